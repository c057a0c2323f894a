//! Tests of the CPU reference rasterizer (`splat_render::reference`): forward sanity cases
//! with analytic answers, SH values, and the analytic backward against central finite
//! differences of the forward on random small scenes.
//!
//! Run with `--nocapture` to see the finite-difference report (errors, skips per group).
#![expect(
    clippy::float_cmp,
    reason = "the oracle is deterministic: several checks are exact on purpose"
)]

use glam::{Mat4, Quat, Vec3};
use splat_formats::Splats;
use splat_formats::random::SplitMix64;
use splat_render::reference::sh::{SH_C0, SH_C1, SH_C2, SH_C3, sh_eval};
use splat_render::reference::{
    ALPHA_MAX, Branches, Projected, Settings, SplatParams, T_MIN, pixel_traces,
    project_backward_params, project_forward, project_forward_params, projection_branches,
    rasterize_backward, rasterize_forward, render, render_backward, render_backward_params,
    render_params,
};
use splat_render::{Camera, TILE_SIZE};

// ---------------------------------------------------------------------------------------------
// Helpers.

/// f64 draws from the shared generator.
trait Uniform {
    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f64, hi: f64) -> f64;
}

impl Uniform for SplitMix64 {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }
}

/// A camera with non-square pixels and an off-centre principal point. `rotated` turns and
/// moves it away from the world origin (scenes are built in its frame, so they stay in view).
fn camera(width: u32, height: u32, rotated: bool) -> Camera {
    let world_from_camera = if rotated {
        Mat4::from_rotation_translation(
            Quat::from_euler(glam::EulerRot::YXZ, 0.4, -0.25, 0.1),
            Vec3::new(0.7, -0.3, -1.2),
        )
    } else {
        Mat4::IDENTITY
    };
    Camera {
        width,
        height,
        fx: 0.95 * width as f32,
        fy: 1.1 * width as f32,
        cx: 0.52 * width as f32,
        cy: 0.47 * height as f32,
        world_from_camera,
    }
}

/// A camera-space point of the given tangent and depth, in world space.
fn world_point(cam: &Camera, tan_x: f64, tan_y: f64, depth: f64) -> [f64; 3] {
    let p = Vec3::new((tan_x * depth) as f32, (tan_y * depth) as f32, depth as f32);
    cam.world_from_camera.transform_point3(p).as_dvec3().to_array()
}

fn empty_params(sh_degree: u32) -> SplatParams {
    SplatParams { sh_degree, ..SplatParams::default() }
}

/// Appends one splat. `rest` is `rest_per_splat` values (channel-major).
fn push(
    p: &mut SplatParams,
    mean: [f64; 3],
    log_scale: [f64; 3],
    rotation: [f64; 4],
    logit: f64,
    dc: [f64; 3],
    rest: &[f64],
) {
    assert_eq!(rest.len(), p.rest_per_splat());
    p.means.push(mean);
    p.log_scales.push(log_scale);
    p.rotations.push(rotation);
    p.opacity_logits.push(logit);
    p.sh_dc.push(dc);
    p.sh_rest.extend_from_slice(rest);
}

