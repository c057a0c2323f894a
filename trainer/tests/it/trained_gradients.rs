//! The backward pass against the CPU reference on a real training state: desk-statue's splats
//! after 200 steps at 16 px (one refinement: clones, split children), where every pixel of
//! the one-tile views composites hundreds of splats. The rasterizer's own tests use random
//! and trained scenes; this is the state in which a miscompiled tile sum (loops in both the
//! lane and the group sums, on lavapipe) once showed, up to 25% off the reference, with every
//! render test passing. Every reduction is checked.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::sync::Arc;

use splat_render::kernels::Reduction;
use splat_render::{Owner, RenderSettings, Renderer, reference, wgpu};
use splat_trainer::config::TrainConfig;
use splat_trainer::densify::{DefaultConfig, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::train::Trainer;

use crate::helpers::{context, desk_statue, test_config};

/// Relative L2 error allowed against the f64 reference (`render/tests/it/rasterize_gpu.rs`).
const TOLERANCE: f64 = 1e-4;

#[test]
fn gradients_of_a_trained_state_match_the_reference() {
    let data = desk_statue(16);
    let ctx = context();
    let init = splats_from_points(data.init_points.as_ref().unwrap(), 2);
    let config = TrainConfig {
        sh_degree: 2,
        sh_degree_interval: 500,
        max_splats: splat_trainer::config::SplatBudget::Count(3_000),
        seed: 7,
        ..test_config(
            200,
            Strategy::Default(DefaultConfig { start: 100, ..DefaultConfig::default() }),
        )
    };
    let mut trainer = Trainer::new(&ctx, Arc::clone(&data), &init, config, Owner::Run(1)).unwrap();
    for _ in 0..200 {
        trainer.step().unwrap();
    }
    let splats = trainer.snapshot().unwrap().splats;
    drop(trainer);
    assert!(splats.len() > init.len(), "the refinement added splats");

    let mut reductions = vec![Reduction::PORTABLE, Reduction::Portable { lanes: 32 }];
    if ctx.device.features().contains(wgpu::Features::SUBGROUP) {
        reductions.push(Reduction::Subgroup);
    }
    let settings = RenderSettings::default();
    let reference_settings =
        reference::Settings { background: [0.0; 3], antialiased: false, sh_degree: 2 };
    let n = splats.len();
    for view in data.train.iter().take(3) {
        let camera = view.camera;
        let pixels = (camera.width * camera.height) as usize;
        let v_image: Vec<f32> =
            (0..pixels * 4).map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0).collect();
        let v_rgb: Vec<[f64; 3]> =
            v_image.chunks_exact(4).map(|v| [v[0], v[1], v[2]].map(f64::from)).collect();
        let v_alpha: Vec<f64> = v_image.chunks_exact(4).map(|v| f64::from(v[3])).collect();
        let want =
            reference::render_backward(&splats, &camera, &reference_settings, &v_rgb, &v_alpha);
        for &reduction in &reductions {
            let renderer = Renderer::with_reduction(&ctx, reduction).unwrap();
            let pass = renderer
                .forward_backward(&ctx, &splats, (&camera, &settings), &v_image, Owner::Run(2))
                .unwrap();
            let groups = pass.gradients;
            for (what, got, expected) in [
                ("means", &groups[0], want.v_means.as_flattened()),
                ("log-scales", &groups[1], want.v_log_scales.as_flattened()),
                ("rotations", &groups[2], want.v_rotations.as_flattened()),
                ("opacities", &groups[3], &want.v_opacity_logits[..]),
            ] {
                let diff: f64 = got
                    .iter()
                    .zip(expected)
                    .map(|(g, w)| (f64::from(*g) - w).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let norm: f64 = expected.iter().map(|w| w * w).sum::<f64>().sqrt();
                let error = diff / norm.max(1e-12);
                assert!(
                    error <= TOLERANCE,
                    "{reduction:?}, {what} of {n} splats: relative error {error:.2e}"
                );
            }
        }
    }
}
