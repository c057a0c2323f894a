//! CPU reference of the differentiable splat rasterizer, in plain Rust and f64.
//!
//! This is the oracle the GPU kernels are tested against. It implements `render/MATH.md`
//! exactly and nothing else: projection ([`project_forward`]), per-pixel compositing
//! ([`rasterize_forward`]) and their exact analytic derivatives ([`rasterize_backward`],
//! [`project_backward`]). Speed is no goal: every pixel walks the splats of its tile.
//!
//! Inputs are the f32 [`Splats`] and [`Camera`]; both are converted to f64 on the way in
//! ([`SplatParams`], [`RefCamera`]). The `*_params` entry points take the f64 parameters
//! directly, which finite-difference tests need (an f32 parameter cannot be nudged by 1e-6).
//!
//! Conventions where MATH.md leaves a choice (the GPU kernels must agree):
//! - a value exactly on a clamp threshold is *not* clamped and keeps its gradient
//!   (colour e + 0.5 = 0, α·exp(−σ) = `ALPHA_MAX`, tangent ratio = ±lim);
//! - `camera_from_world` is `Camera::camera_from_world()` (inverted in f32) widened to f64,
//!   the camera centre for the view direction is `Camera::position()` widened;
//! - step 1 culls a splat with a non-finite value in *any* of its stored parameters,
//!   including SH coefficients above the active degree;
//! - the active SH degree is `min(settings.sh_degree, splats.sh_degree)`;
//! - "the clamped tangent has zero gradient outside its range" is read as ∂clamp(u)/∂u = 0:
//!   outside the range t = p.z · lim still depends on p.z, and that gradient is kept (gsplat's
//!   rule, and the exact derivative of the forward);
//! - the 2D covariance is the triple (j₀·Σc j₀, j₀·Σc j₁, j₁·Σc j₁) of J's rows, its
//!   determinant a c − b²; a radius that is not finite culls the splat (only reachable with
//!   overflowing scales).

pub mod math;
pub mod sh;

use glam::{DMat3, DVec3};
use splat_formats::Splats;

use crate::Camera;
use math::Tangent;
use sh::SH_MAX_COEFFS;

/// Splats whose camera-space depth is below this are culled (MATH.md step 2).
pub const NEAR: f64 = 0.01;
/// Side of a screen tile in pixels.
pub const TILE: u32 = crate::TILE_SIZE;
/// Added to the diagonal of the 2D covariance (MATH.md step 5).
pub const DILATION: f64 = 0.3;
/// Largest α a splat composites with.
pub const ALPHA_MAX: f64 = 0.99;
/// Smaller α are skipped.
pub const ALPHA_MIN: f64 = 1.0 / 255.0;
/// Compositing stops before the transmittance would fall below this.
pub const T_MIN: f64 = 1e-4;
/// Frustum margin of the clamped tangent, as a fraction of the image size (MATH.md step 4).
pub const FOV_MARGIN: f64 = 0.3;
/// Lower bound of mid² − det' under the square root of the radius (MATH.md step 8).
pub const EIGEN_GAP_MIN: f64 = 0.1;
/// The radius covers this many standard deviations of the larger eigenvalue.
pub const RADIUS_SIGMAS: f64 = 3.0;
/// σ at the 3σ ellipse, the most a splat is composited out to (MATH.md step 8).
pub const SIGMA_3: f64 = 4.5;
/// Relative and absolute slack on σ of the tile test (MATH.md step 8).
pub const TILE_SLACK: f64 = 1e-4;

/// Render settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Background colour b.
    pub background: [f64; 3],
    /// Mip-Splatting style antialiasing: opacity times the compensation factor.
    pub antialiased: bool,
    /// Active SH degree, ≤ `splats.sh_degree` (larger values act as `splats.sh_degree`).
    pub sh_degree: u32,
}

/// The camera in f64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RefCamera {
    pub width: u32,
    pub height: u32,
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
    /// R of `camera_from_world`.
    pub rotation: DMat3,
    /// t of `camera_from_world`.
    pub translation: DVec3,
    /// Camera centre in world space (for the SH view direction).
    pub centre: DVec3,
}

impl RefCamera {
    /// Widens a [`Camera`] to f64 (see the module docs for which matrices are used).
    #[must_use]
    pub fn new(camera: &Camera) -> Self {
        let camera_from_world = camera.camera_from_world().as_dmat4();
        Self {
            width: camera.width,
            height: camera.height,
            fx: f64::from(camera.fx),
            fy: f64::from(camera.fy),
            cx: f64::from(camera.cx),
            cy: f64::from(camera.cy),
            rotation: DMat3::from_mat4(camera_from_world),
            translation: camera_from_world.w_axis.truncate(),
            centre: camera.position().as_dvec3(),
        }
    }

