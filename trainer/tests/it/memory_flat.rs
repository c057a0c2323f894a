//! Long runs do not grow: after a warm-up, hundreds of training steps leave the process's
//! resident memory where it was (on software Vulkan, device memory is host memory, so RSS
//! sees GPU leaks too) and the ledger exactly where it was.
//!
//! This caught a real one: lavapipe specialises shaders on uniform-buffer values at every
//! dispatch and keeps the variants (~0.4 MB a dispatch); our kernels read their parameters
//! from read-only storage buffers instead. One test per file: RSS is per process.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::sync::Arc;

use splat_render::Owner;
use splat_test_support::{assert_own_process, rss_bytes};
use splat_trainer::config::TrainConfig;
use splat_trainer::densify::{DefaultConfig, McmcConfig, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::train::Trainer;

use crate::helpers::{context, desk_statue, test_config};

#[test]
#[ignore = "slow, about 30 s: hundreds of steps of two strategies leave the resident set and the ledger flat"]
fn training_steps_do_not_grow_memory() {
    assert_own_process("memory_flat::training_steps_do_not_grow_memory");
    let data = desk_statue(64);
    let init = splats_from_points(data.init_points.as_ref().unwrap(), 2);
    let ctx = context();
    for (name, strategy) in [
        (
            "default",
            Strategy::Default(DefaultConfig { start: u32::MAX, ..DefaultConfig::default() }),
        ),
        ("mcmc", Strategy::Mcmc(McmcConfig { start: u32::MAX, ..McmcConfig::default() })),
    ] {
        let config = TrainConfig {
            sh_degree: 2,
            sh_degree_interval: 50,
            max_splats: splat_trainer::config::SplatBudget::Count(10_000),
            ..test_config(400, strategy)
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
