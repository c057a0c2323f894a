//! The 3DGS real spherical-harmonics basis up to degree 3 (MATH.md, "SH basis"), its
//! evaluation and their VJPs.
//!
//! The basis functions are the polynomials of MATH.md in the direction's x, y, z; their
//! derivatives treat x, y, z as independent, and the caller takes the result through the
//! normalisation of the view direction ([`super::math::view_direction_vjp`]), which removes
//! the radial part. (Polynomials that agree on the unit sphere, such as 2z² − x² − y² and
//! 3z² − 1, therefore give the same final gradient.)

use glam::DVec3;

/// Degree-0 constant.
pub const SH_C0: f64 = 0.282_094_791_773_878_14;
/// Degree-1 constant.
pub const SH_C1: f64 = 0.488_602_511_902_919_9;
/// Degree-2 constants.
pub const SH_C2: [f64; 5] = [
    1.092_548_430_592_079_2,
    -1.092_548_430_592_079_2,
    0.315_391_565_252_520_05,
    -1.092_548_430_592_079_2,
    0.546_274_215_296_039_6,
];
/// Degree-3 constants.
pub const SH_C3: [f64; 7] = [
    -0.590_043_589_926_643_5,
    2.890_611_442_640_554,
    -0.457_045_799_464_465_8,
    0.373_176_332_590_115_4,
    -0.457_045_799_464_465_8,
    1.445_305_721_320_277,
    -0.590_043_589_926_643_5,
];

/// The most SH coefficients per channel (degree 3): 16.
pub const SH_MAX_COEFFS: usize = 16;
/// The highest supported SH degree.
pub const SH_MAX_DEGREE: u32 = 3;

/// Coefficients per channel for a degree, (d + 1)².
#[must_use]
pub const fn num_coeffs(degree: u32) -> usize {
    ((degree + 1) * (degree + 1)) as usize
}

/// The basis values Y₀..Y₁₅ at `dir` (a unit vector); entries at and beyond
/// [`num_coeffs`]`(degree)` are 0. Degrees above 3 are treated as 3.
#[must_use]
pub fn sh_basis(degree: u32, dir: DVec3) -> [f64; SH_MAX_COEFFS] {
    let DVec3 { x, y, z } = dir;
    let mut out = [0.0; SH_MAX_COEFFS];
    out[0] = SH_C0;
    if degree >= 1 {
        out[1] = -SH_C1 * y;
        out[2] = SH_C1 * z;
        out[3] = -SH_C1 * x;
    }
    if degree >= 2 {
        let (xx, yy, zz) = (x * x, y * y, z * z);
        out[4] = SH_C2[0] * x * y;
        out[5] = SH_C2[1] * y * z;
        out[6] = SH_C2[2] * (2.0 * zz - xx - yy);
        out[7] = SH_C2[3] * x * z;
        out[8] = SH_C2[4] * (xx - yy);
    }
    if degree >= 3 {
        let (xx, yy, zz) = (x * x, y * y, z * z);
        out[9] = SH_C3[0] * y * (3.0 * xx - yy);
        out[10] = SH_C3[1] * x * y * z;
        out[11] = SH_C3[2] * y * (4.0 * zz - xx - yy);
        out[12] = SH_C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy);
        out[13] = SH_C3[4] * x * (4.0 * zz - xx - yy);
        out[14] = SH_C3[5] * z * (xx - yy);
        out[15] = SH_C3[6] * x * (xx - 3.0 * yy);
    }
    out
}

