// The backward rasterizer without subgroup operations: groups of 8 consecutive invocations
// stand in for subgroups, their sums taken through workgroup memory (two barriers a value, so
// every invocation takes part in every sum). Slower; for adapters without `SUBGROUP`.

const LANES: u32 = 8u;

var<workgroup> lane_values: array<f32, THREADS>;

fn lane_sum(v: f32, lid: u32) -> f32 {
    lane_values[lid] = v;
    workgroupBarrier();
    let first = lid - lid % LANES;
    var sum = 0.0;
    for (var k = 0u; k < LANES; k++) {
        sum += lane_values[first + k];
    }
    workgroupBarrier();
    return sum;
}

// Uniform, so that every invocation reaches the barriers of `lane_sum`.
fn lane_any(c: bool) -> bool {
    return true;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    backward(gid, lid, groups, THREADS / LANES, lid / LANES, lid % LANES == 0u);
}
