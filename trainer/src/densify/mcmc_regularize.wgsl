// The MCMC strategy's regularisers (Kheradmand et al. 2024, equation 8; gsplat's
// simple_trainer): loss += opacity_reg · mean(sigmoid(o)) + scale_reg · mean(exp(s)).
// Their gradients are added to the rasterizer's, before Adam:
//   dL/do += opacity_reg / N · σ(o)(1 − σ(o)),   dL/ds += scale_reg / (3N) · exp(s).
// One thread per log-scale float; the first N threads also do the opacities.

// Keep in sync with `RegularizeUniform` in kernels.rs (16 bytes).
struct RegularizeUniform {
    count: u32,
    opacity_coefficient: f32, // opacity_reg / N
    scale_coefficient: f32,   // scale_reg / (3N)
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> ru: RegularizeUniform;
@group(0) @binding(1) var<storage, read> opacities: array<f32>;
@group(0) @binding(2) var<storage, read> log_scales: array<f32>;
@group(0) @binding(3) var<storage, read_write> v_opacities: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_log_scales: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let j = (gid.x + gid.y * groups.x) * 256u + lid;
    if j >= 3u * ru.count {
        return;
    }
    v_log_scales[j] += ru.scale_coefficient * exp(log_scales[j]);
    if j < ru.count {
        let s = 1.0 / (1.0 + exp(-opacities[j]));
        v_opacities[j] += ru.opacity_coefficient * s * (1.0 - s);
    }
}
