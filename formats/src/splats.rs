use crate::ParseError;

/// The zeroth-order SH basis constant: colour = 0.5 + `SH_C0` · `f_dc`.
pub const SH_C0: f32 = 0.282_094_8;

/// Number of SH coefficients per channel for a degree: (d+1)².
#[must_use]
pub const fn sh_coeffs_for_degree(degree: u32) -> usize {
    ((degree + 1) * (degree + 1)) as usize
}

/// SH degree from the number of `f_rest_*` values (3 channels × (K − 1)), if it is one of
/// 0, 9, 24, 45.
#[must_use]
pub fn sh_degree_for_rest_count(rest: usize) -> Option<u32> {
    (0..=3).find(|&d| 3 * (sh_coeffs_for_degree(d) - 1) == rest)
}

/// A splat scene in the raw parameterisation of the 3DGS PLY format, as a structure of
/// arrays (the layout the GPU wants). `N` = [`Splats::len`], `K` = (`sh_degree` + 1)².
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Splats {
    /// World-space centres. [N, 3]
    pub means: Vec<[f32; 3]>,
    /// Natural log of the per-axis standard deviations. [N, 3]
    pub log_scales: Vec<[f32; 3]>,
    /// Rotation quaternions `w, x, y, z`, *not* normalised (normalise at use). [N, 4]
    pub rotations: Vec<[f32; 4]>,
    /// Opacity before the sigmoid. [N]
    pub opacity_logits: Vec<f32>,
    /// SH degree-0 coefficient per colour channel (`f_dc_0..2`). [N, 3]
    pub sh_dc: Vec<[f32; 3]>,
    /// Higher SH coefficients, channel-major like PLY's `f_rest_*`: for each splat all K−1
    /// red coefficients, then green, then blue. [N, 3, K−1]
    pub sh_rest: Vec<f32>,
    /// 0..=3.
    pub sh_degree: u32,
}

impl Splats {
    /// An empty scene with room for `n` splats of the given SH degree.
    #[must_use]
    pub fn with_capacity(n: usize, sh_degree: u32) -> Self {
        Self {
            means: Vec::with_capacity(n),
            log_scales: Vec::with_capacity(n),
            rotations: Vec::with_capacity(n),
            opacity_logits: Vec::with_capacity(n),
            sh_dc: Vec::with_capacity(n),
            sh_rest: Vec::with_capacity(n * 3 * (sh_coeffs_for_degree(sh_degree) - 1)),
            sh_degree,
        }
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.means.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }

    /// `f_rest` values per splat: 3 · (K − 1).
    #[must_use]
    pub fn rest_per_splat(&self) -> usize {
        3 * (sh_coeffs_for_degree(self.sh_degree) - 1)
    }

    /// Checks that every array has `len()` rows and every value is finite. Readers call this
    /// last, so a file with a NaN or an infinity is refused with the splat and field named.
    pub fn validate(&self) -> Result<(), ParseError> {
        let n = self.len();
        if self.sh_degree > 3 {
            return Err(ParseError::invalid(format!("SH degree {} (at most 3)", self.sh_degree)));
        }
        let lens = [
            self.log_scales.len(),
            self.rotations.len(),
            self.opacity_logits.len(),
            self.sh_dc.len(),
        ];
        if lens.iter().any(|&l| l != n) || self.sh_rest.len() != n * self.rest_per_splat() {
            return Err(ParseError::invalid("splat arrays have different lengths"));
        }
        let rest = self.rest_per_splat();
        for i in 0..n {
            let fields: [(&str, &[f32]); 5] = [
                ("position", &self.means[i]),
                ("scale", &self.log_scales[i]),
                ("rotation", &self.rotations[i]),
                ("opacity", std::slice::from_ref(&self.opacity_logits[i])),
                ("colour", &self.sh_dc[i]),
            ];
            for (what, values) in fields {
                check_finite(i, what, values)?;
            }
            check_finite(i, "SH coefficient", &self.sh_rest[i * rest..(i + 1) * rest])?;
        }
        Ok(())
    }
}

fn check_finite(index: usize, what: &str, values: &[f32]) -> Result<(), ParseError> {
    match values.iter().find(|v| !v.is_finite()) {
        Some(&value) => {
            Err(ParseError::NonFinite { what: format!("splat {index}: {what}"), value })
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sh_degree_from_rest_count() {
        assert_eq!(sh_degree_for_rest_count(0), Some(0));
        assert_eq!(sh_degree_for_rest_count(9), Some(1));
        assert_eq!(sh_degree_for_rest_count(24), Some(2));
        assert_eq!(sh_degree_for_rest_count(45), Some(3));
        assert_eq!(sh_degree_for_rest_count(10), None);
    }

    #[test]
    fn validate_names_the_bad_value() {
        let mut s = Splats::with_capacity(2, 0);
        for _ in 0..2 {
            s.means.push([0.0; 3]);
            s.log_scales.push([0.0; 3]);
            s.rotations.push([1.0, 0.0, 0.0, 0.0]);
            s.opacity_logits.push(0.0);
            s.sh_dc.push([0.0; 3]);
        }
        assert!(s.validate().is_ok());
        s.opacity_logits[1] = f32::NAN;
        let msg = s.validate().unwrap_err().to_string();
        assert!(msg.contains("splat 1: opacity"), "{msg}");
    }
}