/// `n` random splats in front of `cam`: mostly inside the frustum; splat 0 and 1 far outside
/// it horizontally and vertically (large, so they still reach the image, and their tangent is
/// clamped), splat 2 large, far and very opaque (α clamped at `ALPHA_MAX` near its centre),
/// splat 3 with a
/// red channel clamped at 0.
fn random_scene(rng: &mut SplitMix64, cam: &Camera, n: usize, sh_degree: u32) -> SplatParams {
    let mut p = empty_params(sh_degree);
    let rest_n = p.rest_per_splat();
    for i in 0..n {
        let mut depth = rng.uniform(1.5, 4.0);
        let (mut tx, mut ty) = (rng.uniform(-0.45, 0.45), rng.uniform(-0.3, 0.3));
        let mut log_scale = [0; 3].map(|_| rng.uniform(-3.4, -2.0));
        match i {
            0 => tx = rng.uniform(0.9, 0.95),
            1 => ty = rng.uniform(-0.95, -0.9),
            _ => {}
        }
        if i < 2 {
            depth = 2.0 + 0.3 * i as f64;
            log_scale = [0; 3].map(|_| rng.uniform(-0.5, -0.3));
        }
        if i == 2 {
            // ~10 px wide (so the antialiasing compensation stays near 1), centred on a pixel
            // centre: there α ≈ opacity > ALPHA_MAX.
            depth = 4.0;
            log_scale = [0; 3].map(|_| rng.uniform(-0.1, 0.1));
            let centre = [f64::from(cam.width / 2) + 0.5, f64::from(cam.height / 2) + 0.5];
            tx = (centre[0] - f64::from(cam.cx)) / f64::from(cam.fx);
            ty = (centre[1] - f64::from(cam.cy)) / f64::from(cam.fy);
        }
        let mut rotation = [0; 4].map(|_| rng.uniform(-1.0, 1.0));
        rotation[0] += 0.5_f64.copysign(rotation[0]);
        let logit = if i == 2 { 8.0 } else { rng.uniform(-1.5, 2.5) };
        let mut dc = [0; 3].map(|_| rng.uniform(-1.0, 1.0));
        if i == 3 {
            dc[0] = -5.0;
        }
        let rest: Vec<f64> = (0..rest_n).map(|_| rng.uniform(-0.3, 0.3)).collect();
        push(&mut p, world_point(cam, tx, ty, depth), log_scale, rotation, logit, dc, &rest);
    }
    p
}

fn settings(sh_degree: u32, antialiased: bool) -> Settings {
    Settings { background: [0.2, 0.6, 0.9], antialiased, sh_degree }
}

fn to_splats(p: &SplatParams) -> Splats {
    let narrow3 = |v: &Vec<[f64; 3]>| v.iter().map(|a| a.map(|x| x as f32)).collect();
    Splats {
        means: narrow3(&p.means),
        log_scales: narrow3(&p.log_scales),
        rotations: p.rotations.iter().map(|a| a.map(|x| x as f32)).collect(),
        opacity_logits: p.opacity_logits.iter().map(|&x| x as f32).collect(),
        sh_dc: narrow3(&p.sh_dc),
        sh_rest: p.sh_rest.iter().map(|&x| x as f32).collect(),
        sh_degree: p.sh_degree,
    }
}

fn assert_close(a: f64, b: f64, tol: f64, what: &str) {
    assert!((a - b).abs() <= tol, "{what}: {a} vs {b} (tolerance {tol})");
}

