//! Camera poses from the window: a folder of photos without poses, or a video, dropped on it
//! asks "compute camera poses with COLMAP?"; the run (`splat_poses::compute_poses`) goes on a
//! thread of its own (`colmap-poses`), its stages and Cancel in a window, and the dataset opens
//! when it ends (a run in progress goes on: then the user opens it). Training and the
//! viewport go on meanwhile: the UI never waits for it.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use splat_poses::{Cancel, Input, Options, PosesError, Progress, Report, Stage};

/// Progress events in flight at most: the UI drains them every frame, and each carries the
/// whole state of its stage, so one dropped when full loses nothing.
const EVENT_CAPACITY: usize = 64;

enum PosesEvent {
    Progress(Progress),
    Finished(Result<Report, PosesError>),
}

enum State {
    /// The question, with the output folder and COLMAP's path editable.
    Asking { out: String },
    Running {
        cancel: Cancel,
        events: Receiver<PosesEvent>,
        thread: Option<JoinHandle<()>>,
        since: Instant,
        /// When the current stage began (as seen here).
        stage_since: Instant,
        /// The latest progress, and each finished stage's seconds.
        progress: Option<Progress>,
        finished: Vec<(Stage, f64)>,
    },
    /// It failed: the message stays until closed.
    Failed(String),
}

/// What the user or the run asked of the app this frame.
pub(super) enum Action {
    None,
    /// The dataset is written: open it, and tell these warnings.
    Open {
        dataset: PathBuf,
        summary: String,
        warnings: Vec<String>,
    },
    /// The run failed or was cancelled: say so in the log.
    Ended(Result<String, String>),
}

/// The window's settings for the engines, kept between runs.
pub(super) struct EngineSettings {
    /// COLMAP's executable (empty: `colmap` on the `PATH`).
    pub colmap: String,
    /// Seconds an engine may print nothing and use no CPU time before it is stopped.
    pub idle_limit_s: u64,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self { colmap: String::new(), idle_limit_s: splat_poses::DEFAULT_IDLE_LIMIT.as_secs() }
    }
}

pub(super) struct PosesWindow {
    input_path: PathBuf,
    input: Input,
    state: State,
    /// Closed by the user (asking or failed).
    closed: bool,
}

impl PosesWindow {
    /// Asks whether to compute poses for `input` (found at `input_path`).
    pub(super) fn ask(input_path: PathBuf, input: Input) -> Self {
        let out = splat_poses::default_output(&input_path).display().to_string();
        Self { input_path, input, state: State::Asking { out }, closed: false }
    }

    pub(super) fn is_running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    /// Whether the window is still shown.
    pub(super) fn is_open(&self) -> bool {
        !self.closed
    }

    /// Draws the window, with the app's engine settings.
    pub(super) fn show(&mut self, ctx: &egui::Context, engines: &mut EngineSettings) -> Action {
        let action = self.poll(ctx);
        let mut start = None;
        let mut close = false;
        let window = egui::Window::new("Camera poses")
            .collapsible(false)
            .resizable(false)
            .pivot(egui::Align2::CENTER_TOP)
            .default_pos(ctx.content_rect().center_top() + egui::vec2(0.0, 120.0));
        window.show(ctx, |ui| {
            ui.set_max_width(460.0);
            match &mut self.state {
                State::Asking { out } => {
                    ui.label(format!(
                        "{} has no camera poses. Compute them with COLMAP?",
                        self.input.describe()
                    ));
                    ui.label(
                        "COLMAP finds the camera of every image (a few minutes for a hundred \
                         images); the dataset then opens here, ready to train.",
                    );
                    egui::Grid::new("poses-settings").num_columns(2).show(ui, |ui| {
                        ui.label("Write the dataset to");
                        ui.add(egui::TextEdit::singleline(out).desired_width(300.0));
                        ui.end_row();
                        ui.label("COLMAP");
                        ui.add(
                            egui::TextEdit::singleline(&mut engines.colmap)
                                .hint_text("colmap (on the PATH)")
                                .desired_width(300.0),
                        );
                        ui.end_row();
                        ui.label("Stop when idle for");
                        ui.add(
                            egui::DragValue::new(&mut engines.idle_limit_s)
                                .range(1..=86_400)
                                .suffix(" s"),
                        )
                        .on_hover_text(
                            "A COLMAP or ffmpeg that prints nothing and uses no CPU time for \
                             this long is stopped, and the run says which stage it was in \
                             (Linux)",
                        );
                        ui.end_row();
                    });
                    ui.horizontal(|ui| {
                        if ui.button("Compute camera poses").clicked() {
                            start = Some(PathBuf::from(out.trim()));
                        }
                        if ui.button("Not now").clicked() {
                            close = true;
                        }
                    });
                }
                State::Running { cancel, since, progress, finished, .. } => {
                    ui.label(format!("Camera poses for {}", self.input.describe()));
                    for stage in Stage::all_for(&self.input) {
                        stage_row(ui, *stage, progress.as_ref(), finished);
                    }
                    ui.horizontal(|ui| {
                        if cancel.is_cancelled() {
                            ui.spinner();
                            ui.label("Cancelling…");
                        } else if ui.button("Cancel").clicked() {
                            cancel.cancel();
                        }
                        ui.label(format!("{:.0} s", since.elapsed().as_secs_f32()));
                    });
                    ctx.request_repaint_after(std::time::Duration::from_millis(250));
                }
                State::Failed(message) => {
                    ui.colored_label(ui.visuals().error_fg_color, message.as_str());
                    if ui.button("Close").clicked() {
                        close = true;
                    }
                }
            }
        });
        if let Some(out) = start {
            let colmap = Some(engines.colmap.trim()).filter(|c| !c.is_empty()).map(PathBuf::from);
            let options = Options {
                colmap,
                idle_limit: Duration::from_secs(engines.idle_limit_s),
                ..Options::default()
            };
            self.start(ctx, out, options);
        }
        if close {
            self.closed = true;
        }
        action
    }