    /// Tiles across and down: ceil(W / 16), ceil(H / 16).
    #[must_use]
    pub fn tiles(&self) -> [u32; 2] {
        [self.width.div_ceil(TILE), self.height.div_ceil(TILE)]
    }

    /// Number of pixels, W · H.
    #[must_use]
    pub fn pixels(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// The tangent clamp limits (lim⁻, lim⁺) for x and y (MATH.md step 4):
    /// lim⁺ = (W − cx)/fx + 0.3 W/fx, lim⁻ = cx/fx + 0.3 W/fx, likewise for y.
    #[must_use]
    pub fn tangent_limits(&self) -> ([f64; 2], [f64; 2]) {
        let margin =
            [math::fov_margin(self.width, self.fx), math::fov_margin(self.height, self.fy)];
        let lim_neg = [self.cx / self.fx + margin[0], self.cy / self.fy + margin[1]];
        let lim_pos = [
            (f64::from(self.width) - self.cx) / self.fx + margin[0],
            (f64::from(self.height) - self.cy) / self.fy + margin[1],
        ];
        (lim_neg, lim_pos)
    }
}

/// The splat parameters of [`Splats`] in f64, same layout and meaning.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SplatParams {
    /// `[N][3]`
    pub means: Vec<[f64; 3]>,
    /// `[N][3]`
    pub log_scales: Vec<[f64; 3]>,
    /// `[N][4]`, `w, x, y, z`, not normalised.
    pub rotations: Vec<[f64; 4]>,
    /// `[N]`
    pub opacity_logits: Vec<f64>,
    /// `[N][3]` = `sh[k = 0][c]`.
    pub sh_dc: Vec<[f64; 3]>,
    /// `[N][3][K − 1]`, channel-major: `sh[k][c]` = `sh_rest[i·3(K−1) + c(K−1) + k − 1]`.
    pub sh_rest: Vec<f64>,
    /// Stored SH degree d (K = (d + 1)²).
    pub sh_degree: u32,
}

impl From<&Splats> for SplatParams {
    fn from(s: &Splats) -> Self {
        let widen3 = |v: &Vec<[f32; 3]>| v.iter().map(|a| a.map(f64::from)).collect();
        Self {
            means: widen3(&s.means),
            log_scales: widen3(&s.log_scales),
            rotations: s.rotations.iter().map(|a| a.map(f64::from)).collect(),
            opacity_logits: s.opacity_logits.iter().copied().map(f64::from).collect(),
            sh_dc: widen3(&s.sh_dc),
            sh_rest: s.sh_rest.iter().copied().map(f64::from).collect(),
            sh_degree: s.sh_degree,
        }
    }
}

impl SplatParams {
    /// Number of splats N.
    #[must_use]
    pub fn len(&self) -> usize {
        self.means.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }

    /// Higher SH coefficients per channel, K − 1.
    #[must_use]
    pub fn rest_per_channel(&self) -> usize {
        sh::num_coeffs(self.sh_degree.min(sh::SH_MAX_DEGREE)) - 1
    }

    /// `sh_rest` values per splat, 3 (K − 1).
    #[must_use]
    pub fn rest_per_splat(&self) -> usize {
        3 * self.rest_per_channel()
    }

    fn sh_rest_of(&self, i: usize) -> &[f64] {
        let n = self.rest_per_splat();
        &self.sh_rest[i * n..(i + 1) * n]
    }

    /// Every parameter of splat `i` that the render reads (SH up to `degree`) is finite
    /// (MATH.md step 1).
    fn is_finite(&self, i: usize, degree: u32) -> bool {
        let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        finite(&self.means[i])
            && finite(&self.log_scales[i])
            && finite(&self.rotations[i])
            && self.opacity_logits[i].is_finite()
            && self.coeffs(i)[..sh::num_coeffs(degree)].iter().all(|c| finite(c))
    }

    /// `sh[k][c]` of splat `i` for k < 16 (zero past the stored degree).
    fn coeffs(&self, i: usize) -> [[f64; 3]; SH_MAX_COEFFS] {
        let per_channel = self.rest_per_channel();
        let rest = self.sh_rest_of(i);
        let mut out = [[0.0; 3]; SH_MAX_COEFFS];
        out[0] = self.sh_dc[i];
        for (k, row) in out.iter_mut().enumerate().take(per_channel + 1).skip(1) {
            *row = std::array::from_fn(|c| rest[c * per_channel + k - 1]);
        }
        out
    }

    fn check_lengths(&self) {
        let n = self.len();
        assert!(
            self.log_scales.len() == n
                && self.rotations.len() == n
                && self.opacity_logits.len() == n
                && self.sh_dc.len() == n
                && self.sh_rest.len() == n * self.rest_per_splat(),
            "splat arrays have different lengths"
        );
    }
}

