//! How far one set of camera poses is from another once the best similarity transform
//! (rotation, translation, scale) puts them in one frame: the measure of our COLMAP runs
//! against a capture's own model. Structure-from-motion fixes poses only up to such a
//! transform, so nothing else can be compared.
//!
//! The rotation between the two frames is the median of the rotations that take each
//! camera's orientation in ours to its orientation in the reference (reweighted quaternion
//! averages, Markley et al. 2007 and Weiszfeld); the scale and
//! the translation then fit the camera centres in least squares (as in Umeyama, 1991).
//! Fitting the rotation to the centres instead (Horn's closed form) leaves the roll about
//! their main axis poorly fixed when the cameras stand along a line or a shallow arc (a walk,
//! a half circle around an object), which shows as the same error on every camera.

use glam::{DMat3, DMat4, DQuat, DVec3};

/// Reweighted averages of the rotation: each halves the pull of an outlier or better.
const WEISZFELD_ITERATIONS: usize = 32;

/// Poses of the same images from two reconstructions, after alignment.
#[derive(Clone, Debug)]
pub struct PoseComparison {
    /// Images in both (by name).
    pub matched: usize,
    /// Angle between each matched camera's orientation in the reference and ours, aligned,
    /// in degrees, sorted.
    pub rotation_errors_deg: Vec<f64>,
    /// Distance between each matched camera's centre in the reference and ours, aligned, as
    /// a fraction of the reference cameras' extent (the diagonal of their centres' bounding
    /// box), sorted.
    pub centre_errors: Vec<f64>,
    /// Scale of ours in the reference's units.
    pub scale: f64,
}

impl PoseComparison {
    #[must_use]
    pub fn median_rotation_deg(&self) -> f64 {
        median(&self.rotation_errors_deg)
    }

    #[must_use]
    pub fn max_rotation_deg(&self) -> f64 {
        self.rotation_errors_deg.last().copied().unwrap_or(0.0)
    }

    #[must_use]
    pub fn median_centre_error(&self) -> f64 {
        median(&self.centre_errors)
    }

    #[must_use]
    pub fn max_centre_error(&self) -> f64 {
        self.centre_errors.last().copied().unwrap_or(0.0)
    }
}

/// Compares `ours` with `reference`, each a list of (image name, `world_from_camera`). `None`
/// when fewer than three images are in both, or the reference cameras all stand in one
/// place: no similarity transform is defined then.
#[must_use]
pub fn compare_poses(
    ours: &[(String, DMat4)],
    reference: &[(String, DMat4)],
) -> Option<PoseComparison> {
    let pairs: Vec<(DMat4, DMat4)> = ours
        .iter()
        .filter_map(|(name, pose)| {
            reference.iter().find(|(other, _)| other == name).map(|(_, r)| (*pose, *r))
        })
        .collect();
    let centres = |pick: fn(&(DMat4, DMat4)) -> DMat4| -> Vec<DVec3> {
        pairs.iter().map(|pair| pick(pair).w_axis.truncate()).collect()
    };
    let (ours_centres, reference_centres) = (centres(|p| p.0), centres(|p| p.1));
    let (lower, upper) = reference_centres
        .iter()
        .fold((DVec3::splat(f64::INFINITY), DVec3::splat(f64::NEG_INFINITY)), |(lo, hi), c| {
            (lo.min(*c), hi.max(*c))
        });
    let extent = (upper - lower).length();
    if pairs.len() < 3 || extent.is_nan() || extent <= 0.0 {
        return None;
    }
    let rotation = average_rotation(pairs.iter().map(|(ours, reference)| {
        DMat3::from_mat4(*reference) * DMat3::from_mat4(*ours).transpose()
    }));
    let transform = similarity(rotation, &ours_centres, &reference_centres)?;
    let mut rotation_errors_deg: Vec<f64> = pairs
        .iter()
        .map(|(ours, reference)| {
            let aligned = transform.rotation * DMat3::from_mat4(*ours);
            let difference = DMat3::from_mat4(*reference).transpose() * aligned;
            angle(DQuat::from_mat3(&difference)).to_degrees()
        })
        .collect();
    let mut centre_errors: Vec<f64> = ours_centres
        .iter()
        .zip(&reference_centres)
        .map(|(ours, reference)| (transform.apply(*ours) - *reference).length() / extent)
        .collect();
    rotation_errors_deg.sort_by(f64::total_cmp);
    centre_errors.sort_by(f64::total_cmp);
    Some(PoseComparison {
        matched: pairs.len(),
        rotation_errors_deg,
        centre_errors,
        scale: transform.scale,
    })
}

