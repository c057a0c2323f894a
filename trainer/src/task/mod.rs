//! The trainer task: one named thread owns every run's GPU state. The UI and the command line
//! talk to it only through a bounded command channel and a bounded event channel.
//!
//! States: `Empty → Loading → Ready → Training ⇄ Paused`, `Stop → Ready`; `NewRun` from
//! Ready, Training or Paused tears the current run down and starts again from the init.
//! Commands that make no sense in a state are answered with a warning event, never a panic.
//!
//! Teardown order: stop stepping → drop the run (optimizer state, scratch, parameters, in
//! that order inside [`Trainer`]) → wait for the GPU to finish → check the ledger holds zero
//! bytes for the run's owner (an error event names what is left) → only then read the next
//! dataset or init.
//!
//! The task is async: one named thread runs a current-thread tokio runtime whose only task is
//! this one. It never polls the device itself: GPU read-backs are awaited, and the context's
//! `gpu-poller` thread resolves them. Each step begins by submitting its projection and then
//! waits, in one `select!`, for either the step's counts (the step's one wait for
//! the GPU) or a command; a command wins and the step is abandoned (it had changed nothing), so
//! Pause, Stop and New run land within one step however long a step takes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{Receiver, Sender};

use splat_formats::filter::Filter;
use splat_formats::{PointCloud, Splats, ply};
use splat_render::level::{leveling_rotation, rotate_splats};
use splat_render::{GpuContext, GpuError, GpuSplats, Owner, ShPrecision, human_bytes};

use crate::appearance::{Compensation, Decision, Evidence};
use crate::checkpoint::{self, Checkpoint};
use crate::config::{SplatBudget, TrainConfig};
use crate::dataset::{Dataset, LoadOptions, load_dataset};
use crate::densify::{RefineStats, Strategy};
use crate::init::upload_from_points;
use crate::memory::{Cap, MemoryModel, RunPlan};
use crate::train::{ImagePlacement, TrainKernels, Trainer, resident_image_bytes};

mod export;
mod handle;

use export::create_parent;
pub use export::{
    EXPORT_EXTENSIONS, cpu_palette_seconds, is_software, keep_at_most, sh_palette, sog_files,
    write_atomically, write_splats,
};
pub use handle::{
    Command, Event, Notify, SharedDataset, TaskError, TaskHandle, TaskState, ViewerSlot,
    ViewerSplats,
};

/// Commands waiting for the task at most; a full queue is an error for the sender, never a
/// wait.
pub const COMMAND_CAPACITY: usize = 64;
/// Events waiting for the receiver at most. Progress and memory events are dropped when it is
/// full (the next one supersedes them); the others wait for room.
pub const EVENT_CAPACITY: usize = 1024;
/// Random points for a dataset without a point cloud, where the cameras look in common
/// (`Dataset::random_init_points`). 3DGS starts NeRF-synthetic scenes from 100k; inside the
/// region half the cameras see, 20k trained lego past 29 dB in 2,000 steps at 200 px (the
/// densification grows them) with a fifth of the projection work at the start
/// (BENCHMARKS.md, "Object captures").
pub const RANDOM_INIT_POINTS: usize = 20_000;
/// A memory event every this many steps while training.
const MEMORY_EVERY: u32 = 10;
/// The viewer slot is refreshed every this many steps (and when a run pauses or finishes).
const VIEWER_EVERY: u32 = 10;

/// What the task owns.
struct Task {
    ctx: GpuContext,
    commands: Receiver<Command>,
    events: Sender<Event>,
    notify: Notify,
    receiver_gone: bool,
    viewer: ViewerSlot,
    state: TaskState,
    dataset: Option<Arc<Dataset>>,
    /// init.ply for the next runs; read at each start, after the previous run's teardown.
    init: Option<PathBuf>,
    trainer: Option<Trainer>,
    /// The splats of a failed run's last good step (step, splats): what Export writes while
    /// there is no run.
    kept: Option<(u32, Splats)>,
    /// The last checkpoint saved (run, path, step), named when that run fails and keeps
    /// nothing else.
    last_checkpoint: Option<(u64, PathBuf, u32)>,
    /// Built once, on the task's thread, shared by every run; what the device said when it
    /// could not build them (every start then says it).
    kernels: Result<Arc<TrainKernels>, String>,
    last_config: Option<TrainConfig>,
    memory_budget: u64,
    next_run: u64,
    run_started: Instant,
}

