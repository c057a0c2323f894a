//! The per-splat projection math of `render/MATH.md`, one small function per step, each
//! beside its vector-Jacobian product (`foo_vjp` takes the forward's inputs and the
//! cotangent of its output and returns the cotangents of its inputs), like gsplat.
//!
//! Matrices are `glam::DMat3` (column-major storage; [`at`] reads by row and column). A
//! matrix cotangent `G` is the array of ∂L/∂Mᵢⱼ for every entry taken as independent, so
//! `⟨G, dM⟩ = Σᵢⱼ Gᵢⱼ dMᵢⱼ`. Symmetric 2×2 matrices are stored as their upper triangle
//! `[m₀₀, m₀₁, m₁₁]`; their cotangent `[g₀₀, g₀₁, g₁₁]` is with respect to those three numbers
//! (the off-diagonal appears once).
//!
//! Quaternions are `[w, x, y, z]`.

use glam::{DMat3, DVec3};

use super::{DILATION, EIGEN_GAP_MIN, FOV_MARGIN, RADIUS_SIGMAS, RefCamera};

/// Entry (row, col) of a 3×3 matrix.
#[must_use]
pub fn at(m: &DMat3, row: usize, col: usize) -> f64 {
    m.col(col)[row]
}

/// A 3×3 matrix from its rows.
#[must_use]
pub fn mat3_from_rows(rows: [[f64; 3]; 3]) -> DMat3 {
    DMat3::from_cols_array_2d(&rows).transpose()
}

/// The outer product `u vᵀ`.
#[must_use]
pub fn outer(u: DVec3, v: DVec3) -> DMat3 {
    DMat3::from_cols(u * v.x, u * v.y, u * v.z)
}

// ---------------------------------------------------------------------------------------------
// Step 3: quaternion → rotation, scales → 3D covariance.

/// q̂ = q / |q| and |q| (MATH.md step 3). `None` when |q| is zero or not finite (culled).
#[must_use]
pub fn normalize_quat(q: [f64; 4]) -> Option<([f64; 4], f64)> {
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    (norm > 0.0 && norm.is_finite()).then(|| (q.map(|v| v / norm), norm))
}

/// VJP of [`normalize_quat`]: ∂q̂/∂q = (I − q̂ q̂ᵀ) / |q|.
#[must_use]
pub fn normalize_quat_vjp(q_hat: [f64; 4], norm: f64, v_q_hat: [f64; 4]) -> [f64; 4] {
    let dot: f64 = q_hat.iter().zip(&v_q_hat).map(|(a, b)| a * b).sum();
    std::array::from_fn(|i| (v_q_hat[i] - q_hat[i] * dot) / norm)
}

