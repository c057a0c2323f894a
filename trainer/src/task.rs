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
//! Why a thread and not an async task: every step blocks on the GPU (two read-backs), and
//! `device.poll` must not run on an executor thread; a dedicated thread that steps between
//! commands is the simplest owner. Pause takes effect before the next step starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use splat_formats::{PointCloud, Splats, ply, spz};
use splat_render::{GpuContext, GpuSplats, LedgerSnapshot, Owner};

use crate::checkpoint::{self, Checkpoint};
use crate::dataset::{Dataset, LoadOptions, load_dataset};
use crate::densify::Strategy;
use crate::init::upload_from_points;
use crate::memory::{MemoryModel, RunShape};
use crate::train::{EvalStats, StepStats, TrainConfig, TrainKernels, Trainer};

/// Commands waiting for the task at most; a full queue is an error for the sender, never a
/// wait.
pub const COMMAND_CAPACITY: usize = 64;
/// Events waiting for the receiver at most. Progress and memory events are dropped when it is
/// full (the next one supersedes them); the others wait for room.
pub const EVENT_CAPACITY: usize = 1024;
/// Random points for a dataset without a point cloud (3DGS's NeRF-synthetic default).
pub const RANDOM_INIT_POINTS: usize = 100_000;
/// A memory event every this many steps while training.
const MEMORY_EVERY: u32 = 10;
/// The viewer slot is refreshed every this many steps (and when a run pauses or finishes).
const VIEWER_EVERY: u32 = 10;

/// The latest splats of the current run, for a viewer on the same device: a copy owned by
/// [`Owner::Viewer`], so the viewer never holds a run's own buffers. The viewer takes the
/// `Arc` each frame and drops it after drawing; the task clears the slot at teardown, so a
/// dead run's splats are gone once the viewer's frame ends.
#[derive(Clone, Debug, Default)]
pub struct ViewerSlot(Arc<std::sync::Mutex<Option<ViewerSplats>>>);

#[derive(Clone, Debug)]
pub struct ViewerSplats {
    pub run: u64,
    pub step: u32,
    pub splats: Arc<GpuSplats>,
}

impl ViewerSlot {
    /// The latest splats, if a run has any.
    #[must_use]
    pub fn latest(&self) -> Option<ViewerSplats> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set(&self, value: Option<ViewerSplats>) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = value;
    }

    fn take(&self) -> Option<ViewerSplats> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }
}

/// The loaded dataset, shared with the UI (its cameras and ground-truth images) without a
/// copy. Whoever holds one keeps the images in host memory, so a UI drops its handle before it
/// asks for another dataset. Equal when it is the same dataset in memory.
#[derive(Clone, Debug)]
pub struct SharedDataset(pub Arc<Dataset>);

impl PartialEq for SharedDataset {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Load a dataset (tears down any run first).
    LoadDataset {
        path: PathBuf,
        options: LoadOptions,
    },
    /// Use this point cloud as init.ply for the loaded dataset's next run.
    LoadInit {
        path: PathBuf,
    },
    /// Start a run on the loaded dataset.
    Start {
        config: TrainConfig,
    },
    Pause,
    Resume,
    /// End the run and free it; the dataset stays loaded.
    Stop,
    /// Tear the run down and start again from the init, with new settings or the last ones.
    NewRun {
        config: Option<TrainConfig>,
    },
    /// Let the run go on to this many steps in all.
    SetSteps {
        steps: u32,
    },
    /// Write the current splats: `.ply` or `.spz` by extension.
    Export {
        path: PathBuf,
    },
    SaveCheckpoint {
        path: PathBuf,
    },
    /// Continue a saved run on the loaded dataset (it must be the same dataset); the run
    /// comes back paused.
    LoadCheckpoint {
        path: PathBuf,
    },
    /// Cap the splat count of the next runs so their predicted peak GPU memory fits.
    SetMemoryBudget {
        bytes: u64,
    },
    /// Answered with [`Event::Pong`] once every earlier command has been handled: a barrier
    /// for tests and for measuring how long the task takes to react.
    Ping {
        id: u64,
    },
    Shutdown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    Empty,
    Loading,
    Ready,
    Training,
    Paused,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    State(TaskState),
    DatasetLoaded {
        path: PathBuf,
        train: usize,
        eval: usize,
        init_points: usize,
        dataset: SharedDataset,
    },
    RunStarted {
        run: u64,
        splats: u32,
        steps: u32,
    },
    Step(StepStats),
    Eval(EvalStats),
    /// The run reached its planned steps (it stays, paused: export it or extend it).
    Finished {
        step: u32,
    },
    Memory(LedgerSnapshot),
    Exported(PathBuf),
    CheckpointSaved(PathBuf),
    Warning(String),
    Error(String),
    Pong {
        id: u64,
    },
    /// Before a run starts: its predicted peak GPU bytes and the budget it must fit; the
    /// splat cap is lowered to fit when needed.
    Prediction {
        peak_bytes: u64,
        budget_bytes: u64,
        max_splats: u32,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("the trainer is busy: {COMMAND_CAPACITY} commands are already waiting")]
    Busy,
    #[error("the trainer has stopped")]
    Stopped,
    #[error("could not start the trainer thread: {0}")]
    Spawn(std::io::Error),
}

