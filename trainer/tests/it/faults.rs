//! Runs that outgrow their GPU. On a device of 4 MiB a densifying run runs out of memory
//! mid-run and ends with one message (which run, which step, what to try, what is kept), the
//! run's ledger owner back at zero, the last good step's splats kept and exported, and the
//! next run working. On a device whose bindings are capped at 1 MiB the same run is capped
//! at start by the limit that binds, named, and finishes. On a device lost mid-run the
//! message says so and names the checkpoint that stays. Where wgpu itself refuses a step's
//! work (a bind group, a submit) the run ends the same way, and the next run works.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::path::PathBuf;

use splat_formats::filter::Filter;
use splat_formats::{Loaded, load_file};
use splat_render::{Fault, FaultKind, GpuContext, HeadlessOptions, Owner, ShPrecision};
use splat_test_support::data;
use splat_trainer::config::{LearningRates, Progressive, TrainConfig, Transparency};
use splat_trainer::dataset::{LoadOptions, load_dataset};
use splat_trainer::densify::{DefaultConfig, Strategy};
use splat_trainer::loss::LossWeights;
use splat_trainer::task::{Command, Event, TaskHandle, TaskState};

use crate::helpers::{context, until};

/// The device's buffer and storage binding limits here.
const LIMIT: u64 = 1 << 20;

fn config(steps: u32, max_splats: u32) -> TrainConfig {
    TrainConfig {
        steps,
        sh_degree: 1,
        sh_degree_interval: 50,
        sh_precision: ShPrecision::F32,
        // Densify early and often, with a low threshold, and clone rather than split (a
        // clone keeps its parent's size): the wide splats multiply, each still touching
        // many tiles.
        strategy: Strategy::Default(DefaultConfig {
            start: 20,
            refine_every: 20,
            grad_threshold: 2e-5,
            percent_dense: 100.0,
            ..DefaultConfig::default()
        }),
        max_splats: splat_trainer::config::SplatBudget::Count(max_splats),
        eval_every: 0,
        seed: 3,
        background: [0.0; 3],
        learning_rates: LearningRates::default(),
        loss_weights: LossWeights::default(),
        transparency: Transparency::default(),
        progressive: Progressive::Off,
        appearance: splat_trainer::appearance::Compensation::Off,
    }
}

/// Desk-statue at 96 px from every 12th point of its capture (wide splats, each touching many
/// tiles), loaded into `task`; returns the init.ply written for it (to delete at the end),
/// named after `test` (tests run side by side: each deletes its own).
fn load_sparse_start(task: &TaskHandle, test: &str) -> PathBuf {
    let load = LoadOptions { max_resolution: 96, ..LoadOptions::default() };
    let path = data("datasets/desk-statue-colmap");
    task.send(Command::LoadDataset { path: path.clone(), options: load.clone() }).unwrap();
    until(task, |e| *e == Event::State(TaskState::Ready));
    let points = load_dataset(&path, &load).unwrap().init_points.unwrap();
    let init = std::env::temp_dir()
        .join(format!("splatforge-faults-{}-{test}-init.ply", std::process::id()));
    let sparse: Vec<String> = points
        .positions
        .iter()
        .step_by(12)
        .map(|p| format!("{} {} {}", p[0], p[1], p[2]))
        .collect();
    let header = format!(
        "ply\nformat ascii 1.0\nelement vertex {}\nproperty float x\nproperty float y\n\
         property float z\nend_header\n",
        sparse.len()
    );
    std::fs::write(&init, header + &sparse.join("\n") + "\n").unwrap();
    task.send(Command::LoadInit { path: init.clone() }).unwrap();
    init
}

fn ends(e: &Event) -> bool {
    matches!(e, Event::RunFailed { .. } | Event::Finished { .. } | Event::Error(_))
}

