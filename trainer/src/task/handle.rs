//! The task's side of the channels: the commands it takes, the events it sends, the handle the
//! UI and the command line hold, and the slot the viewer reads a run's splats from.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use splat_formats::filter::Filter;
use splat_render::{GpuContext, GpuSplats, LedgerSnapshot};
use tokio::sync::mpsc::error::{TryRecvError, TrySendError};
use tokio::sync::mpsc::{Receiver, Sender, channel};

use super::{COMMAND_CAPACITY, EVENT_CAPACITY, Task};
use crate::config::TrainConfig;
use crate::dataset::{Dataset, LoadOptions};
use crate::train::{EvalStats, ImagePlacement, StepMetrics, StepStats};

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

    pub(super) fn set(&self, value: Option<ViewerSplats>) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = value;
    }

    pub(super) fn take(&self) -> Option<ViewerSplats> {
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
    /// Write the current splats: `.ply`, `.spz`, `.splat` or `.sog` by extension; only those
    /// `keep` keeps (the window's crop), then with `up` levelled (turned so that `up`, the
    /// cameras' up, becomes −y: `render::level`).
    Export {
        path: PathBuf,
        up: Option<[f32; 3]>,
        keep: Filter,
    },
    /// Find the dense scene's cells, leaving out likely floaters
    /// ([`splat_formats::filter::scene_cells`]); answered by [`Event::SceneCells`].
    FindSceneCells,
    /// Save the run; `crop` (the window's) goes with it and comes back with
    /// [`Event::Crop`] when the checkpoint is continued.
    SaveCheckpoint {
        path: PathBuf,
        crop: Filter,
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
        /// Whether the run compensates per-view appearance, and why.
        appearance: crate::appearance::Decision,
    },
    Step(StepStats),
    /// A step's loss, read back a step or so after the step (see `Trainer::next_metrics`).
    Metrics(StepMetrics),
    Eval(EvalStats),
    /// With per-view appearance, each train view's learned transform (sent after each
    /// evaluation).
    Appearance(Vec<crate::appearance::ViewAppearance>),
    /// The run reached its planned steps (it stays, paused: export it or extend it).
    Finished {
        step: u32,
    },
    Memory(LedgerSnapshot),
    Exported(PathBuf),
    CheckpointSaved(PathBuf),
    /// The crop a continued checkpoint was saved with (empty where it had none).
    Crop(Box<Filter>),
    /// [`Command::FindSceneCells`]'s cells, and how many of the splats are outside them.
    SceneCells {
        cells: Box<splat_formats::filter::SceneCells>,
        outside: usize,
        splats: usize,
    },
    Warning(String),
    Error(String),
    /// A run could not go on (a GPU error, out of memory, a device lost) and was torn down;
    /// `message` says what happened, to which run and what to try. `kept`: the step whose
    /// splats the task kept (Export writes them, the viewer shows them) until the next run
    /// or dataset.
    RunFailed {
        run: u64,
        step: u32,
        message: String,
        kept: Option<u32>,
    },
    Pong {
        id: u64,
    },
    /// Before a run starts: its predicted peak GPU bytes and the budget it must fit; the
    /// splat cap is lowered to fit when needed.
    Prediction {
        peak_bytes: u64,
        budget_bytes: u64,
        max_splats: u32,
        /// Whether the run keeps every image on the GPU or streams them.
        images: ImagePlacement,
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

/// "An event was sent": set by the task after each event, waited for by
/// [`TaskHandle::event_timeout`] (tokio's receiver has no blocking receive with a timeout).
#[derive(Debug, Default)]
pub(super) struct News {
    sent: Mutex<bool>,
    changed: std::sync::Condvar,
}

impl News {
    pub(super) fn tell(&self) {
        *self.sent.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.changed.notify_all();
    }

    /// Waits at most `timeout` for news since the last wait; false if none came.
    fn wait(&self, timeout: Duration) -> bool {
        let sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut sent, _) = self
            .changed
            .wait_timeout_while(sent, timeout, |sent| !*sent)
            .unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut *sent)
    }
}

/// The sending side, held by the UI or the command line.
#[derive(Debug)]
pub struct TaskHandle {
    commands: Sender<Command>,
    /// Behind a mutex so that reading events needs only `&self` (one reader at a time).
    events: Mutex<Receiver<Event>>,
    news: Arc<News>,
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
        let news = Arc::new(News::default());
        let notify: Notify = {
            let news = Arc::clone(&news);
            Arc::new(move || {
                news.tell();
                notify();
            })
        };
        let (commands, command_rx) = channel(COMMAND_CAPACITY);
        let (event_tx, events) = channel(EVENT_CAPACITY);
        let viewer = ViewerSlot::default();
        let slot = viewer.clone();
        // No I/O or timer drivers: the task only awaits channels and the GPU's callbacks.
        let runtime =
            tokio::runtime::Builder::new_current_thread().build().map_err(TaskError::Spawn)?;
        let thread = std::thread::Builder::new()
            .name("splat-trainer".into())
            .spawn(move || {
                runtime.block_on(Task::new(ctx, command_rx, event_tx, slot, notify).run());
            })
            .map_err(TaskError::Spawn)?;
        Ok(Self { commands, events: Mutex::new(events), news, viewer, thread: Some(thread) })
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
            TrySendError::Closed(_) => TaskError::Stopped,
        })
    }

    fn receiver(&self) -> std::sync::MutexGuard<'_, Receiver<Event>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next event, if one is waiting.
    #[must_use]
    pub fn try_event(&self) -> Option<Event> {
        self.receiver().try_recv().ok()
    }

    /// The next event, waiting at most `timeout` (for the command line and tests; a UI uses
    /// [`TaskHandle::try_event`] and the notify hook). Sleeps until the task says there is
    /// news.
    #[must_use]
    pub fn event_timeout(&self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.receiver().try_recv() {
                Ok(event) => return Some(event),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.news.wait(left) {
                return self.receiver().try_recv().ok();
            }
        }
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
                while self.receiver().try_recv().is_ok() {}
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
