// dL/d(projected splat) accumulators without float atomics: a compare-exchange loop on the
// bit pattern (the fallback where the adapter lacks SHADER_FLOAT32_ATOMIC).
@group(0) @binding(7) var<storage, read_write> v_projected: array<atomic<u32>>;  // [N, 9]

fn add_grad(i: u32, v: f32) {
    if v == 0.0 {
        return;
    }
    var old = atomicLoad(&v_projected[i]);
    loop {
        let swapped = atomicCompareExchangeWeak(&v_projected[i], old, bitcast<u32>(bitcast<f32>(old) + v));
        if swapped.exchanged {
            break;
        }
        old = swapped.old_value;
    }
}