/// Called by the task after each event it sends.
pub type Notify = Arc<dyn Fn() + Send + Sync>;

/// The sending side, held by the UI or the command line.
#[derive(Debug)]
pub struct TaskHandle {
    commands: SyncSender<Command>,
    events: Receiver<Event>,
    viewer: ViewerSlot,
    thread: Option<JoinHandle<()>>,
}

impl TaskHandle {
    /// Starts the task on its own thread, on `ctx`'s device.
    pub fn spawn(ctx: GpuContext) -> Result<Self, TaskError> {
        Self::spawn_with_notify(ctx, Arc::new(|| {}))
    }

    /// Like [`TaskHandle::spawn`], and calls `notify` after each event it sends (a UI asks
    /// for a repaint there, so it wakes exactly when there is news). `notify` runs on the
    /// trainer thread: keep it short and non-blocking.
    pub fn spawn_with_notify(ctx: GpuContext, notify: Notify) -> Result<Self, TaskError> {
        let (commands, command_rx) = sync_channel(COMMAND_CAPACITY);
        let (event_tx, events) = sync_channel(EVENT_CAPACITY);
        let viewer = ViewerSlot::default();
        let slot = viewer.clone();
        let thread = std::thread::Builder::new()
            .name("splat-trainer".into())
            .spawn(move || Task::new(ctx, command_rx, event_tx, slot, notify).run())
            .map_err(TaskError::Spawn)?;
        Ok(Self { commands, events, viewer, thread: Some(thread) })
    }

    /// The latest-splats slot for a viewer.
    #[must_use]
    pub fn viewer(&self) -> &ViewerSlot {
        &self.viewer
    }

    /// Queues a command; never waits.
    pub fn send(&self, command: Command) -> Result<(), TaskError> {
        self.commands.try_send(command).map_err(|e| match e {
            TrySendError::Full(_) => TaskError::Busy,
            TrySendError::Disconnected(_) => TaskError::Stopped,
        })
    }

    /// The next event, if one is waiting.
    #[must_use]
    pub fn try_event(&self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// The next event, waiting at most `timeout`.
    #[must_use]
    pub fn event_timeout(&self, timeout: Duration) -> Option<Event> {
        self.events.recv_timeout(timeout).ok()
    }

    /// Sends `Shutdown` and waits for the thread to end (after its teardown).
    pub fn shutdown(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        if let Some(thread) = self.thread.take() {
            // If the queue is full or the task is gone, dropping the sender below ends it too.
            let _ = self.commands.try_send(Command::Shutdown);
            // Drain events so a task waiting for room can finish.
            while !thread.is_finished() {
                while self.events.try_recv().is_ok() {}
                std::thread::sleep(Duration::from_millis(1));
            }
            if thread.join().is_err() {
                log::error!("the trainer thread panicked");
            }
        }
    }
}

impl Drop for TaskHandle {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// What the task owns.
struct Task {
    ctx: GpuContext,
    commands: Receiver<Command>,
    events: SyncSender<Event>,
    notify: Notify,
    receiver_gone: bool,
    viewer: ViewerSlot,
    state: TaskState,
    dataset: Option<Arc<Dataset>>,
    /// init.ply for the next runs; read at each start, after the previous run's teardown.
    init: Option<PathBuf>,
    trainer: Option<Trainer>,
    /// Built once, shared by every run.
    kernels: Arc<TrainKernels>,
    last_config: Option<TrainConfig>,
    memory_budget: u64,
    next_run: u64,
    run_started: Instant,
}

impl Task {
    fn new(
        ctx: GpuContext,
        commands: Receiver<Command>,
        events: SyncSender<Event>,
        viewer: ViewerSlot,
        notify: Notify,
    ) -> Self {
        Self {
            notify,
            viewer,
            kernels: Arc::new(TrainKernels::new(&ctx)),
            memory_budget: crate::memory::default_budget(&ctx),
            ctx,
            commands,
            events,
            receiver_gone: false,
            state: TaskState::Empty,
            dataset: None,
            init: None,
            trainer: None,
            last_config: None,
            next_run: 1,
            run_started: Instant::now(),
        }
    }

