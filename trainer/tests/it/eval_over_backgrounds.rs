//! A measurement, not a check (ignored): how well trained splats of a transparent object
//! capture keep their transparency, by evaluating them on lego's eval views composited over
//! several background colours (training saw one, or random ones). Splat files from
//! `SPLATS` (comma-separated .ply paths, e.g. `splatforge train`'s outputs at 200 px):
//!
//! `SPLATS=a/splats.ply,b/splats.ply cargo test -p splat-trainer --test it eval_over_backgrounds::
//! -- --ignored --nocapture`
#![allow(clippy::unwrap_used, reason = "a measurement: any error should stop it")]

use std::path::Path;
use std::sync::Arc;

use splat_render::{Owner, ShPrecision};
use splat_test_support::dataset_path;
use splat_trainer::config::{LearningRates, Progressive, TrainConfig, Transparency};
use splat_trainer::dataset::{LoadOptions, load_dataset};
use splat_trainer::densify::{DefaultConfig, Strategy};
use splat_trainer::formats::{Loaded, load_file};
use splat_trainer::loss::LossWeights;
use splat_trainer::train::{HostOptimizerState, RunSnapshot, Trainer};

use crate::helpers::context;

/// The resolution the runs of BENCHMARKS.md ("Object captures") trained at.
const MAX_RESOLUTION: u32 = 200;
const BACKGROUNDS: [[f32; 3]; 4] = [[0.0; 3], [1.0; 3], [0.5; 3], [0.2, 0.6, 0.9]];

#[test]
#[ignore = "a measurement of given splat files"]
fn measure_eval_psnr_over_backgrounds() {
    let Ok(files) = std::env::var("SPLATS") else {
        eprintln!("set SPLATS to the splat files to measure");
        return;
    };
    let ctx = context();
    let path = dataset_path("lego-blender");
    for background in BACKGROUNDS {
        let options =
            LoadOptions { max_resolution: MAX_RESOLUTION, background, ..LoadOptions::default() };
        let data = Arc::new(load_dataset(&path, &options).unwrap());
        for file in files.split(',') {
            let Loaded::Splats { splats, .. } = load_file(Path::new(file)).unwrap() else {
                panic!("{file}: not splats");
            };
            // A snapshot at step `sh_degree` with an interval of 1: every band renders (bands
            // a run never reached are zero, as it left them).
            let config = TrainConfig {
                steps: splats.sh_degree,
                sh_degree: splats.sh_degree,
                sh_degree_interval: 1,
                sh_precision: ShPrecision::F32,
                strategy: Strategy::Default(DefaultConfig::default()),
                max_splats: splat_trainer::config::SplatBudget::Count(u32::MAX),
                eval_every: 0,
                seed: 0,
                background,
                learning_rates: LearningRates::default(),
                loss_weights: LossWeights::default(),
                transparency: Transparency::Composite,
                progressive: Progressive::Off,
                appearance: splat_trainer::appearance::Compensation::Off,
            };
            let snapshot = RunSnapshot {
                step: splats.sh_degree,
                splats,
                optimizer: HostOptimizerState::default(),
                rng: 0,
                order: Vec::new(),
                peak_splats: 0,
                config,
            };
            let mut trainer =
                Trainer::from_snapshot(&ctx, Arc::clone(&data), snapshot, Owner::Run(1)).unwrap();
            let eval = trainer.evaluate().unwrap();
            eprintln!(
                "{file} over {background:?}: eval PSNR {:.2} dB, SSIM {:.4} ({} views)",
                eval.psnr, eval.ssim, eval.views
            );
        }
    }
}