/// The rotation matrix of a unit quaternion `[w, x, y, z]`, exactly as MATH.md step 3 writes
/// it (so it is also defined, though not a rotation, for a non-unit one).
#[must_use]
pub fn quat_to_rotmat(q: [f64; 4]) -> DMat3 {
    let [w, x, y, z] = q;
    mat3_from_rows([
        [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
        [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
        [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
    ])
}

/// VJP of [`quat_to_rotmat`] (each entry's polynomial differentiated in w, x, y, z).
#[must_use]
pub fn quat_to_rotmat_vjp(q: [f64; 4], v_r: &DMat3) -> [f64; 4] {
    let [w, x, y, z] = q;
    let g = |i, j| at(v_r, i, j);
    [
        2.0 * (-z * g(0, 1) + y * g(0, 2) + z * g(1, 0) - x * g(1, 2) - y * g(2, 0) + x * g(2, 1)),
        2.0 * (y * g(0, 1) + z * g(0, 2) + y * g(1, 0) - 2.0 * x * g(1, 1) - w * g(1, 2)
            + z * g(2, 0)
            + w * g(2, 1)
            - 2.0 * x * g(2, 2)),
        2.0 * (-2.0 * y * g(0, 0) + x * g(0, 1) + w * g(0, 2) + x * g(1, 0) + z * g(1, 2)
            - w * g(2, 0)
            + z * g(2, 1)
            - 2.0 * y * g(2, 2)),
        2.0 * (-2.0 * z * g(0, 0) - w * g(0, 1) + x * g(0, 2) + w * g(1, 0) - 2.0 * z * g(1, 1)
            + y * g(1, 2)
            + x * g(2, 0)
            + y * g(2, 1)),
    ]
}

/// Σ = M Mᵀ with M = Rq · diag(scale) (MATH.md step 3; `scale` = exp(log-scale)).
#[must_use]
pub fn covariance_3d(rq: &DMat3, scale: DVec3) -> DMat3 {
    let m = *rq * DMat3::from_diagonal(scale);
    m * m.transpose()
}

/// VJP of [`covariance_3d`]: returns (∂L/∂Rq, ∂L/∂scale).
#[must_use]
pub fn covariance_3d_vjp(rq: &DMat3, scale: DVec3, v_cov: &DMat3) -> (DMat3, DVec3) {
    let m = *rq * DMat3::from_diagonal(scale);
    // dΣ = dM Mᵀ + M dMᵀ  ⇒  ∂L/∂M = (G + Gᵀ) M.
    let v_m = (*v_cov + v_cov.transpose()) * m;
    let v_rq = v_m * DMat3::from_diagonal(scale);
    let v_scale =
        DVec3::new(rq.col(0).dot(v_m.col(0)), rq.col(1).dot(v_m.col(1)), rq.col(2).dot(v_m.col(2)));
    (v_rq, v_scale)
}

/// Σc = R Σ Rᵀ: a world-space covariance in camera space (R = rotation of `camera_from_world`).
#[must_use]
pub fn transform_cov(r: &DMat3, cov: &DMat3) -> DMat3 {
    *r * *cov * r.transpose()
}

/// VJP of [`transform_cov`] with respect to Σ (R is a constant): Rᵀ G R.
#[must_use]
pub fn transform_cov_vjp(r: &DMat3, v_cov_cam: &DMat3) -> DMat3 {
    r.transpose() * *v_cov_cam * *r
}

// ---------------------------------------------------------------------------------------------
// Step 4: clamped tangent and the perspective Jacobian.

/// The clamped tangent of MATH.md step 4 for one camera-space point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tangent {
    /// `(tx, ty)` = p.z · clamp(p.xy / p.z, −lim⁻, lim⁺).
    pub t: [f64; 2],
    /// The clamped ratio clamp(p.xy / p.z, −lim⁻, lim⁺).
    pub ratio: [f64; 2],
    /// Whether the ratio was outside [−lim⁻, lim⁺] (a value exactly on a limit is not clamped).
    pub clamped: [bool; 2],
}

/// The clamped tangent (MATH.md step 4).
#[must_use]
pub fn clamp_tangent(p: DVec3, cam: &RefCamera) -> Tangent {
    let (lim_neg, lim_pos) = cam.tangent_limits();
    let mut out = Tangent { t: [0.0; 2], ratio: [0.0; 2], clamped: [false; 2] };
    for (axis, u) in [p.x / p.z, p.y / p.z].into_iter().enumerate() {
        let clamped = u.clamp(-lim_neg[axis], lim_pos[axis]);
        out.ratio[axis] = clamped;
        out.clamped[axis] = u < -lim_neg[axis] || u > lim_pos[axis];
        out.t[axis] = p.z * clamped;
    }
    out
}

/// The 2×3 Jacobian J of the perspective projection at the clamped tangent, as its two rows:
/// `[[fx/z, 0, −fx·tx/z²], [0, fy/z, −fy·ty/z²]]` (MATH.md step 4).
#[must_use]
pub fn perspective_jacobian(p: DVec3, cam: &RefCamera) -> [DVec3; 2] {
    let Tangent { t: [tx, ty], .. } = clamp_tangent(p, cam);
    let z = p.z;
    [
        DVec3::new(cam.fx / z, 0.0, -cam.fx * tx / (z * z)),
        DVec3::new(0.0, cam.fy / z, -cam.fy * ty / (z * z)),
    ]
}

/// VJP of [`perspective_jacobian`] with respect to p. Inside the clamp range tx = x (∂tx/∂x = 1,
/// ∂tx/∂z = 0); outside it tx = z · lim (∂tx/∂x = 0, ∂tx/∂z = ±lim), which is gsplat's rule
/// and the exact derivative of the forward. The structurally zero entries J₀₁, J₁₀ take no
/// gradient.
#[must_use]
pub fn perspective_jacobian_vjp(p: DVec3, cam: &RefCamera, v_j: &[DVec3; 2]) -> DVec3 {
    let tan = clamp_tangent(p, cam);
    let z = p.z;
    let (rz, rz2) = (1.0 / z, 1.0 / (z * z));
    let rz3 = rz2 * rz;
    let f = [cam.fx, cam.fy];
    let mut v_p = DVec3::ZERO;
    for axis in 0..2 {
        let row = v_j[axis];
        // J[axis][axis] = f / z.
        v_p.z += -f[axis] * rz2 * row[axis];
        // J[axis][2] = −f · t / z².
        let v_t = -f[axis] * rz2 * row.z;
        v_p.z += 2.0 * f[axis] * tan.t[axis] * rz3 * row.z;
        // t = z · clamp(p[axis] / z).
        if tan.clamped[axis] {
            v_p.z += v_t * tan.ratio[axis];
        } else {
            v_p[axis] += v_t;
        }
    }
    v_p
}

// ---------------------------------------------------------------------------------------------
// Step 4 (end) – 6: 2D covariance, dilation, compensation, conic.

/// Σ2 = J Σc Jᵀ as `[a, b, c]` = `[j₀·Σc j₀, j₀·Σc j₁, j₁·Σc j₁]` (j₀, j₁ the rows of J).
#[must_use]
pub fn project_cov(j: &[DVec3; 2], cov_cam: &DMat3) -> [f64; 3] {
    [j[0].dot(*cov_cam * j[0]), j[0].dot(*cov_cam * j[1]), j[1].dot(*cov_cam * j[1])]
}

/// VJP of [`project_cov`]: returns (∂L/∂J rows, ∂L/∂Σc).
#[must_use]
pub fn project_cov_vjp(j: &[DVec3; 2], cov_cam: &DMat3, v_cov2d: [f64; 3]) -> ([DVec3; 2], DMat3) {
    let [v_a, v_b, v_c] = v_cov2d;
    let sym = *cov_cam + cov_cam.transpose();
    let v_j0 = v_a * (sym * j[0]) + v_b * (*cov_cam * j[1]);
    let v_j1 = v_c * (sym * j[1]) + v_b * (cov_cam.transpose() * j[0]);
    let v_cov_cam = v_a * outer(j[0], j[0]) + v_b * outer(j[0], j[1]) + v_c * outer(j[1], j[1]);
    ([v_j0, v_j1], v_cov_cam)
}

/// Determinant of a symmetric 2×2 `[a, b, c]`: a c − b².
#[must_use]
pub fn det2(m: [f64; 3]) -> f64 {
    m[0] * m[2] - m[1] * m[1]
}

/// VJP of [`det2`].
#[must_use]
pub fn det2_vjp(m: [f64; 3], v_det: f64) -> [f64; 3] {
    [v_det * m[2], -2.0 * v_det * m[1], v_det * m[0]]
}

/// Σ2' = Σ2 + DILATION · I (MATH.md step 5). Its VJP is the identity.
#[must_use]
pub fn dilate(cov2d: [f64; 3]) -> [f64; 3] {
    [cov2d[0] + DILATION, cov2d[1], cov2d[2] + DILATION]
}

/// Antialiasing compensation sqrt(max(0, det(Σ2) / det(Σ2'))) (MATH.md step 5).
#[must_use]
pub fn aa_compensation(cov2d: [f64; 3], cov_dil: [f64; 3]) -> f64 {
    (det2(cov2d) / det2(cov_dil)).max(0.0).sqrt()
}

/// VJP of [`aa_compensation`]: returns (∂L/∂Σ2, ∂L/∂Σ2'). Zero where the ratio is clamped at
/// 0 (ratio ≤ 0).
#[must_use]
pub fn aa_compensation_vjp(
    cov2d: [f64; 3],
    cov_dil: [f64; 3],
    v_comp: f64,
) -> ([f64; 3], [f64; 3]) {
    let (det, det_dil) = (det2(cov2d), det2(cov_dil));
    let ratio = det / det_dil;
    if ratio <= 0.0 {
        return ([0.0; 3], [0.0; 3]);
    }
    let v_ratio = v_comp / (2.0 * ratio.sqrt());
    let v_det = v_ratio / det_dil;
    let v_det_dil = -v_ratio * det / (det_dil * det_dil);
    (det2_vjp(cov2d, v_det), det2_vjp(cov_dil, v_det_dil))
}

/// The conic (A, B, C) = (Σ'₁₁, −Σ'₀₁, Σ'₀₀) / det' (MATH.md step 6), or `None` when det' ≤ 0
/// or is not finite (culled, step 5).
#[must_use]
pub fn conic(cov_dil: [f64; 3]) -> Option<[f64; 3]> {
    let det = det2(cov_dil);
    (det > 0.0 && det.is_finite()).then(|| [cov_dil[2] / det, -cov_dil[1] / det, cov_dil[0] / det])
}

/// VJP of [`conic`] with respect to Σ2' = `[a, b, c]`.
#[must_use]
pub fn conic_vjp(cov_dil: [f64; 3], v_conic: [f64; 3]) -> [f64; 3] {
    let [a, b, c] = cov_dil;
    let [v_a_out, v_b_out, v_c_out] = v_conic;
    let det = det2(cov_dil);
    // A = c/det, B = −b/det, C = a/det.
    let v_det = -(v_a_out * c - v_b_out * b + v_c_out * a) / (det * det);
    let from_det = det2_vjp(cov_dil, v_det);
    [v_c_out / det + from_det[0], -v_b_out / det + from_det[1], v_a_out / det + from_det[2]]
}

/// Screen radius in pixels, ceil(3 sqrt(λ)) with λ = mid + sqrt(max(0.1, mid² − det'))
/// (MATH.md step 8). `None` when not finite. Not differentiated.
#[must_use]
pub fn screen_radius(cov_dil: [f64; 3]) -> Option<u32> {
    let mid = 0.5 * (cov_dil[0] + cov_dil[2]);
    let lambda = mid + (mid * mid - det2(cov_dil)).max(EIGEN_GAP_MIN).sqrt();
    let radius = (RADIUS_SIGMAS * lambda.sqrt()).ceil();
    (radius.is_finite() && radius >= 0.0 && radius <= f64::from(u32::MAX)).then_some(radius as u32)
}

// ---------------------------------------------------------------------------------------------
// Steps 2, 7: camera-space mean and its projection.

/// p = R μ + t (MATH.md step 2).
#[must_use]
pub fn world_to_camera(mean: DVec3, cam: &RefCamera) -> DVec3 {
    cam.rotation * mean + cam.translation
}

/// VJP of [`world_to_camera`] with respect to μ: Rᵀ v.
#[must_use]
pub fn world_to_camera_vjp(cam: &RefCamera, v_p: DVec3) -> DVec3 {
    cam.rotation.transpose() * v_p
}

/// mean2d = (fx · x/z + cx, fy · y/z + cy) (MATH.md step 7).
#[must_use]
pub fn project_mean(p: DVec3, cam: &RefCamera) -> [f64; 2] {
    [cam.fx * p.x / p.z + cam.cx, cam.fy * p.y / p.z + cam.cy]
}

/// VJP of [`project_mean`] with respect to p.
#[must_use]
pub fn project_mean_vjp(p: DVec3, cam: &RefCamera, v_mean2d: [f64; 2]) -> DVec3 {
    let rz = 1.0 / p.z;
    DVec3::new(
        cam.fx * rz * v_mean2d[0],
        cam.fy * rz * v_mean2d[1],
        -(cam.fx * p.x * v_mean2d[0] + cam.fy * p.y * v_mean2d[1]) * rz * rz,
    )
}

// ---------------------------------------------------------------------------------------------
// Steps 9, 10: view direction, colour clamp, opacity.

/// v = (μ − centre) / |μ − centre| and |μ − centre| (MATH.md step 9). A zero offset gives the
/// zero direction (such a splat has p.z ≈ 0 < NEAR and is culled anyway).
#[must_use]
pub fn view_direction(mean: DVec3, centre: DVec3) -> (DVec3, f64) {
    let offset = mean - centre;
    let dist = offset.length();
    if dist > 0.0 { (offset / dist, dist) } else { (DVec3::ZERO, 0.0) }
}

/// VJP of [`view_direction`] with respect to μ: (I − v vᵀ) v̄ / |μ − centre|.
#[must_use]
pub fn view_direction_vjp(dir: DVec3, dist: f64, v_dir: DVec3) -> DVec3 {
    if dist > 0.0 { (v_dir - dir * dir.dot(v_dir)) / dist } else { DVec3::ZERO }
}

/// colour = max(e + 0.5, 0) per channel (MATH.md step 9).
#[must_use]
pub fn clamp_color(sh_value: [f64; 3]) -> [f64; 3] {
    sh_value.map(|e| (e + 0.5).max(0.0))
}

/// VJP of [`clamp_color`]: zero for a channel clamped at 0 (e + 0.5 < 0; exactly 0 passes).
#[must_use]
pub fn clamp_color_vjp(sh_value: [f64; 3], v_color: [f64; 3]) -> [f64; 3] {
    std::array::from_fn(|c| if sh_value[c] + 0.5 >= 0.0 { v_color[c] } else { 0.0 })
}

/// The logistic sigmoid 1 / (1 + e⁻ˣ), evaluated without overflow.
#[must_use]
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// VJP of [`sigmoid`]: σ(x)(1 − σ(x)) v.
#[must_use]
pub fn sigmoid_vjp(x: f64, v: f64) -> f64 {
    let s = sigmoid(x);
    v * s * (1.0 - s)
}

/// The frustum margin of the clamped tangent: `FOV_MARGIN · size / focal`.
#[must_use]
pub fn fov_margin(size: u32, focal: f64) -> f64 {
    FOV_MARGIN * f64::from(size) / focal
}

#[cfg(test)]
mod tests {
    //! Each VJP against central finite differences of its forward (these functions are
    //! smooth away from their clamps, and the inputs below are away from them).
    use super::*;

    const H: f64 = 1e-6;

    /// A tiny deterministic generator in [-1, 1).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        }
        fn vec3(&mut self) -> DVec3 {
            DVec3::new(self.next(), self.next(), self.next())
        }
        fn mat3(&mut self) -> DMat3 {
            DMat3::from_cols(self.vec3(), self.vec3(), self.vec3())
        }
    }

    fn close(a: f64, b: f64, what: &str) {
        assert!(
            (a - b).abs() <= 1e-7 * (1.0 + a.abs().max(b.abs())),
            "{what}: analytic {a} vs numeric {b}"
        );
    }

    /// Central difference of `f` along every coordinate of `x`.
    fn numeric<const N: usize>(x: [f64; N], f: impl Fn([f64; N]) -> f64) -> [f64; N] {
        std::array::from_fn(|i| {
            let (mut xp, mut xm) = (x, x);
            xp[i] += H;
            xm[i] -= H;
            (f(xp) - f(xm)) / (2.0 * H)
        })
    }

    fn dot_m(a: &DMat3, b: &DMat3) -> f64 {
        (0..3).map(|c| a.col(c).dot(b.col(c))).sum()
    }

    fn cam() -> RefCamera {
        RefCamera {
            width: 40,
            height: 32,
            fx: 35.0,
            fy: 30.0,
            cx: 19.0,
            cy: 17.0,
            rotation: DMat3::IDENTITY,
            translation: DVec3::ZERO,
            centre: DVec3::ZERO,
        }
    }

    #[test]
    fn quaternion_vjps() {
        let mut rng = Lcg(1);
        for _ in 0..10 {
            let q = [rng.next(), rng.next(), rng.next(), rng.next()];
            let g = rng.mat3();
            let (q_hat, norm) = normalize_quat(q).unwrap();
            let an = normalize_quat_vjp(q_hat, norm, quat_to_rotmat_vjp(q_hat, &g));
            let num = numeric(q, |q| dot_m(&g, &quat_to_rotmat(normalize_quat(q).unwrap().0)));
            for i in 0..4 {
                close(an[i], num[i], "quat");
            }
            // The normalised rotation is orthonormal.
            let r = quat_to_rotmat(q_hat);
            assert!((r * r.transpose()).abs_diff_eq(DMat3::IDENTITY, 1e-12));
        }
    }

    #[test]
    fn covariance_vjps() {
        let mut rng = Lcg(2);
        for _ in 0..10 {
            let (rq, scale, g, r) = (rng.mat3(), rng.vec3() + 2.0, rng.mat3(), rng.mat3());
            let (v_rq, v_scale) = covariance_3d_vjp(&rq, scale, &transform_cov_vjp(&r, &g));
            let f = |rq: DMat3, s: DVec3| dot_m(&g, &transform_cov(&r, &covariance_3d(&rq, s)));
            let num_s = numeric(scale.to_array(), |s| f(rq, DVec3::from_array(s)));
            for i in 0..3 {
                close(v_scale[i], num_s[i], "scale");
            }
            let num_r = numeric(rq.to_cols_array(), |m| f(DMat3::from_cols_array(&m), scale));
            for (a, b) in v_rq.to_cols_array().iter().zip(num_r) {
                close(*a, b, "rq");
            }
        }
    }

    #[test]
    fn projection_vjps() {
        let mut rng = Lcg(3);
        let cam = cam();
        let mut clamped = 0;
        for k in 0..20 {
            // Half of the points far outside the frustum, to exercise the clamped tangent.
            let spread = if k % 2 == 0 { 0.5 } else { 5.0 };
            let p = DVec3::new(spread * rng.next(), spread * rng.next(), 2.0 + rng.next());
            let cov_cam = {
                let m = rng.mat3();
                m * m.transpose() + DMat3::IDENTITY * 0.1
            };
            let v_cov2d = [rng.next(), rng.next(), rng.next()];
            let v_mean2d = [rng.next(), rng.next()];
            clamped += usize::from(clamp_tangent(p, &cam).clamped.contains(&true));
            let j = perspective_jacobian(p, &cam);
            let (v_j, v_cov_cam) = project_cov_vjp(&j, &cov_cam, v_cov2d);
            let an_p =
                perspective_jacobian_vjp(p, &cam, &v_j) + project_mean_vjp(p, &cam, v_mean2d);
            let f = |p: DVec3, cov: &DMat3| {
                let c = project_cov(&perspective_jacobian(p, &cam), cov);
                let m = project_mean(p, &cam);
                (0..3).map(|i| c[i] * v_cov2d[i]).sum::<f64>()
                    + m[0] * v_mean2d[0]
                    + m[1] * v_mean2d[1]
            };
            let num_p = numeric(p.to_array(), |p| f(DVec3::from_array(p), &cov_cam));
            for i in 0..3 {
                close(an_p[i], num_p[i], "p");
            }
            let num_c = numeric(cov_cam.to_cols_array(), |m| f(p, &DMat3::from_cols_array(&m)));
            for (a, b) in v_cov_cam.to_cols_array().iter().zip(num_c) {
                close(*a, b, "cov_cam");
            }
        }
        assert!(clamped >= 5, "only {clamped} points with a clamped tangent");
    }

    #[test]
    fn conic_and_compensation_vjps() {
        let mut rng = Lcg(4);
        for _ in 0..20 {
            let cov2d = [2.0 + rng.next(), 0.5 * rng.next(), 1.5 + rng.next()];
            let (v_conic, v_comp) = ([rng.next(), rng.next(), rng.next()], rng.next());
            let f = |c: [f64; 3]| {
                let d = dilate(c);
                let q = conic(d).unwrap();
                (0..3).map(|i| q[i] * v_conic[i]).sum::<f64>() + aa_compensation(c, d) * v_comp
            };
            let d = dilate(cov2d);
            let (v_c, v_d) = aa_compensation_vjp(cov2d, d, v_comp);
            let v_d2 = conic_vjp(d, v_conic);
            let num = numeric(cov2d, f);
            for i in 0..3 {
                close(v_c[i] + v_d[i] + v_d2[i], num[i], "cov2d");
            }
        }
    }

    #[test]
    fn direction_and_sigmoid_vjps() {
        let mut rng = Lcg(5);
        for _ in 0..10 {
            let (mean, centre, g) = (rng.vec3() * 3.0, rng.vec3(), rng.vec3());
            let (dir, dist) = view_direction(mean, centre);
            let an = view_direction_vjp(dir, dist, g);
            let num =
                numeric(mean.to_array(), |m| view_direction(DVec3::from_array(m), centre).0.dot(g));
            for i in 0..3 {
                close(an[i], num[i], "dir");
            }
            let x = 4.0 * rng.next();
            close(sigmoid_vjp(x, 1.0), numeric([x], |x| sigmoid(x[0]))[0], "sigmoid");
        }
        assert!(sigmoid(-800.0) >= 0.0 && sigmoid(800.0) <= 1.0);
        assert_eq!(view_direction(DVec3::ONE, DVec3::ONE), (DVec3::ZERO, 0.0));
    }
}
