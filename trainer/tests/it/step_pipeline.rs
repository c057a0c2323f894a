//! How a training step uses the GPU: images resident or streamed, losses read back without
//! waiting, per-pass timings.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::sync::Arc;

use splat_render::{Category, GpuContext, Owner};
use splat_trainer::config::TrainConfig;
use splat_trainer::dataset::Dataset;
use splat_trainer::densify::{DefaultConfig, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::train::{
    ImagePlacement, RunSnapshot, StepMetrics, TrainKernels, Trainer, resident_image_bytes,
};

use crate::helpers::{context, desk_statue, test_config};

fn config() -> TrainConfig {
    TrainConfig {
        seed: 3,
        ..test_config(
            1000,
            Strategy::Default(DefaultConfig { start: u32::MAX, ..DefaultConfig::default() }),
        )
    }
}

fn start(ctx: &GpuContext, data: &Arc<Dataset>, placement: ImagePlacement, run: u64) -> Trainer {
    let init = splats_from_points(data.init_points.as_ref().unwrap(), 1);
    let snapshot = RunSnapshot {
        splats: init,
        optimizer: splat_trainer::train::HostOptimizerState::default(),
        step: 0,
        rng: 3,
        order: Vec::new(),
        peak_splats: 0,
        config: config(),
    };
    let kernels = Arc::new(TrainKernels::new(ctx).unwrap());
    Trainer::from_snapshot_with(
        kernels,
        ctx,
        Arc::clone(data),
        snapshot,
        placement,
        Owner::Run(run),
    )
    .unwrap()
}

/// Steps `steps` times and returns every step's metrics, in order (the last ones waited for).
fn train(trainer: &mut Trainer, steps: u32) -> Vec<StepMetrics> {
    let mut metrics = Vec::new();
    for _ in 0..steps {
        trainer.step().unwrap();
        metrics.extend(std::iter::from_fn(|| trainer.next_metrics()));
    }
    metrics.extend(trainer.flush_metrics().unwrap());
    metrics
}

#[test]
fn resident_and_streamed_images_train_alike() {
    let data = desk_statue(48);
    let ctx = context();
    let images = |run| {
        ctx.ledger()
            .snapshot()
            .allocations
            .iter()
            .filter(|a| a.owner == Owner::Run(run) && a.category == Category::DatasetImages)
            .map(|a| a.bytes)
            .sum::<u64>()
    };

    let mut resident = start(&ctx, &data, ImagePlacement::Resident, 1);
    // Every train and eval image, packed RGBA8, once.
    assert_eq!(images(1), resident_image_bytes(&data));
    let a = train(&mut resident, 25);
    let eval_a = resident.evaluate().unwrap();
    drop(resident);

    let mut streamed = start(&ctx, &data, ImagePlacement::Streamed, 2);
    let (w, h) = data.largest_image();
    assert_eq!(images(2), 2 * u64::from(w) * u64::from(h) * 4, "two image buffers");
    let b = train(&mut streamed, 25);
    let eval_b = streamed.evaluate().unwrap();
    drop(streamed);

    assert_eq!(a.len(), 25);
    assert_eq!(b.len(), 25);
    // The same views in the same order, the same pixels: the same training, bit for bit.
    assert_eq!(a, b);
    assert_eq!(eval_a, eval_b);
    ctx.wait_idle().unwrap();
    assert_eq!(ctx.ledger().owner_bytes(Owner::Run(1)), 0);
    assert_eq!(ctx.ledger().owner_bytes(Owner::Run(2)), 0);
    assert!(ctx.take_uncaptured_errors().is_empty());
}

#[test]
fn losses_come_back_a_step_later_without_waiting() {
    let data = desk_statue(48);
    let ctx = context();
    let mut trainer = start(&ctx, &data, ImagePlacement::Resident, 3);
    let mut seen = Vec::new();
    for step in 1..=12_u32 {
        trainer.step().unwrap();
        seen.extend(std::iter::from_fn(|| trainer.next_metrics()));
        // The step waits for the GPU once, for the previous step's work too: by then that
        // step's loss is readable, so the losses lag by at most two steps.
        assert!(
            seen.len() + 2 >= step as usize,
            "after step {step} only {} losses came back",
            seen.len()
        );
    }
    seen.extend(trainer.flush_metrics().unwrap());
    let steps: Vec<u32> = seen.iter().map(|m| m.step).collect();
    assert_eq!(steps, (1..=12).collect::<Vec<_>>());
    assert!(seen.iter().all(|m| m.loss.is_finite() && m.loss > 0.0 && m.train_psnr > 0.0));
    // Pausing hands back the losses still in flight, so a paused run has all of its own.
    trainer.step().unwrap();
    trainer.pause().unwrap();
    let last: Vec<u32> = std::iter::from_fn(|| trainer.next_metrics()).map(|m| m.step).collect();
    assert_eq!(last, [13]);
}

#[test]
fn profiling_times_every_pass_of_a_step() {
    let data = desk_statue(48);
    let ctx = context();
    assert!(ctx.pass_timer().is_none(), "no timestamps unless profiling");
    if !ctx.device.features().contains(splat_render::wgpu::Features::TIMESTAMP_QUERY) {
        eprintln!("skipped: the adapter has no timestamp queries");
        return;
    }
    let mut trainer = start(&ctx, &data, ImagePlacement::Resident, 4);
    trainer.step().unwrap();
    let shared = ctx.ledger().owner_bytes(Owner::Shared);
    ctx.start_profiling().unwrap();
    for _ in 0..6 {
        trainer.step().unwrap();
    }
    let profile = ctx.finish_profiling().unwrap();
    assert_eq!(profile.untimed_frames, 0);
    assert_eq!(profile.untimed_passes, 0);
    // One frame a step: each step's passes, filed at the next step's start or at the end.
    assert_eq!(profile.frames.len(), 6, "{profile:?}");
    for frame in &profile.frames {
        for stage in [
            "projection",
            "depth sort",
            "scan",
            "emit",
            "tile sort",
            "tile ranges",
            "rasterize forward",
            "loss",
            "rasterize backward",
            "projection backward",
            "adam",
        ] {
            assert!(frame.passes.iter().any(|p| p.stage == stage), "no {stage} in {frame:?}");
        }
        assert!(frame.passes.iter().all(|p| p.ms.is_finite() && p.ms >= 0.0));
        // Passes run in the order they were encoded.
        assert!(frame.passes.windows(2).all(|w| w[1].start_ms >= w[0].start_ms));
        assert!(frame.gap_before_ms("emit").is_some());
        assert!(frame.total_ms() > 0.0);
    }
    // Profiling off again: no more timestamps, and its buffers are gone.
    assert!(ctx.pass_timer().is_none());
    assert_eq!(ctx.ledger().owner_bytes(Owner::Shared), shared);
    drop(trainer);
    assert!(ctx.take_uncaptured_errors().is_empty());
}