#[test]
#[ignore = "slow, about 10 s: a run out of device memory stops in words, keeps its splats, and the next run works"]
fn a_run_that_runs_out_of_memory_stops_keeps_its_splats_and_the_next_run_works() {
    // A GPU of 4 MiB: the memory budget (the default, from the host's memory) lets the run
    // densify on until an allocation fails.
    let options = HeadlessOptions { memory_bytes: Some(4 << 20), ..HeadlessOptions::default() };
    let ctx = pollster::block_on(GpuContext::new_headless_with(&options)).unwrap();
    let task = TaskHandle::spawn(ctx.clone()).unwrap();
    let init = load_sparse_start(&task, "out-of-memory");
    task.send(Command::Start { config: config(2_000, 1_000_000) }).unwrap();
    let events = until(&task, ends);
    let Some(Event::RunFailed { run, step, message, kept }) = events.last().cloned() else {
        panic!("the run did not run out of memory: {:?}", events.last());
    };
    eprintln!("{message}");
    assert!(step > 20, "it failed growing, after a refinement: step {step}");
    assert!(message.starts_with(&format!("run {run} stopped at step {step}: ")), "{message}");
    assert!(message.contains("the GPU is out of memory"), "says what: {message}");
    assert!(message.contains("lower splat cap"), "says what to try: {message}");
    let kept = kept.expect("the splats of the last good step are kept");
    assert!(kept <= step, "{kept} ≤ {step}");
    assert!(message.contains(&format!("splats of step {kept} are kept")), "{message}");
    assert!(!events.iter().any(|e| matches!(e, Event::Error(_))), "said once: {events:?}");
    // The run is gone, every byte of it.
    until(&task, |e| *e == Event::State(TaskState::Ready));
    assert_eq!(ctx.ledger().owner_bytes(Owner::Run(run)), 0);

    // Export writes the kept splats.
    let out = std::env::temp_dir().join(format!("splatforge-faults-{}.ply", std::process::id()));
    task.send(Command::Export { path: out.clone(), up: None, keep: Filter::default() }).unwrap();
    until(&task, |e| matches!(e, Event::Exported(_)));
    let Loaded::Splats { splats, .. } = load_file(&out).unwrap() else { panic!("not splats") };
    assert!(splats.len() > 121, "the kept splats are the densified ones: {}", splats.len());
    let _ = std::fs::remove_file(&out);

    // The next run, capped lower, works.
    task.send(Command::Start { config: config(60, 2_000) }).unwrap();
    let events = until(&task, ends);
    assert!(matches!(events.last(), Some(Event::Finished { step: 60 })), "{:?}", events.last());
    assert!(ctx.take_uncaptured_errors().is_empty());
    task.send(Command::Shutdown).unwrap();
    let _ = std::fs::remove_file(&init);
}

#[test]
fn a_refused_bind_group_or_submit_mid_step_ends_one_run_and_the_next_works() {
    // A real refusal by wgpu in place of the 20th step's work (not the ledger's simulated
    // out-of-memory): a bind group that does not match its layout, then a submit of work on a
    // destroyed buffer.
    for (kind, says) in [(FaultKind::BindGroup, "bind group"), (FaultKind::Submit, "destroyed")] {
        let fault = Fault { label: "training step", at: 20, kind };
        let options = HeadlessOptions { fault: Some(fault), ..HeadlessOptions::default() };
        let ctx = pollster::block_on(GpuContext::new_headless_with(&options)).unwrap();
        let task = TaskHandle::spawn(ctx.clone()).unwrap();
        task.send(Command::LoadDataset {
            path: data("datasets/desk-statue-colmap"),
            options: LoadOptions { max_resolution: 32, ..LoadOptions::default() },
        })
        .unwrap();
        until(&task, |e| *e == Event::State(TaskState::Ready));
        task.send(Command::Start { config: config(60, 5_000) }).unwrap();
        let events = until(&task, ends);
        let Some(Event::RunFailed { run, step, message, kept }) = events.last().cloned() else {
            panic!("{kind:?}: the run did not fail: {:?}", events.last());
        };
        eprintln!("{message}");
        assert_eq!((step, kept), (19, Some(19)), "{kind:?}: the last good step is kept");
        let head =
            format!("run {run} stopped at step 19: a training step failed: 'training step': ");
        assert!(message.starts_with(&head), "{message}");
        assert!(!message.contains('\n'), "one line: {message}");
        assert!(message.contains(says), "says what wgpu refused: {message}");
        assert!(message.contains("splats of step 19 are kept"), "{message}");
        assert!(!events.iter().any(|e| matches!(e, Event::Error(_))), "said once: {events:?}");
        until(&task, |e| *e == Event::State(TaskState::Ready));
        assert_eq!(ctx.ledger().owner_bytes(Owner::Run(run)), 0, "{kind:?}: the run is gone");

        task.send(Command::Start { config: config(30, 5_000) }).unwrap();
        let events = until(&task, ends);
        assert!(matches!(events.last(), Some(Event::Finished { step: 30 })), "{:?}", events.last());
        assert!(ctx.take_uncaptured_errors().is_empty());
        task.send(Command::Shutdown).unwrap();
    }
}