/// One splat after projection (MATH.md steps 1–10). A culled splat has `visible == false`
/// and every other field zero.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Projected {
    pub visible: bool,
    /// Pixel coordinates of the projected mean.
    pub mean2d: [f64; 2],
    /// Inverse of the dilated 2D covariance, (A, B, C): σ = ½(A dx² + C dy²) + B dx dy.
    pub conic: [f64; 3],
    /// RGB after the clamp at 0.
    pub color: [f64; 3],
    /// sigmoid(o) · comp.
    pub opacity: f64,
    /// Camera-space z.
    pub depth: f64,
    /// In pixels: of the 3σ circle (the densification statistic).
    pub radius: u32,
    /// Pixels are composited where σ ≤ this (MATH.md step 8).
    pub sigma_cut: f64,
    /// First tile (x, y) of the extent's bounding box.
    pub tile_min: [u32; 2],
    /// One past the last tile (x, y) of the extent's bounding box.
    pub tile_max: [u32; 2],
}

impl Projected {
    /// Whether the splat is visible and its ellipse σ ≤ `sigma_cut` reaches a pixel centre
    /// of tile (tx, ty) of `camera`'s image (MATH.md step 8).
    #[must_use]
    pub fn touches_tile(&self, tx: u32, ty: u32, camera: &Camera) -> bool {
        self.visible
            && (self.tile_min[0]..self.tile_max[0]).contains(&tx)
            && (self.tile_min[1]..self.tile_max[1]).contains(&ty)
            && tile_touched(
                self.mean2d,
                self.conic,
                self.sigma_cut,
                [tx, ty],
                [camera.width, camera.height],
            )
    }
}

/// A rendered image. Every per-pixel array is row-major, `[H][W]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    /// C + T · b.
    pub rgb: Vec<[f64; 3]>,
    /// 1 − T.
    pub alpha: Vec<f64>,
    /// T after the last composited splat.
    pub final_transmittance: Vec<f64>,
    /// Number of splats composited in the pixel.
    pub contributors: Vec<u32>,
}

/// Cotangents of the per-splat outputs of the projection, `[N]` each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProjectedGrads {
    pub v_mean2d: Vec<[f64; 2]>,
    pub v_conic: Vec<[f64; 3]>,
    pub v_color: Vec<[f64; 3]>,
    pub v_opacity: Vec<f64>,
    /// The absolute growth statistic: Σ over the pixels p the splat is composited in of
    /// `|(∂L_p/∂mean2d.x · W/2, ∂L_p/∂mean2d.y · H/2)|`, with `L_p` pixel p's share of the
    /// loss (its terms of Σ `v_rgb` · rgb + `v_alpha` · alpha). Not a gradient: a norm a pixel.
    pub abs_grad2d: Vec<f64>,
}

impl ProjectedGrads {
    /// All zero, for `n` splats.
    #[must_use]
    pub fn zeros(n: usize) -> Self {
        Self {
            v_mean2d: vec![[0.0; 2]; n],
            v_conic: vec![[0.0; 3]; n],
            v_color: vec![[0.0; 3]; n],
            v_opacity: vec![0.0; n],
            abs_grad2d: vec![0.0; n],
        }
    }
}

/// Gradients of the loss with respect to the raw splat parameters, `[N]` rows each, plus the
/// densification statistics of MATH.md ("Backward").
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gradients {
    pub v_means: Vec<[f64; 3]>,
    pub v_log_scales: Vec<[f64; 3]>,
    pub v_rotations: Vec<[f64; 4]>,
    pub v_opacity_logits: Vec<f64>,
    pub v_sh_dc: Vec<[f64; 3]>,
    /// Same layout as `Splats::sh_rest`; zero above the active degree.
    pub v_sh_rest: Vec<f64>,
    /// |(∂L/∂mean2d.x · W/2, ∂L/∂mean2d.y · H/2)|: the signed growth statistic.
    pub grad2d: Vec<f64>,
    /// [`ProjectedGrads::abs_grad2d`] of the visible splats: the absolute growth statistic.
    pub abs_grad2d: Vec<f64>,
    pub visible: Vec<bool>,
    /// In pixels (0 when culled).
    pub radius: Vec<u32>,
}

/// Which side of each non-smooth point of the projection a splat is on. Finite-difference
/// tests compare these between +h and −h: a coordinate whose perturbation changes them
/// straddles a kink or a jump, where the central difference is not the derivative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Branches {
    pub visible: bool,
    /// Colour channel clamped at 0.
    pub color_clamped: [bool; 3],
    /// Tangent ratio outside its clamp range (x, y).
    pub tangent_clamped: [bool; 2],
    /// Antialiasing ratio det(Σ2)/det(Σ2') clamped at 0 (antialiased mode only).
    pub compensation_clamped: bool,
}

