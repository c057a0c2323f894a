// 3DGS's opacity reset (reset_opacity): opacity ← min(opacity, reset value), on the logits.
// The Rust side clears the opacity moments.

// Keep in sync with `ResetUniform` in kernels.rs (16 bytes).
struct ResetUniform {
    count: u32,
    max_logit: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> ru: ResetUniform;
@group(0) @binding(1) var<storage, read_write> opacities: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = (gid.x + gid.y * groups.x) * 256u + lid;
    if i >= ru.count {
        return;
    }
    opacities[i] = min(opacities[i], ru.max_logit);
}