    fn run(mut self) {
        self.emit(Event::State(TaskState::Empty));
        loop {
            let command = if self.state == TaskState::Training {
                match self.commands.try_recv() {
                    Ok(command) => Some(command),
                    Err(std::sync::mpsc::TryRecvError::Empty) => None,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(Command::Shutdown),
                }
            } else {
                match self.commands.recv_timeout(Duration::from_millis(200)) {
                    Ok(command) => Some(command),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => Some(Command::Shutdown),
                }
            };
            match command {
                Some(Command::Shutdown) => {
                    self.teardown();
                    return;
                }
                Some(command) => self.handle(command),
                None => self.train_one_step(),
            }
        }
    }

    /// Sends an event. Progress and memory events are dropped when the receiver is behind;
    /// others wait for room. A receiver that is gone is noted once; the task goes on (the
    /// command line may stop listening before it sends Shutdown).
    fn emit(&mut self, event: Event) {
        if self.receiver_gone {
            return;
        }
        let droppable = matches!(event, Event::Step(_) | Event::Memory(_));
        let result = if droppable {
            match self.events.try_send(event) {
                Ok(()) | Err(TrySendError::Full(_)) => Ok(()),
                Err(TrySendError::Disconnected(_)) => Err(()),
            }
        } else {
            self.events.send(event).map_err(|_| ())
        };
        if result.is_err() {
            log::warn!("nobody receives the trainer's events any more");
            self.receiver_gone = true;
        } else {
            (self.notify)();
        }
    }

    fn set_state(&mut self, state: TaskState) {
        if self.state != state {
            self.state = state;
            self.emit(Event::State(state));
        }
    }

    fn warn(&mut self, message: impl Into<String>) {
        self.emit(Event::Warning(message.into()));
    }

    fn error(&mut self, message: impl Into<String>) {
        self.emit(Event::Error(message.into()));
    }

    fn memory(&mut self) {
        let snapshot = self.ctx.ledger().snapshot();
        self.emit(Event::Memory(snapshot));
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::LoadDataset { path, options } => self.load_dataset(&path, &options),
            Command::LoadInit { path } => self.load_init(&path),
            Command::Start { config } => {
                if self.state == TaskState::Ready {
                    self.start(&config);
                } else {
                    self.warn(format!("cannot start a run while {:?}", self.state));
                }
            }
            Command::NewRun { config } => {
                match (self.state, config.or_else(|| self.last_config.clone())) {
                    (TaskState::Ready | TaskState::Training | TaskState::Paused, Some(config)) => {
                        self.teardown();
                        self.start(&config);
                    }
                    (TaskState::Ready | TaskState::Training | TaskState::Paused, None) => {
                        self.warn("no settings for a new run: start one first");
                    }
                    (state, _) => self.warn(format!("cannot start a new run while {state:?}")),
                }
            }
            Command::Pause => match self.trainer.as_mut() {
                Some(trainer) if self.state == TaskState::Training => match trainer.pause() {
                    Ok(()) => {
                        self.set_state(TaskState::Paused);
                        self.refresh_viewer();
                        self.memory();
                    }
                    Err(e) => self.fail_run(&format!("pause failed: {e}")),
                },
                _ => self.warn(format!("nothing to pause while {:?}", self.state)),
            },
            Command::Resume => self.resume(),
            Command::Stop => {
                if matches!(self.state, TaskState::Training | TaskState::Paused) {
                    self.teardown();
                    self.set_state(TaskState::Ready);
                } else {
                    self.warn(format!("nothing to stop while {:?}", self.state));
                }
            }
            Command::SetSteps { steps } => match self.trainer.as_mut() {
                Some(trainer) => trainer.set_planned_steps(steps),
                None => self.warn("no run to extend"),
            },
            Command::Export { path } => self.export(&path),
            Command::SaveCheckpoint { path } => self.save_checkpoint(&path),
            Command::LoadCheckpoint { path } => self.load_checkpoint(&path),
            Command::Ping { id } => self.emit(Event::Pong { id }),
            Command::SetMemoryBudget { bytes } => self.memory_budget = bytes,
            Command::Shutdown => {}
        }
    }

