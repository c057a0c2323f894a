//! A tiny deterministic PRNG, so that random initialisation is reproducible without a
//! dependency.

/// `SplitMix64` (Steele, Lea & Flood 2014): 64 bits of state, good statistical quality for
/// scattering points, identical on every platform.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), from the top 24 bits (an f32's mantissa precision).
    pub fn next_f32(&mut self) -> f32 {
        const MANTISSA_BITS: u32 = 24;
        (self.next_u64() >> (64 - MANTISSA_BITS)) as f32 / (1u32 << MANTISSA_BITS) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_reference_sequence() {
        // First outputs for seed 1234567 from the reference C implementation.
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn floats_stay_in_unit_interval() {
        let mut rng = SplitMix64::new(0);
        assert!((0..10_000).map(|_| rng.next_f32()).all(|x| (0.0..1.0).contains(&x)));
    }
}
