//! Levelling a scene: turning its splats so that its up (from the cameras, [`scene_up`]) is
//! −y, the axis 3DGS files and the web viewers take as up, so an export does not open tilted or
//! upside down (a COLMAP model's up is wherever its first camera's −y pointed).
//!
//! Turning splats turns their centres, their orientations and their view-dependent colour: each
//! SH band of degree l is closed under rotation, so its 2l + 1 coefficients per channel map
//! through a (2l + 1)² matrix. The matrix is found by least squares from the basis (the
//! renderer's own, [`sh_basis`]) at 64 directions spread over the sphere, which is exact up to
//! rounding: the colour of a turned splat seen from a turned direction is the colour of the
//! splat seen from the direction (tested to 1e-9).
//!
//! [`scene_up`]: crate::view_controller::scene_up

use glam::{DMat3, DQuat, DVec3, Vec3};
use splat_formats::Splats;

use crate::reference::sh::{SH_MAX_COEFFS, sh_basis};
use crate::view_controller::DEFAULT_UP;

/// Directions the SH rotation is fitted at (more than the 7 unknowns of band 3, spread evenly).
const FIT_DIRECTIONS: usize = 64;

/// The smallest rotation taking `up` to −y ([`DEFAULT_UP`]); the identity for a zero or
/// non-finite `up`.
#[must_use]
pub fn leveling_rotation(up: Vec3) -> DQuat {
    match up.as_dvec3().try_normalize() {
        Some(up) => DQuat::from_rotation_arc(up, DEFAULT_UP.as_dvec3()),
        None => DQuat::IDENTITY,
    }
}

/// Turns every splat by `rotation` about the origin: centres, orientations and SH bands 1–3.
/// Scales, opacities and the DC colour do not change.
pub fn rotate_splats(splats: &mut Splats, rotation: DQuat) {
    let rotation = rotation.normalize();
    let matrix = DMat3::from_quat(rotation);
    for mean in &mut splats.means {
        *mean = (matrix * DVec3::from(mean.map(f64::from))).as_vec3().to_array();
    }
    for q in &mut splats.rotations {
        let [w, x, y, z] = q.map(f64::from);
        let turned = rotation * DQuat::from_xyzw(x, y, z, w);
        *q = [turned.w, turned.x, turned.y, turned.z].map(|v| v as f32);
    }
    let coeffs = (splats.sh_degree as usize + 1).pow(2);
    if coeffs <= 1 {
        return;
    }
    let bands = sh_rotation(splats.sh_degree, matrix);
    let rest = coeffs - 1;
    for splat in splats.sh_rest.chunks_exact_mut(3 * rest) {
        // Channel-major: all of red's coefficients 1.., then green's, then blue's.
        for channel in splat.chunks_exact_mut(rest) {
            let mut old = [0.0_f64; SH_MAX_COEFFS - 1];
            for (o, &v) in old.iter_mut().zip(channel.iter()) {
                *o = f64::from(v);
            }
            for (l, band) in bands.iter().enumerate() {
                let l = l + 1;
                // Coefficients of band l are basis indexes l² .. (l + 1)², rest indexes one less.
                let first = l * l - 1;
                let width = 2 * l + 1;
                for row in 0..width {
                    let value: f64 =
                        (0..width).map(|col| band[row * width + col] * old[first + col]).sum();
                    channel[first + row] = value as f32;
                }
            }
        }
    }
}

/// For each band 1..=`degree`, the row-major (2l + 1)² matrix `N` with c′ = N c: the
/// coefficients of the function f′(d) = f(Rᵀ d) from those of f.
fn sh_rotation(degree: u32, rotation: DMat3) -> Vec<Vec<f64>> {
    let directions: Vec<DVec3> = (0..FIT_DIRECTIONS)
        .map(|i| {
            // A Fibonacci sphere.
            let z = 1.0 - (2.0 * i as f64 + 1.0) / FIT_DIRECTIONS as f64;
            let radius = (1.0 - z * z).sqrt();
            let angle = i as f64 * std::f64::consts::PI * (3.0 - 5.0_f64.sqrt());
            DVec3::new(radius * angle.cos(), radius * angle.sin(), z)
        })
        .collect();
    let basis: Vec<[f64; SH_MAX_COEFFS]> =
        directions.iter().map(|&d| sh_basis(degree, d)).collect();
    let turned: Vec<[f64; SH_MAX_COEFFS]> =
        directions.iter().map(|&d| sh_basis(degree, rotation.transpose() * d)).collect();
    (1..=degree as usize)
        .map(|l| {
            let (first, width) = (l * l, 2 * l + 1);
            // Y(Rᵀd) = M Y(d) over the samples: least squares for M, then N = Mᵀ.
            // Normal equations (Aᵀ A) Mᵀ = Aᵀ B with A rows Y(d), B rows Y(Rᵀ d).
            let mut ata = vec![0.0; width * width];
            let mut atb = vec![0.0; width * width];
            for (a, b) in basis.iter().zip(&turned) {
                for i in 0..width {
                    for j in 0..width {
                        ata[i * width + j] += a[first + i] * a[first + j];
                        atb[i * width + j] += a[first + i] * b[first + j];
                    }
                }
            }
            // N = Mᵀ: c′ᵢ = Σⱼ M_ji cⱼ.
            solve(&mut ata, &mut atb, width)
        })
        .collect()
}

