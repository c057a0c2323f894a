// The backward rasterizer's lane groups are the adapter's subgroups (a power-of-two width, 4
// to 128 as WGSL allows: 4 or 8 on lavapipe, 32 or 64 on GPUs). A subgroup's lanes are
// the consecutive slots subgroup_id · width + lane, whatever invocations the driver put in
// it, and `lane_sum` adds them by butterfly shuffles: after the exchange at distance d, every
// lane holds the sum of its aligned block of 2d lanes, the two halves added (commutative, so
// both partners hold the same bits). That is the lower levels of the tile's one tree
// (rasterize_backward.wgsl), for any width.

var<private> lanes: u32;

// A list entry's PARTIALS values for each of the workgroup's slots (15,876 bytes of workgroup
// memory in all, under WebGPU's 16 KiB): runs of one entry a slot.
const GROUP_SUMS: u32 = PARTIALS * THREADS;

// The adapter's one subgroup width, where all its pipelines have the same (kernels/mod.rs);
// 0: the width is read at run time. Known, the switches on the width below and in
// `tree_sum` are decided when the pipeline is built.
override SUBGROUP_WIDTH: u32 = 0u;

// One level of the butterfly: the lane's sum and its partner's at distance d.
fn level(s: f32, d: u32) -> f32 {
    return s + subgroupShuffleXor(s, d);
}

// Written out per width, without a loop (see `tree_sum` in rasterize_backward.wgsl).
fn lane_sum(v: f32, slot: u32) -> f32 {
    switch lanes {
        case 4u: { return level(level(v, 1u), 2u); }
        case 8u: { return level(level(level(v, 1u), 2u), 4u); }
        case 16u: { return level(level(level(level(v, 1u), 2u), 4u), 8u); }
        case 32u: { return level(level(level(level(level(v, 1u), 2u), 4u), 8u), 16u); }
        case 64u: { return level(level(level(level(level(level(v, 1u), 2u), 4u), 8u), 16u), 32u); }
        default: {
            return level(level(level(level(level(level(level(v, 1u), 2u), 4u), 8u), 16u), 32u), 64u);
        }
    }
}

fn lane_any(c: bool) -> bool {
    return subgroupAny(c);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(num_subgroups) num_subgroups: u32, @builtin(subgroup_id) subgroup: u32,
        @builtin(subgroup_size) width: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let known = SUBGROUP_WIDTH != 0u;
    lanes = select(width, SUBGROUP_WIDTH, known);
    let num_groups = select(num_subgroups, THREADS / max(SUBGROUP_WIDTH, 1u), known);
    backward(gid, lid, subgroup * lanes + lane, groups, num_groups, subgroup, lane == 0u);
}
