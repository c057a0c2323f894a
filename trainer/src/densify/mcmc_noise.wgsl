// The MCMC strategy's position noise (Kheradmand et al. 2024, equation 11; gsplat's
// `inject_noise_to_position`), after Adam's step:
//   μ += Σ · (z · gate(o) · scaler),  z ~ N(0, I),  Σ = R diag(exp(2s)) Rᵀ,
//   gate(o) = sigmoid(k · ((1 − σ(o)) − x0)) with k = 100, x0 = 0.995,
//   scaler = lr_means · noise_lr.
// The gate is ~1 for nearly transparent splats and ~0 for visible ones, so noise explores
// with the splats that do not show. One thread per splat of a window (its first `nu.first`).

// Keep in sync with `NoiseUniform` in kernels.rs (32 bytes).
struct NoiseUniform {
    count: u32,
    seed: u32,
    scaler: f32,
    gate_sharpness: f32,
    gate_center: f32,
    first: u32,   // the window's first splat: splats are bound from it (kernels.rs)
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> nu: NoiseUniform;
@group(0) @binding(1) var<storage, read_write> means: array<f32>;
@group(0) @binding(2) var<storage, read> quats: array<f32>;
@group(0) @binding(3) var<storage, read> log_scales: array<f32>;
@group(0) @binding(4) var<storage, read> opacities: array<f32>;

// Past ±80 the logistic is 0 or 1 in f32; clamping keeps exp() finite.
const LOGISTIC_CLAMP: f32 = 80.0;

fn logistic(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-clamp(x, -LOGISTIC_CLAMP, LOGISTIC_CLAMP)));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = (gid.x + gid.y * groups.x) * 256u + lid;
    if i >= nu.count {
        return;
    }
    let opacity = logistic(opacities[i]);
    let gate = logistic(nu.gate_sharpness * ((1.0 - opacity) - nu.gate_center));
    let q = vec4<f32>(quats[4u * i], quats[4u * i + 1u], quats[4u * i + 2u], quats[4u * i + 3u]);
    let r = rotation(q);
    let variance = exp(2.0 * vec3<f32>(log_scales[3u * i], log_scales[3u * i + 1u],
                                       log_scales[3u * i + 2u]));
    let z = normal3(pcg_hash(nu.seed ^ pcg_hash(nu.first + i))) * (gate * nu.scaler);
    // Σ z = R diag(variance) Rᵀ z.
    let delta = r * (variance * (transpose(r) * z));
    means[3u * i] += delta.x;
    means[3u * i + 1u] += delta.y;
    means[3u * i + 2u] += delta.z;
}