impl Task {
    fn new(
        ctx: GpuContext,
        commands: Receiver<Command>,
        events: Sender<Event>,
        viewer: ViewerSlot,
        notify: Notify,
    ) -> Self {
        Self {
            notify,
            viewer,
            kernels: TrainKernels::new(&ctx).map(Arc::new).map_err(|e| e.to_string()),
            memory_budget: crate::memory::default_budget(&ctx).bytes,
            ctx,
            commands,
            events,
            receiver_gone: false,
            state: TaskState::Empty,
            dataset: None,
            init: None,
            trainer: None,
            kept: None,
            last_checkpoint: None,
            last_config: None,
            next_run: 1,
            run_started: Instant::now(),
        }
    }

    async fn run(mut self) {
        self.emit(Event::State(TaskState::Empty)).await;
        if let Err(e) = &self.kernels {
            let message = format!("this GPU cannot build the training pipelines: {e}");
            self.error(message).await;
        }
        loop {
            let command = if self.state == TaskState::Training {
                match self.step_or_command().await {
                    Some(command) => command,
                    None => continue,
                }
            } else {
                self.commands.recv().await
            };
            match command {
                None | Some(Command::Shutdown) => {
                    self.teardown().await;
                    return;
                }
                Some(command) => self.handle(command).await,
            }
        }
    }

    /// Begins a step, then waits for whichever comes first: the step's counts
    /// (the step then finishes: `None`) or a command (the step is abandoned — it had changed
    /// nothing — and the command returned; `Some(None)` when every sender is gone).
    async fn step_or_command(&mut self) -> Option<Option<Command>> {
        let Some(trainer) = self.trainer.as_mut() else {
            self.set_state(TaskState::Ready).await;
            return None;
        };
        if let Err(e) = trainer.begin_step() {
            self.fail_run("a training step", &e).await;
            return None;
        }
        let counted = tokio::select! {
            biased;
            command = self.commands.recv() => Err(command),
            counts = trainer.counts() => Ok(counts),
        };
        match counted {
            Err(command) => Some(command),
            Ok(counts) => {
                self.finish_step(counts).await;
                None
            }
        }
    }

    /// Sends an event. Progress and memory events are dropped when the receiver is behind;
    /// others wait for room. A receiver that is gone is noted once; the task goes on (the
    /// command line may stop listening before it sends Shutdown).
    async fn emit(&mut self, event: Event) {
        if self.receiver_gone {
            return;
        }
        let droppable = matches!(event, Event::Step(_) | Event::Metrics(_) | Event::Memory(_));
        let result = if droppable {
            match self.events.try_send(event) {
                Ok(()) | Err(TrySendError::Full(_)) => Ok(()),
                Err(TrySendError::Closed(_)) => Err(()),
            }
        } else {
            self.events.send(event).await.map_err(|_| ())
        };
        if result.is_err() {
            log::warn!("nobody receives the trainer's events any more");
            self.receiver_gone = true;
        } else {
            (self.notify)();
        }
    }

    async fn set_state(&mut self, state: TaskState) {
        if self.state != state {
            self.state = state;
            self.emit(Event::State(state)).await;
        }
    }

    async fn warn(&mut self, message: impl Into<String>) {
        self.emit(Event::Warning(message.into())).await;
    }

    async fn error(&mut self, message: impl Into<String>) {
        self.emit(Event::Error(message.into())).await;
    }

