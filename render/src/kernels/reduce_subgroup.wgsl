// The backward rasterizer's lanes are the adapter's subgroups (any size that divides the
// workgroup: 8 on lavapipe, 32 or 64 on GPUs).

fn lane_sum(v: f32, lid: u32) -> f32 {
    return subgroupAdd(v);
}

fn lane_any(c: bool) -> bool {
    return subgroupAny(c);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(num_subgroups) num_subgroups: u32, @builtin(subgroup_id) subgroup: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    backward(gid, lid, groups, num_subgroups, subgroup, lane == 0u);
}