    fn load_dataset(&mut self, path: &Path, options: &LoadOptions) {
        self.teardown();
        self.dataset = None;
        self.init = None;
        self.set_state(TaskState::Loading);
        match load_dataset(path, options) {
            Ok(dataset) => {
                for warning in &dataset.warnings {
                    self.warn(warning.clone());
                }
                let dataset = Arc::new(dataset);
                self.emit(Event::DatasetLoaded {
                    path: path.to_path_buf(),
                    train: dataset.train.len(),
                    eval: dataset.eval.len(),
                    init_points: dataset.init_points.as_ref().map_or(0, PointCloud::len),
                    dataset: SharedDataset(Arc::clone(&dataset)),
                });
                self.dataset = Some(dataset);
                self.set_state(TaskState::Ready);
            }
            Err(e) => {
                self.error(format!("cannot load dataset: {e}"));
                self.set_state(TaskState::Empty);
            }
        }
    }

    fn load_init(&mut self, path: &Path) {
        if self.dataset.is_none() {
            self.warn("load a dataset before its init.ply");
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
                    self.warn("the new init.ply is used from the next run on");
                }
            }
            Err(e) => self.error(format!("cannot use init.ply: {e}")),
        }
    }

    /// Points to start from: init.ply, else the dataset's points, else random; at most
    /// `config.max_splats` of them.
    fn initial_points(
        &self,
        dataset: &Dataset,
        config: &TrainConfig,
    ) -> Result<PointCloud, String> {
        let cloud = match &self.init {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                ply::read_points(&bytes).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => dataset
                .init_points
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| dataset.random_points(RANDOM_INIT_POINTS, config.seed)),
        };
        if cloud.is_empty() {
            return Err("the init point cloud is empty".into());
        }
        Ok(keep_at_most(cloud, config.max_splats as usize))
    }

    fn start(&mut self, config: &TrainConfig) {
        let Some(dataset) = self.dataset.clone() else {
            self.warn("load a dataset first");
            return;
        };
        let config = &self.fit_budget(&dataset, config);
        let points = match self.initial_points(&dataset, config) {
            Ok(points) => points,
            Err(e) => {
                self.error(format!("cannot start the run: {e}"));
                return;
            }
        };
        let owner = Owner::Run(self.next_run);
        self.next_run += 1;
        self.last_config = Some(config.clone());
        self.ctx.ledger().reset_peak();
        let started =
            upload_from_points(&self.ctx, &points, config.sh_degree, owner).and_then(|splats| {
                drop(points);
                Trainer::start_with(
                    Arc::clone(&self.kernels),
                    &self.ctx,
                    dataset,
                    splats,
                    config.clone(),
                    owner,
                )
            });
        match started {
            Ok(trainer) => {
                self.emit(Event::RunStarted {
                    run: self.next_run - 1,
                    splats: trainer.splat_count(),
                    steps: config.steps,
                });
                self.trainer = Some(trainer);
                self.run_started = Instant::now();
                self.set_state(TaskState::Training);
                self.memory();
            }
            Err(e) => {
                self.error(format!("cannot start the run: {e}"));
                self.check_freed(owner);
                self.set_state(TaskState::Ready);
            }
        }
    }

    /// Predicts the run's peak GPU memory and lowers its splat cap to fit the budget (and the
    /// device's binding limits).
    fn fit_budget(&mut self, dataset: &Dataset, config: &TrainConfig) -> TrainConfig {
        let model = MemoryModel::default();
        let shape = RunShape::for_dataset(dataset, u64::from(config.max_splats), config.sh_degree);
        let fits = model
            .max_splats_for_budget(self.memory_budget, &shape)
            .min(model.max_splats_for_limits(&self.ctx.device.limits(), &shape));
        let max_splats = u32::try_from(fits).unwrap_or(u32::MAX).min(config.max_splats).max(1);
        if max_splats < config.max_splats {
            self.warn(format!(
                "max splats {}: does not fit the memory budget of {} bytes, capped at {max_splats}",
                config.max_splats, self.memory_budget
            ));
        }
        let mut config = config.clone();
        config.max_splats = max_splats;
        if let Strategy::Mcmc(mcmc) = &mut config.strategy {
            mcmc.cap = mcmc.cap.min(max_splats);
        }
        let peak = model.predict(&shape.with_splats(u64::from(max_splats))).peak_bytes;
        self.emit(Event::Prediction {
            peak_bytes: peak,
            budget_bytes: self.memory_budget,
            max_splats,
        });
        config
    }

    fn resume(&mut self) {
        let Some(trainer) = self.trainer.as_mut() else {
            self.warn(format!("nothing to resume while {:?}", self.state));
            return;
        };
        if self.state != TaskState::Paused {
            self.warn(format!("nothing to resume while {:?}", self.state));
            return;
        }
        if trainer.step_count() >= trainer.config().steps {
            self.warn("the run has reached its planned steps: extend it first (SetSteps)");
            return;
        }
        match trainer.resume() {
            Ok(()) => {
                self.set_state(TaskState::Training);
                self.memory();
            }
            Err(e) => self.fail_run(&format!("resume failed: {e}")),
        }
    }

    fn train_one_step(&mut self) {
        let Some(trainer) = self.trainer.as_mut() else {
            self.set_state(TaskState::Ready);
            return;
        };
        let result = trainer.step();
        let eval_every = trainer.config().eval_every;
        let planned = trainer.config().steps;
        match result {
            Ok(stats) => {
                let eval =
                    (eval_every > 0 && stats.step % eval_every == 0) || stats.step >= planned;
                let eval = if eval { Some(trainer.evaluate()) } else { None };
                self.emit(Event::Step(stats));
                match eval {
                    Some(Ok(eval)) => self.emit(Event::Eval(eval)),
                    Some(Err(e)) => self.warn(format!("evaluation failed: {e}")),
                    None => {}
                }
                if stats.step % VIEWER_EVERY == 0 || stats.step == 1 || stats.step >= planned {
                    self.refresh_viewer();
                }
                if stats.step % MEMORY_EVERY == 0 || stats.refine.is_some() {
                    self.memory();
                }
                for error in self.ctx.take_uncaptured_errors() {
                    // The device may be shared with a window: its surface's errors (such as a
                    // reconfigure that timed out while a step kept the GPU busy, which the
                    // window retries) are not the run's.
                    if error.contains("Surface::") {
                        self.warn(format!("window surface: {error}"));
                    } else {
                        self.error(format!("GPU error: {error}"));
                    }
                }
                if stats.step >= planned {
                    self.emit(Event::Finished { step: stats.step });
                    if let Some(trainer) = self.trainer.as_mut()
                        && let Err(e) = trainer.pause()
                    {
                        self.fail_run(&format!("pause failed: {e}"));
                        return;
                    }
                    self.set_state(TaskState::Paused);
                    self.memory();
                }
            }
            Err(e) => self.fail_run(&format!("training step failed: {e}")),
        }
    }

    /// A GPU error in the run: report it, free the run, stay usable.
    fn fail_run(&mut self, message: &str) {
        self.error(message);
        self.teardown();
        self.set_state(if self.dataset.is_some() { TaskState::Ready } else { TaskState::Empty });
    }

    /// Copies the current run's splats into the viewer slot, reusing the slot's buffers when
    /// the viewer is not holding them and the shape is unchanged.
    fn refresh_viewer(&mut self) {
        let Some(trainer) = self.trainer.as_ref() else { return };
        let Some(source) = trainer.gpu_splats() else { return };
        let run = match trainer.owner() {
            Owner::Run(id) => id,
            _ => 0,
        };
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
                    self.warn(format!("the viewer copy failed: {e}"));
                    None
                }
            }
        };
        self.viewer.set(next);
    }

    /// Drops the run and checks that its owner holds nothing afterwards.
    fn teardown(&mut self) {
        self.viewer.set(None);
        if let Some(trainer) = self.trainer.take() {
            let owner = trainer.owner();
            drop(trainer);
            self.check_freed(owner);
            self.memory();
        }
    }

    fn check_freed(&mut self, owner: Owner) {
        if let Err(e) = self.ctx.wait_idle() {
            self.error(format!("waiting for the GPU failed: {e}"));
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
            self.error(format!("{owner} left {left} bytes on the GPU: {}", what.join(", ")));
        }
    }

    fn export(&mut self, path: &Path) {
        let Some(trainer) = self.trainer.as_ref() else {
            self.warn("nothing to export: no run");
            return;
        };
        let result = create_parent(path)
            .and_then(|()| trainer.splats().map_err(|e| e.to_string()))
            .and_then(|splats| write_splats(path, &splats));
        match result {
            Ok(()) => self.emit(Event::Exported(path.to_path_buf())),
            Err(e) => self.error(format!("export failed: {e}")),
        }
    }

    fn save_checkpoint(&mut self, path: &Path) {
        let (Some(trainer), Some(dataset)) = (self.trainer.as_ref(), self.dataset.as_ref()) else {
            self.warn("nothing to checkpoint: no run");
            return;
        };
        let result = create_parent(path)
            .and_then(|()| trainer.snapshot().map_err(|e| e.to_string()))
            .and_then(|snapshot| {
                let checkpoint =
                    Checkpoint { snapshot, dataset: checkpoint::dataset_identity(dataset) };
                checkpoint::save(path, &checkpoint).map_err(|e| e.to_string())
            });
        match result {
            Ok(()) => self.emit(Event::CheckpointSaved(path.to_path_buf())),
            Err(e) => self.error(format!("saving the checkpoint failed: {e}")),
        }
    }

    fn load_checkpoint(&mut self, path: &Path) {
        let Some(dataset) = self.dataset.clone() else {
            self.warn("load the checkpoint's dataset first");
            return;
        };
        let checkpoint = match checkpoint::load(path) {
            Ok(checkpoint) => checkpoint,
            Err(e) => {
                self.error(format!("cannot load checkpoint: {e}"));
                return;
            }
        };
        let here = checkpoint::dataset_identity(&dataset);
        if here.fingerprint != checkpoint.dataset.fingerprint {
            self.error(format!(
                "{}: the checkpoint belongs to another dataset ({}), not {}",
                path.display(),
                checkpoint.dataset.path,
                here.path
            ));
            return;
        }
        self.teardown();
        let owner = Owner::Run(self.next_run);
        self.next_run += 1;
        let config = checkpoint.snapshot.config.clone();
        match Trainer::from_snapshot_with(
            Arc::clone(&self.kernels),
            &self.ctx,
            dataset,
            checkpoint.snapshot,
            owner,
        ) {
            Ok(mut trainer) => {
                self.last_config = Some(config);
                let paused = trainer.pause();
                self.emit(Event::RunStarted {
                    run: self.next_run - 1,
                    splats: trainer.splat_count(),
                    steps: trainer.config().steps,
                });
                self.trainer = Some(trainer);
                match paused {
                    Ok(()) => {
                        self.set_state(TaskState::Paused);
                        self.refresh_viewer();
                    }
                    Err(e) => self.fail_run(&format!("pause failed: {e}")),
                }
            }
            Err(e) => {
                self.error(format!("cannot continue the checkpoint: {e}"));
                self.check_freed(owner);
                self.set_state(TaskState::Ready);
            }
        }
    }
}

