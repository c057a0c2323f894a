// The backward rasterizer without subgroup operations: groups of LANES (4 to 64) consecutive
// invocations stand in for subgroups, their sums taken through workgroup memory (two barriers
// a value, so every invocation takes part in every sum) in the same tree as a subgroup of
// that width would make (rasterize_backward.wgsl). For adapters without `SUBGROUP` (8 lanes);
// other widths stand in for other adapters' subgroups in tests and the self-test.

override LANES: u32 = 8u;

var<workgroup> lane_values: array<f32, THREADS>;

// What WebGPU's 16 KiB of workgroup memory leave beside `lane_values` (15,876 bytes in all):
// nine values a slot, so a run holds 9/10 of a slot's entries (7 of 8 with 8 lanes).
const GROUP_SUMS: u32 = 9u * THREADS;

// The complete binary tree over lane_values[i .. i + n], written out level by level (no loop:
// see `tree_sum` in rasterize_backward.wgsl).
fn tree2(i: u32) -> f32 {
    return lane_values[i] + lane_values[i + 1u];
}
fn tree4(i: u32) -> f32 {
    return tree2(i) + tree2(i + 2u);
}
fn tree8(i: u32) -> f32 {
    return tree4(i) + tree4(i + 4u);
}
fn tree16(i: u32) -> f32 {
    return tree8(i) + tree8(i + 8u);
}
fn tree32(i: u32) -> f32 {
    return tree16(i) + tree16(i + 16u);
}
fn tree64(i: u32) -> f32 {
    return tree32(i) + tree32(i + 32u);
}

fn lane_sum(v: f32, slot: u32) -> f32 {
    lane_values[slot] = v;
    workgroupBarrier();
    let first = slot - slot % LANES;
    var sum: f32;
    switch LANES {
        case 4u: { sum = tree4(first); }
        case 8u: { sum = tree8(first); }
        case 16u: { sum = tree16(first); }
        case 32u: { sum = tree32(first); }
        default: { sum = tree64(first); }
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
    backward(gid, lid, lid, groups, THREADS / LANES, lid / LANES, lid % LANES == 0u);
}
