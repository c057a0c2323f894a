// Counter-based random numbers and the rotation of a quaternion, shared by split.wgsl and
// mcmc_noise.wgsl. A sample is a pure function of (seed, counter), so results are the same
// whatever the dispatch order.

const TAU: f32 = 6.283185307179586;

// PCG hash (Jarzynski & Olano 2020, "Hash Functions for GPU Rendering").
fn pcg_hash(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// Uniform in (0, 1] from 24 hashed bits (never 0, so its log is finite).
fn uniform_01(seed: u32, counter: u32) -> f32 {
    let h = pcg_hash(seed ^ pcg_hash(counter));
    return f32((h >> 8u) + 1u) * (1.0 / 16777216.0);
}

// Three independent standard normal samples (Box–Muller).
fn normal3(seed: u32) -> vec3<f32> {
    let r0 = sqrt(-2.0 * log(uniform_01(seed, 0u)));
    let t0 = TAU * uniform_01(seed, 1u);
    let r1 = sqrt(-2.0 * log(uniform_01(seed, 2u)));
    let t1 = TAU * uniform_01(seed, 3u);
    return vec3<f32>(r0 * cos(t0), r0 * sin(t0), r1 * cos(t1));
}

// Rotation of the quaternion (w, x, y, z), normalised here (render/MATH.md, projection step
// 3); the identity for a zero quaternion.
fn rotation(raw: vec4<f32>) -> mat3x3<f32> {
    let len = length(raw);
    if !is_positive_normal(len) {
        return mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));
    }
    let q = raw / len;
    let w = q.x;
    let x = q.y;
    let y = q.z;
    let z = q.w;
    // Columns of [[1−2(y²+z²), 2(xy−wz), 2(xz+wy)], [2(xy+wz), 1−2(x²+z²), 2(yz−wx)],
    //             [2(xz−wy), 2(yz+wx), 1−2(x²+y²)]].
    return mat3x3<f32>(
        vec3<f32>(1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y + w * z), 2.0 * (x * z - w * y)),
        vec3<f32>(2.0 * (x * y - w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z + w * x)),
        vec3<f32>(2.0 * (x * z + w * y), 2.0 * (y * z - w * x), 1.0 - 2.0 * (x * x + y * y)),
    );
}
