//! A short real training run on software Vulkan: eval PSNR must rise by more than a wrong
//! gradient could give, densification must run, and the run must leave nothing behind.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::path::Path;
use std::sync::Arc;

use splat_render::Owner;
use splat_test_support::dataset_path;
use splat_trainer::config::TrainConfig;
use splat_trainer::dataset::{LoadOptions, load_dataset};
use splat_trainer::densify::{CompactConfig, DefaultConfig, SplitRule, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::train::Trainer;

use crate::helpers::{context, desk_statue, every_nth_point, test_config};

fn config(strategy: Strategy, steps: u32) -> TrainConfig {
    TrainConfig { sh_degree_interval: 100, seed: 3, ..test_config(steps, strategy) }
}

#[test]
#[ignore = "slow, about 15 s: 300 steps of a real capture gain over 4 dB and densify"]
fn desk_statue_learns() {
    let data = desk_statue(96);
    let init = splats_from_points(data.init_points.as_ref().unwrap(), 1);
    let ctx = context();
    // Densify early and often so a short run exercises it.
    let strategy = Strategy::Default(DefaultConfig {
        start: 100,
        stop: 250,
        refine_every: 50,
        ..DefaultConfig::default()
    });
    let steps = 300;
    let mut trainer =
        Trainer::new(&ctx, Arc::clone(&data), &init, config(strategy, steps), Owner::Run(7))
            .unwrap();
    let before = trainer.evaluate().unwrap();
    let mut refined = 0;
    for _ in 0..steps {
        let stats = trainer.step().unwrap();
        while let Some(m) = trainer.next_metrics() {
            assert!(m.loss.is_finite(), "step {}: loss {}", m.step, m.loss);
        }
        refined += usize::from(stats.refine.is_some());
    }
    let after = trainer.evaluate().unwrap();
    eprintln!(
        "eval PSNR {:.2} → {:.2} dB, SSIM {:.3} → {:.3}, {} → {} splats",
        before.psnr,
        after.psnr,
        before.ssim,
        after.ssim,
        init.len(),
        trainer.splat_count()
    );
    // From the colmap points alone the eval views score ~8.5 dB here (16.6 after 300 steps on
    // lavapipe, 2026-11-21); 300 steps of a correct
    // gradient gain well over 4 dB, while a wrong one (sign, a missing term) stalls or
    // diverges.
    assert!(after.psnr > before.psnr + 4.0, "PSNR {:.2} → {:.2}", before.psnr, after.psnr);
    assert!(after.ssim > before.ssim, "SSIM {:.3} → {:.3}", before.ssim, after.ssim);
    assert!(refined >= 2, "densification ran {refined} times");
    assert_ne!(trainer.splat_count() as usize, init.len(), "densification changed the count");
    drop(trainer);
    ctx.wait_idle().unwrap();
    assert_eq!(
        ctx.ledger().owner_bytes(Owner::Run(7)),
        0,
        "{:?}",
        ctx.ledger().snapshot().allocations
    );
    assert!(ctx.take_uncaptured_errors().is_empty());
}

/// The default schedules of compact (the default strategy) and 3dgs shortened: refinements
/// every 50 steps from step 100 and, for 3dgs, opacity resets every 300, so 850 steps cross
/// two. On the sample scene from a tenth of its points, whose splats are then large on screen
/// (a 3σ radius of about 40 px in its 128-px images) as a full-resolution capture's are. No
/// refinement may leave fewer than half the splats it found, and the eval PSNR 250 steps after
/// each reset may not be more than 0.5 dB under its figure before the first: a collapse (the
/// large splats deleted by the 20-px screen prune at the refinement after a reset, or the
/// faded ones sunk for good by compact's regulariser) costs 3 dB here. One test a strategy
/// (until 2026-11-28 one test ran both, 113 s in the full tier).
fn no_collapse_over_a_shortened_schedule(strategy: Strategy) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/sample-scene.zip");
    let data = Arc::new(load_dataset(&path, &LoadOptions::default()).unwrap());
    let init = splats_from_points(&every_nth_point(data.init_points.as_ref().unwrap(), 10), 1);
    let ctx = context();
    let steps = 850;
    let name = strategy.name();
    // 3dgs would grow to 16,000 splats here (6 minutes on lavapipe): capped. At 2,000 its test
    // took 218 s in CI on a slow day of 2026-11-28, near the limit of 240; at 1,200, 180 s
    // alone that day (1,094 splats at step 250, 17.33 → 26.96 → 30.49 dB).
    let config = TrainConfig {
        max_splats: splat_trainer::config::SplatBudget::Count(1_200),
        ..config(strategy, steps)
    };
    let mut trainer = Trainer::new(&ctx, Arc::clone(&data), &init, config, Owner::Run(8)).unwrap();
    let mut evals = Vec::new();
    for _ in 0..steps {
        let stats = trainer.step().unwrap();
        while trainer.next_metrics().is_some() {}
        if let Some(refine) = stats.refine {
            assert!(!refine.halved(), "{name}, step {}: {refine:?}", stats.step);
        }
        if [250, 550, 850].contains(&stats.step) {
            evals.push((stats.step, trainer.evaluate().unwrap().psnr, stats.splats));
        }
    }
    eprintln!("{name}: (step, eval PSNR, splats) {evals:.2?}");
    let (_, before, _) = evals[0];
    for &(step, psnr, _) in &evals[1..] {
        assert!(
            psnr > before - 0.5,
            "{name}: eval PSNR {before:.2} dB at 250, {psnr:.2} at {step}"
        );
    }
    drop(trainer);
    ctx.wait_idle().unwrap();
    assert_eq!(ctx.ledger().owner_bytes(Owner::Run(8)), 0);
}

