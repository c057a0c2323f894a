// Adam, in place. m and v are the first and second moment estimates; bias correction is
// folded into `step_size` and `eps_hat` on the CPU (Kingma & Ba, section 2, the "efficient"
// form). Parameters and moments are bound as 32-bit words: f32 bits (`main`, one thread per
// value), or for an SH band stored in 16 bits two binary16 values a word (`main_half`, one
// thread per word; see `ShPrecision` in render/src/gpu_splats.rs). Preceded by the render
// crate's binary16.wgsl (`unpack_halves`, `pack_halves`).

struct AdamUniform {
    count: u32,       // values (`main`) or words (`main_half`)
    beta1: f32,
    beta2: f32,
    step_size: f32,   // lr · sqrt(1 − β2ᵗ) / (1 − β1ᵗ)
    eps_hat: f32,     // ε · sqrt(1 − β2ᵗ)
    row_values: u32,  // `main_half`: values in a splat's row (its gradient row)
    round_seed: u32,  // `main_half`: seed of this step's stochastic rounding
    first: u32,       // `main_half`: the first word bound (a window of splats, adam.rs)
}

@group(0) @binding(0) var<storage, read> au: AdamUniform;
@group(0) @binding(1) var<storage, read_write> params: array<u32>;
@group(0) @binding(2) var<storage, read> grads: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<u32>;
@group(0) @binding(4) var<storage, read_write> v: array<u32>;

// The 16-bit moments are kept scaled by 2^14, and v as its square root: the gradients of SH
// coefficients (means over the image's pixels) lie within ±4 and mostly far below 1e-3,
// so m · 2^14 and sqrt(v) · 2^14 sit in binary16's normal range (2^-14 … 65504) down to
// gradients of 4e-9, where v itself (down to 1e-17 and less) would not fit at all.
const MOMENT_SCALE: f32 = 16384.0;

// A gradient that is not finite (an overflow somewhere upstream) moves nothing: one bad
// value must not turn the parameter and both moments into NaN for good. A finite one is
// bounded by 1e18, whose square (1e36) the second moment holds: a larger one (1.8e19 and
// up) would make it +inf, and the parameter would never move again.
const GRAD_BOUND: f32 = 1e18;

fn bounded(g: f32) -> f32 {
    return clamp(finite_or_zero(g), -GRAD_BOUND, GRAD_BOUND);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = (gid.x + gid.y * groups.x) * 256u + lid;
    if i >= au.count {
        return;
    }
    let g = bounded(grads[i]);
    let m1 = au.beta1 * bitcast<f32>(m[i]) + (1.0 - au.beta1) * g;
    let v1 = au.beta2 * bitcast<f32>(v[i]) + (1.0 - au.beta2) * g * g;
    m[i] = bitcast<u32>(m1);
    v[i] = bitcast<u32>(v1);
    params[i] = bitcast<u32>(bitcast<f32>(params[i]) - au.step_size * m1 / (sqrt(v1) + au.eps_hat));
}

@compute @workgroup_size(256)
fn main_half(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
             @builtin(num_workgroups) groups: vec3<u32>) {
    let w = (gid.x + gid.y * groups.x) * 256u + lid;
    if w >= au.count {
        return;
    }
    let row_words = (au.row_values + 1u) / 2u;
    let splat = w / row_words;
    let first = (w - splat * row_words) * 2u;
    var p = unpack_halves(params[w]);
    var m2 = unpack_halves(m[w]) / MOMENT_SCALE;
    var s2 = unpack_halves(v[w]) / MOMENT_SCALE;
    var bits = hash((au.first + w) ^ hash(au.round_seed));
    for (var h = 0u; h < 2u; h++) {
        // The row's padding value (odd rows) stays zero.
        if first + h < au.row_values {
            let g = bounded(grads[splat * au.row_values + first + h]);
            let m1 = au.beta1 * m2[h] + (1.0 - au.beta1) * g;
            let v1 = au.beta2 * s2[h] * s2[h] + (1.0 - au.beta2) * g * g;
            let s1 = sqrt(v1);
            let p1 = p[h] - au.step_size * m1 / (s1 + au.eps_hat);
            bits = hash(bits);
            p[h] = round_stochastic(p1, bits);
            bits = hash(bits);
            m2[h] = round_stochastic(m1 * MOMENT_SCALE, bits);
            bits = hash(bits);
            s2[h] = round_stochastic(s1 * MOMENT_SCALE, bits);
        }
    }
    params[w] = pack_halves(p);
    m[w] = pack_halves(m2);
    v[w] = pack_halves(s2);
}

// A 32-bit integer hash (PCG's output permutation over one LCG step): random bits for the
// rounding, the same on every run.
fn hash(x: u32) -> u32 {
    let state = x * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// x rounded to one of the two binary16 values around it, the upper with probability
// (x − lower) / (upper − lower), from the random bits r: the expected result is x, so the
// many steps smaller than a binary16 spacing (an SH coefficient of 0.5 moves ~1e-4 a step,
// its spacing is 5e-4) add up instead of rounding away. The result is exactly a binary16
// value, as pack_halves needs. Beyond the largest finite binary16 (65504) it is clamped;
// infinities and NaN pass through.
fn round_stochastic(x: f32, r: u32) -> f32 {
    let a = abs(x);
    let a_bits = bitcast<u32>(a);
    if a_bits >= 0x7f800000u {
        return x;
    }
    var q: f32;
    if a < 6.103515625e-5 {
        // Below binary16's smallest normal (2^-14) its values are whole multiples of 2^-24.
        q = floor(a * 16777216.0 + f32(r >> 8u) / 16777216.0) / 16777216.0;
    } else {
        // A normal binary16 keeps 10 of f32's 23 fraction bits: add random bits below them
        // and drop those 13.
        q = min(bitcast<f32>((a_bits + (r & 0x1fffu)) & 0xffffe000u), 65504.0);
    }
    return select(q, -q, x < 0.0);
}