/// Solves A X = B for X (A `n`×`n`, B `n`×`n`, both row-major; Gauss–Jordan with partial
/// pivoting). A is the Gram matrix of the band's basis over the fit directions: symmetric and
/// well conditioned.
fn solve(a: &mut [f64], b: &mut [f64], n: usize) -> Vec<f64> {
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
            .unwrap_or(col);
        for k in 0..n {
            a.swap(col * n + k, pivot * n + k);
            b.swap(col * n + k, pivot * n + k);
        }
        let diagonal = a[col * n + col];
        for k in 0..n {
            a[col * n + k] /= diagonal;
            b[col * n + k] /= diagonal;
        }
        for row in (0..n).filter(|&r| r != col) {
            let factor = a[row * n + col];
            for k in 0..n {
                a[row * n + k] -= factor * a[col * n + k];
                b[row * n + k] -= factor * b[col * n + k];
            }
        }
    }
    b.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::sh::sh_eval;

    fn splats(degree: u32) -> Splats {
        let coeffs = (degree as usize + 1).pow(2);
        let mut s = Splats::with_capacity(2, degree);
        for i in 0..2 {
            s.means.push([1.0 + i as f32, -2.0, 0.5]);
            s.log_scales.push([-1.0, -2.0, -3.0]);
            s.rotations.push([0.9, 0.1 * i as f32, -0.3, 0.2]);
            s.opacity_logits.push(0.5);
            s.sh_dc.push([0.1, 0.2, 0.3]);
            s.sh_rest.extend(
                (0..3 * (coeffs - 1)).map(|k| ((k * 37 + i * 11) % 17) as f32 / 17.0 - 0.5),
            );
        }
        s
    }

    /// Every channel's colour of splat `i` seen from `dir`, through the renderer's basis.
    fn colour(s: &Splats, i: usize, dir: DVec3) -> [f64; 3] {
        let coeffs = (s.sh_degree as usize + 1).pow(2);
        let rest = &s.sh_rest[i * 3 * (coeffs - 1)..(i + 1) * 3 * (coeffs - 1)];
        let rows: Vec<[f64; 3]> = (0..coeffs)
            .map(|k| {
                if k == 0 {
                    s.sh_dc[i].map(f64::from)
                } else {
                    std::array::from_fn(|c| f64::from(rest[c * (coeffs - 1) + k - 1]))
                }
            })
            .collect();
        sh_eval(s.sh_degree, &rows, dir)
    }

    #[test]
    fn a_turned_splat_seen_from_a_turned_direction_has_the_same_colour() {
        let rotation = DQuat::from_euler(glam::EulerRot::YXZ, 0.7, -1.1, 2.3);
        for degree in 1..=3 {
            let original = splats(degree);
            let mut turned = original.clone();
            rotate_splats(&mut turned, rotation);
            for i in 0..2 {
                for k in 0..20 {
                    let dir = DVec3::new(
                        f64::from(k).sin(),
                        (f64::from(k) * 1.7).cos(),
                        0.3 * f64::from(k) - 3.0,
                    )
                    .normalize();
                    let (a, b) = (colour(&original, i, dir), colour(&turned, i, rotation * dir));
                    for c in 0..3 {
                        // f32 storage of the coefficients bounds the agreement.
                        assert!(
                            (a[c] - b[c]).abs() < 1e-6,
                            "degree {degree} splat {i}: {a:?} {b:?}"
                        );
                    }
                }
            }
            // Centres and orientations turn with the scene; the rest is unchanged.
            let m = DMat3::from_quat(rotation);
            let mean = m * DVec3::from(original.means[1].map(f64::from));
            assert!(mean.distance(DVec3::from(turned.means[1].map(f64::from))) < 1e-5);
            let [w, x, y, z] = original.rotations[1].map(f64::from);
            let expected = rotation * DQuat::from_xyzw(x, y, z, w);
            let [tw, tx, ty, tz] = turned.rotations[1].map(f64::from);
            assert!(
                expected.dot(DQuat::from_xyzw(tx, ty, tz, tw)).abs()
                    > expected.length_squared() * (1.0 - 1e-6)
            );
            assert_eq!(turned.log_scales, original.log_scales);
            assert_eq!(turned.sh_dc, original.sh_dc);
        }
    }

    #[test]
    fn levelling_takes_up_to_minus_y() {
        for up in [Vec3::Z, Vec3::NEG_Y, Vec3::Y, Vec3::new(0.3, -0.2, 0.9)] {
            let level = leveling_rotation(up);
            let turned = level * up.as_dvec3().normalize();
            assert!(turned.distance(DVec3::NEG_Y) < 1e-12, "{up}: {turned}");
        }
        assert_eq!(leveling_rotation(Vec3::ZERO), DQuat::IDENTITY);
    }
}