/// Writes `.ply` or `.spz` (by extension) through a temporary file and a rename.
pub fn write_splats(path: &Path, splats: &Splats) -> Result<(), String> {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let bytes = match extension.as_str() {
        "ply" => {
            let mut bytes = Vec::new();
            ply::write_splats(splats, &mut bytes).map_err(|e| e.to_string())?;
            bytes
        }
        "spz" => spz::write(splats).map_err(|e| e.to_string())?,
        _ => return Err(format!("{}: export as .ply or .spz", path.display())),
    };
    write_atomically(path, &bytes)
}

/// Writes `bytes` atomically: a temporary file in the same folder, synced, then renamed
/// (see [`checkpoint::write_atomically`]), so a crash never leaves a truncated file under the
/// final name.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    checkpoint::write_atomically(path, |out| {
        out.write_all(bytes).map_err(|e| checkpoint::CheckpointError::io("write", e))
    })
    .map_err(|e| e.to_string())
}

/// Creates the folder `path` goes in (the app's `<dataset>_exports/` may not exist yet).
fn create_parent(path: &Path) -> Result<(), String> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => std::fs::create_dir_all(parent)
            .map_err(|e| format!("{}: cannot create the folder: {e}", parent.display())),
        None => Ok(()),
    }
}

/// Keeps at most `max` points, evenly spread over the input order.
#[must_use]
pub fn keep_at_most(cloud: PointCloud, max: usize) -> PointCloud {
    let n = cloud.len();
    if n <= max {
        return cloud;
    }
    let keep = (0..max).map(|i| i * n / max);
    PointCloud {
        positions: keep.clone().map(|i| cloud.positions[i]).collect(),
        colors: keep.map(|i| cloud.colors[i]).collect(),
        has_color: cloud.has_color,
    }
}
