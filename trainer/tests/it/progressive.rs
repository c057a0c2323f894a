//! Coarse-to-fine training (`Progressive`): each stage's steps train on the images shrunk as
//! the stage says, the coarse images' buffers are gone once the run reaches full size, and a
//! run snapshotted, restored, paused and resumed across the stages trains as an unbroken one.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::sync::Arc;

use splat_render::{GpuContext, Owner};
use splat_trainer::config::{Progressive, TrainConfig};
use splat_trainer::densify::{DefaultConfig, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::train::Trainer;

use crate::helpers::{context, desk_statue, test_config};

const STAGES: Progressive = Progressive::Stages { half_from: 10, full_from: 20 };

fn config() -> TrainConfig {
    let strategy = Strategy::Default(DefaultConfig { start: u32::MAX, ..DefaultConfig::default() });
    TrainConfig { seed: 9, progressive: STAGES, ..test_config(40, strategy) }
}

/// Bytes of `owner`'s coarse image slots.
fn coarse_bytes(ctx: &GpuContext, owner: Owner) -> u64 {
    let snapshot = ctx.ledger().snapshot();
    let coarse = snapshot.allocations.iter();
    coarse
        .filter(|a| a.owner == owner && a.label.starts_with("coarse target"))
        .map(|a| a.bytes)
        .sum()
}

#[test]
fn a_progressive_run_trains_each_stage_at_its_size_and_continues_exactly() {
    let data = desk_statue(64);
    let (width, height) = data.largest_image();
    assert!(data.train.iter().all(|v| (v.camera.width, v.camera.height) == (width, height)));
    let init = splats_from_points(data.init_points.as_ref().unwrap(), 1);
    let ctx = context();

    let mut unbroken =
        Trainer::new(&ctx, Arc::clone(&data), &init, config(), Owner::Run(1)).unwrap();
    for step in 0..40 {
        let stats = unbroken.step().unwrap();
        let d = STAGES.divisor(step);
        assert_eq!(stats.image_size, [width / d, height / d], "step {step}");
        // The next step's image is prepared with this one: the slots go when it is full size.
        let held = coarse_bytes(&ctx, Owner::Run(1));
        assert_eq!(held > 0, STAGES.divisor(step + 1) > 1, "step {step}: {held} bytes");
    }
    let reference = unbroken.snapshot().unwrap();
    drop(unbroken);

    // Snapshot in the first stage, restore, pause across the second switch, resume.
    let mut broken = Trainer::new(&ctx, Arc::clone(&data), &init, config(), Owner::Run(2)).unwrap();
    for _ in 0..5 {
        broken.step().unwrap();
    }
    let saved = broken.snapshot().unwrap();
    assert_eq!(saved.config.progressive, STAGES, "the stages are part of the run's state");
    drop(broken);
    let mut restored =
        Trainer::from_snapshot(&ctx, Arc::clone(&data), saved, Owner::Run(3)).unwrap();
    for _ in 5..19 {
        restored.step().unwrap();
    }
    restored.pause().unwrap();
    assert_eq!(coarse_bytes(&ctx, Owner::Run(3)), 0, "a paused run holds no images");
    restored.resume().unwrap();
    for _ in 19..40 {
        restored.step().unwrap();
    }
    assert_eq!(restored.snapshot().unwrap(), reference, "broken and unbroken runs train the same");
    drop(restored);
    ctx.wait_idle().unwrap();
    for run in 1..=3 {
        assert_eq!(ctx.ledger().owner_bytes(Owner::Run(run)), 0);
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}
