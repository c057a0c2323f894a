//! Pause → resume and snapshot → restore continue a run exactly; while paused only the splat
//! parameters stay on the GPU.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::sync::Arc;

use splat_render::{Category, Owner, ShPrecision};
use splat_trainer::appearance::{Compensation, MOMENTS, PARAMS};
use splat_trainer::config::TrainConfig;
use splat_trainer::densify::{CompactConfig, DefaultConfig, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::train::{RunSnapshot, Trainer};

use crate::helpers::{context, desk_statue, test_config};

fn config(sh_precision: ShPrecision) -> TrainConfig {
    // No refinement (tests/it/reproducible.rs trains through refinements): the
    // densification statistics still accumulate every step and must survive the pause
    // bit for bit.
    let strategy = Strategy::Default(DefaultConfig { start: u32::MAX, ..DefaultConfig::default() });
    TrainConfig { sh_degree_interval: 20, sh_precision, seed: 5, ..test_config(80, strategy) }
}

/// The losses of the next `steps` steps, in step order (they are read back a step or so after
/// each step; the last ones are waited for).
fn losses(trainer: &mut Trainer, steps: u32) -> Vec<f64> {
    let first = trainer.step_count() + 1;
    let mut metrics = Vec::new();
    for _ in 0..steps {
        trainer.step().unwrap();
        metrics.extend(std::iter::from_fn(|| trainer.next_metrics()));
    }
    metrics.extend(trainer.flush_metrics().unwrap());
    let measured: Vec<u32> = metrics.iter().map(|m| m.step).collect();
    assert_eq!(measured, (first..first + steps).collect::<Vec<_>>(), "every step, once, in order");
    metrics.iter().map(|m| m.loss).collect()
}

#[test]
fn pause_resume_and_snapshots_continue_exactly() {
    pause_resume_and_snapshots_continue_exactly_with(ShPrecision::F32, false);
}

/// The same with SH band 1 and its moments in 16 bits (stochastic rounding in Adam).
#[test]
fn sixteen_bit_sh_pauses_resumes_and_restores_exactly() {
    pause_resume_and_snapshots_continue_exactly_with(ShPrecision::F16, false);
}

/// The same with per-view appearance: its transforms and their moments are run state.
#[test]
fn per_view_appearance_pauses_resumes_and_restores_exactly() {
    pause_resume_and_snapshots_continue_exactly_with(ShPrecision::F32, true);
}

fn pause_resume_and_snapshots_continue_exactly_with(precision: ShPrecision, appearance: bool) {
    let data = desk_statue(48);
    let init = splats_from_points(data.init_points.as_ref().unwrap(), 1);
    let ctx = context();
    let appearance_mode = if appearance { Compensation::On } else { Compensation::Off };
    let config = || TrainConfig { appearance: appearance_mode, ..config(precision) };

    // The uninterrupted run. Training is bit-reproducible (no float atomics), so an
    // interrupted run must match it exactly.
    let mut a = Trainer::new(&ctx, Arc::clone(&data), &init, config(), Owner::Run(1)).unwrap();
    let reference = losses(&mut a, 70);
    drop(a);

    // Pause after 20 steps: only the parameters stay on the GPU.
    let mut b = Trainer::new(&ctx, Arc::clone(&data), &init, config(), Owner::Run(3)).unwrap();
    let mut resumed = losses(&mut b, 20);
    let before_pause = b.snapshot().unwrap();
    b.pause().unwrap();
    let snap = ctx.ledger().snapshot();
    let owned: u64 =
        snap.allocations.iter().filter(|a| a.owner == Owner::Run(3)).map(|a| a.bytes).sum();
    let params: u64 = snap
        .allocations
        .iter()
        .filter(|a| a.owner == Owner::Run(3) && a.category == Category::SplatParameters)
        .map(|a| a.bytes)
        .sum();
    assert_eq!(
        owned,
        params,
        "paused run holds only its parameters: {:?}",
        snap.allocations.iter().filter(|a| a.owner == Owner::Run(3)).collect::<Vec<_>>()
    );
    assert!(b.step().is_err(), "a paused run does not step");
    b.resume().unwrap();
    assert_eq!(
        b.snapshot().unwrap(),
        before_pause,
        "pause → resume restores the state bit for bit"
    );
    // With appearance, 20 steps (one epoch of desk-statue's 20 train views) have moved every
    // view's transform away from the identity.
    let transforms = &before_pause.optimizer.appearance;
    assert_eq!(transforms.is_empty(), !appearance);
    if appearance {
        let views = data.train.len();
        assert_eq!(transforms.len(), views * (PARAMS + MOMENTS));
        assert!(transforms[..views * PARAMS].chunks(PARAMS).all(|t| t.iter().any(|&p| p != 0.0)));
    }
    resumed.extend(losses(&mut b, 20));

    // Snapshot at 40, restore into a new run, continue 30 steps.
    let saved = b.snapshot().unwrap();
    drop(b);
    let mut c =
        Trainer::from_snapshot(&ctx, Arc::clone(&data), saved.clone(), Owner::Run(4)).unwrap();
    assert_eq!(c.snapshot().unwrap(), saved, "restored state equals the saved state");
    resumed.extend(losses(&mut c, 30));

    assert_eq!(resumed, reference, "interrupted and uninterrupted runs train the same");

    // Training can go on past the planned steps.
    c.set_planned_steps(200);
    losses(&mut c, 5);
    drop(c);
    ctx.wait_idle().unwrap();
    for run in [1, 3, 4] {
        assert_eq!(ctx.ledger().owner_bytes(Owner::Run(run)), 0);
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}

/// Compact refinement paces its growth from the most splats a run has had: a run restored
/// after a prune took it below that peak grows as the unbroken run does. (Restored without
/// its peak, it would be held to 10% above what the prune left: the second refinement shows
/// the difference.)
#[test]
fn a_compact_run_restored_below_its_peak_grows_as_an_unbroken_one() {
    let data = desk_statue(48);
    let ctx = context();
    // The capture's points, then four transparent copies of them that the first refinement
    // (step 10) prunes; every splat is a growth candidate (threshold 0).
    let points = splats_from_points(data.init_points.as_ref().unwrap(), 1);
    let mut init = points.clone();
    for _copy in 0..4 {
        init.means.extend_from_slice(&points.means);
        init.log_scales.extend_from_slice(&points.log_scales);
        init.rotations.extend_from_slice(&points.rotations);
        init.opacity_logits.extend(points.opacity_logits.iter().map(|_| -7.0));
        init.sh_dc.extend_from_slice(&points.sh_dc);
        init.sh_rest.extend_from_slice(&points.sh_rest);
    }
    let initial = init.len() as u32;
    let refine =
        DefaultConfig { start: 0, refine_every: 10, grad_threshold: 0.0, ..Default::default() };
    let config = TrainConfig {
        strategy: Strategy::Compact(CompactConfig { refine, ..CompactConfig::default() }),
        ..config(ShPrecision::F32)
    };
    let run = |owner: u64| {
        Trainer::new(&ctx, Arc::clone(&data), &init, config.clone(), Owner::Run(owner)).unwrap()
    };

    let mut unbroken = run(5);
    losses(&mut unbroken, 25);
    let reference = unbroken.snapshot().unwrap();
    drop(unbroken);

    let mut first = run(6);
    losses(&mut first, 15);
    let saved = first.snapshot().unwrap();
    drop(first);
    assert_eq!(saved.peak_splats, initial, "the peak is the initial count");
    assert!(
        saved.splats.len() < initial as usize / 2,
        "{} splats after the prune",
        saved.splats.len()
    );
    let restored = |snapshot: RunSnapshot, owner: u64| {
        let mut trainer =
            Trainer::from_snapshot(&ctx, Arc::clone(&data), snapshot, Owner::Run(owner)).unwrap();
        losses(&mut trainer, 10);
        trainer.snapshot().unwrap()
    };
    let resumed = restored(saved.clone(), 7);
    assert_eq!(resumed, reference, "the restored run trains as the unbroken one");
    assert!(resumed.splats.len() > saved.splats.len() * 11 / 10 + 1, "it refilled past +10%");

    let forgotten = restored(RunSnapshot { peak_splats: 0, ..saved.clone() }, 8);
    assert_eq!(forgotten.splats.len(), saved.splats.len() + saved.splats.len().div_ceil(10));

    ctx.wait_idle().unwrap();
    for run in 5..=8 {
        assert_eq!(ctx.ledger().owner_bytes(Owner::Run(run)), 0);
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}