/// `x ↦ scale · rotation · x + translation`.
#[derive(Clone, Copy, Debug)]
struct Similarity {
    rotation: DMat3,
    translation: DVec3,
    scale: f64,
}

impl Similarity {
    fn apply(&self, x: DVec3) -> DVec3 {
        self.scale * (self.rotation * x) + self.translation
    }
}

/// The rotation nearest all of `rotations` in the sense of a median: quaternion averages
/// (the unit eigenvector of the largest eigenvalue of Σ w q qᵀ, where a quaternion's sign
/// does not matter) reweighted by the inverse of each rotation's angle from the last one
/// (Weiszfeld's iteration), so that one misregistered camera does not turn all the others.
fn average_rotation(rotations: impl Iterator<Item = DMat3>) -> DMat3 {
    let quaternions: Vec<DQuat> = rotations.map(|r| DQuat::from_mat3(&r)).collect();
    let mut weights = vec![1.0; quaternions.len()];
    let mut mean = DQuat::IDENTITY;
    for _ in 0..WEISZFELD_ITERATIONS {
        let mut sum = [[0.0f64; 4]; 4];
        for (q, weight) in quaternions.iter().zip(&weights) {
            let q = q.to_array();
            for (i, row) in sum.iter_mut().enumerate() {
                for (j, value) in row.iter_mut().enumerate() {
                    *value += weight * q[i] * q[j];
                }
            }
        }
        let [x, y, z, w] = largest_eigenvector(sum);
        mean = DQuat::from_xyzw(x, y, z, w).normalize();
        for (q, weight) in quaternions.iter().zip(&mut weights) {
            *weight = 1.0 / angle(mean.inverse() * *q).max(1e-12);
        }
    }
    DMat3::from_quat(mean)
}

/// The angle of a rotation, in radians (from the quaternion's halves: precise near zero,
/// where acos of the trace is not).
fn angle(q: DQuat) -> f64 {
    2.0 * q.xyz().length().atan2(q.w.abs())
}

/// The scale and translation that, with `rotation`, take `from` closest to `to` in least
/// squares. `None` when `from` is a single point.
fn similarity(rotation: DMat3, from: &[DVec3], to: &[DVec3]) -> Option<Similarity> {
    let count = from.len() as f64;
    let from_mean = from.iter().sum::<DVec3>() / count;
    let to_mean = to.iter().sum::<DVec3>() / count;
    let from_square: f64 = from.iter().map(|a| (*a - from_mean).length_squared()).sum();
    if from_square.is_nan() || from_square <= 0.0 {
        return None;
    }
    let scale = from
        .iter()
        .zip(to)
        .map(|(a, b)| (*b - to_mean).dot(rotation * (*a - from_mean)))
        .sum::<f64>()
        / from_square;
    Some(Similarity { rotation, translation: to_mean - scale * (rotation * from_mean), scale })
}

