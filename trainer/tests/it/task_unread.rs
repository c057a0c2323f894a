//! The trainer task with nobody reading its events. A file of its own: the channel it fills
//! holds memory events (ledger snapshots), which would show in the RSS that `task.rs`'s
//! twenty-runs test watches if they ran in one process.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::time::{Duration, Instant};

use splat_render::Owner;
use splat_test_support::data;
use splat_trainer::config::TrainConfig;
use splat_trainer::dataset::LoadOptions;
use splat_trainer::densify::{DefaultConfig, Strategy};
use splat_trainer::task::{Command, Event, TaskHandle, TaskState};

use crate::helpers::{context, test_config, until};

const WAIT: Duration = Duration::from_secs(300);

/// Nobody reads the events for hundreds of steps: the progress and loss events that do not
/// fit the channel are dropped, and nothing of them piles up on the GPU or in the task.
#[test]
#[ignore = "slow, about 15 s: events nobody reads are dropped, and nothing of them piles up"]
fn unread_progress_keeps_the_ledger_flat() {
    let ctx = context();
    let task = TaskHandle::spawn(ctx.clone()).unwrap();
    task.send(Command::LoadDataset {
        path: data("datasets/desk-statue-colmap"),
        options: LoadOptions { max_resolution: 40, ..LoadOptions::default() },
    })
    .unwrap();
    until(&task, |e| *e == Event::State(TaskState::Ready));
    let steps = 700;
    let config = TrainConfig {
        max_splats: splat_trainer::config::SplatBudget::Count(5000),
        seed: 2,
        ..test_config(
            steps,
            Strategy::Default(DefaultConfig { start: u32::MAX, ..DefaultConfig::default() }),
        )
    };
    task.send(Command::Start { config }).unwrap();
    // The step the run has reached, from the viewer slot (refreshed every 10 steps): the
    // events are not read.
    let step = || task.viewer().latest().map_or(0, |v| v.step);
    let wait_for = |target: u32| {
        let start = Instant::now();
        while step() < target {
            assert!(start.elapsed() < WAIT, "stuck at step {}", step());
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for(50);
    let early = ctx.ledger().total_bytes();
    wait_for(steps - 20);
    let late = ctx.ledger().total_bytes();
    assert_eq!(early, late, "the ledger grew from step ~50 to step ~{}", steps - 20);
    let events = until(&task, |e| matches!(e, Event::Finished { .. }));
    let step_events = events.iter().filter(|e| matches!(e, Event::Step(_))).count();
    assert!(step_events < steps as usize, "the channel was full: some progress was dropped");
    drop(task);
    assert_eq!(ctx.ledger().total_bytes() - ctx.ledger().owner_bytes(Owner::Shared), 0);
}