/// VJP of [`sh_basis`] with respect to `dir` (x, y, z independent; see the module docs).
#[must_use]
pub fn sh_basis_vjp(degree: u32, dir: DVec3, v_basis: &[f64; SH_MAX_COEFFS]) -> DVec3 {
    let DVec3 { x, y, z } = dir;
    let v = v_basis;
    let mut g = DVec3::ZERO;
    if degree >= 1 {
        g += DVec3::new(-SH_C1 * v[3], -SH_C1 * v[1], SH_C1 * v[2]);
    }
    if degree >= 2 {
        let c = SH_C2;
        g += v[4] * c[0] * DVec3::new(y, x, 0.0);
        g += v[5] * c[1] * DVec3::new(0.0, z, y);
        g += v[6] * c[2] * DVec3::new(-2.0 * x, -2.0 * y, 4.0 * z);
        g += v[7] * c[3] * DVec3::new(z, 0.0, x);
        g += v[8] * c[4] * DVec3::new(2.0 * x, -2.0 * y, 0.0);
    }
    if degree >= 3 {
        let c = SH_C3;
        let (xx, yy, zz) = (x * x, y * y, z * z);
        g += v[9] * c[0] * DVec3::new(6.0 * x * y, 3.0 * xx - 3.0 * yy, 0.0);
        g += v[10] * c[1] * DVec3::new(y * z, x * z, x * y);
        g += v[11] * c[2] * DVec3::new(-2.0 * x * y, 4.0 * zz - xx - 3.0 * yy, 8.0 * y * z);
        g += v[12] * c[3] * DVec3::new(-6.0 * x * z, -6.0 * y * z, 6.0 * zz - 3.0 * xx - 3.0 * yy);
        g += v[13] * c[4] * DVec3::new(4.0 * zz - 3.0 * xx - yy, -2.0 * x * y, 8.0 * x * z);
        g += v[14] * c[5] * DVec3::new(2.0 * x * z, -2.0 * y * z, xx - yy);
        g += v[15] * c[6] * DVec3::new(3.0 * xx - 3.0 * yy, -6.0 * x * y, 0.0);
    }
    g
}

/// e = Σₖ Yₖ(dir) · `coeffs[k]` per channel, over the first [`num_coeffs`]`(degree)` rows of
/// `coeffs` (`[K][3]`, K ≥ that many; row k = `sh[k][0..3]`).
#[must_use]
pub fn sh_eval(degree: u32, coeffs: &[[f64; 3]], dir: DVec3) -> [f64; 3] {
    let basis = sh_basis(degree, dir);
    let mut out = [0.0; 3];
    for (y, row) in basis.iter().zip(coeffs).take(num_coeffs(degree.min(SH_MAX_DEGREE))) {
        for c in 0..3 {
            out[c] += y * row[c];
        }
    }
    out
}

/// VJP of [`sh_eval`]: returns (∂L/∂coeffs, `[K][3]` with K = `coeffs.len()`, zero past the
/// active degree; ∂L/∂dir).
#[must_use]
pub fn sh_eval_vjp(
    degree: u32,
    coeffs: &[[f64; 3]],
    dir: DVec3,
    v_value: [f64; 3],
) -> (Vec<[f64; 3]>, DVec3) {
    let k_active = num_coeffs(degree.min(SH_MAX_DEGREE)).min(coeffs.len());
    let basis = sh_basis(degree, dir);
    let mut v_coeffs = vec![[0.0; 3]; coeffs.len()];
    let mut v_basis = [0.0; SH_MAX_COEFFS];
    for k in 0..k_active {
        v_coeffs[k] = v_value.map(|v| v * basis[k]);
        v_basis[k] = (0..3).map(|c| v_value[c] * coeffs[k][c]).sum();
    }
    (v_coeffs, sh_basis_vjp(degree, dir, &v_basis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basis_vjp_matches_finite_differences() {
        let dir = DVec3::new(0.3, -0.5, 0.8).normalize();
        let coeffs: Vec<[f64; 3]> = (0..16_u8)
            .map(|k| [0.1 * f64::from(k) - 0.7, (f64::from(k) * 0.37).sin(), f64::from(k).cos()])
            .collect();
        let v_value = [0.7, -1.1, 0.4];
        let h = 1e-6;
        for degree in 0..=3 {
            let (v_coeffs, v_dir) = sh_eval_vjp(degree, &coeffs, dir, v_value);
            let loss = |d: DVec3| {
                sh_eval(degree, &coeffs, d).iter().zip(v_value).map(|(a, b)| a * b).sum::<f64>()
            };
            for axis in 0..3 {
                let mut e = DVec3::ZERO;
                e[axis] = h;
                let num = (loss(dir + e) - loss(dir - e)) / (2.0 * h);
                assert!(
                    (num - v_dir[axis]).abs() < 1e-8,
                    "degree {degree} axis {axis}: {num} vs {}",
                    v_dir[axis]
                );
            }
            for (k, row) in v_coeffs.iter().enumerate() {
                let expected = if k < num_coeffs(degree) { sh_basis(degree, dir)[k] } else { 0.0 };
                for c in 0..3 {
                    assert!((row[c] - v_value[c] * expected).abs() < 1e-15);
                }
            }
        }
    }
}