/// A strategy's schedule shortened: refinements every 50 steps from step 100, opacity resets
/// (where it has them) every 300.
fn shortened(refine: &DefaultConfig) -> DefaultConfig {
    DefaultConfig {
        start: 100,
        refine_every: 50,
        stop: 1_000,
        opacity_reset_every: if refine.opacity_reset_every > 0 { 300 } else { 0 },
        ..refine.clone()
    }
}

#[test]
#[ignore = "slow, about 25 s: compact keeps its picture and its splats over a shortened schedule"]
fn compact_does_not_collapse_over_a_shortened_schedule() {
    let compact = CompactConfig::default();
    let refine = shortened(&compact.refine);
    no_collapse_over_a_shortened_schedule(Strategy::Compact(CompactConfig { refine, ..compact }));
}

#[test]
#[ignore = "slow, about 180 s: 3dgs keeps its picture and its splats through two opacity resets"]
fn three_dgs_does_not_collapse_over_a_shortened_schedule() {
    no_collapse_over_a_shortened_schedule(Strategy::Default(shortened(&DefaultConfig::default())));
}

/// A refinement that splits large splats keeps the picture: compact's default schedule on
/// desk-penguin at 96 px to step 599, then its first refinement (step 600) once with each
/// split rule from the same state, the eval views scored just before and just after. 3DGS's
/// sampled split (two children of the parent's opacity at random places, each thinner on every
/// axis) takes several dB at once; compact's long-axis split at most half as much (measured
/// 2026-11-27 with the CLI's settings: 30.9 → 20.1 dB against 30.9 → 27.5; here, from every
/// other point, 3,781 splats: 29.43 → 15.08 against 29.43 → 24.72, 34 s alone on lavapipe,
/// 2026-11-28; from every point it took 95 s in the full tier).
#[test]
#[ignore = "slow, about 35 s: compact's long-axis split costs at most half the sampled split's dB"]
fn a_refinement_keeps_the_picture() {
    let options = LoadOptions { max_resolution: 96, ..LoadOptions::default() };
    let data = Arc::new(load_dataset(&dataset_path("desk-penguin-opencv"), &options).unwrap());
    // Every other COLMAP point: a step costs about its splats here, and the splits still
    // tell apart (below).
    let init = splats_from_points(&every_nth_point(data.init_points.as_ref().unwrap(), 2), 1);
    let ctx = context();
    let compact = Strategy::Compact(CompactConfig::default());
    let config = TrainConfig { sh_degree_interval: 1_000, ..config(compact, 600) };
    let mut trainer = Trainer::new(&ctx, Arc::clone(&data), &init, config, Owner::Run(9)).unwrap();
    for _ in 0..599 {
        assert!(trainer.step().unwrap().refine.is_none(), "compact refines from step 600");
        while trainer.next_metrics().is_some() {}
    }
    let before = trainer.evaluate().unwrap().psnr;
    let snapshot = trainer.snapshot().unwrap();
    drop(trainer);
    let drop_with = |split: SplitRule| {
        let mut snapshot = snapshot.clone();
        let Strategy::Compact(compact) = &mut snapshot.config.strategy else { unreachable!() };
        compact.refine.split = split;
        let mut trainer =
            Trainer::from_snapshot(&ctx, Arc::clone(&data), snapshot, Owner::Run(9)).unwrap();
        let stats = trainer.step().unwrap();
        let refine = stats.refine.expect("step 600 refines");
        let after = trainer.evaluate().unwrap().psnr;
        eprintln!("{split:?}: eval {before:.2} → {after:.2} dB at step 600, {refine:?}");
        drop(trainer);
        before - after
    };
    let sampled = drop_with(SplitRule::Sampled);
    let long_axis = drop_with(SplitRule::LongAxis);
    ctx.wait_idle().unwrap();
    assert_eq!(ctx.ledger().owner_bytes(Owner::Run(9)), 0);
    assert!(
        sampled > 3.0,
        "the sampled split took only {sampled:.2} dB: the scene no longer tests"
    );
    assert!(
        long_axis < 0.5 * sampled,
        "the long-axis split took {long_axis:.2} dB, the sampled one {sampled:.2}"
    );
}