    fn start(&mut self, ctx: &egui::Context, out: PathBuf, options: Options) {
        let (tx, events) = sync_channel(EVENT_CAPACITY);
        let cancel = Cancel::default();
        let input = self.input.clone();
        let (run_cancel, repaint) = (cancel.clone(), ctx.clone());
        let spawned = std::thread::Builder::new().name("colmap-poses".into()).spawn(move || {
            run(&input, &out, &options, &run_cancel, &tx, &repaint);
        });
        self.state = match spawned {
            Ok(thread) => State::Running {
                cancel,
                events,
                thread: Some(thread),
                since: Instant::now(),
                stage_since: Instant::now(),
                progress: None,
                finished: Vec::new(),
            },
            Err(e) => State::Failed(format!("cannot start the camera-pose thread: {e}")),
        };
    }

    /// Takes the run's events; when it has ended, what the app should do.
    fn poll(&mut self, ctx: &egui::Context) -> Action {
        let State::Running { events, progress, finished, thread, stage_since, .. } =
            &mut self.state
        else {
            return Action::None;
        };
        let ended = loop {
            match events.try_recv() {
                Ok(PosesEvent::Progress(next)) => {
                    // A new stage: the previous one is done.
                    if let Some(previous) = progress.filter(|p| p.stage != next.stage) {
                        finished.push((previous.stage, stage_since.elapsed().as_secs_f64()));
                        *stage_since = Instant::now();
                    }
                    *progress = Some(next);
                }
                Ok(PosesEvent::Finished(result)) => break Some(result),
                Err(TryRecvError::Empty) => break None,
                Err(TryRecvError::Disconnected) => {
                    break Some(Err(PosesError::Failed {
                        what: "the camera-pose thread".into(),
                        status: "stopped".into(),
                        tail: String::new(),
                    }));
                }
            }
        };
        let Some(result) = ended else { return Action::None };
        if let Some(thread) = thread.take() {
            let _ = thread.join();
        }
        ctx.request_repaint();
        match result {
            Ok(report) => {
                self.closed = true;
                Action::Open {
                    dataset: report.dataset.clone(),
                    summary: format!(
                        "{} Dataset written to {}.",
                        report.summary(),
                        report.dataset.display()
                    ),
                    warnings: report.warnings,
                }
            }
            Err(PosesError::Cancelled) => {
                self.closed = true;
                Action::Ended(Ok(format!(
                    "Camera poses for {} cancelled; nothing was written.",
                    self.input_path.display()
                )))
            }
            Err(e) => {
                let message = format!("Camera poses for {}: {e}", self.input_path.display());
                self.state = State::Failed(message.clone());
                Action::Ended(Err(message))
            }
        }
    }
}

impl Drop for PosesWindow {
    /// Closing the app mid-run stops COLMAP (its own process group would outlive us) and
    /// removes the unfinished folder: a wait of a few seconds at most.
    fn drop(&mut self) {
        if let State::Running { cancel, events, thread, .. } =
            std::mem::replace(&mut self.state, State::Failed(String::new()))
        {
            cancel.cancel();
            // The thread's last send must not wait for a reader that is no longer there.
            drop(events);
            if let Some(thread) = thread {
                let _ = thread.join();
            }
        }
    }
}

fn run(
    input: &Input,
    out: &Path,
    options: &Options,
    cancel: &Cancel,
    tx: &SyncSender<PosesEvent>,
    repaint: &egui::Context,
) {
    let mut last_repaint = Instant::now();
    let result = splat_poses::compute_poses(input, out, options, cancel, &mut |progress| {
        // Full: the UI has the newer state of this stage soon enough.
        let _ = tx.try_send(PosesEvent::Progress(progress));
        if last_repaint.elapsed().as_millis() >= 100 {
            repaint.request_repaint();
            last_repaint = Instant::now();
        }
    });
    // The UI may be gone (the window closed): then nobody is left to tell.
    let _ = tx.send(PosesEvent::Finished(result));
    repaint.request_repaint();
}

/// One line a stage: done (with its time), going (a spinner and a bar), or to come (dim).
fn stage_row(
    ui: &mut egui::Ui,
    stage: Stage,
    progress: Option<&Progress>,
    finished: &[(Stage, f64)],
) {
    ui.horizontal(|ui| {
        if let Some((_, seconds)) = finished.iter().find(|(s, _)| *s == stage) {
            ui.label(format!("{}: done in {seconds:.0} s", stage.label()));
        } else if let Some(p) = progress.filter(|p| p.stage == stage) {
            ui.spinner();
            ui.label(stage.label());
            let fraction = if p.total > 0 { p.done as f32 / p.total as f32 } else { 0.0 };
            ui.add(
                egui::ProgressBar::new(fraction.clamp(0.0, 1.0)).desired_width(160.0).text(
                    if p.total > 0 { format!("{}/{}", p.done, p.total) } else { String::new() },
                ),
            );
        } else {
            ui.weak(stage.label());
        }
    });
}