fn assert_is_background(cam: &Camera, s: &Settings, image: &splat_render::reference::Image) {
    assert_eq!(image.rgb.len(), (cam.width * cam.height) as usize);
    for (i, rgb) in image.rgb.iter().enumerate() {
        assert_eq!(*rgb, s.background, "pixel {i}");
        assert_eq!(image.alpha[i], 0.0);
        assert_eq!(image.final_transmittance[i], 1.0);
        assert_eq!(image.contributors[i], 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Forward sanity.

/// One isotropic splat on the optical axis, with the principal point on a pixel centre.
fn centred_splat(antialiased: bool) {
    let mut cam = camera(50, 38, false);
    cam.cx = 25.5;
    cam.cy = 19.5;
    let (depth, scale, logit, dc) = (2.0, 0.05_f64, 0.8, [0.3, -0.4, 0.9]);
    let mut p = empty_params(0);
    push(&mut p, [0.0, 0.0, depth], [scale.ln(); 3], [0.3, 0.0, 0.0, 0.0], logit, dc, &[]);
    let s = settings(0, antialiased);
    let (projected, image) = render_params(&p, &cam, &s);
    let pr = projected[0];
    assert!(pr.visible);
    assert_eq!(pr.mean2d, [25.5, 19.5]);
    assert_eq!(pr.depth, depth);

    // On the axis tx = ty = 0, so Σ2 = diag((fx s/z)², (fy s/z)²) exactly as a formula.
    let (fx, fy) = (f64::from(cam.fx), f64::from(cam.fy));
    let (sx, sy) = ((fx * scale / depth).powi(2), (fy * scale / depth).powi(2));
    let (ax, ay) = (sx + 0.3, sy + 0.3);
    let tol = 1e-12;
    assert_close(pr.conic[0], 1.0 / ax, tol, "A");
    assert_close(pr.conic[1], 0.0, tol, "B");
    assert_close(pr.conic[2], 1.0 / ay, tol, "C");
    let comp = if antialiased { (sx * sy / (ax * ay)).sqrt() } else { 1.0 };
    let opacity = comp / (1.0 + (-logit).exp());
    assert_close(pr.opacity, opacity, tol, "opacity");
    let colour = dc.map(|d| 0.5 + SH_C0 * d);
    for (got, want) in pr.color.iter().zip(colour) {
        assert_close(*got, want, tol, "colour");
    }
    // Radius from the larger eigenvalue, ay.
    let lambda = 0.5 * (ax + ay) + (0.25 * (ax + ay).powi(2) - ax * ay).max(0.1).sqrt();
    assert_eq!(pr.radius, (3.0 * lambda.sqrt()).ceil() as u32);

    // The centre pixel: colour · α + b (1 − α), α = opacity (exp(0) = 1).
    let centre = 19 * 50 + 25;
    for ((got, col), bg) in image.rgb[centre].iter().zip(colour).zip(s.background) {
        let expected = col * opacity + bg * (1.0 - opacity);
        assert_close(*got, expected, tol, "centre pixel");
    }
    assert_close(image.alpha[centre], opacity, tol, "centre alpha");
    assert_eq!(image.contributors[centre], 1);
    // A blob centred there: alpha is largest at the centre, symmetric about it (the
    // principal point is a pixel centre), and its centroid is the centre.
    let alpha_at = |x: i32, y: i32| image.alpha[(y * 50 + x) as usize];
    let max = image.alpha.iter().copied().fold(0.0, f64::max);
    assert_eq!(max, image.alpha[centre]);
    for d in 1..5 {
        assert_close(alpha_at(25 - d, 19), alpha_at(25 + d, 19), 1e-15, "x symmetry");
        assert_close(alpha_at(25, 19 - d), alpha_at(25, 19 + d), 1e-15, "y symmetry");
        assert!(alpha_at(25 + d, 19) < alpha_at(25 + d - 1, 19));
    }
    let (mut sum, mut mx, mut my) = (0.0, 0.0, 0.0);
    for y in 0..38 {
        for x in 0..50 {
            let a = alpha_at(x, y);
            sum += a;
            mx += a * (f64::from(x) + 0.5);
            my += a * (f64::from(y) + 0.5);
        }
    }
    assert_close(mx / sum, 25.5, 1e-9, "centroid x");
    assert_close(my / sum, 19.5, 1e-9, "centroid y");
    // Far from the blob only the background.
    assert_eq!(image.rgb[0], s.background);
}

#[test]
fn centred_splat_renders_analytic_blob() {
    centred_splat(false);
}

#[test]
fn centred_splat_renders_analytic_blob_antialiased() {
    centred_splat(true);
}

#[test]
fn no_splats_is_background() {
    for (w, h) in [(40, 32), (1, 1), (17, 33)] {
        let cam = camera(w, h, true);
        let s = settings(0, false);
        let (projected, image) = render(&Splats::default(), &cam, &s);
        assert!(projected.is_empty());
        assert_eq!((image.width, image.height), (w, h));
        assert_is_background(&cam, &s, &image);
        let g = render_backward(
            &Splats::default(),
            &cam,
            &s,
            &vec![[1.0; 3]; (w * h) as usize],
            &vec![1.0; (w * h) as usize],
        );
        assert!(g.v_means.is_empty());
    }
}

#[test]
fn splats_behind_the_camera_are_culled() {
    let cam = camera(40, 32, true);
    let mut p = empty_params(1);
    let rest = [0.1; 9];
    // Behind, on the camera plane, just before NEAR, and one in front.
    for depth in [-2.0, 0.0, 0.009, 2.0] {
        push(
            &mut p,
            world_point(&cam, 0.0, 0.0, depth),
            [-2.0; 3],
            [1.0, 0.2, 0.0, 0.0],
            1.0,
            [0.5; 3],
            &rest,
        );
    }
    let s = settings(1, false);
    let projected = project_forward_params(&p, &cam, &s);
    assert_eq!(
        projected.iter().map(|x| x.visible).collect::<Vec<_>>(),
        [false, false, false, true]
    );

    // All behind: the background, and zero gradients.
    let mut behind = empty_params(1);
    for i in 0..3 {
        push(
            &mut behind,
            world_point(&cam, 0.1 * f64::from(i), 0.0, -1.0 - f64::from(i)),
            [-1.0; 3],
            [1.0, 0.0, 0.0, 0.0],
            3.0,
            [1.0; 3],
            &rest,
        );
    }
    let (_, image) = render_params(&behind, &cam, &s);
    assert_is_background(&cam, &s, &image);
    let n = (cam.width * cam.height) as usize;
    let g = render_backward_params(&behind, &cam, &s, &vec![[1.0; 3]; n], &vec![1.0; n]);
    assert!(g.visible.iter().all(|v| !v));
    assert!(g.v_means.iter().flatten().chain(&g.v_sh_rest).all(|&x| x == 0.0));
}

#[test]
fn non_finite_parameters_are_culled_without_panic() {
    let cam = camera(40, 32, false);
    let base = {
        let mut p = empty_params(2);
        push(
            &mut p,
            world_point(&cam, 0.0, 0.0, 2.0),
            [-2.5; 3],
            [1.0, 0.1, 0.2, 0.0],
            1.0,
            [0.2; 3],
            &[0.1; 24],
        );
        to_splats(&p)
    };
    let mut scenes = Vec::new();
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for field in 0..6 {
            let mut s = base.clone();
            match field {
                0 => s.means[0][1] = bad,
                1 => s.log_scales[0][2] = bad,
                2 => s.rotations[0][3] = bad,
                3 => s.opacity_logits[0] = bad,
                4 => s.sh_dc[0][0] = bad,
                _ => s.sh_rest[23] = bad,
            }
            scenes.push(s);
        }
    }
    // A zero quaternion is culled too (step 3), and a huge log-scale overflows exp.
    let mut zero_q = base.clone();
    zero_q.rotations[0] = [0.0; 4];
    scenes.push(zero_q);
    let mut huge = base.clone();
    huge.log_scales[0] = [1e30; 3];
    scenes.push(huge);
    let st = settings(2, true);
    let n = (cam.width * cam.height) as usize;
    for (k, scene) in scenes.iter().enumerate() {
        let (projected, image) = render(scene, &cam, &st);
        assert!(!projected[0].visible, "scene {k}");
        assert_eq!(projected[0], Projected::default());
        assert_is_background(&cam, &st, &image);
        let g = render_backward(scene, &cam, &st, &vec![[1.0; 3]; n], &vec![1.0; n]);
        assert!(!g.visible[0]);
        assert!(g.v_means[0].iter().chain(&g.v_sh_rest).all(|&x| x == 0.0));
    }
    // The clean splat is visible.
    assert!(project_forward(&base, &cam, &st)[0].visible);
}

#[test]
fn one_splat_covering_every_tile() {
    let cam = camera(70, 45, true);
    let mut p = empty_params(0);
    push(
        &mut p,
        world_point(&cam, 0.0, 0.0, 1.0),
        [0.5, 0.4, 0.2],
        [1.0, 0.0, 0.0, 0.3],
        2.0,
        [0.1; 3],
        &[],
    );
    let s = settings(0, false);
    let (projected, image) = render_params(&p, &cam, &s);
    assert_eq!(projected[0].tile_min, [0, 0]);
    assert_eq!(projected[0].tile_max, [5, 3]);
    assert!(image.contributors.iter().all(|&c| c == 1));
    assert!(image.alpha.iter().all(|&a| a > 0.5));
}

#[test]
fn image_sizes_not_a_multiple_of_the_tile() {
    // The same scene (tangents well inside both frusta, so no clamp depends on the size) on a
    // 40×32 camera and a larger one with the same intrinsics: the shared pixels agree exactly,
    // including those of the partial tiles at the right and bottom.
    let mut rng = SplitMix64::new(7);
    let small = camera(37, 29, true);
    let mut large = small;
    (large.width, large.height) = (57, 45);
    let mut p = empty_params(1);
    for _ in 0..30 {
        let rest: Vec<f64> = (0..9).map(|_| rng.uniform(-0.3, 0.3)).collect();
        let mean = world_point(
            &small,
            rng.uniform(-0.5, 0.5),
            rng.uniform(-0.4, 0.4),
            rng.uniform(1.5, 3.0),
        );
        let log_scale = [0; 3].map(|_| rng.uniform(-3.0, -2.0));
        push(
            &mut p,
            mean,
            log_scale,
            [1.0, rng.uniform(-1.0, 1.0), 0.3, 0.0],
            rng.uniform(-1.0, 2.0),
            [0.3; 3],
            &rest,
        );
    }
    let s = settings(1, true);
    let (_, a) = render_params(&p, &small, &s);
    let (_, b) = render_params(&p, &large, &s);
    assert_eq!(a.rgb.len(), 37 * 29);
    for y in 0..29 {
        for x in 0..37 {
            assert_eq!(a.rgb[y * 37 + x], b.rgb[y * 57 + x], "pixel ({x}, {y})");
            assert_eq!(a.contributors[y * 37 + x], b.contributors[y * 57 + x]);
        }
    }
    // The partial tiles are drawn at all.
    let last_column = (0..29).any(|y| a.contributors[y * 37 + 36] > 0);
    let last_row = (0..37).any(|x| a.contributors[28 * 37 + x] > 0);
    assert!(last_column && last_row);
}

#[test]
fn compositing_stops_before_t_min_and_clamps_alpha() {
    // Six identical splats on the axis at increasing depth, α = 0.95 at the centre pixel:
    // T = 1, 0.05, 0.0025, 1.25e-4, and the fourth would take T to 6.25e-6 < T_MIN, so only
    // three are composited. A seventh, in front and very opaque, is clamped at ALPHA_MAX.
    let mut cam = camera(32, 32, false);
    (cam.cx, cam.cy) = (16.5, 16.5);
    let logit = (0.95_f64 / 0.05).ln();
    let mut p = empty_params(0);
    let dcs = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0; 3], [-1.0; 3], [0.5; 3]];
    for (k, dc) in dcs.iter().enumerate() {
        push(
            &mut p,
            [0.0, 0.0, 2.0 + 0.1 * k as f64],
            [-2.0; 3],
            [1.0, 0.0, 0.0, 0.0],
            logit,
            *dc,
            &[],
        );
    }
    let s = settings(0, false);
    let centre = 16 * 32 + 16;
    let (projected, image) = render_params(&p, &cam, &s);
    assert_eq!(image.contributors[centre], 3);
    let alpha = projected[0].opacity;
    assert_close(alpha, 0.95, 1e-12, "opacity");
    let mut t = 1.0;
    let mut rgb = [0.0; 3];
    for pr in &projected[..3] {
        for (acc, col) in rgb.iter_mut().zip(pr.color) {
            *acc += col * alpha * t;
        }
        t *= 1.0 - alpha;
    }
    assert!(t * (1.0 - alpha) < T_MIN && t >= T_MIN);
    assert_close(image.final_transmittance[centre], t, 1e-15, "T");
    for ((got, acc), bg) in image.rgb[centre].iter().zip(rgb).zip(s.background) {
        assert_close(*got, acc + t * bg, 1e-14, "rgb");
    }

    push(&mut p, [0.0, 0.0, 1.0], [-2.0; 3], [1.0, 0.0, 0.0, 0.0], 10.0, [0.0; 3], &[]);
    let (projected, _) = render_params(&p, &cam, &s);
    let traces = pixel_traces(&projected, &cam);
    let first = traces[centre].contributions[0];
    assert_eq!(first.splat, 6);
    assert!(first.alpha_clamped);
    assert_eq!(first.alpha, ALPHA_MAX);
}

