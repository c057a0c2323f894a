//! What the trainer tests share; what every crate's tests share is in `splat_test_support`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use splat_render::{GpuContext, ShPrecision};
use splat_test_support::dataset_path;
use splat_trainer::config::{LearningRates, Progressive, TrainConfig, Transparency};
use splat_trainer::dataset::{Dataset, LoadOptions, load_dataset};
use splat_trainer::densify::Strategy;
use splat_trainer::loss::LossWeights;
use splat_trainer::task::{Event, TaskHandle};

/// The adapter wgpu finds (lavapipe in CI and on the development machine).
pub fn context() -> GpuContext {
    pollster::block_on(GpuContext::new_headless()).expect("a GPU adapter (lavapipe in CI)")
}

/// desk-statue-colmap (a COLMAP binary model of a real capture) at `max_resolution` px.
pub fn desk_statue(max_resolution: u32) -> Arc<Dataset> {
    let options = LoadOptions { max_resolution, ..LoadOptions::default() };
    Arc::new(load_dataset(&dataset_path("desk-statue-colmap"), &options).expect("desk-statue"))
}

/// Every `n`th point of `points`: fewer initial splats, for a run whose step cost follows them.
pub fn every_nth_point(
    points: &splat_trainer::formats::PointCloud,
    n: usize,
) -> splat_trainer::formats::PointCloud {
    splat_trainer::formats::PointCloud {
        positions: points.positions.iter().copied().step_by(n).collect(),
        colors: points.colors.iter().copied().step_by(n).collect(),
        has_color: points.has_color,
    }
}

/// A small test run of `steps` steps: SH degree 1 (raised after 10 steps), at most 20,000
/// splats, seed 1, no evaluation, a black background, the default rates and loss. Tests
/// override what they need with `TrainConfig { …, ..test_config(steps, strategy) }`.
pub fn test_config(steps: u32, strategy: Strategy) -> TrainConfig {
    TrainConfig {
        steps,
        sh_degree: 1,
        sh_degree_interval: 10,
        sh_precision: ShPrecision::F32,
        strategy,
        max_splats: splat_trainer::config::SplatBudget::Count(20_000),
        eval_every: 0,
        seed: 1,
        background: [0.0; 3],
        learning_rates: LearningRates::default(),
        loss_weights: LossWeights::default(),
        transparency: Transparency::default(),
        progressive: Progressive::Off,
        appearance: splat_trainer::appearance::Compensation::Off,
    }
}

/// The trainer task's events until `done` says stop (that event included); fails the test
/// after five minutes, naming the last events seen (a hang, not a slow machine).
pub fn until(task: &TaskHandle, mut done: impl FnMut(&Event) -> bool) -> Vec<Event> {
    const WAIT: Duration = Duration::from_secs(300);
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        assert!(
            start.elapsed() < WAIT,
            "timed out; saw {:?}",
            seen.iter().rev().take(5).collect::<Vec<_>>()
        );
        if let Some(event) = task.event_timeout(Duration::from_millis(100)) {
            let stop = done(&event);
            seen.push(event);
            if stop {
                return seen;
            }
        }
    }
}