/// One splat composited into one pixel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Contribution {
    /// Index of the splat.
    pub splat: u32,
    /// α = min(`ALPHA_MAX`, opacity · exp(−σ)).
    pub alpha: f64,
    /// Whether α was clamped at `ALPHA_MAX`.
    pub alpha_clamped: bool,
    /// exp(−σ).
    pub gaussian: f64,
    /// d = pixel centre − mean2d.
    pub delta: [f64; 2],
    /// T before this splat.
    pub transmittance: f64,
}

/// The compositing of one pixel: the splats composited, in order, and the final T.
#[derive(Clone, Debug, PartialEq)]
pub struct PixelTrace {
    pub contributions: Vec<Contribution>,
    pub final_transmittance: f64,
}

// ---------------------------------------------------------------------------------------------
// Projection.

/// Every intermediate of one visible splat's projection, kept for the backward pass.
struct SplatState {
    /// Camera-space mean.
    p: DVec3,
    q_hat: [f64; 4],
    q_norm: f64,
    rq: DMat3,
    scale: DVec3,
    cov_cam: DMat3,
    tangent: Tangent,
    jac: [DVec3; 2],
    /// Σ2 and Σ2', `[a, b, c]`.
    cov2d: [f64; 3],
    cov_dil: [f64; 3],
    comp: f64,
    comp_clamped: bool,
    conic: [f64; 3],
    mean2d: [f64; 2],
    radius: u32,
    sigma_cut: f64,
    tile_min: [u32; 2],
    tile_max: [u32; 2],
    dir: DVec3,
    dist: f64,
    /// Active SH degree.
    degree: u32,
    coeffs: [[f64; 3]; SH_MAX_COEFFS],
    /// e (before + 0.5 and the clamp).
    sh_value: [f64; 3],
    color: [f64; 3],
    sigmoid: f64,
    opacity: f64,
}

/// σ = ½(A dx² + C dy²) + B dx dy.
fn conic_sigma([a, b, c]: [f64; 3], [dx, dy]: [f64; 2]) -> f64 {
    0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy
}

/// The tiles (min, max exclusive per axis) of the bounding box of the ellipse σ ≤ `cut`,
/// whose half-extents are sqrt(2 cut Σ'₀₀) and sqrt(2 cut Σ'₁₁) (MATH.md step 8).
fn tile_span(mean2d: [f64; 2], conic: [f64; 3], cut: f64, tiles: [u32; 2]) -> ([u32; 2], [u32; 2]) {
    let [a, b, c] = conic;
    let det = a * c - b * b;
    let extent = [(2.0 * cut * c / det).sqrt(), (2.0 * cut * a / det).sqrt()];
    let tile = f64::from(TILE);
    let clamp = |v: f64, n: u32| v.floor().clamp(0.0, f64::from(n)) as u32;
    (
        std::array::from_fn(|k| clamp((mean2d[k] - extent[k]) / tile, tiles[k])),
        std::array::from_fn(|k| clamp((mean2d[k] + extent[k]) / tile + 1.0, tiles[k])),
    )
}

/// Whether the least σ over the pixel centres' rect of tile `tile` (inside an image of `size`) is at
/// most `cut` (with [`TILE_SLACK`]): on the rect's boundary unless it holds the mean.
fn tile_touched(
    mean2d: [f64; 2],
    conic: [f64; 3],
    cut: f64,
    tile: [u32; 2],
    size: [u32; 2],
) -> bool {
    let lo: [f64; 2] = std::array::from_fn(|k| f64::from(tile[k] * TILE) + 0.5 - mean2d[k]);
    let hi: [f64; 2] =
        std::array::from_fn(|k| f64::from(((tile[k] + 1) * TILE).min(size[k])) - 0.5 - mean2d[k]);
    if lo[0] <= 0.0 && lo[1] <= 0.0 && hi[0] >= 0.0 && hi[1] >= 0.0 {
        return true;
    }
    let [a, b, c] = conic;
    let least = [lo[0], hi[0]]
        .map(|dx| conic_sigma(conic, [dx, (-b * dx / c).clamp(lo[1], hi[1])]))
        .into_iter()
        .chain([lo[1], hi[1]].map(|dy| conic_sigma(conic, [(-b * dy / a).clamp(lo[0], hi[0]), dy])))
        .fold(f64::INFINITY, f64::min);
    least <= cut * (1.0 + TILE_SLACK) + TILE_SLACK
}

