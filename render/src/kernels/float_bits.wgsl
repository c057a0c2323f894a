// Tests of floats on their bits, for every kernel that guards against NaN, infinity or a
// division by (almost) zero.
//
// Drivers may compile with fast math: Metal does by default, Vulkan drivers may assume no NaN
// or infinity, and naga emits FMin/FMax/FClamp, whose result on NaN is undefined. A float
// comparison used as a guard can then be folded as if NaN did not exist (`!(x > 0.0)` into
// `x <= 0.0`, which a NaN passes; `abs(x) <= 3.4e38` into true). Integer tests of the bits
// cannot be folded that way. tests/repo_rules.rs refuses float-comparison guards in WGSL.

const EXPONENT_MASK: u32 = 0x7f800000u;
// The bits of the least normal f32 (2^-126).
const LEAST_NORMAL_BITS: u32 = 0x00800000u;

// Neither NaN nor ±infinity.
fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & EXPONENT_MASK) != EXPONENT_MASK;
}

fn all_finite3(v: vec3<f32>) -> bool {
    let exponents = bitcast<vec3<u32>>(v) & vec3<u32>(EXPONENT_MASK);
    return all(exponents != vec3<u32>(EXPONENT_MASK));
}

// Finite and ≥ +0 (−0 excluded).
fn is_nonnegative(x: f32) -> bool {
    return bitcast<u32>(x) < EXPONENT_MASK;
}

// Finite, > 0 and normal: safe to divide by. A subnormal divisor is refused because GPUs
// flush subnormals to zero, and the quotient would be infinite.
fn is_positive_normal(x: f32) -> bool {
    let bits = bitcast<u32>(x);
    return bits >= LEAST_NORMAL_BITS && bits < EXPONENT_MASK;
}

// x where it is finite, else 0: keeps one bad value from spreading.
fn finite_or_zero(x: f32) -> f32 {
    return select(0.0, x, is_finite(x));
}
