//! What the window knows of the trainer's session: the task's state, the dataset, the run, the
//! file being viewed, and where exports go. The app writes it (from the trainer's and the file
//! worker's events, and as it sends commands); the panes read it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use glam::Vec3;
use splat_trainer::dataset::Dataset;
use splat_trainer::task::TaskState;
use splat_trainer::train::{StepMetrics, StepStats};

use super::viewer;

/// The loaded dataset, as the UI sees it.
pub struct LoadedDataset {
    pub path: PathBuf,
    pub dataset: Arc<Dataset>,
    pub up: Vec3,
    pub focus: (Vec3, f32),
}

/// A splat file being viewed.
pub struct ViewedFile {
    pub path: PathBuf,
    pub splats: Arc<splat_trainer::render::GpuSplats>,
    pub focus: (Vec3, f32),
}

/// The current run.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub id: u64,
    pub planned_steps: u32,
    pub last: Option<StepStats>,
    /// The latest step loss read back (a step or so behind `last`).
    pub last_metrics: Option<StepMetrics>,
    /// Recent (time, step) pairs for steps/s.
    rate_window: VecDeque<(Instant, u32)>,
}

impl RunInfo {
    pub(super) fn new(id: u64, planned_steps: u32) -> Self {
        Self { id, planned_steps, last: None, last_metrics: None, rate_window: VecDeque::new() }
    }

    pub(super) fn record(&mut self, stats: StepStats) {
        let now = Instant::now();
        self.rate_window.push_back((now, stats.step));
        while self
            .rate_window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(3))
        {
            self.rate_window.pop_front();
        }
        self.last = Some(stats);
    }

    /// Steps per second over the last few seconds.
    #[must_use]
    pub fn steps_per_second(&self) -> Option<f64> {
        let (t0, s0) = self.rate_window.front()?;
        let (t1, s1) = self.rate_window.back()?;
        let seconds = t1.duration_since(*t0).as_secs_f64();
        (seconds > 0.2 && s1 > s0).then(|| f64::from(s1 - s0) / seconds)
    }

    #[must_use]
    pub fn step(&self) -> u32 {
        self.last.map_or(0, |s| s.step)
    }

    /// Seconds left at the current rate.
    #[must_use]
    pub fn eta_seconds(&self) -> Option<f64> {
        let rate = self.steps_per_second()?;
        Some(f64::from(self.planned_steps.saturating_sub(self.step())) / rate)
    }

    /// The run has reached the steps it planned.
    #[must_use]
    pub fn finished(&self) -> bool {
        self.step() >= self.planned_steps
    }
}

/// The session as the window sees it.
pub(super) struct Session {
    pub task_state: TaskState,
    pub dataset: Option<LoadedDataset>,
    /// Asked for, not loaded yet.
    pub loading: Option<PathBuf>,
    /// The point cloud the next run starts from, where one was given.
    pub init: Option<PathBuf>,
    pub run: Option<RunInfo>,
    /// A failed run's kept splats (run, step): what Export writes until the next run.
    pub kept: Option<(u64, u32)>,
    pub viewed_file: Option<ViewedFile>,
    /// Show the viewed file (true) or the run (false) when both exist.
    pub show_file: bool,
    /// Where Ctrl+E and Ctrl+S write, when the command line said.
    pub out: Option<PathBuf>,
}

impl Session {
    pub(super) fn new(out: Option<PathBuf>) -> Self {
        Self {
            task_state: TaskState::Empty,
            dataset: None,
            loading: None,
            init: None,
            run: None,
            kept: None,
            viewed_file: None,
            show_file: false,
            out,
        }
    }

    /// The viewed file, when the viewport shows it rather than the run.
    pub(super) fn shown_file(&self) -> Option<&ViewedFile> {
        self.viewed_file.as_ref().filter(|_| self.show_file || self.run.is_none())
    }

    /// What the viewport shows now.
    pub(super) fn source(&self) -> viewer::Source {
        match self.shown_file() {
            Some(file) => viewer::Source::File(Arc::clone(&file.splats)),
            // The run's splats, or before any run the dataset's initial ones (the trainer
            // puts those in the same slot).
            None if self.run.is_some() || self.dataset.is_some() => viewer::Source::Run,
            None => viewer::Source::Nothing,
        }
    }

    /// The centre and radius of what the viewport shows.
    pub(super) fn focus(&self) -> Option<(Vec3, f32)> {
        match (self.shown_file(), &self.dataset) {
            (Some(file), _) => Some(file.focus),
            (None, Some(d)) => Some(d.focus),
            (None, None) => None,
        }
    }

    /// The scene's up: the dataset cameras', or −y.
    pub(super) fn up(&self) -> Vec3 {
        self.dataset.as_ref().map_or(Vec3::NEG_Y, |d| d.up)
    }

    /// A run is going on (training or paused).
    pub(super) fn running(&self) -> bool {
        matches!(self.task_state, TaskState::Training | TaskState::Paused)
    }

    /// There are splats to export: the run's, or a failed run's kept ones.
    pub(super) fn has_splats(&self) -> bool {
        self.run.is_some() || self.kept.is_some()
    }

    /// The folder Ctrl+E and Ctrl+S write to.
    pub(super) fn exports_dir(&self) -> Option<PathBuf> {
        if let Some(out) = &self.out {
            return Some(out.clone());
        }
        let path = &self.dataset.as_ref()?.path;
        let stem = path.file_stem()?.to_string_lossy().into_owned();
        Some(path.with_file_name(format!("{stem}_exports")))
    }

    /// `<exports>/<dataset>-run<id>-step<step>.<extension>`.
    pub(super) fn output_path(&self, extension: &str) -> Option<PathBuf> {
        let dir = self.exports_dir()?;
        let stem = self.dataset.as_ref()?.path.file_stem()?.to_string_lossy().into_owned();
        // The run's, or a failed run's kept splats (no checkpoint of those: no optimizer).
        let (run, step) = match (&self.run, self.kept) {
            (Some(run), _) => (run.id, run.step()),
            (None, Some(kept)) if extension != "ckpt" => kept,
            _ => return None,
        };
        Some(dir.join(format!("{stem}-run{run}-step{step}.{extension}")))
    }
}
