// The refinement plan, shared by gather.wgsl and split.wgsl. Keep in sync with plan.rs.

// One output splat. Keep in sync with `PlanEntry` in plan.rs (32 bytes).
struct PlanEntry {
    source: u32,          // index of the old splat it is gathered from
    flags: u32,           // FLAG_* bits
    seed: u32,            // a split child's random seed, or its axis and side (FLAG_LONG_AXIS)
    opacity: f32,         // new opacity logit (FLAG_SET_OPACITY)
    log_scale: array<f32, 3>, // new log-scales (FLAG_SET_LOG_SCALE)
    _pad: u32,
}

const FLAG_ZERO_MOMENTS: u32 = 1u;
const FLAG_SET_OPACITY: u32 = 2u;
const FLAG_SET_LOG_SCALE: u32 = 4u;
const FLAG_SPLIT: u32 = 8u;
const FLAG_LONG_AXIS: u32 = 16u;

// Which parameter a gather dispatch moves. Keep in sync with `Role` in kernels.rs.
const ROLE_PLAIN: u32 = 0u;
const ROLE_OPACITY: u32 = 1u;
const ROLE_LOG_SCALE: u32 = 2u;

// Per-dispatch parameters. Keep in sync with `GatherUniform` in kernels.rs (32 bytes). A
// dispatch moves a window of output splats (the plan and the new buffers are bound from its
// first) from a window of old ones (`old_first`, `old_count`: the old buffers are bound from
// there); an output splat whose source lies in another window is that window's dispatch's.
struct GatherUniform {
    elements: u32,         // output words of this window: out_count · words_per_splat
    words_per_splat: u32,
    role: u32,
    out_count: u32,        // output splats of this window
    old_first: u32,
    old_count: u32,
}

// The output splat i's source as an index into the old window bound, or `none` when it lies
// in another window.
fn source_in_window(i: u32, none: u32) -> u32 {
    let s = plan[i].source - gu.old_first;
    return select(none, s, s < gu.old_count);
}

@group(0) @binding(0) var<storage, read> gu: GatherUniform;
@group(0) @binding(1) var<storage, read> plan: array<PlanEntry>;
