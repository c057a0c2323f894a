//! The CPU reference's backward pass against central finite differences of its forward pass.

use super::*;

/// Step of the central differences (parameters are O(0.1–3)).
const H: f64 = 1e-6;
/// |analytic − numeric| ≤ ATOL + RTOL · max(|analytic|, |numeric|). See `fd_check`.
const ATOL: f64 = 1e-6;
const RTOL: f64 = 1e-5;

/// A parameter group of [`SplatParams`], flattened.
type Access = fn(&mut SplatParams) -> &mut [f64];

/// Everything that decides which non-smooth branch the forward is on: per pixel the
/// composited (splat, α clamped) in order, per splat its [`Branches`].
#[derive(PartialEq)]
struct Signature {
    pixels: Vec<Vec<(u32, bool)>>,
    splats: Vec<Branches>,
}

impl Signature {
    /// The first difference from `other`, in words.
    fn difference(&self, other: &Self) -> String {
        for (i, (a, b)) in self.splats.iter().zip(&other.splats).enumerate() {
            if a != b {
                return format!("splat {i} branches {a:?} -> {b:?}");
            }
        }
        for (i, (a, b)) in self.pixels.iter().zip(&other.pixels).enumerate() {
            if a != b {
                return format!("pixel {i} composites {a:?} -> {b:?}");
            }
        }
        "none".into()
    }
}

/// The loss L = Σ `v_rgb` · rgb + Σ `v_alpha` · alpha and the branch signature.
fn loss(
    p: &SplatParams,
    cam: &Camera,
    s: &Settings,
    v_rgb: &[[f64; 3]],
    v_alpha: &[f64],
) -> (f64, Signature) {
    let (projected, image) = render_params(p, cam, s);
    let mut l = 0.0;
    for i in 0..image.rgb.len() {
        l += (0..3).map(|c| v_rgb[i][c] * image.rgb[i][c]).sum::<f64>()
            + v_alpha[i] * image.alpha[i];
    }
    let pixels = pixel_traces(&projected, cam)
        .into_iter()
        .map(|t| t.contributions.iter().map(|c| (c.splat, c.alpha_clamped)).collect())
        .collect();
    (l, Signature { pixels, splats: projection_branches(p, cam, s) })
}

#[derive(Default, Debug)]
struct GroupStats {
    checked: usize,
    skipped: usize,
    max_abs_err: f64,
    /// Largest |analytic| checked (so the errors can be read against the gradients' size).
    max_grad: f64,
    /// Largest error as a fraction of the tolerance.
    max_tol_frac: f64,
}