    async fn memory(&mut self) {
        let snapshot = self.ctx.ledger().snapshot();
        self.emit(Event::Memory(snapshot)).await;
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::LoadDataset { path, options } => self.load_dataset(&path, &options).await,
            Command::LoadInit { path } => self.load_init(&path).await,
            Command::Start { config } => {
                if self.state == TaskState::Ready {
                    self.start(&config).await;
                } else {
                    self.warn(format!("cannot start a run while {:?}", self.state)).await;
                }
            }
            Command::NewRun { config } => {
                match (self.state, config.or_else(|| self.last_config.clone())) {
                    (TaskState::Ready | TaskState::Training | TaskState::Paused, Some(config)) => {
                        self.teardown().await;
                        self.start(&config).await;
                    }
                    (TaskState::Ready | TaskState::Training | TaskState::Paused, None) => {
                        self.warn("no settings for a new run: start one first").await;
                    }
                    (state, _) => {
                        self.warn(format!("cannot start a new run while {state:?}")).await;
                    }
                }
            }
            Command::Pause => match self.trainer.as_mut() {
                Some(trainer) if self.state == TaskState::Training => {
                    match trainer.pause_async().await {
                        Ok(()) => {
                            self.emit_metrics().await;
                            self.set_state(TaskState::Paused).await;
                            self.refresh_viewer().await;
                            self.memory().await;
                        }
                        Err(e) => self.fail_run("the pause", &e).await,
                    }
                }
                _ => self.warn(format!("nothing to pause while {:?}", self.state)).await,
            },
            Command::Resume => self.resume().await,
            Command::Stop => {
                if matches!(self.state, TaskState::Training | TaskState::Paused) {
                    self.teardown().await;
                    self.set_state(TaskState::Ready).await;
                } else {
                    self.warn(format!("nothing to stop while {:?}", self.state)).await;
                }
            }
            Command::SetSteps { steps } => match self.trainer.as_mut() {
                Some(trainer) => trainer.set_planned_steps(steps),
                None => self.warn("no run to extend").await,
            },
            Command::Export { path, up, keep } => self.export(&path, up, &keep).await,
            Command::SaveCheckpoint { path, crop } => self.save_checkpoint(&path, &crop).await,
            Command::FindSceneCells => self.find_scene_cells().await,
            Command::LoadCheckpoint { path } => self.load_checkpoint(&path).await,
            Command::Ping { id } => self.emit(Event::Pong { id }).await,
            Command::SetMemoryBudget { bytes } => self.memory_budget = bytes,
            Command::Shutdown => {}
        }
    }

    async fn load_dataset(&mut self, path: &Path, options: &LoadOptions) {
        self.teardown().await;
        self.dataset = None;
        self.init = None;
        self.set_state(TaskState::Loading).await;
        match load_dataset(path, options) {
            Ok(dataset) => {
                for warning in &dataset.warnings {
                    self.warn(warning.clone()).await;
                }
                let dataset = Arc::new(dataset);
                self.emit(Event::DatasetLoaded {
                    path: path.to_path_buf(),
                    train: dataset.train.len(),
                    eval: dataset.eval.len(),
                    init_points: dataset.init_points.as_ref().map_or(0, PointCloud::len),
                    dataset: SharedDataset(Arc::clone(&dataset)),
                })
                .await;
                self.dataset = Some(dataset);
                self.preview_init().await;
                self.set_state(TaskState::Ready).await;
            }
            Err(e) => {
                self.error(format!("cannot load dataset: {e}")).await;
                self.set_state(TaskState::Empty).await;
            }
        }
    }

    async fn load_init(&mut self, path: &Path) {
        if self.dataset.is_none() {
            self.warn("load a dataset before its init.ply").await;
            return;
        }
        // Only the header now (is it a point cloud at all?): the points are read when a run
        // starts, after the current run has been torn down.
        let kind =
            std::fs::read(path).map_err(|e| format!("{}: {e}", path.display())).and_then(|bytes| {
                if bytes.starts_with(b"ply") {
                    ply::classify(&bytes)
                        .map(|_| ())
                        .map_err(|e| format!("{}: {e}", path.display()))
                } else {
                    Err(format!("{}: not a PLY point cloud", path.display()))
                }
            });
        match kind {
            Ok(()) => {
                self.init = Some(path.to_path_buf());
                if self.trainer.is_some() {
                    self.warn("the new init.ply is used from the next run on").await;
                }
            }
            Err(e) => self.error(format!("cannot use init.ply: {e}")).await,
        }
    }

    /// The splats a run would start from, in the viewer slot (run 0, step 0, SH degree 0,
    /// owned by the viewer) until a run replaces them or a teardown clears the slot, so that
    /// a window shows the loaded dataset before any training.
    async fn preview_init(&mut self) {
        let Some(dataset) = self.dataset.clone() else { return };
        // As the last run started, else as the defaults would.
        let (max_splats, seed) =
            self.last_config.as_ref().map_or((u32::MAX, 0), |c| (c.max_splats.count(), c.seed));
        let Ok(points) = self.initial_points(&dataset, seed) else { return };
        let points = keep_at_most(points, max_splats as usize);
        match upload_from_points(&self.ctx, &points, 0, ShPrecision::F32, Owner::Viewer) {
            Ok(splats) => {
                self.viewer.set(Some(ViewerSplats { run: 0, step: 0, splats: Arc::new(splats) }));
            }
            Err(e) => self.warn(format!("the initial splats cannot be shown: {e}")).await,
        }
    }

    /// Points to start from: init.ply, else the dataset's points, else random (from `seed`).
    fn initial_points(&self, dataset: &Dataset, seed: u64) -> Result<PointCloud, String> {
        let cloud = match &self.init {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                ply::read_points(&bytes).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => dataset
                .init_points
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| dataset.random_init_points(RANDOM_INIT_POINTS, seed)),
        };
        if cloud.is_empty() {
            return Err("the init point cloud is empty".into());
        }
        Ok(cloud)
    }

    async fn start(&mut self, config: &TrainConfig) {
        let Some(dataset) = self.dataset.clone() else {
            self.warn("load a dataset first").await;
            return;
        };
        let kernels = match &self.kernels {
            Ok(kernels) => Arc::clone(kernels),
            Err(e) => {
                self.error(format!(
                    "cannot start the run: this GPU cannot build the training pipelines: {e}"
                ))
                .await;
                return;
            }
        };
        // What the run decides (auto appearance, the auto splat budget), as asked.
        let requested = (config.appearance, config.max_splats);
        let appearance = requested.0.decide(&dataset);
        let mut config = config.clone();
        config.appearance = appearance.compensation;
        if let Some(warning) = appearance_warning(&dataset, &appearance) {
            self.warn(warning).await;
        }
        let points = match self.initial_points(&dataset, config.seed) {
            Ok(points) => points,
            Err(e) => {
                self.error(format!("cannot start the run: {e}")).await;
                return;
            }
        };
        let initial = u32::try_from(points.len()).unwrap_or(u32::MAX);
        config.max_splats = config.max_splats.fixed(&config.strategy, &dataset, initial);
        let Some((config, placement)) = self.fit_budget(&dataset, &config).await else {
            return;
        };
        let config = &config;
        let points = keep_at_most(points, config.max_splats.count() as usize);
        // The initial splats' preview (or a failed run's kept splats, which stay on the host
        // until the run has started) goes before the run allocates (its peak is its own).
        self.viewer.set(None);
        let owner = Owner::Run(self.next_run);
        self.next_run += 1;
        // A new run decides auto again, on whatever dataset it has then.
        let (asked_appearance, asked_budget) = requested;
        self.last_config = Some(TrainConfig {
            appearance: asked_appearance,
            max_splats: asked_budget,
            ..config.clone()
        });
        self.ctx.ledger().reset_peak();
        let started =
            upload_from_points(&self.ctx, &points, config.sh_degree, config.sh_precision, owner)
                .and_then(|splats| {
                    drop(points);
                    Trainer::start_with(
                        kernels,
                        &self.ctx,
                        dataset,
                        splats,
                        config.clone(),
                        placement,
                        owner,
                    )
                });
        match started {
            Ok(trainer) => {
                self.kept = None;
                self.emit(Event::RunStarted {
                    run: self.next_run - 1,
                    splats: trainer.splat_count(),
                    steps: config.steps,
                    appearance,
                })
                .await;
                self.trainer = Some(trainer);
                self.run_started = Instant::now();
                // The run's own splats replace the preview at once.
                self.refresh_viewer().await;
                self.set_state(TaskState::Training).await;
                self.memory().await;
            }
            Err(e) => {
                self.error(format!("cannot start the run: {e}")).await;
                self.check_freed(owner).await;
                self.set_state(TaskState::Ready).await;
            }
        }
    }

    /// Predicts the run's peak GPU memory and lowers its splat cap to fit the budget (and the
    /// device's binding limits). The dataset's images stay on the GPU for the whole run unless
    /// that would lower the splat cap; then they are streamed (splats come first).
    async fn fit_budget(
        &mut self,
        dataset: &Dataset,
        config: &TrainConfig,
    ) -> Option<(TrainConfig, ImagePlacement)> {
        let model = MemoryModel::default();
        let limits = self.ctx.device.limits();
        let requested = config.max_splats.count();
        let RunPlan { shape, placement, max_splats, cap } = model.plan_run(
            dataset,
            requested,
            (config.sh_degree, config.sh_precision, config.appearance.is_on()),
            self.memory_budget,
            Some(&limits),
        );
        if placement == ImagePlacement::Streamed {
            self.warn(format!(
                "the dataset's images ({} bytes) do not fit the memory budget beside the splats: \
                 they are streamed to the GPU one step ahead",
                resident_image_bytes(dataset)
            ))
            .await;
        }
        match cap {
            Cap::Requested => {}
            Cap::Budget => {
                self.warn(format!(
                    "max splats {requested} capped at {max_splats}: a larger run's predicted peak \
                     passes the memory budget ({})",
                    human_bytes(self.memory_budget)
                ))
                .await;
            }
            Cap::Binding { buffer, limit, which } if max_splats == 0 => {
                self.error(format!(
                    "cannot start the run: {buffer} would pass what this GPU allows in one \
                     {which} ({}) even for one splat; try smaller images (--max-resolution)",
                    human_bytes(limit)
                ))
                .await;
                return None;
            }
            Cap::Binding { buffer, limit, which } => {
                let by_budget = model.max_splats_for_budget(self.memory_budget, &shape);
                self.warn(format!(
                    "max splats {requested} capped at {max_splats}: beyond that, {buffer} would \
                     pass what this GPU allows in one {which} ({}); the memory budget ({}) \
                     would hold {by_budget}",
                    human_bytes(limit),
                    human_bytes(self.memory_budget)
                ))
                .await;
            }
        }
        let mut config = config.clone();
        config.max_splats = SplatBudget::Count(max_splats);
        if let Strategy::Mcmc(mcmc) = &mut config.strategy {
            mcmc.cap = mcmc.cap.min(max_splats);
        }
        let peak = model.predict(&shape.with_splats(u64::from(max_splats))).peak_bytes;
        self.emit(Event::Prediction {
            peak_bytes: peak,
            budget_bytes: self.memory_budget,
            max_splats,
            images: placement,
        })
        .await;
        Some((config, placement))
    }

    async fn resume(&mut self) {
        let Some(trainer) = self.trainer.as_mut() else {
            self.warn(format!("nothing to resume while {:?}", self.state)).await;
            return;
        };
        if self.state != TaskState::Paused {
            self.warn(format!("nothing to resume while {:?}", self.state)).await;
            return;
        }
        if trainer.step_count() >= trainer.config().steps {
            self.warn("the run has reached its planned steps: extend it first (SetSteps)").await;
            return;
        }
        match trainer.resume() {
            Ok(()) => {
                self.set_state(TaskState::Training).await;
                self.memory().await;
            }
            Err(e) => self.fail_run("the resume", &e).await,
        }
    }

    /// Finishes the step begun, for its counts, and reports it.
    async fn finish_step(
        &mut self,
        counts: Result<splat_render::FrameCounts, splat_render::GpuError>,
    ) {
        let Some(trainer) = self.trainer.as_mut() else {
            self.set_state(TaskState::Ready).await;
            return;
        };
        let result = match counts {
            Ok(counts) => trainer.finish_step(counts).await,
            Err(e) => Err(e),
        };
        let eval_every = trainer.config().eval_every;
        let planned = trainer.config().steps;
        let stats = match result {
            Ok(stats) => stats,
            Err(e) => {
                self.fail_run("a training step", &e).await;
                return;
            }
        };
        let eval = (eval_every > 0 && stats.step % eval_every == 0) || stats.step >= planned;
        let eval = if eval { Some(trainer.evaluate_async().await) } else { None };
        let appearance = match eval {
            Some(Ok(_)) => trainer.appearance_async().await,
            _ => Ok(None),
        };
        self.emit(Event::Step(stats)).await;
        if let Some(refine) = stats.refine.filter(RefineStats::halved) {
            self.warn(format!(
                "step {}: the refinement left {} of {} splats ({} removed, {} added)",
                stats.step,
                refine.count,
                refine.before(),
                refine.removed,
                refine.added
            ))
            .await;
        }
        self.emit_metrics().await;
        match eval {
            Some(Ok(eval)) => {
                self.emit(Event::Eval(eval)).await;
                match appearance {
                    Ok(Some(views)) => self.emit(Event::Appearance(views)).await,
                    Ok(None) => {}
                    Err(e) => {
                        self.warn(format!("reading the per-view appearance failed: {e}")).await;
                    }
                }
            }
            Some(Err(e)) => self.warn(format!("evaluation failed: {e}")).await,
            None => {}
        }
        if stats.step % VIEWER_EVERY == 0 || stats.step == 1 || stats.step >= planned {
            self.refresh_viewer().await;
        }
        if stats.step % MEMORY_EVERY == 0 || stats.refine.is_some() {
            self.memory().await;
        }
        for error in self.ctx.take_uncaptured_errors() {
            // The device may be shared with a window: its surface's errors (such as a
            // reconfigure that timed out while a step kept the GPU busy, which the window
            // retries) are not the run's.
            if error.contains("Surface::") {
                self.warn(format!("window surface: {error}")).await;
            } else {
                self.error(format!("GPU error: {error}")).await;
            }
        }
        if stats.step >= planned {
            if let Some(trainer) = self.trainer.as_mut()
                && let Err(e) = trainer.pause_async().await
            {
                self.fail_run("the pause at the planned step", &e).await;
                return;
            }
            // Paused: every loss of the run has come back.
            self.emit_metrics().await;
            self.emit(Event::Finished { step: stats.step }).await;
            self.set_state(TaskState::Paused).await;
            self.memory().await;
        }
    }

    /// Sends the step losses the trainer has read back since the last call (dropped, like
    /// progress, when the receiver is behind).
    async fn emit_metrics(&mut self) {
        while let Some(metrics) = self.trainer.as_mut().and_then(Trainer::next_metrics) {
            self.emit(Event::Metrics(metrics)).await;
        }
    }

    /// A run that cannot go on (a GPU error in `during`): keep the splats of its last good
    /// step where the device still answers, report what happened to which run and what to
    /// try, free the run (its ledger owner back to zero, checked) and stay usable.
    async fn fail_run(&mut self, during: &str, error: &GpuError) {
        let Some(trainer) = self.trainer.as_ref() else { return };
        let run = run_id(trainer.owner());
        let step = trainer.step_count();
        let lost = self.ctx.lost();
        // The run's own parameters (a failed step changes none of them before its submit);
        // else the viewer's copy, a few steps older. Nothing answers on a lost device.
        let kept = if lost.is_some() {
            None
        } else if let Ok(splats) = trainer.splats_async().await {
            Some((step, splats))
        } else {
            let copy = self.viewer.take();
            let kept = match &copy {
                Some(v) => v.splats.download_async(&self.ctx).await.ok().map(|s| (v.step, s)),
                None => None,
            };
            drop(copy);
            kept
        };
        // A loss can show first in those read-backs.
        let lost = lost.or_else(|| self.ctx.lost());
        let what = match &lost {
            Some(why) => format!(
                "the GPU device was lost ({why}): the driver reset it or the GPU hung; restart \
                 splatforge to train again"
            ),
            None => format!("{during} failed: {error}{}", advice(error)),
        };
        let checkpoint = self.last_checkpoint.as_ref().filter(|(of, ..)| *of == run);
        let what_is_kept = match (&kept, checkpoint) {
            (Some((kept_step, _)), _) => {
                format!("The splats of step {kept_step} are kept: export them to save them")
            }
            (None, Some((_, path, saved))) => {
                format!("The last checkpoint is kept: {} (step {saved})", path.display())
            }
            (None, None) => "Nothing of the run could be kept".to_string(),
        };
        let message = format!("run {run} stopped at step {step}: {what}. {what_is_kept}");
        self.emit(Event::RunFailed { run, step, message, kept: kept.as_ref().map(|(s, _)| *s) })
            .await;
        self.teardown().await;
        if let Some((kept_step, splats)) = kept {
            self.show_kept(run, kept_step, &splats).await;
            self.kept = Some((kept_step, splats));
        }
        self.set_state(if self.dataset.is_some() { TaskState::Ready } else { TaskState::Empty })
            .await;
    }

    /// Shows a failed run's kept splats in the viewer slot (viewer-owned: the run's owner
    /// stays at zero). Best effort: a device short of memory shows nothing.
    async fn show_kept(&mut self, run: u64, step: u32, splats: &Splats) {
        match GpuSplats::upload(&self.ctx, splats, Owner::Viewer) {
            Ok(copy) => self.viewer.set(Some(ViewerSplats { run, step, splats: Arc::new(copy) })),
            Err(e) => self.warn(format!("the kept splats cannot be shown: {e}")).await,
        }
    }

    /// Copies the current run's splats into the viewer slot, reusing the slot's buffers when
    /// the viewer is not holding them and the shape is unchanged.
    async fn refresh_viewer(&mut self) {
        let Some(trainer) = self.trainer.as_ref() else { return };
        let Some(source) = trainer.gpu_splats() else { return };
        let run = run_id(trainer.owner());
        let step = trainer.step_count();
        let mut current = self.viewer.take();
        let reused =
            current.as_mut().and_then(|v| Arc::get_mut(&mut v.splats)).is_some_and(|copy| {
                let fits = copy.count == source.count && copy.sh_degree == source.sh_degree;
                if fits {
                    copy.copy_from(&self.ctx, source);
                }
                fits
            });
        let next = if reused {
            current.map(|v| ViewerSplats { run, step, ..v })
        } else {
            drop(current);
            match source.duplicate(&self.ctx, Owner::Viewer) {
                Ok(copy) => Some(ViewerSplats { run, step, splats: Arc::new(copy) }),
                Err(e) => {
                    self.warn(format!("the viewer copy failed: {e}")).await;
                    None
                }
            }
        };
        self.viewer.set(next);
    }

    /// Drops the run and checks that its owner holds nothing afterwards.
    async fn teardown(&mut self) {
        self.viewer.set(None);
        self.kept = None;
        if let Some(trainer) = self.trainer.take() {
            let owner = trainer.owner();
            drop(trainer);
            self.check_freed(owner).await;
            self.memory().await;
        }
    }

    async fn check_freed(&mut self, owner: Owner) {
        if let Err(e) = self.ctx.idle().await {
            self.error(format!("waiting for the GPU failed: {e}")).await;
        }
        let left = self.ctx.ledger().owner_bytes(owner);
        if left != 0 {
            let what: Vec<String> = self
                .ctx
                .ledger()
                .snapshot()
                .allocations
                .iter()
                .filter(|a| a.owner == owner)
                .map(|a| format!("{} ({} bytes)", a.label, a.bytes))
                .collect();
            self.error(format!("{owner} left {left} bytes on the GPU: {}", what.join(", "))).await;
        }
    }

    async fn export(&mut self, path: &Path, up: Option<[f32; 3]>, keep: &Filter) {
        let splats = match (create_parent(path), self.trainer.as_ref(), self.kept.as_ref()) {
            (Err(e), _, _) => Err(e),
            (Ok(()), Some(trainer), _) => trainer.splats_async().await.map_err(|e| e.to_string()),
            // A failed run's last good step.
            (Ok(()), None, Some((_, splats))) => Ok(splats.clone()),
            (Ok(()), None, None) => {
                self.warn("nothing to export: no run").await;
                return;
            }
        };
        let result = splats.and_then(|mut splats| {
            if keep.apply(&mut splats).kept == 0 {
                return Err("nothing to export: the crop hides every splat".to_owned());
            }
            if let Some(up) = up {
                rotate_splats(&mut splats, leveling_rotation(glam::Vec3::from(up)));
            }
            write_splats(path, &splats, Some(&self.ctx))
        });
        match result {
            Ok(()) => self.emit(Event::Exported(path.to_path_buf())).await,
            Err(e) => self.error(format!("export failed: {e}")).await,
        }
    }

    async fn find_scene_cells(&mut self) {
        let splats = match (self.trainer.as_ref(), self.kept.as_ref()) {
            (Some(trainer), _) => trainer.splats_async().await.map_err(|e| e.to_string()),
            (None, Some((_, splats))) => Ok(splats.clone()),
            (None, None) => {
                self.warn("no splats to look for floaters in: start a run first").await;
                return;
            }
        };
        match splats {
            Ok(splats) => match splat_formats::filter::scene_cells(&splats) {
                Some(cells) => {
                    let outside = splats.means.iter().filter(|m| !cells.contains(**m)).count();
                    let (cells, splats) = (Box::new(cells), splats.len());
                    self.emit(Event::SceneCells { cells, outside, splats }).await;
                }
                None => {
                    self.warn("too few splats, or too spread out, to tell floaters from the scene")
                        .await;
                }
            },
            Err(e) => self.error(format!("reading the splats failed: {e}")).await,
        }
    }

    async fn save_checkpoint(&mut self, path: &Path, crop: &Filter) {
        let (Some(trainer), Some(dataset)) = (self.trainer.as_ref(), self.dataset.as_ref()) else {
            self.warn("nothing to checkpoint: no run").await;
            return;
        };
        let run = run_id(trainer.owner());
        let result = match create_parent(path) {
            Ok(()) => trainer.snapshot_async().await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        }
        .and_then(|snapshot| {
            let step = snapshot.step;
            let checkpoint = Checkpoint {
                snapshot,
                dataset: checkpoint::dataset_identity(dataset),
                crop: crop.clone(),
            };
            checkpoint::save(path, &checkpoint).map(|()| (run, step)).map_err(|e| e.to_string())
        });
        match result {
            Ok((run, step)) => {
                self.last_checkpoint = Some((run, path.to_path_buf(), step));
                self.emit(Event::CheckpointSaved(path.to_path_buf())).await;
            }
            Err(e) => self.error(format!("saving the checkpoint failed: {e}")).await,
        }
    }

    async fn load_checkpoint(&mut self, path: &Path) {
        let Some(mut dataset) = self.dataset.clone() else {
            self.warn("load the checkpoint's dataset first").await;
            return;
        };
        let checkpoint = match checkpoint::load(path) {
            Ok(checkpoint) => checkpoint,
            Err(e) => {
                self.error(format!("cannot load checkpoint: {e}")).await;
                return;
            }
        };
        // The run trained on the dataset loaded another way (image size, background, eval
        // split): load it that way again.
        if let Some(options) = &checkpoint.dataset.options
            && *options != dataset.options
        {
            let source = dataset.source.clone();
            drop(dataset);
            self.load_dataset(&source, options).await;
            let Some(reloaded) = self.dataset.clone() else { return };
            dataset = reloaded;
        }
        let here = checkpoint::dataset_identity(&dataset);
        if here.fingerprint != checkpoint.dataset.fingerprint {
            self.error(format!(
                "{}: the checkpoint belongs to another dataset: {}",
                path.display(),
                checkpoint::identity_difference(&checkpoint.dataset, &here)
            ))
            .await;
            return;
        }
        self.teardown().await;
        let owner = Owner::Run(self.next_run);
        self.next_run += 1;
        let config = checkpoint.snapshot.config.clone();
        let crop = checkpoint.crop;
        let saved = &checkpoint.snapshot.config;
        let placement = MemoryModel::default()
            .plan_run(
                &dataset,
                saved.max_splats.count(),
                (saved.sh_degree, saved.sh_precision, saved.appearance.is_on()),
                self.memory_budget,
                Some(&self.ctx.device.limits()),
            )
            .placement;
        let kernels = match &self.kernels {
            Ok(kernels) => Arc::clone(kernels),
            Err(e) => {
                self.error(format!("cannot continue the checkpoint: this GPU cannot build the training pipelines: {e}")).await;
                return;
            }
        };
        match Trainer::from_snapshot_with(
            kernels,
            &self.ctx,
            dataset,
            checkpoint.snapshot,
            placement,
            owner,
        ) {
            Ok(mut trainer) => {
                self.last_config = Some(config);
                self.emit(Event::Crop(Box::new(crop))).await;
                let paused = trainer.pause_async().await;
                self.emit(Event::RunStarted {
                    run: self.next_run - 1,
                    splats: trainer.splat_count(),
                    steps: trainer.config().steps,
                    appearance: Decision {
                        compensation: trainer.config().appearance,
                        from: Evidence::Checkpoint,
                    },
                })
                .await;
                self.trainer = Some(trainer);
                match paused {
                    Ok(()) => {
                        self.set_state(TaskState::Paused).await;
                        self.refresh_viewer().await;
                    }
                    Err(e) => self.fail_run("the pause", &e).await,
                }
            }
            Err(e) => {
                self.error(format!("cannot continue the checkpoint: {e}")).await;
                self.check_freed(owner).await;
                self.set_state(TaskState::Ready).await;
            }
        }
    }
}

/// What to try after a run failed with `error`: for memory, the settings that lower it; for
/// anything else, the self-test, which tells whether this GPU computes right.
fn advice(error: &GpuError) -> &'static str {
    match error {
        GpuError::OutOfMemory { .. } => {
            "; try a lower splat cap, smaller images or a lower memory budget"
        }
        GpuError::TooLarge { .. } | GpuError::TooMany { .. } => {
            "; try a lower splat cap or smaller images"
        }
        _ => "; the self-test tells whether this GPU computes right",
    }
}

/// A run's number (0 for the preview of a dataset's initial splats).
fn run_id(owner: Owner) -> u64 {
    match owner {
        Owner::Run(id) => id,
        _ => 0,
    }
}

/// A warning where a run set off leaves out the drift `auto` would have compensated.
fn appearance_warning(dataset: &Dataset, decision: &Decision) -> Option<String> {
    if decision.from != Evidence::Setting || decision.compensation.is_on() {
        return None;
    }
    let auto = Compensation::Auto.decide(dataset);
    auto.compensation.is_on().then(|| {
        format!(
            "per-view appearance is set off, and auto would turn it on ({}): the views' \
             brightness and colour differences go into the splats",
            auto.reason()
        )
    })
}