#[test]
fn f32_and_f64_entry_points_agree() {
    let mut rng = SplitMix64::new(3);
    let cam = camera(40, 32, true);
    let p = random_scene(&mut rng, &cam, 20, 2);
    // Round the f64 scene to f32 values so both paths see the same numbers.
    let splats = to_splats(&p);
    let p32 = SplatParams::from(&splats);
    let s = settings(2, true);
    assert_eq!(project_forward(&splats, &cam, &s), project_forward_params(&p32, &cam, &s));
    let (projected, image) = render(&splats, &cam, &s);
    assert_eq!(image, rasterize_forward(&projected, &cam, &s));
    let n = (cam.width * cam.height) as usize;
    let (v_rgb, v_alpha) = (vec![[0.3, -0.2, 0.1]; n], vec![0.5; n]);
    assert_eq!(
        render_backward(&splats, &cam, &s, &v_rgb, &v_alpha),
        render_backward_params(&p32, &cam, &s, &v_rgb, &v_alpha)
    );
}

// ---------------------------------------------------------------------------------------------
// SH.

#[test]
fn sh_degree3_values_and_direction_flip() {
    // v = (1, 2, 2) / 3. One coefficient at a time (red channel only).
    let v = glam::DVec3::new(1.0, 2.0, 2.0) / 3.0;
    let single = |k: usize| {
        let mut coeffs = vec![[0.0; 3]; 16];
        coeffs[k][0] = 1.0;
        coeffs
    };
    let cases = [
        (2, SH_C1 * 2.0 / 3.0, -1.0),                 // C1 z: odd
        (6, SH_C2[2] * (8.0 - 1.0 - 4.0) / 9.0, 1.0), // C2₂(2z² − x² − y²): even
        (10, SH_C3[1] * 4.0 / 27.0, -1.0),            // C3₁ xyz: odd
        (12, SH_C3[3] * (2.0 / 3.0) * (8.0 - 3.0 - 12.0) / 9.0, -1.0), // C3₃ z(2z² − 3x² − 3y²)
        (15, SH_C3[6] * (1.0 / 3.0) * (1.0 - 12.0) / 9.0, -1.0), // C3₆ x(x² − 3y²)
    ];
    // Spelled-out numbers for two of them, so a wrong constant cannot hide.
    assert_close(cases[2].1, 0.428_238_732_243_045, 1e-15, "Y10");
    assert_close(cases[1].1, 0.105_130_521_750_840_02, 1e-15, "Y6");
    for (k, expected, parity) in cases {
        let coeffs = single(k);
        let e = sh_eval(3, &coeffs, v);
        assert_close(e[0], expected, 1e-15, &format!("Y{k}"));
        assert_eq!([e[1], e[2]], [0.0, 0.0]);
        let flipped = sh_eval(3, &coeffs, -v);
        assert_close(flipped[0], parity * expected, 1e-15, &format!("Y{k}(−v)"));
        // Below the coefficient's degree it does not count.
        let degree_below = if k < 4 {
            0
        } else if k < 9 {
            1
        } else {
            2
        };
        assert_eq!(sh_eval(degree_below, &coeffs, v)[0], 0.0);
    }
    // Y0 is the constant.
    assert_eq!(sh_eval(3, &single(0), -v)[0], SH_C0);
}