/// MATH.md steps 1–10 for splat `i`; `None` when culled.
fn project_splat(
    params: &SplatParams,
    i: usize,
    cam: &RefCamera,
    settings: &Settings,
) -> Option<SplatState> {
    // 1. Non-finite parameters (of the active degree).
    let degree = settings.sh_degree.min(params.sh_degree).min(sh::SH_MAX_DEGREE);
    if !params.is_finite(i, degree) {
        return None;
    }
    // 2. Camera-space mean.
    let mean = DVec3::from_array(params.means[i]);
    let p = math::world_to_camera(mean, cam);
    if !p.is_finite() || p.z < NEAR {
        return None;
    }
    // 3. Rotation, scale, 3D covariance (world, then camera space).
    let (q_hat, q_norm) = math::normalize_quat(params.rotations[i])?;
    let rq = math::quat_to_rotmat(q_hat);
    let scale = DVec3::from_array(params.log_scales[i]).exp();
    let cov_world = math::covariance_3d(&rq, scale);
    let cov_cam = math::transform_cov(&cam.rotation, &cov_world);
    // 4. Clamped tangent, Jacobian, 2D covariance.
    let tangent = math::clamp_tangent(p, cam);
    let jac = math::perspective_jacobian(p, cam);
    let cov2d = math::project_cov(&jac, &cov_cam);
    // 5. Dilation and compensation; 6. conic.
    let cov_dil = math::dilate(cov2d);
    let conic = math::conic(cov_dil)?;
    let (comp, comp_clamped) = if settings.antialiased {
        (math::aa_compensation(cov2d, cov_dil), math::det2(cov2d) / math::det2(cov_dil) <= 0.0)
    } else {
        (1.0, false)
    };
    // 10. Opacity (step 8 needs it).
    let sigmoid = math::sigmoid(params.opacity_logits[i]);
    let opacity = sigmoid * comp;
    // 7. Mean in pixels; 8. radius, extent and the tiles it touches.
    let mean2d = math::project_mean(p, cam);
    let radius = math::screen_radius(cov_dil)?;
    let sigma_cut = SIGMA_3.min((opacity / ALPHA_MIN).ln());
    if sigma_cut.is_nan() || sigma_cut < 0.0 {
        return None;
    }
    let (tile_min, tile_max) = tile_span(mean2d, conic, sigma_cut, cam.tiles());
    let touches = (tile_min[1]..tile_max[1]).any(|ty| {
        (tile_min[0]..tile_max[0])
            .any(|tx| tile_touched(mean2d, conic, sigma_cut, [tx, ty], [cam.width, cam.height]))
    });
    if !touches {
        return None;
    }
    // 9. Colour from SH along the view direction.
    let (dir, dist) = math::view_direction(mean, cam.centre);
    let coeffs = params.coeffs(i);
    let sh_value = sh::sh_eval(degree, &coeffs, dir);
    let color = math::clamp_color(sh_value);
    Some(SplatState {
        p,
        q_hat,
        q_norm,
        rq,
        scale,
        cov_cam,
        tangent,
        jac,
        cov2d,
        cov_dil,
        comp,
        comp_clamped,
        conic,
        mean2d,
        radius,
        sigma_cut,
        tile_min,
        tile_max,
        dir,
        dist,
        degree,
        coeffs,
        sh_value,
        color,
        sigmoid,
        opacity,
    })
}

/// Projects every splat (MATH.md "Projection"). `[N]` in, `[N]` out.
#[must_use]
pub fn project_forward(splats: &Splats, camera: &Camera, settings: &Settings) -> Vec<Projected> {
    project_forward_params(&SplatParams::from(splats), camera, settings)
}

/// [`project_forward`] on f64 parameters.
#[must_use]
pub fn project_forward_params(
    params: &SplatParams,
    camera: &Camera,
    settings: &Settings,
) -> Vec<Projected> {
    params.check_lengths();
    let cam = RefCamera::new(camera);
    (0..params.len())
        .map(|i| match project_splat(params, i, &cam, settings) {
            Some(s) => Projected {
                visible: true,
                mean2d: s.mean2d,
                conic: s.conic,
                color: s.color,
                opacity: s.opacity,
                depth: s.p.z,
                radius: s.radius,
                sigma_cut: s.sigma_cut,
                tile_min: s.tile_min,
                tile_max: s.tile_max,
            },
            None => Projected::default(),
        })
        .collect()
}

