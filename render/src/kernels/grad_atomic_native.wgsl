// dL/d(projected splat) accumulators with native float atomics (SHADER_FLOAT32_ATOMIC).
@group(0) @binding(7) var<storage, read_write> v_projected: array<atomic<f32>>;  // [N, 9]

fn add_grad(i: u32, v: f32) {
    if v != 0.0 {
        atomicAdd(&v_projected[i], v);
    }
}