#[test]
fn sh_view_direction_points_from_camera_to_splat() {
    // Camera at the origin looking down +z; splat on the axis: v = (0, 0, 1), so the red
    // colour is 0.5 + C0·dc + C1·z·sh[2] = 0.5 + C1 (with dc = 0, sh[2] = 1). Behind a
    // camera turned around (looking down −z at a splat at z = −2) v = (0, 0, −1).
    for (flip, sign) in [(false, 1.0), (true, -1.0)] {
        let mut cam = camera(32, 32, false);
        if flip {
            cam.world_from_camera = Mat4::from_rotation_y(std::f32::consts::PI);
        }
        let mut p = empty_params(1);
        let mut rest = [0.0; 9];
        rest[1] = 1.0; // red, k = 2
        push(&mut p, [0.0, 0.0, 2.0 * sign], [-2.0; 3], [1.0, 0.0, 0.0, 0.0], 0.0, [0.0; 3], &rest);
        let pr = project_forward_params(&p, &cam, &settings(1, false))[0];
        assert!(pr.visible);
        assert_close(pr.color[0], 0.5 + sign * SH_C1, 1e-6, "colour");
        // With active degree 0 the higher coefficients are ignored.
        let pr0 = project_forward_params(&p, &cam, &settings(0, false))[0];
        assert_eq!(pr0.color, [0.5; 3]);
    }
}

mod backward;
