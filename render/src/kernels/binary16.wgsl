// IEEE binary16 values kept two to a 32-bit word (the first in the low half), converted with
// integer operations instead of WGSL's unpack2x16float / pack2x16float: those need a downlevel
// capability that some adapters lack (Mesa's llvmpipe without shader-f16, some GL drivers),
// and drivers may flush subnormals in them; these are exact on every adapter. Shared by
// splat_params.wgsl (SH bands stored in 16 bits) and the trainer's Adam (BINARY16 in
// kernels/mod.rs); tested against the `half` crate on every one of the 65,536 bit patterns.

// The f32 value of the binary16 in the low 16 bits of h (exact: every binary16 is an f32).
fn f16_bits_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let exponent = (h >> 10u) & 0x1fu;
    let fraction = h & 0x3ffu;
    if exponent == 0u {
        // Zero or subnormal: fraction · 2^-24, a normal f32.
        return bitcast<f32>(sign | bitcast<u32>(f32(fraction) * 5.9604644775390625e-8));
    }
    if exponent == 31u {
        return bitcast<f32>(sign | 0x7f800000u | (fraction << 13u));
    }
    return bitcast<f32>(sign | ((exponent + 112u) << 23u) | (fraction << 13u));
}

fn unpack_halves(word: u32) -> vec2<f32> {
    return vec2<f32>(f16_bits_to_f32(word & 0xffffu), f16_bits_to_f32(word >> 16u));
}

// The binary16 bits of x, which must already be a binary16 value (rounded first): its bits
// are moved, not rounded. Magnitudes of 65536 and more become the infinity; NaN stays NaN.
fn f32_to_f16_bits(x: f32) -> u32 {
    let bits = bitcast<u32>(x);
    let sign = (bits >> 16u) & 0x8000u;
    let a = bits & 0x7fffffffu;
    if a > 0x7f800000u {
        return sign | 0x7e00u;
    }
    if a >= 0x47800000u {
        return sign | 0x7c00u;
    }
    if a < 0x38800000u {
        // Below 2^-14: a whole number of 2^-24.
        return sign | u32(bitcast<f32>(a) * 16777216.0);
    }
    return sign | (((a >> 23u) - 112u) << 10u) | ((a >> 13u) & 0x3ffu);
}

fn pack_halves(v: vec2<f32>) -> u32 {
    return f32_to_f16_bits(v.x) | (f32_to_f16_bits(v.y) << 16u);
}
