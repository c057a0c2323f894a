// Adam, in place: one thread per parameter value. m and v are the first and second moment
// estimates; bias correction is folded into `step_size` and `eps_hat` on the CPU
// (Kingma & Ba, section 2, the "efficient" form).

struct AdamUniform {
    count: u32,
    beta1: f32,
    beta2: f32,
    step_size: f32,   // lr · sqrt(1 − β2ᵗ) / (1 − β1ᵗ)
    eps_hat: f32,     // ε · sqrt(1 − β2ᵗ)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> au: AdamUniform;
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read> grads: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = (gid.x + gid.y * groups.x) * 256u + lid;
    if i >= au.count {
        return;
    }
    let g = grads[i];
    let m1 = au.beta1 * m[i] + (1.0 - au.beta1) * g;
    let v1 = au.beta2 * v[i] + (1.0 - au.beta2) * g * g;
    m[i] = m1;
    v[i] = v1;
    params[i] -= au.step_size * m1 / (sqrt(v1) + au.eps_hat);
}