/// The unit eigenvector of the largest eigenvalue of a symmetric 4×4 matrix (cyclic Jacobi
/// rotations until the off-diagonal part vanishes).
fn largest_eigenvector(mut a: [[f64; 4]; 4]) -> [f64; 4] {
    let mut v = [[0.0; 4]; 4];
    for (i, row) in v.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    for _sweep in 0..64 {
        let off: f64 = (0..4)
            .flat_map(|i| (0..4).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        let diagonal: f64 = (0..4).map(|i| a[i][i] * a[i][i]).sum();
        if off <= 1e-30 * diagonal.max(f64::MIN_POSITIVE) {
            break;
        }
        for p in 0..3 {
            for q in p + 1..4 {
                if a[p][q] == 0.0 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                // signum(0) = 1: a zero θ turns by 45°.
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                // A ← Jᵀ A J: columns p and q, then rows p and q.
                for row in &mut a {
                    let (akp, akq) = (row[p], row[q]);
                    row[p] = c * akp - s * akq;
                    row[q] = s * akp + c * akq;
                }
                let (row_p, row_q) = (a[p], a[q]);
                a[p] = std::array::from_fn(|k| c * row_p[k] - s * row_q[k]);
                a[q] = std::array::from_fn(|k| s * row_p[k] + c * row_q[k]);
                for row in &mut v {
                    let (vp, vq) = (row[p], row[q]);
                    row[p] = c * vp - s * vq;
                    row[q] = s * vp + c * vq;
                }
            }
        }
    }
    let largest = (0..4).max_by(|&i, &j| a[i][i].total_cmp(&a[j][j])).unwrap_or(0);
    [v[0][largest], v[1][largest], v[2][largest], v[3][largest]]
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pose(rotation: DQuat, centre: DVec3) -> DMat4 {
        DMat4::from_rotation_translation(rotation, centre)
    }

    /// Cameras on a ring looking in, seen through a known similarity: recovered exactly,
    /// and the errors of a perturbed camera are the perturbation.
    #[test]
    fn a_known_similarity_is_recovered() {
        let reference: Vec<(String, DMat4)> = (0..12)
            .map(|i| {
                let angle = f64::from(i) * std::f64::consts::TAU / 12.0;
                let centre =
                    DVec3::new(3.0 * angle.cos(), 0.3 * f64::from(i % 3), 3.0 * angle.sin());
                (format!("{i}.jpg"), pose(DQuat::from_rotation_y(-angle), centre))
            })
            .collect();
        let rotation = DQuat::from_euler(glam::EulerRot::XYZ, 0.4, -1.1, 2.5);
        let (scale, translation) = (0.37, DVec3::new(5.0, -2.0, 0.5));
        // ours = the reference seen in another frame: x_ours = (R⁻¹ (x − t)) / s.
        let to_ours =
            DMat4::from_scale_rotation_translation(DVec3::splat(scale), rotation, translation)
                .inverse();
        let mut ours: Vec<(String, DMat4)> = reference
            .iter()
            .map(|(name, p)| {
                let centre = to_ours.transform_point3(p.w_axis.truncate());
                let orientation = rotation.inverse() * DQuat::from_mat4(p);
                (name.clone(), pose(orientation, centre))
            })
            .collect();
        let exact = compare_poses(&ours, &reference).expect("defined");
        assert_eq!(exact.matched, 12);
        assert!((exact.scale - scale).abs() < 1e-9, "{}", exact.scale);
        assert!(exact.max_rotation_deg() < 1e-6, "{exact:?}");
        assert!(exact.max_centre_error() < 1e-9, "{exact:?}");

        // Turn one camera by 2° about its own axis: only its rotation error moves.
        let (name, p) = &ours[5];
        let turned = DQuat::from_mat4(p) * DQuat::from_rotation_z(2f64.to_radians());
        ours[5] = (name.clone(), pose(turned, p.w_axis.truncate()));
        ours.push(("not in the reference.jpg".into(), DMat4::IDENTITY));
        let one_off = compare_poses(&ours, &reference).expect("defined");
        assert_eq!(one_off.matched, 12);
        assert!((one_off.max_rotation_deg() - 2.0).abs() < 1e-6, "{one_off:?}");
        assert!(one_off.median_rotation_deg() < 1e-6);
    }

    #[test]
    fn too_few_or_degenerate_cameras_compare_to_nothing() {
        let same = |n: usize| -> Vec<(String, DMat4)> {
            (0..n).map(|i| (format!("{i}"), DMat4::IDENTITY)).collect()
        };
        assert!(compare_poses(&same(5), &same(5)).is_none());
        let two: Vec<(String, DMat4)> = (0..2)
            .map(|i| (format!("{i}"), pose(DQuat::IDENTITY, DVec3::X * f64::from(i))))
            .collect();
        assert!(compare_poses(&two, &two).is_none());
    }
}