/// The non-smooth branches each splat's projection took (for finite-difference tests).
#[must_use]
pub fn projection_branches(
    params: &SplatParams,
    camera: &Camera,
    settings: &Settings,
) -> Vec<Branches> {
    params.check_lengths();
    let cam = RefCamera::new(camera);
    (0..params.len())
        .map(|i| match project_splat(params, i, &cam, settings) {
            Some(s) => Branches {
                visible: true,
                color_clamped: s.sh_value.map(|e| e + 0.5 < 0.0),
                tangent_clamped: s.tangent.clamped,
                compensation_clamped: s.comp_clamped,
            },
            None => Branches::default(),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Rasterization.

/// Composites one pixel (MATH.md "Rasterization") from its tile's splats, already sorted by
/// (depth, index).
fn composite_pixel(projected: &[Projected], sorted: &[usize], px: u32, py: u32) -> PixelTrace {
    let centre = [f64::from(px) + 0.5, f64::from(py) + 0.5];
    let mut t = 1.0;
    let mut contributions = Vec::new();
    for &i in sorted {
        let s = &projected[i];
        let delta = [centre[0] - s.mean2d[0], centre[1] - s.mean2d[1]];
        let sigma = conic_sigma(s.conic, delta);
        if sigma < 0.0 || sigma > s.sigma_cut {
            continue;
        }
        let gaussian = (-sigma).exp();
        let raw = s.opacity * gaussian;
        let alpha = raw.min(ALPHA_MAX);
        let next_t = t * (1.0 - alpha);
        if next_t < T_MIN {
            break;
        }
        contributions.push(Contribution {
            splat: i as u32,
            alpha,
            alpha_clamped: raw > ALPHA_MAX,
            gaussian,
            delta,
            transmittance: t,
        });
        t = next_t;
    }
    PixelTrace { contributions, final_transmittance: t }
}

/// The compositing trace of every pixel, row-major `[H][W]`: for each pixel the splats that
/// touch its tile, in increasing (depth, index), composited with the thresholds. (A splat
/// that does not touch the tile has σ > its cut at every pixel of it: the tiles only save
/// work.)
#[must_use]
pub fn pixel_traces(projected: &[Projected], camera: &Camera) -> Vec<PixelTrace> {
    let (w, h) = (camera.width, camera.height);
    let [tiles_x, tiles_y] = [w.div_ceil(TILE), h.div_ceil(TILE)];
    let mut traces = vec![
        PixelTrace { contributions: Vec::new(), final_transmittance: 1.0 };
        w as usize * h as usize
    ];
    for ty in 0..tiles_y {
        for tx in 0..tiles_x {
            let mut sorted: Vec<usize> = (0..projected.len())
                .filter(|&i| projected[i].touches_tile(tx, ty, camera))
                .collect();
            sorted.sort_by(|&i, &j| {
                projected[i].depth.total_cmp(&projected[j].depth).then(i.cmp(&j))
            });
            for py in ty * TILE..((ty + 1) * TILE).min(h) {
                for px in tx * TILE..((tx + 1) * TILE).min(w) {
                    traces[py as usize * w as usize + px as usize] =
                        composite_pixel(projected, &sorted, px, py);
                }
            }
        }
    }
    traces
}

/// Renders the projected splats (MATH.md "Rasterization").
#[must_use]
pub fn rasterize_forward(projected: &[Projected], camera: &Camera, settings: &Settings) -> Image {
    let traces = pixel_traces(projected, camera);
    let mut image = Image {
        width: camera.width,
        height: camera.height,
        rgb: Vec::with_capacity(traces.len()),
        alpha: Vec::with_capacity(traces.len()),
        final_transmittance: Vec::with_capacity(traces.len()),
        contributors: Vec::with_capacity(traces.len()),
    };
    for trace in &traces {
        let mut rgb = [0.0; 3];
        for c in &trace.contributions {
            let colour = projected[c.splat as usize].color;
            for ch in 0..3 {
                rgb[ch] += colour[ch] * c.alpha * c.transmittance;
            }
        }
        let t = trace.final_transmittance;
        image.rgb.push(std::array::from_fn(|ch| rgb[ch] + t * settings.background[ch]));
        image.alpha.push(1.0 - t);
        image.final_transmittance.push(t);
        image.contributors.push(trace.contributions.len() as u32);
    }
    image
}

/// Cotangents of the projected splats for the per-pixel cotangents `v_rgb` and `v_alpha`
/// (`[H][W]` each, row-major). Only `image`'s size is used: every pixel's list is recomputed
/// from `projected` (as [`pixel_traces`]), so the result is the exact gradient of
/// [`rasterize_forward`]`(projected, ..)` even when `image` was rendered elsewhere (by the GPU,
/// whose f32 contributor counts may differ at the thresholds).
///
/// Walks each pixel's splats back to front with the suffix composites (no division by 1 − α):
///
/// ```text
/// R_N = b,  P_N = 1,  R_k = c_k α_k + (1 − α_k) R_{k+1},  P_k = (1 − α_k) P_{k+1}
/// (so rgb = R_0, alpha = 1 − P_0)
/// ∂rgb/∂α_k = T_k (c_k − R_{k+1}),  ∂alpha/∂α_k = T_k P_{k+1},  ∂rgb/∂c_k = α_k T_k
/// ```
#[must_use]
pub fn rasterize_backward(
    projected: &[Projected],
    image: &Image,
    camera: &Camera,
    settings: &Settings,
    v_rgb: &[[f64; 3]],
    v_alpha: &[f64],
) -> ProjectedGrads {
    let pixels = camera.width as usize * camera.height as usize;
    assert_eq!(
        (image.width, image.height),
        (camera.width, camera.height),
        "image and camera differ in size"
    );
    assert_eq!(v_rgb.len(), pixels, "v_rgb must have one row per pixel");
    assert_eq!(v_alpha.len(), pixels, "v_alpha must have one value per pixel");
    let traces = pixel_traces(projected, camera);
    let mut grads = ProjectedGrads::zeros(projected.len());
    let half = [f64::from(camera.width) / 2.0, f64::from(camera.height) / 2.0];
    for (pix, trace) in traces.iter().enumerate() {
        let mut suffix_rgb = settings.background;
        let mut suffix_t = 1.0;
        for c in trace.contributions.iter().rev() {
            let s = c.splat as usize;
            let colour = projected[s].color;
            let (alpha, t) = (c.alpha, c.transmittance);
            for (g, v) in grads.v_color[s].iter_mut().zip(v_rgb[pix]) {
                *g += v * alpha * t;
            }
            let v_a = t
                * ((0..3).map(|ch| v_rgb[pix][ch] * (colour[ch] - suffix_rgb[ch])).sum::<f64>()
                    + v_alpha[pix] * suffix_t);
            if !c.alpha_clamped {
                // α = opacity · exp(−σ): ∂α/∂opacity = exp(−σ), ∂α/∂σ = −α.
                grads.v_opacity[s] += v_a * c.gaussian;
                let v_sigma = -v_a * alpha;
                let [dx, dy] = c.delta;
                let [a, b, cc] = projected[s].conic;
                grads.v_conic[s][0] += v_sigma * 0.5 * dx * dx;
                grads.v_conic[s][1] += v_sigma * dx * dy;
                grads.v_conic[s][2] += v_sigma * 0.5 * dy * dy;
                // d = pixel − mean2d: ∂σ/∂mean2d = −(A dx + B dy, B dx + C dy).
                let v_mean2d = [-v_sigma * (a * dx + b * dy), -v_sigma * (b * dx + cc * dy)];
                grads.v_mean2d[s][0] += v_mean2d[0];
                grads.v_mean2d[s][1] += v_mean2d[1];
                grads.abs_grad2d[s] += (v_mean2d[0] * half[0]).hypot(v_mean2d[1] * half[1]);
            }
            for ch in 0..3 {
                suffix_rgb[ch] = colour[ch] * alpha + (1.0 - alpha) * suffix_rgb[ch];
            }
            suffix_t *= 1.0 - alpha;
        }
    }
    grads
}

// ---------------------------------------------------------------------------------------------
// Projection backward.

/// Gradients of the raw parameters from the cotangents of the projected splats.
///
/// Each splat's intermediates are recomputed from `splats` (so visibility and radius follow
/// this reference's forward); `projected` is only checked to have one entry per splat, and may
/// come from elsewhere. Culled splats get zero gradients.
#[must_use]
pub fn project_backward(
    splats: &Splats,
    camera: &Camera,
    settings: &Settings,
    projected: &[Projected],
    grads: &ProjectedGrads,
) -> Gradients {
    project_backward_params(&SplatParams::from(splats), camera, settings, projected, grads)
}

/// [`project_backward`] on f64 parameters.
#[must_use]
pub fn project_backward_params(
    params: &SplatParams,
    camera: &Camera,
    settings: &Settings,
    projected: &[Projected],
    grads: &ProjectedGrads,
) -> Gradients {
    params.check_lengths();
    let n = params.len();
    assert_eq!(projected.len(), n, "one projected splat per splat");
    assert!(
        grads.v_mean2d.len() == n
            && grads.v_conic.len() == n
            && grads.v_color.len() == n
            && grads.v_opacity.len() == n
            && grads.abs_grad2d.len() == n,
        "one projected gradient per splat"
    );
    let cam = RefCamera::new(camera);
    let rest = params.rest_per_splat();
    let per_channel = params.rest_per_channel();
    let mut out = Gradients {
        v_means: vec![[0.0; 3]; n],
        v_log_scales: vec![[0.0; 3]; n],
        v_rotations: vec![[0.0; 4]; n],
        v_opacity_logits: vec![0.0; n],
        v_sh_dc: vec![[0.0; 3]; n],
        v_sh_rest: vec![0.0; params.sh_rest.len()],
        grad2d: vec![0.0; n],
        abs_grad2d: vec![0.0; n],
        visible: vec![false; n],
        radius: vec![0; n],
    };
    for i in 0..n {
        let Some(s) = project_splat(params, i, &cam, settings) else {
            continue;
        };
        out.visible[i] = true;
        out.radius[i] = s.radius;
        let v_mean2d = grads.v_mean2d[i];
        out.grad2d[i] = (v_mean2d[0] * f64::from(cam.width) / 2.0)
            .hypot(v_mean2d[1] * f64::from(cam.height) / 2.0);
        out.abs_grad2d[i] = grads.abs_grad2d[i];

        // 9. Colour → SH coefficients and view direction.
        let v_sh_value = math::clamp_color_vjp(s.sh_value, grads.v_color[i]);
        let (v_coeffs, v_dir) = sh::sh_eval_vjp(s.degree, &s.coeffs, s.dir, v_sh_value);
        out.v_sh_dc[i] = v_coeffs[0];
        for (k, row) in v_coeffs.iter().enumerate().take(per_channel + 1).skip(1) {
            for (c, v) in row.iter().enumerate() {
                out.v_sh_rest[i * rest + c * per_channel + k - 1] = *v;
            }
        }
        let mut v_mean = math::view_direction_vjp(s.dir, s.dist, v_dir);

        // 10. Opacity = sigmoid(o) · comp.
        let v_opacity = grads.v_opacity[i];
        out.v_opacity_logits[i] = math::sigmoid_vjp(params.opacity_logits[i], v_opacity * s.comp);
        let v_comp = v_opacity * s.sigmoid;

        // 6. Conic; 5. compensation and dilation.
        let mut v_cov_dil = math::conic_vjp(s.cov_dil, grads.v_conic[i]);
        let mut v_cov2d = [0.0; 3];
        if settings.antialiased {
            let (v_c, v_d) = math::aa_compensation_vjp(s.cov2d, s.cov_dil, v_comp);
            v_cov2d = v_c;
            for k in 0..3 {
                v_cov_dil[k] += v_d[k];
            }
        }
        for k in 0..3 {
            v_cov2d[k] += v_cov_dil[k];
        }

        // 4. Σ2 = J Σc Jᵀ; J(p); 7. mean2d(p); 2. p = R μ + t.
        let (v_jac, v_cov_cam) = math::project_cov_vjp(&s.jac, &s.cov_cam, v_cov2d);
        let v_p = math::perspective_jacobian_vjp(s.p, &cam, &v_jac)
            + math::project_mean_vjp(s.p, &cam, v_mean2d);
        v_mean += math::world_to_camera_vjp(&cam, v_p);
        out.v_means[i] = v_mean.to_array();

        // 3. Σc = R Σ Rᵀ, Σ = M Mᵀ, M = Rq diag(exp s), Rq(q / |q|).
        let v_cov_world = math::transform_cov_vjp(&cam.rotation, &v_cov_cam);
        let (v_rq, v_scale) = math::covariance_3d_vjp(&s.rq, s.scale, &v_cov_world);
        out.v_log_scales[i] = (v_scale * s.scale).to_array();
        let v_q_hat = math::quat_to_rotmat_vjp(s.q_hat, &v_rq);
        out.v_rotations[i] = math::normalize_quat_vjp(s.q_hat, s.q_norm, v_q_hat);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Convenience.

/// Projects and rasterizes.
#[must_use]
pub fn render(splats: &Splats, camera: &Camera, settings: &Settings) -> (Vec<Projected>, Image) {
    render_params(&SplatParams::from(splats), camera, settings)
}

/// [`render`] on f64 parameters.
#[must_use]
pub fn render_params(
    params: &SplatParams,
    camera: &Camera,
    settings: &Settings,
) -> (Vec<Projected>, Image) {
    let projected = project_forward_params(params, camera, settings);
    let image = rasterize_forward(&projected, camera, settings);
    (projected, image)
}

/// Forward then backward for the loss with per-pixel cotangents `v_rgb` and `v_alpha`
/// (`[H][W]`, row-major), i.e. L = Σ `v_rgb` · rgb + Σ `v_alpha` · alpha.
#[must_use]
pub fn render_backward(
    splats: &Splats,
    camera: &Camera,
    settings: &Settings,
    v_rgb: &[[f64; 3]],
    v_alpha: &[f64],
) -> Gradients {
    render_backward_params(&SplatParams::from(splats), camera, settings, v_rgb, v_alpha)
}

/// [`render_backward`] on f64 parameters.
#[must_use]
pub fn render_backward_params(
    params: &SplatParams,
    camera: &Camera,
    settings: &Settings,
    v_rgb: &[[f64; 3]],
    v_alpha: &[f64],
) -> Gradients {
    let (projected, image) = render_params(params, camera, settings);
    let grads = rasterize_backward(&projected, &image, camera, settings, v_rgb, v_alpha);
    project_backward_params(params, camera, settings, &projected, &grads)
}