#[test]
#[ignore = "slow, about 25 s: 1 MiB bindings cap a run in words and never fail it mid-run"]
fn a_device_with_1_mib_bindings_caps_the_run_in_words_and_never_fails_it_mid_run() {
    // The same densifying run on a device whose buffers and bindings are capped at 1 MiB:
    // its cap names the limit that sets it (one buffer: the rows of its parameters are bound
    // a window of splats at a time); its intersections, which outgrow the 4 a splat the cap
    // assumes, are cut into depth bands (renderer.rs) instead of failing the run.
    let options = HeadlessOptions {
        max_buffer_size: Some(LIMIT),
        max_storage_buffer_binding_size: Some(LIMIT),
        ..HeadlessOptions::default()
    };
    let ctx = pollster::block_on(GpuContext::new_headless_with(&options)).unwrap();
    let task = TaskHandle::spawn(ctx.clone()).unwrap();
    let init = load_sparse_start(&task, "1-mib-bindings");
    task.send(Command::Start { config: config(200, 1_000_000) }).unwrap();
    let events = until(&task, ends);
    let capped = events
        .iter()
        .find_map(|e| match e {
            Event::Warning(w) if w.contains("capped at") => Some(w.clone()),
            _ => None,
        })
        .expect("the run was capped by the device");
    eprintln!("{capped}");
    assert!(
        capped.starts_with("max splats 1000000 capped at ")
            && capped.contains("the largest parameter gradient buffer")
            && capped.contains("one buffer (1.00 MiB)")
            && capped.contains("the memory budget"),
        "{capped}"
    );
    assert!(matches!(events.last(), Some(Event::Finished { step: 200 })), "{:?}", events.last());
    assert!(ctx.take_uncaptured_errors().is_empty());
    task.send(Command::Shutdown).unwrap();
    let _ = std::fs::remove_file(&init);
}

#[test]
fn a_lost_device_ends_the_run_in_words_and_the_checkpoint_stays() {
    let ctx = context();
    let task = TaskHandle::spawn(ctx.clone()).unwrap();
    task.send(Command::LoadDataset {
        path: data("datasets/desk-statue-colmap"),
        options: LoadOptions { max_resolution: 48, ..LoadOptions::default() },
    })
    .unwrap();
    until(&task, |e| *e == Event::State(TaskState::Ready));
    task.send(Command::Start { config: config(100_000, 5_000) }).unwrap();
    until(&task, |e| matches!(e, Event::Step(s) if s.step >= 5));
    let checkpoint =
        std::env::temp_dir().join(format!("splatforge-faults-{}.ckpt", std::process::id()));
    task.send(Command::SaveCheckpoint { path: checkpoint.clone(), crop: Filter::default() })
        .unwrap();
    until(&task, |e| matches!(e, Event::CheckpointSaved(_)));
    // What a driver reset or a hung GPU does to a device: it is lost.
    ctx.device.destroy();
    let events = until(&task, |e| matches!(e, Event::RunFailed { .. } | Event::Error(_)));
    let Some(Event::RunFailed { message, kept, .. }) = events.last().cloned() else {
        panic!("{:?}", events.last());
    };
    eprintln!("{message}");
    assert!(message.contains("the GPU device was lost"), "{message}");
    assert!(message.contains("restart splatforge"), "says what to do: {message}");
    assert!(message.contains(&checkpoint.display().to_string()), "names the checkpoint: {message}");
    assert_eq!(kept, None, "nothing can be read from a lost device");
    assert!(checkpoint.exists(), "the checkpoint stays");
    // The task is still there, and says so.
    task.send(Command::Ping { id: 1 }).unwrap();
    until(&task, |e| *e == Event::Pong { id: 1 });
    task.send(Command::Shutdown).unwrap();
    let _ = std::fs::remove_file(&checkpoint);
}