/// Compares every coordinate of every parameter group of `p` with central differences.
///
/// Tolerance: with h = 1e-6 the O(h²) truncation error is ~1e-12 · |f'''| and the rounding
/// error of the difference is ~ε|L|/h ≈ 1e-16 · 10² / 1e-6 = 1e-8, so a gradient with an
/// absolute error above 1e-6 or a relative error above 1e-5 is wrong, not noise (observed
/// errors are far below; the test prints them).
///
/// A coordinate whose ±h perturbation changes the branch signature (a (splat, pixel)
/// contribution appearing or vanishing at `ALPHA_MIN` / `T_MIN` / the tile rect / culling, an α
/// or colour or tangent clamp switching, a depth-order swap) straddles a jump or a kink where
/// a central difference is not the derivative: it is skipped and counted, never silently.
fn fd_check(
    name: &str,
    p: &SplatParams,
    cam: &Camera,
    s: &Settings,
    seed: u64,
) -> Vec<(&'static str, GroupStats)> {
    let n_pix = (cam.width * cam.height) as usize;
    let mut rng = SplitMix64::new(seed);
    let v_rgb: Vec<[f64; 3]> = (0..n_pix).map(|_| [0; 3].map(|_| rng.uniform(-1.0, 1.0))).collect();
    let v_alpha: Vec<f64> = (0..n_pix).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let g = render_backward_params(p, cam, s, &v_rgb, &v_alpha);
    let (_, base_sig) = loss(p, cam, s, &v_rgb, &v_alpha);
    let visible = g.visible.iter().filter(|&&v| v).count();
    assert!(visible >= p.len() / 2, "{name}: only {visible} of {} splats visible", p.len());

    let groups: [(&'static str, Access, Vec<f64>); 6] = [
        ("means", |p| p.means.as_flattened_mut(), g.v_means.as_flattened().to_vec()),
        ("log_scales", |p| p.log_scales.as_flattened_mut(), g.v_log_scales.as_flattened().to_vec()),
        ("rotations", |p| p.rotations.as_flattened_mut(), g.v_rotations.as_flattened().to_vec()),
        ("opacity_logits", |p| &mut p.opacity_logits, g.v_opacity_logits.clone()),
        ("sh_dc", |p| p.sh_dc.as_flattened_mut(), g.v_sh_dc.as_flattened().to_vec()),
        ("sh_rest", |p| &mut p.sh_rest, g.v_sh_rest.clone()),
    ];
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (group, access, analytic) in groups {
        let mut stats = GroupStats::default();
        let mut q = p.clone();
        for (k, &an) in analytic.iter().enumerate() {
            let x = access(&mut q)[k];
            access(&mut q)[k] = x + H;
            let (lp, sp) = loss(&q, cam, s, &v_rgb, &v_alpha);
            access(&mut q)[k] = x - H;
            let (lm, sm) = loss(&q, cam, s, &v_rgb, &v_alpha);
            access(&mut q)[k] = x;
            if sp != base_sig || sm != base_sig {
                stats.skipped += 1;
                let why = base_sig.difference(if sp == base_sig { &sm } else { &sp });
                println!("  skip {group}[{k}]: {why}");
                continue;
            }
            stats.checked += 1;
            let num = (lp - lm) / (2.0 * H);
            let err = (an - num).abs();
            let tol = ATOL + RTOL * an.abs().max(num.abs());
            stats.max_abs_err = stats.max_abs_err.max(err);
            stats.max_grad = stats.max_grad.max(an.abs());
            stats.max_tol_frac = stats.max_tol_frac.max(err / tol);
            if err > tol {
                failures.push(format!("{name} {group}[{k}]: analytic {an:e} numeric {num:e}"));
            }
        }
        report.push((group, stats));
    }
    println!("{name}: {visible}/{} visible", p.len());
    for (group, st) in &report {
        println!(
            "  {group:15} checked {:5} skipped {:3} max |grad| {:.2e} max |err| {:.2e} max err/tol {:.3}",
            st.checked, st.skipped, st.max_grad, st.max_abs_err, st.max_tol_frac
        );
    }
    assert!(
        failures.is_empty(),
        "{} gradient mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    report
}

/// One finite-difference scene.
struct Case {
    name: &'static str,
    seed: u64,
    size: (u32, u32),
    rotated: bool,
    /// Stored SH degree and active degree.
    sh: (u32, u32),
    antialiased: bool,
}

/// Asserts the skips are few: at most 10% of a group's coordinates and 2% of all.
fn assert_few_skips(name: &str, report: &[(&str, GroupStats)]) {
    let (mut checked, mut skipped) = (0, 0);
    for (group, st) in report {
        let total = st.checked + st.skipped;
        assert!(st.skipped * 10 <= total, "{name} {group}: {} of {total} skipped", st.skipped);
        (checked, skipped) = (checked + st.checked, skipped + st.skipped);
    }
    assert!(
        skipped * 50 <= checked + skipped,
        "{name}: {skipped} of {} skipped",
        checked + skipped
    );
}

/// Runs [`fd_check`] on a [`random_scene`] of 20 splats, after checking that its special
/// splats take the branches they are there for.
fn fd_scene(case: &Case) {
    let name = case.name;
    let cam = camera(case.size.0, case.size.1, case.rotated);
    let mut rng = SplitMix64::new(case.seed);
    let p = random_scene(&mut rng, &cam, 20, case.sh.0);
    let s = settings(case.sh.1, case.antialiased);
    let branches = projection_branches(&p, &cam, &s);
    assert!(
        branches[0].visible && branches[0].tangent_clamped[0],
        "{name}: splat 0 not tangent-clamped"
    );
    assert!(
        branches[1].visible && branches[1].tangent_clamped[1],
        "{name}: splat 1 not tangent-clamped"
    );
    assert!(branches[3].color_clamped[0], "{name}: splat 3 colour not clamped: {:?}", branches[3]);
    let (projected, _) = render_params(&p, &cam, &s);
    let traces = pixel_traces(&projected, &cam);
    let clamped = traces.iter().flat_map(|t| &t.contributions).filter(|c| c.alpha_clamped).count();
    assert!(clamped > 0, "{name}: no α clamped at ALPHA_MAX");

    let report = fd_check(name, &p, &cam, &s, case.seed ^ 0xABCD);
    assert_few_skips(name, &report);
}

/// Pixels where compositing stopped at `T_MIN`: a candidate with σ ≤ its cut was left out.
fn stopped_pixels(projected: &[Projected], cam: &Camera) -> usize {
    let traces = pixel_traces(projected, cam);
    let mut stopped = 0;
    for y in 0..cam.height {
        for x in 0..cam.width {
            let candidates = projected
                .iter()
                .filter(|pr| pr.touches_tile(x / TILE_SIZE, y / TILE_SIZE, cam))
                .filter(|pr| {
                    let d = [f64::from(x) + 0.5 - pr.mean2d[0], f64::from(y) + 0.5 - pr.mean2d[1]];
                    let sigma = 0.5 * (pr.conic[0] * d[0] * d[0] + pr.conic[2] * d[1] * d[1])
                        + pr.conic[1] * d[0] * d[1];
                    (0.0..=pr.sigma_cut).contains(&sigma)
                })
                .count();
            if candidates > traces[(y * cam.width + x) as usize].contributions.len() {
                stopped += 1;
            }
        }
    }
    stopped
}

#[test]
fn fd_sh0() {
    fd_scene(&Case {
        name: "sh0",
        seed: 11,
        size: (40, 32),
        rotated: true,
        sh: (0, 0),
        antialiased: false,
    });
}

#[test]
fn fd_sh0_antialiased() {
    fd_scene(&Case {
        name: "sh0 aa",
        seed: 12,
        size: (40, 32),
        rotated: true,
        sh: (0, 0),
        antialiased: true,
    });
}

#[test]
fn fd_sh1() {
    fd_scene(&Case {
        name: "sh1",
        seed: 13,
        size: (40, 32),
        rotated: false,
        sh: (1, 1),
        antialiased: false,
    });
}

#[test]
fn fd_sh1_antialiased() {
    fd_scene(&Case {
        name: "sh1 aa",
        seed: 14,
        size: (40, 32),
        rotated: true,
        sh: (1, 1),
        antialiased: true,
    });
}

#[test]
fn fd_sh2() {
    fd_scene(&Case {
        name: "sh2",
        seed: 15,
        size: (40, 32),
        rotated: true,
        sh: (2, 2),
        antialiased: false,
    });
}

#[test]
fn fd_sh2_antialiased() {
    fd_scene(&Case {
        name: "sh2 aa",
        seed: 16,
        size: (37, 29),
        rotated: true,
        sh: (2, 2),
        antialiased: true,
    });
}

#[test]
fn fd_sh3() {
    fd_scene(&Case {
        name: "sh3",
        seed: 17,
        size: (40, 32),
        rotated: true,
        sh: (3, 3),
        antialiased: false,
    });
}

#[test]
fn fd_sh3_antialiased() {
    fd_scene(&Case {
        name: "sh3 aa",
        seed: 18,
        size: (40, 32),
        rotated: true,
        sh: (3, 3),
        antialiased: true,
    });
}

#[test]
fn fd_sh3_active_degree_1() {
    // The coefficients above the active degree get exactly zero gradient (and FD agrees).
    fd_scene(&Case {
        name: "sh3 active 1 aa",
        seed: 19,
        size: (33, 40),
        rotated: true,
        sh: (3, 1),
        antialiased: true,
    });
}

#[test]
fn fd_dense_scene_stopping_at_t_min() {
    // 40 opaque splats piled in the middle of a 24×20 image: many pixels stop at T_MIN, so
    // the backward's suffix terms run over truncated lists.
    let cam = camera(24, 20, true);
    let mut rng = SplitMix64::new(21);
    let mut p = empty_params(1);
    for _ in 0..40 {
        let mean = world_point(
            &cam,
            rng.uniform(-0.15, 0.15),
            rng.uniform(-0.1, 0.1),
            rng.uniform(1.5, 3.0),
        );
        let log_scale = [0; 3].map(|_| rng.uniform(-2.3, -1.8));
        let rotation =
            [1.0, rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0)];
        let dc = [0; 3].map(|_| rng.uniform(-1.0, 1.0));
        let rest: Vec<f64> = (0..9).map(|_| rng.uniform(-0.3, 0.3)).collect();
        push(&mut p, mean, log_scale, rotation, rng.uniform(2.5, 4.5), dc, &rest);
    }
    let s = settings(1, true);
    let (projected, _) = render_params(&p, &cam, &s);
    let stopped = stopped_pixels(&projected, &cam);
    println!("dense: {stopped} of {} pixels stop at T_MIN", cam.width * cam.height);
    assert!(stopped >= 20, "only {stopped} pixels stop at T_MIN");
    let report = fd_check("dense", &p, &cam, &s, 22);
    assert_few_skips("dense", &report);
}

#[test]
fn fd_skips_are_detected_at_a_depth_tie() {
    // Two overlapping splats at exactly the same depth: their order is by index, and nudging
    // either one's depth swaps it, a jump in the image. The check must skip (and count) those
    // coordinates, and still agree everywhere else.
    let cam = camera(32, 32, false);
    let mut p = empty_params(0);
    for (x, dc) in [(-0.02, [1.0, -1.0, 0.0]), (0.02, [-1.0, 1.0, 0.5])] {
        push(&mut p, [x, 0.0, 2.0], [-2.5; 3], [1.0, 0.0, 0.0, 0.0], 1.5, dc, &[]);
    }
    let report = fd_check("tie", &p, &cam, &settings(0, false), 23);
    let means = &report[0].1;
    assert_eq!(report[0].0, "means");
    // The z coordinates of both means (camera = world here) flip the order.
    assert!(means.skipped >= 2, "{means:?}");
}

#[test]
fn fd_rasterize_backward_on_projected_splats() {
    // The rasterizer alone: perturb the projected splats' mean2d, conic, colour and opacity
    // directly (what the GPU's rasterize_backward is compared on), and check grad2d.
    let cam = camera(40, 32, true);
    let mut rng = SplitMix64::new(31);
    let p = random_scene(&mut rng, &cam, 20, 1);
    let s = settings(1, true);
    let n_pix = (cam.width * cam.height) as usize;
    let v_rgb: Vec<[f64; 3]> = (0..n_pix).map(|_| [0; 3].map(|_| rng.uniform(-1.0, 1.0))).collect();
    let v_alpha: Vec<f64> = (0..n_pix).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let (projected, image) = render_params(&p, &cam, &s);
    let grads = rasterize_backward(&projected, &image, &cam, &s, &v_rgb, &v_alpha);
    let signature = |pr: &[Projected]| -> Vec<Vec<(u32, bool)>> {
        pixel_traces(pr, &cam)
            .into_iter()
            .map(|t| t.contributions.iter().map(|c| (c.splat, c.alpha_clamped)).collect())
            .collect()
    };
    let loss = |pr: &[Projected]| {
        let image = rasterize_forward(pr, &cam, &s);
        let mut l = 0.0;
        for i in 0..n_pix {
            l += (0..3).map(|c| v_rgb[i][c] * image.rgb[i][c]).sum::<f64>()
                + v_alpha[i] * image.alpha[i];
        }
        l
    };
    let base = signature(&projected);
    let (mut checked, mut skipped, mut max_err, mut max_frac) = (0, 0, 0.0_f64, 0.0_f64);
    for i in (0..projected.len()).filter(|&i| projected[i].visible) {
        let analytic: [f64; 9] = [
            grads.v_mean2d[i][0],
            grads.v_mean2d[i][1],
            grads.v_conic[i][0],
            grads.v_conic[i][1],
            grads.v_conic[i][2],
            grads.v_color[i][0],
            grads.v_color[i][1],
            grads.v_color[i][2],
            grads.v_opacity[i],
        ];
        for (k, an) in analytic.into_iter().enumerate() {
            let nudge = |delta: f64| {
                let mut q = projected.clone();
                let field = match k {
                    0 | 1 => &mut q[i].mean2d[k],
                    2..=4 => &mut q[i].conic[k - 2],
                    5..=7 => &mut q[i].color[k - 5],
                    _ => &mut q[i].opacity,
                };
                *field += delta;
                q
            };
            let (qp, qm) = (nudge(H), nudge(-H));
            if signature(&qp) != base || signature(&qm) != base {
                skipped += 1;
                println!("  skip splat {i} field {k}");
                continue;
            }
            checked += 1;
            let num = (loss(&qp) - loss(&qm)) / (2.0 * H);
            let err = (an - num).abs();
            max_err = max_err.max(err);
            let tol = ATOL + RTOL * an.abs().max(num.abs());
            max_frac = max_frac.max(err / tol);
            assert!(err <= tol, "splat {i} field {k}: analytic {an:e} numeric {num:e}");
        }
    }
    println!(
        "rasterize: checked {checked} skipped {skipped} max |err| {max_err:.2e} max err/tol {max_frac:.3}"
    );
    assert!(skipped * 50 <= checked + skipped);

    // grad2d is the NDC-scaled norm of ∂L/∂mean2d.
    let g = project_backward_params(&p, &cam, &s, &projected, &grads);
    for (i, pr) in projected.iter().enumerate() {
        let [gx, gy] = grads.v_mean2d[i];
        let expected = (gx * 20.0).hypot(gy * 16.0);
        assert_close(g.grad2d[i], expected, 1e-12 * (1.0 + expected), "grad2d");
        assert_eq!(g.visible[i], pr.visible);
        assert_eq!(g.radius[i], pr.radius);
    }
    assert!(g.grad2d.iter().any(|&x| x > 0.0));
}

/// The absolute growth statistic is, for each splat, the sum over the pixels of the norm of
/// that pixel's own NDC mean2d gradient: the backward of each pixel's cotangent alone gives
/// that pixel's gradient (the loss is a sum over pixels), and their norms add up to
/// `abs_grad2d`. By the triangle inequality it is at least the signed `grad2d`.
#[test]
fn the_absolute_statistic_sums_each_pixels_gradient_norm() {
    let cam = camera(24, 20, true);
    let mut rng = SplitMix64::new(41);
    let p = random_scene(&mut rng, &cam, 12, 1);
    let s = settings(1, true);
    let n_pix = (cam.width * cam.height) as usize;
    let v_rgb: Vec<[f64; 3]> = (0..n_pix).map(|_| [0; 3].map(|_| rng.uniform(-1.0, 1.0))).collect();
    let v_alpha: Vec<f64> = (0..n_pix).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let (projected, image) = render_params(&p, &cam, &s);
    let all = rasterize_backward(&projected, &image, &cam, &s, &v_rgb, &v_alpha);
    let half = [f64::from(cam.width) / 2.0, f64::from(cam.height) / 2.0];
    let mut by_pixel = vec![0.0; p.len()];
    for pixel in 0..n_pix {
        let mut one_rgb = vec![[0.0; 3]; n_pix];
        let mut one_alpha = vec![0.0; n_pix];
        one_rgb[pixel] = v_rgb[pixel];
        one_alpha[pixel] = v_alpha[pixel];
        let one = rasterize_backward(&projected, &image, &cam, &s, &one_rgb, &one_alpha);
        for (sum, [gx, gy]) in by_pixel.iter_mut().zip(one.v_mean2d) {
            *sum += (gx * half[0]).hypot(gy * half[1]);
        }
    }
    let g = project_backward_params(&p, &cam, &s, &projected, &all);
    for (i, &summed) in by_pixel.iter().enumerate() {
        assert_close(all.abs_grad2d[i], summed, 1e-12 * (1.0 + summed), "abs_grad2d");
        let expected = if g.visible[i] { all.abs_grad2d[i] } else { 0.0 };
        assert_eq!(g.abs_grad2d[i], expected, "splat {i}: the projection passes it on");
        assert!(g.abs_grad2d[i] >= g.grad2d[i] * (1.0 - 1e-12), "splat {i}");
    }
    let cancelled = (0..p.len()).filter(|&i| g.abs_grad2d[i] > 2.0 * g.grad2d[i]).count();
    assert!(cancelled > 0, "random cotangents cancel in the signed sum of some splat");
}

/// Why compact grows by the absolute statistic: under per-pixel noise (a mean loss over the
/// pixels, so a pixel's cotangent is 1 / pixels), the same splat seen at 4× the image side
/// keeps its absolute statistic, while the signed one falls about as 1 / side (the sum of
/// N random terms grows as √N, not N). Eight noise draws at 64 and 256 px, one splat over
/// the same part of the view.
#[test]
fn the_absolute_statistic_keeps_its_size_at_any_resolution() {
    let mean_statistics = |side: u32| {
        let cam = camera(side, side, false);
        let mut p = empty_params(0);
        push(
            &mut p,
            world_point(&cam, 0.0, 0.0, 2.0),
            [-1.8; 3],
            [1.0, 0.0, 0.0, 0.0],
            1.0,
            [0.3; 3],
            &[],
        );
        let s = settings(0, false);
        let n_pix = (side * side) as usize;
        let mut rng = SplitMix64::new(u64::from(side));
        let (mut signed, mut absolute) = (0.0, 0.0);
        for _ in 0..8 {
            let scale = 1.0 / n_pix as f64;
            let v_rgb: Vec<[f64; 3]> =
                (0..n_pix).map(|_| [0; 3].map(|_| scale * rng.uniform(-1.0, 1.0))).collect();
            let g = render_backward_params(&p, &cam, &s, &v_rgb, &vec![0.0; n_pix]);
            signed += g.grad2d[0] / 8.0;
            absolute += g.abs_grad2d[0] / 8.0;
        }
        (signed, absolute)
    };
    let (signed_64, absolute_64) = mean_statistics(64);
    let (signed_256, absolute_256) = mean_statistics(256);
    let (signed_ratio, absolute_ratio) = (signed_256 / signed_64, absolute_256 / absolute_64);
    println!("256 px against 64 px: signed × {signed_ratio:.3}, absolute × {absolute_ratio:.3}");
    assert!((0.9..1.1).contains(&absolute_ratio), "absolute × {absolute_ratio}");
    assert!(signed_ratio < 0.5, "signed × {signed_ratio}");
}
