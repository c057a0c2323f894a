//! Long runs do not grow: after a warm-up, hundreds of training steps leave the process's
//! resident memory where it was (on software Vulkan, device memory is host memory, so RSS
//! sees GPU leaks too) and the ledger exactly where it was.
//!
//! This caught a real one: lavapipe specialises shaders on uniform-buffer values at every
//! dispatch and keeps the variants (~0.4 MB a dispatch); our kernels read their parameters
//! from read-only storage buffers instead. One test per file: RSS is per process.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::path::Path;
use std::sync::Arc;

use splat_render::{GpuContext, Owner, ShPrecision};
use splat_trainer::dataset::{LoadOptions, load_dataset};
use splat_trainer::densify::{DefaultConfig, McmcConfig, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::loss::LossWeights;
use splat_trainer::train::{LearningRates, TrainConfig, Trainer, Transparency};

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    Some(statm.split_whitespace().nth(1)?.parse::<u64>().ok()? * 4096)
}

#[test]
#[ignore = "slow: a memory soak (RSS over a long run)"]
fn training_steps_do_not_grow_memory() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/datasets/desk-statue-colmap");
    let data = Arc::new(
        load_dataset(&path, &LoadOptions { max_resolution: 64, ..LoadOptions::default() }).unwrap(),
    );
    let init = splats_from_points(data.init_points.as_ref().unwrap(), 2);
    let ctx = pollster::block_on(GpuContext::new_headless()).unwrap();
    for (name, strategy) in [
        (
            "default",
            Strategy::Default(DefaultConfig { start: u32::MAX, ..DefaultConfig::default() }),
        ),
        ("mcmc", Strategy::Mcmc(McmcConfig { start: u32::MAX, ..McmcConfig::default() })),
    ] {
        let config = TrainConfig {
            steps: 400,
            sh_degree: 2,
            sh_degree_interval: 50,
            sh_precision: ShPrecision::F32,
            strategy,
            max_splats: 10_000,
            eval_every: 0,
            seed: 1,
            background: [0.0; 3],
            learning_rates: LearningRates::default(),
            loss_weights: LossWeights::default(),
            transparency: Transparency::default(),
        };
        let mut trainer =
            Trainer::new(&ctx, Arc::clone(&data), &init, config, Owner::Run(9)).unwrap();
        // Warm-up: every SH degree reached, every pipeline and allocator cache filled.
        for _ in 0..150 {
            trainer.step().unwrap();
        }
        ctx.wait_idle().unwrap();
        let (ledger, rss) = (ctx.ledger().total_bytes(), rss_bytes());
        for _ in 0..250 {
            trainer.step().unwrap();
        }
        ctx.wait_idle().unwrap();
        assert_eq!(ctx.ledger().total_bytes(), ledger, "{name}: the ledger moved");
        if let (Some(before), Some(after)) = (rss, rss_bytes()) {
            let growth = after.saturating_sub(before);
            eprintln!("{name}: RSS {:.1} → {:.1} MB", before as f64 / 1e6, after as f64 / 1e6);
            // Before the fix this grew ~100 MB over 250 steps; allocator noise is < 4 MB.
            assert!(growth < 8 << 20, "{name}: RSS grew {} MB over 250 steps", growth >> 20);
        }
        drop(trainer);
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}
