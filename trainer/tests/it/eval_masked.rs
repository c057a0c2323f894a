//! Our evaluation figures on a real undistorted view, against an independent computation.
//!
//! desk-penguin's phone frames have lens distortion: undistorted at load, each view keeps its
//! size and masks the border pixels its lens has no source for. The trainer's evaluation
//! (`Trainer::evaluate`: the GPU loss kernels, separable blur, rearranged SSIM formula, f32)
//! must give the PSNR and SSIM that a direct computation gives on the CPU in f64 — each
//! pixel's 11×11 Gaussian window (σ 1.5) taken whole, the statistics of the pixels that count
//! (weighted by the mask, the zero padding outside the image counting as in 3DGS), the
//! textbook SSIM, the mean over the counted pixels — from the same render and view.
//! The test also computes what a window that mixes in the uncovered pixels gives, and checks
//! that it is far off: the error this evaluation had, which the comparison would catch.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]
#![allow(
    clippy::needless_range_loop,
    reason = "the channel indexes the render and the image alike"
)]

use std::sync::Arc;

use splat_render::{FrameScratch, GpuSplats, Owner, RenderSettings, Renderer};
use splat_test_support::dataset_path;
use splat_trainer::config::TrainConfig;
use splat_trainer::dataset::{LoadOptions, View, load_dataset};
use splat_trainer::densify::{DefaultConfig, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::loss::{C1, C2, RADIUS, gaussian_window};
use splat_trainer::train::{
    HostOptimizerState, ImagePlacement, RunSnapshot, TrainKernels, Trainer,
};

use crate::helpers::{context, test_config};

/// How a window treats the pixels a mask leaves out.
#[derive(Clone, Copy, PartialEq)]
enum Window {
    /// Left out of its statistics (what evaluation must do).
    WithoutMasked,
    /// Mixed in like any other pixel (the error to catch).
    WithMasked,
}

/// PSNR (dB) and SSIM of `render` against `view` over the pixels its mask counts, directly.
fn direct_metrics(render: &[[f32; 4]], view: &View, window: Window) -> (f64, f64) {
    let (width, height) = (i64::from(view.camera.width), i64::from(view.camera.height));
    let g = gaussian_window();
    let weight = |x: i64, y: i64| -> f64 {
        match &view.mask {
            Some(mask) if window == Window::WithoutMasked => {
                f64::from(mask.get_pixel(x as u32, y as u32).0[0]) / 255.0
            }
            _ => 1.0,
        }
    };
    let counted = |x: i64, y: i64| -> f64 {
        view.mask.as_ref().map_or(1.0, |m| f64::from(m.get_pixel(x as u32, y as u32).0[0]) / 255.0)
    };
    let (mut ssim_sum, mut squared_sum, mut weight_sum) = (0.0, 0.0, 0.0);
    for py in 0..height {
        for px in 0..width {
            let w_p = counted(px, py);
            if w_p == 0.0 {
                continue;
            }
            weight_sum += w_p;
            let i = (py * width + px) as usize;
            for c in 0..3 {
                // Σ over the window of g·w·(1, x, y, x², y², xy); outside the image x = y = 0
                // with weight 1.
                let mut s = [0.0f64; 6];
                for dy in -(RADIUS as i64)..=RADIUS as i64 {
                    for dx in -(RADIUS as i64)..=RADIUS as i64 {
                        let (qx, qy) = (px + dx, py + dy);
                        let gw =
                            g[(dx + RADIUS as i64) as usize] * g[(dy + RADIUS as i64) as usize];
                        let inside = qx >= 0 && qy >= 0 && qx < width && qy < height;
                        let (w, x, y) = if inside {
                            let q = (qy * width + qx) as usize;
                            let y =
                                f64::from(view.image.get_pixel(qx as u32, qy as u32).0[c]) / 255.0;
                            (weight(qx, qy), f64::from(render[q][c]), y)
                        } else {
                            (1.0, 0.0, 0.0)
                        };
                        for (k, v) in [1.0, x, y, x * x, y * y, x * y].into_iter().enumerate() {
                            s[k] += gw * w * v;
                        }
                    }
                }
                let [n, sx, sy, sxx, syy, sxy] = s;
                let (mx, my) = (sx / n, sy / n);
                let (vx, vy, cov) = (sxx / n - mx * mx, syy / n - my * my, sxy / n - mx * my);
                let ssim = (2.0 * mx * my + C1) * (2.0 * cov + C2)
                    / ((mx * mx + my * my + C1) * (vx + vy + C2));
                ssim_sum += w_p * ssim;
                let d = f64::from(render[i][c])
                    - f64::from(view.image.get_pixel(px as u32, py as u32).0[c]) / 255.0;
                squared_sum += w_p * d * d;
            }
        }
    }
    let mse = squared_sum / (3.0 * weight_sum);
    (-10.0 * mse.log10(), ssim_sum / (3.0 * weight_sum))
}

#[test]
fn eval_metrics_of_an_undistorted_view_match_a_direct_computation() {
    let path = dataset_path("desk-penguin-opencv");
    let options = LoadOptions { max_resolution: 120, ..LoadOptions::default() };
    let data = Arc::new(load_dataset(&path, &options).unwrap());
    assert!(data.eval.iter().all(|v| v.mask.is_some()), "undistortion masks every view");
    let ctx = context();
    let config = TrainConfig {
        sh_degree: 0,
        sh_degree_interval: 1000,
        ..test_config(
            60,
            Strategy::Default(DefaultConfig { start: u32::MAX, ..DefaultConfig::default() }),
        )
    };
    let snapshot = RunSnapshot {
        splats: splats_from_points(data.init_points.as_ref().unwrap(), 0),
        optimizer: HostOptimizerState::default(),
        step: 0,
        rng: 1,
        order: Vec::new(),
        peak_splats: 0,
        config,
    };
    let kernels = Arc::new(TrainKernels::new(&ctx).unwrap());
    let mut trainer = Trainer::from_snapshot_with(
        kernels,
        &ctx,
        Arc::clone(&data),
        snapshot,
        ImagePlacement::Resident,
        Owner::Run(1),
    )
    .unwrap();
    // A few steps, so that the render resembles the view without matching it.
    for _ in 0..60 {
        trainer.step().unwrap();
    }
    let eval = trainer.evaluate().unwrap();
    let splats = trainer.splats().unwrap();
    drop(trainer);

    let renderer = Renderer::new(&ctx).unwrap();
    let params = GpuSplats::upload(&ctx, &splats, Owner::Run(2)).unwrap();
    let mut scratch = FrameScratch::new(&ctx, &renderer, Owner::Run(2)).unwrap();
    let settings = RenderSettings {
        background: [0.0; 3],
        antialiased: false,
        sh_degree: Some(0),
        ..RenderSettings::default()
    };
    let (mut psnr, mut ssim, mut ssim_mixed) = (0.0, 0.0, 0.0);
    for view in &data.eval {
        renderer.forward(&ctx, &params, &view.camera, &settings, &mut scratch).unwrap();
        let render = scratch.read_image(&ctx).unwrap();
        let (view_psnr, view_ssim) = direct_metrics(&render, view, Window::WithoutMasked);
        psnr += view_psnr;
        ssim += view_ssim;
        ssim_mixed += direct_metrics(&render, view, Window::WithMasked).1;
    }
    let views = data.eval.len() as f64;
    let (psnr, ssim, ssim_mixed) = (psnr / views, ssim / views, ssim_mixed / views);
    eprintln!(
        "{} eval views: PSNR {:.4} dB (direct {psnr:.4}), SSIM {:.5} (direct {ssim:.5}; with the \
         uncovered pixels in the windows {ssim_mixed:.5})",
        eval.views, eval.psnr, eval.ssim
    );
    // The GPU blurs in f32 and sums each 16×16 tile in f32 (relative error ~1e-6); the render
    // is the same bits. 1e-4 in SSIM and 0.01 dB leave room for that and nothing else.
    assert!((eval.ssim - ssim).abs() < 1e-4, "SSIM {} vs direct {ssim}", eval.ssim);
    assert!((eval.psnr - psnr).abs() < 0.01, "PSNR {} vs direct {psnr}", eval.psnr);
    // Mixing the uncovered pixels in is an error this comparison catches by far.
    assert!((ssim - ssim_mixed).abs() > 20.0 * 1e-4, "{ssim} vs {ssim_mixed}");
}
