//! The app's state and its reactions: events from the trainer, the viewer and the file worker
//! come in; commands go out. Drawing is in [`super::panels`].

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use glam::Vec3;
use splat_trainer::config::TrainConfig;
use splat_trainer::dataset::{Dataset, LoadOptions};
use splat_trainer::memory::{MemoryBudget, default_budget};
use splat_trainer::render::view_controller::{ViewController, scene_focus, scene_up};
use splat_trainer::render::{Camera, GpuContext, LedgerSnapshot};
use splat_trainer::task::{Command, Event, TaskHandle, TaskState};
use splat_trainer::train::{ImagePlacement, StepMetrics, StepStats};

use super::files::{Files, OpenKind, SaveKind};
use super::history::History;
use super::poses::{self, PosesWindow};
use super::self_test::{self, SelfTestWindow};
use super::viewer::{self, Viewer};
use super::{GuiArgs, sample};

/// Steps of a run started from the window unless the user sets another number.
pub const DEFAULT_STEPS: u32 = 7000;
/// Log lines kept (older ones scroll away).
const LOG_LINES: usize = 1000;
/// How long a notification stays over the viewport.
const TOAST_SECONDS: f32 = 8.0;
/// Events handled per frame at most, so a flood never stalls a frame.
const EVENTS_PER_FRAME: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warning,
    Error,
}

#[derive(Clone, Debug)]
pub struct LogLine {
    pub seconds: f32,
    pub level: Level,
    pub text: String,
}

/// The settings of the next run, as the training panel edits them: the command line's own
/// types, so that a setting added there is here too.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// How the dataset is loaded (applied when it is (re)loaded).
    pub load: LoadOptions,
    pub train: TrainConfig,
    pub memory_budget_mib: u64,
}

impl Settings {
    #[must_use]
    pub fn budget_bytes(&self) -> u64 {
        self.memory_budget_mib.saturating_mul(1 << 20)
    }
}

/// The loaded dataset, as the UI sees it.
pub struct LoadedDataset {
    pub path: PathBuf,
    pub dataset: Arc<Dataset>,
    pub up: Vec3,
    pub focus: (Vec3, f32),
}

/// `path`, or `path` with `-2`, `-3`, … before its extension when that is taken.
pub(super) fn unused_name(path: PathBuf) -> PathBuf {
    if !path.exists() {
        return path;
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let extension = path.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
    (2..10_000)
        .map(|n| path.with_file_name(format!("{stem}-{n}.{extension}")))
        .find(|p| !p.exists())
        .unwrap_or(path)
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
    fn new(id: u64, planned_steps: u32) -> Self {
        Self { id, planned_steps, last: None, last_metrics: None, rate_window: VecDeque::new() }
    }

    fn record(&mut self, stats: StepStats) {
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
}

/// Where the viewport looks from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ViewMode {
    /// The user's orbit / fly camera.
    Free,
    /// Exactly a dataset camera (index into `Dataset::views()` order), its image beside.
    DatasetCamera(usize),
}

/// A splat file being viewed.
pub struct ViewedFile {
    pub path: PathBuf,
    pub splats: Arc<splat_trainer::render::GpuSplats>,
    pub focus: (Vec3, f32),
}

/// Which optional panels are shown.
#[derive(Clone, Copy, Debug)]
pub struct Panels {
    pub plots: bool,
    pub log: bool,
    pub memory: bool,
}

/// A summary for tests and the status bar.
#[derive(Clone, Debug, PartialEq)]
pub struct UiState {
    pub task: TaskState,
    pub dataset: Option<PathBuf>,
    pub init: Option<PathBuf>,
    pub run: Option<u64>,
    pub step: u32,
    pub viewing_file: Option<PathBuf>,
    pub exported: Vec<PathBuf>,
    /// Turntable and path videos written from the window.
    pub videos: Vec<PathBuf>,
    /// Camera path files saved from the window.
    pub camera_paths: Vec<PathBuf>,
    /// Keyframes placed in the viewer.
    pub keyframes: usize,
    pub checkpoints: Vec<PathBuf>,
    pub errors: Vec<String>,
    /// The viewport has drawn splats (of the run or step given, or of a file).
    pub frame: Option<Option<(u64, u32)>>,
    /// Splats in the viewport's last frame.
    pub frame_splats: u32,
    /// The last frame was drawn from the camera the viewport asks for now.
    pub frame_current: bool,
    /// Help → Self-test: `Some(passed)` once it has finished.
    pub self_test: Option<bool>,
    /// The camera-pose window is shown (asking, running or failed).
    pub poses_window: bool,
    /// What the view and the exports keep.
    pub crop: splat_trainer::formats::filter::Filter,
    /// The crop's handles in the viewport ("box x max", "sphere rim", …) and where they are,
    /// in points.
    pub crop_handles: Vec<(&'static str, [f32; 2])>,
    /// Where the viewport is (points): left, top, width, height.
    pub viewport: [f32; 4],
}

/// What the viewport laid out last: for its overlays, and what tests read.
#[derive(Debug, Default)]
pub(super) struct ViewportLayout {
    /// Where the viewport is (points): left, top, width, height.
    pub rect: [f32; 4],
    /// The crop's handles as drawn: each one's name and place (points).
    pub crop_handles: Vec<(&'static str, [f32; 2])>,
    /// A rectangle selection being drawn: where it started and where the pointer is.
    pub selecting: Option<(egui::Pos2, egui::Pos2)>,
    /// A brush stroke being painted: the pointer's path so far.
    pub stroke: Vec<egui::Pos2>,
}

/// What a video films: the splats, the scene's framing (centre, radius, up) and the file.
pub(super) type VideoSubject = (Arc<splat_trainer::render::GpuSplats>, (Vec3, f32, Vec3), PathBuf);

/// How a video's camera moves.
#[derive(Clone, Copy, Debug)]
pub(super) enum VideoMotion {
    /// Once round the scene.
    Turntable,
    /// Along the keyframes placed in the viewer.
    Path,
}

pub struct SplatApp {
    pub(super) gpu: GpuContext,
    pub(super) task: TaskHandle,
    pub(super) viewer: Viewer,
    pub(super) files: Files,
    pub(super) out: Option<PathBuf>,
    pub(super) started: Instant,
    pub(super) task_state: TaskState,
    pub(super) dataset: Option<LoadedDataset>,
    /// Asked for, not loaded yet.
    pub(super) loading: Option<PathBuf>,
    pub(super) init: Option<PathBuf>,
    pub(super) settings: Settings,
    /// Exports turned so that the cameras' up is −y, as web viewers expect. On: exports from
    /// the window are for sharing, upright in every viewer.
    pub(super) level_exports: bool,
    /// Which splats the view and the exports keep.
    pub(super) crop: super::crop::Crop,
    /// A video being made, and the length (of a turntable) and size of the next.
    pub(super) video: Option<super::video_job::VideoJob>,
    pub(super) video_seconds: f64,
    /// The camera path placed in the viewer.
    pub(super) keyframes: super::keyframes::Keyframes,
    pub(super) video_size: (u32, u32),
    videos: Vec<PathBuf>,
    /// The budget the driver (or the host's memory) gives runs on this device, and why.
    pub(super) default_budget: MemoryBudget,
    pub(super) run: Option<RunInfo>,
    pub(super) history: History,
    pub(super) memory: Option<LedgerSnapshot>,
    /// The memory panel's ledger snapshot and when it was taken.
    pub(super) ledger_view: Option<(Instant, LedgerSnapshot)>,
    pub(super) prediction: Option<(u64, u64, u32)>,
    /// Where the current run keeps its images (from the task's prediction).
    pub(super) images: ImagePlacement,
    pub(super) log: VecDeque<LogLine>,
    pub(super) toast: Option<(Instant, Level, String)>,
    pub(super) view: ViewController,
    pub(super) view_mode: ViewMode,
    pub(super) viewed_file: Option<ViewedFile>,
    /// Show the viewed file (true) or the run (false) when both exist.
    pub(super) show_file: bool,
    /// The viewport renders at this fraction of its pixels.
    pub(super) render_scale: f32,
    pub(super) ground_truth: Option<(usize, egui::TextureHandle)>,
    /// The camera the viewport asked the viewer for last.
    pub(super) requested_camera: Option<Camera>,
    /// What the viewport laid out last.
    pub(super) layout: ViewportLayout,
    pub(super) start_when_loaded: bool,
    pub(super) panels: Panels,
    exported: Vec<PathBuf>,
    checkpoints: Vec<PathBuf>,
    errors: Vec<String>,
    /// A failed run's kept splats (run, step): what Export writes until the next run.
    pub(super) kept: Option<(u64, u32)>,
    /// Help → Self-test: its window while running or shown, and the report being saved.
    self_test: Option<SelfTestWindow>,
    pub(super) self_test_json: Option<String>,
    /// Camera poses for dropped photos or a video: the question, then the run.
    pub(super) poses: Option<PosesWindow>,
    /// COLMAP's executable and the engines' idle limit for those runs.
    engines: poses::EngineSettings,
}

impl SplatApp {
    /// The memory budget of the settings: the default (and where it came from) unless the
    /// user changed it.
    pub(super) fn budget(&self) -> MemoryBudget {
        let bytes = self.settings.budget_bytes();
        if bytes == self.default_budget.bytes >> 20 << 20 {
            self.default_budget
        } else {
            MemoryBudget::given(bytes)
        }
    }

    /// Builds the app on eframe's device, starts the trainer and viewer threads, and opens
    /// `args.path` or the sample scene.
    pub fn new(cc: &eframe::CreationContext<'_>, args: GuiArgs) -> anyhow::Result<Self> {
        let render_state = cc
            .wgpu_render_state
            .clone()
            .context("the window has no wgpu device (Splatforge needs Vulkan, Metal or DX12)")?;
        let gpu = GpuContext::from_device(
            render_state.device.clone(),
            render_state.queue.clone(),
            render_state.adapter.get_info(),
        )?;
        let egui_ctx = cc.egui_ctx.clone();
        let repaint = egui_ctx.clone();
        let task = TaskHandle::spawn_with_notify(
            gpu.clone(),
            Arc::new(move || repaint.request_repaint()),
        )?;
        let viewer =
            Viewer::spawn(gpu.clone(), render_state, egui_ctx.clone(), task.viewer().clone())
                .context("cannot start the viewer thread")?;
        let files = Files::spawn(gpu.clone(), egui_ctx).context("cannot start the file thread")?;
        let software = gpu.adapter_info.device_type == wgpu::DeviceType::Cpu;
        let budget = default_budget(&gpu);
        log::info!("memory budget: {budget}");
        let settings = Settings {
            load: LoadOptions::default(),
            // A first run shorter than the command line's, evaluated more often, and capped
            // lower: the window is where people try a capture.
            train: TrainConfig {
                steps: args.steps.unwrap_or(DEFAULT_STEPS).max(1),
                max_splats: 1_000_000,
                eval_every: 500,
                ..TrainConfig::default()
            },
            memory_budget_mib: args.memory_budget.unwrap_or(budget.bytes) >> 20,
        };
        let mut app = Self {
            gpu,
            task,
            viewer,
            files,
            out: args.out.clone(),
            started: Instant::now(),
            task_state: TaskState::Empty,
            dataset: None,
            loading: None,
            init: None,
            settings,
            level_exports: true,
            crop: super::crop::Crop::default(),
            video: None,
            video_seconds: 6.0,
            keyframes: super::keyframes::Keyframes::default(),
            video_size: (1280, 720),
            videos: Vec::new(),
            default_budget: budget,
            run: None,
            history: History::default(),
            memory: None,
            ledger_view: None,
            prediction: None,
            images: ImagePlacement::Resident,
            log: VecDeque::new(),
            toast: None,
            view: ViewController::framing(Vec3::ZERO, 1.0, Vec3::NEG_Y),
            view_mode: ViewMode::Free,
            viewed_file: None,
            show_file: false,
            // A software rasterizer renders a quarter of the pixels to stay interactive.
            render_scale: if software { 0.5 } else { 1.0 },
            ground_truth: None,
            requested_camera: None,
            layout: ViewportLayout::default(),
            start_when_loaded: args.start,
            panels: Panels { plots: true, log: true, memory: true },
            exported: Vec::new(),
            checkpoints: Vec::new(),
            errors: Vec::new(),
            kept: None,
            self_test: None,
            self_test_json: None,
            poses: None,
            engines: poses::EngineSettings::default(),
        };
        let adapter = &app.gpu.adapter_info;
        app.info(format!(
            "GPU: {} ({:?}, {:?})",
            adapter.name, adapter.backend, adapter.device_type
        ));
        match args.path {
            Some(path) => app.open_path(path),
            None => match sample::ensure_on_disk(&sample::data_dir()) {
                Ok(path) => {
                    app.info("Loading the built-in sample scene: press Space to train it.");
                    app.open_path(path);
                }
                Err(e) => app.error(format!("cannot write the sample scene: {e}")),
            },
        }
        Ok(app)
    }

    // ---- Log ---------------------------------------------------------------------------

    fn push_log(&mut self, level: Level, text: String) {
        match level {
            Level::Error => log::error!("{text}"),
            Level::Warning => log::warn!("{text}"),
            Level::Info => log::info!("{text}"),
        }
        if level != Level::Info {
            self.toast = Some((Instant::now(), level, text.clone()));
        }
        if level == Level::Error {
            self.errors.push(text.clone());
        }
        self.log.push_back(LogLine { seconds: self.started.elapsed().as_secs_f32(), level, text });
        while self.log.len() > LOG_LINES {
            self.log.pop_front();
        }
    }

    pub(super) fn info(&mut self, text: impl Into<String>) {
        self.push_log(Level::Info, text.into());
    }

    pub(super) fn warning(&mut self, text: impl Into<String>) {
        self.push_log(Level::Warning, text.into());
    }

    pub(super) fn error(&mut self, text: impl Into<String>) {
        self.push_log(Level::Error, text.into());
    }

    /// The notification to show now, if any.
    pub(super) fn current_toast(&self) -> Option<(Level, &str)> {
        self.toast
            .as_ref()
            .filter(|(at, _, _)| at.elapsed().as_secs_f32() < TOAST_SECONDS)
            .map(|(_, level, text)| (*level, text.as_str()))
    }

    // ---- Commands ----------------------------------------------------------------------

    pub(super) fn send(&mut self, command: Command) {
        if let Err(e) = self.task.send(command) {
            self.error(format!("the trainer did not take the command: {e}"));
        }
    }

    /// Opens a dropped, chosen or command-line path (decided on the file thread).
    pub fn open_path(&mut self, path: PathBuf) {
        if let Err(e) = self.files.open(path) {
            self.error(e);
        }
    }

    pub(super) fn open_dialog(&self, kind: OpenKind) {
        let start = self.dataset.as_ref().and_then(|d| d.path.parent().map(Path::to_path_buf));
        self.files.open_dialog(kind, start);
    }

    pub(super) fn load_dataset(&mut self, path: PathBuf) {
        // Drop our handle on the old images before the trainer reads the new ones.
        self.dataset = None;
        self.ground_truth = None;
        self.view_mode = ViewMode::Free;
        self.init = None;
        // The task lets a failed run's kept splats go with the old dataset.
        self.kept = None;
        self.loading = Some(path.clone());
        self.info(format!("Loading {}", path.display()));
        self.send(Command::LoadDataset { path, options: self.settings.load.clone() });
    }

    /// Reloads the dataset at the resolution in the settings.
    pub(super) fn reload_dataset(&mut self) {
        if let Some(path) = self.dataset.as_ref().map(|d| d.path.clone()) {
            self.load_dataset(path);
        }
    }

    /// Space: start, pause or resume, whichever makes sense.
    pub fn toggle_training(&mut self) {
        match self.task_state {
            TaskState::Ready => self.start(),
            TaskState::Training => self.send(Command::Pause),
            TaskState::Paused => {
                let finished = self.run.as_ref().is_some_and(|r| r.step() >= r.planned_steps);
                if finished {
                    // Continue past the plan: as many steps again as the settings say.
                    let steps =
                        self.run.as_ref().map_or(0, RunInfo::step) + self.settings.train.steps;
                    if let Some(run) = self.run.as_mut() {
                        run.planned_steps = steps;
                    }
                    self.send(Command::SetSteps { steps });
                }
                self.send(Command::Resume);
            }
            TaskState::Empty | TaskState::Loading => {
                self.warning("Open a dataset first (Ctrl+O, or drop a folder or .zip here).");
            }
        }
    }

    pub fn start(&mut self) {
        if self.task_state != TaskState::Ready {
            self.warning(format!("Cannot start while {:?}.", self.task_state));
            return;
        }
        self.send(Command::SetMemoryBudget { bytes: self.settings.budget_bytes() });
        self.send(Command::Start { config: self.settings.train.clone() });
        self.show_file = false;
    }

    pub fn pause(&mut self) {
        self.send(Command::Pause);
    }

    pub fn stop(&mut self) {
        self.send(Command::Stop);
    }

    /// Ctrl+N: tear the run down and start again from the init with the current settings.
    pub fn new_run(&mut self) {
        match self.task_state {
            TaskState::Ready => self.start(),
            TaskState::Training | TaskState::Paused => {
                self.send(Command::SetMemoryBudget { bytes: self.settings.budget_bytes() });
                self.send(Command::NewRun { config: Some(self.settings.train.clone()) });
                self.show_file = false;
            }
            TaskState::Empty | TaskState::Loading => {
                self.warning("Open a dataset first (Ctrl+O).");
            }
        }
    }

    /// The folder Ctrl+E and Ctrl+S write to.
    #[must_use]
    pub fn exports_dir(&self) -> Option<PathBuf> {
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

    /// Crops the view and the exports (as the Crop panel does; for tests and scripts).
    pub fn set_crop(&mut self, keep: &splat_trainer::formats::filter::Filter) {
        self.crop.set(keep);
    }

    /// What a drag over the viewport does (as the Crop panel's "Drag in the view" sets it).
    pub fn set_select(&mut self, select: super::Select) {
        self.crop.select = select;
    }

    /// What a selection is drawn with, and the brush's radius in points (as the Crop panel
    /// sets them).
    pub fn set_select_tool(&mut self, tool: super::Tool, brush_radius: f32) {
        self.crop.tool = tool;
        self.crop.brush_radius = brush_radius;
    }

    /// Levels the exports by the cameras' up, or not (the checkbox).
    pub fn set_level_exports(&mut self, on: bool) {
        self.level_exports = on;
    }

    /// The up an export is levelled to −y by: the dataset cameras', when the setting is on.
    pub(super) fn export_up(&self) -> Option<[f32; 3]> {
        let dataset = self.dataset.as_ref().filter(|_| self.level_exports)?;
        Some(dataset.up.to_array())
    }

    /// Ctrl+E: the run's splats as PLY into the exports folder.
    pub fn export_ply(&mut self) {
        match self.output_path("ply") {
            Some(path) => {
                self.send(Command::Export {
                    path,
                    up: self.export_up(),
                    keep: self.crop.keep().clone(),
                });
            }
            None => self.warning("Nothing to export: start a run first."),
        }
    }

    /// "Hide likely floaters": asks the task for the dense scene's cells, which the crop
    /// keeps when they come (an undo step of its own).
    pub fn hide_likely_floaters(&mut self) {
        self.send(Command::FindSceneCells);
    }

    /// The answer to [`SplatApp::hide_likely_floaters`]: the crop keeps only the dense
    /// scene's cells.
    fn crop_to_scene_cells(
        &mut self,
        cells: splat_trainer::formats::filter::SceneCells,
        outside: usize,
        splats: usize,
    ) {
        let keep = splat_trainer::formats::filter::Filter {
            scene_cells: Some(cells),
            ..self.crop.keep().clone()
        };
        self.crop.restore(&keep);
        self.info(format!(
            "Likely floaters: {outside} of {splats} splats are in small clusters apart from the \
             dense scene and now hidden (Undo, or Floaters hidden in the crop, shows them)"
        ));
    }

    /// Ctrl+S: a checkpoint into the exports folder.
    pub fn save_checkpoint(&mut self) {
        match self.output_path("ckpt") {
            Some(path) => {
                self.send(Command::SaveCheckpoint { path, crop: self.crop.keep().clone() });
            }
            None => self.warning("Nothing to save: start a run first."),
        }
    }

    pub(super) fn save_dialog(&mut self, kind: SaveKind) {
        let extension = if kind == SaveKind::Export { "ply" } else { "ckpt" };
        match self.output_path(extension) {
            Some(path) => self.files.save_dialog(kind, path),
            None => self.warning("Start a run first."),
        }
    }

    /// Help → Self-test: starts it on the window's device (one at a time).
    pub(super) fn start_self_test(&mut self, ctx: &egui::Context) {
        if self.self_test.as_ref().is_some_and(SelfTestWindow::is_running) {
            return;
        }
        match SelfTestWindow::start(self.gpu.clone(), self.budget(), ctx.clone()) {
            Ok(window) => {
                self.info(if self.task_state == TaskState::Training {
                    "Self-test started (about a minute; training goes on meanwhile)."
                } else {
                    "Self-test started (about a minute)."
                });
                self.self_test = Some(window);
            }
            Err(e) => self.error(format!("cannot start the self-test: {e}")),
        }
    }

    fn self_test_window(&mut self, ctx: &egui::Context) {
        let Some(window) = self.self_test.as_mut() else { return };
        if let self_test::Action::Save(json) = window.show(ctx) {
            self.self_test_json = Some(json);
            let suggested = sample::data_dir().join("self-test.json");
            self.files.save_dialog(SaveKind::SelfTestReport, suggested);
        }
        if !window.is_open() {
            self.self_test = None;
        }
    }

    fn poses_window(&mut self, ctx: &egui::Context) {
        let Some(window) = self.poses.as_mut() else { return };
        let action = window.show(ctx, &mut self.engines);
        if !window.is_open() {
            self.poses = None;
        }
        match action {
            poses::Action::None => {}
            poses::Action::Open { dataset, summary, warnings } => {
                self.info(summary);
                for warning in warnings {
                    self.warning(warning);
                }
                if matches!(self.task_state, TaskState::Training | TaskState::Paused) {
                    // Opening it would end the run: the user opens it when they choose.
                    self.info(format!(
                        "The run goes on; open {} (drop it or File / Open) to train on it.",
                        dataset.display()
                    ));
                } else {
                    self.load_dataset(dataset);
                }
            }
            poses::Action::Ended(Ok(message)) => self.info(message),
            poses::Action::Ended(Err(message)) => self.error(message),
        }
    }

    // ---- Events ------------------------------------------------------------------------

    /// Handles what the other threads sent since the last frame.
    pub(super) fn poll(&mut self) {
        for _ in 0..EVENTS_PER_FRAME {
            let Some(event) = self.task.try_event() else { break };
            self.on_task_event(event);
        }
        while let Some(event) = self.files.try_event() {
            self.on_file_event(event);
        }
        if let Some(e) = self.viewer.take_error() {
            self.error(e);
        }
        if let Some(result) = self.video.as_mut().and_then(super::video_job::VideoJob::finished)
            && let Some(job) = self.video.take()
        {
            match result {
                Ok(()) => {
                    self.info(format!("Video written to {}.", job.path.display()));
                    self.videos.push(job.path.clone());
                }
                Err(_) if job.cancelled() => self.info("Video cancelled."),
                Err(e) => self.error(format!("The video was not made: {e}")),
            }
        }
    }

    fn on_task_event(&mut self, event: Event) {
        match event {
            Event::State(state) => {
                self.task_state = state;
                if state == TaskState::Ready && self.dataset.is_some() {
                    self.run = None;
                }
                if state == TaskState::Ready && std::mem::take(&mut self.start_when_loaded) {
                    self.start();
                }
            }
            Event::DatasetLoaded { path, train, eval, init_points, dataset } => {
                self.kept = None;
                let cameras: Vec<Camera> = dataset.0.views().map(|v| v.camera).collect();
                let up = scene_up(&cameras);
                let focus = scene_focus(&cameras);
                let init = if init_points > 0 {
                    format!("{init_points} init points")
                } else {
                    "random init".into()
                };
                self.info(format!(
                    "Loaded {}: {train} training and {eval} eval views, {init}.",
                    path.display()
                ));
                self.loading = None;
                self.history = History::default();
                // A camera path is in its scene's coordinates.
                self.keyframes.clear();
                self.dataset = Some(LoadedDataset { path, dataset: dataset.0, up, focus });
                self.show_file = false;
                // The initial splats from the first camera, its image beside; moving the
                // view from there orbits the scene's focus.
                self.jump_to_camera(0);
            }
            Event::RunStarted { run, splats, steps } => {
                self.kept = None;
                self.info(format!("Run {run}: {splats} splats, {steps} steps."));
                self.run = Some(RunInfo::new(run, steps));
                self.history = History::default();
            }
            Event::Step(stats) => {
                self.history.step(&stats);
                if let Some(run) = self.run.as_mut() {
                    run.record(stats);
                }
            }
            Event::Metrics(metrics) => {
                self.history.metrics(&metrics);
                if let Some(run) = self.run.as_mut() {
                    run.last_metrics = Some(metrics);
                }
            }
            Event::Eval(eval) => {
                self.history.eval(&eval);
                let compensated = eval.compensated_psnr.map_or_else(String::new, |p| {
                    format!("; {p:.2} dB with each view's colours fitted on its left half")
                });
                self.info(format!(
                    "Step {}: eval PSNR {:.2} dB, SSIM {:.4} ({} views{compensated}).",
                    eval.step, eval.psnr, eval.ssim, eval.views
                ));
            }
            Event::Appearance(views) => self.history.appearance(&views),
            Event::Finished { step } => {
                self.info(format!(
                    "Finished {step} steps. Export it (Ctrl+E), or press Space to train on."
                ));
            }
            Event::Memory(snapshot) => {
                self.history.memory(&snapshot);
                self.memory = Some(snapshot);
            }
            Event::Exported(path) => {
                self.info(format!("Exported {}", path.display()));
                self.exported.push(path);
            }
            Event::CheckpointSaved(path) => {
                self.info(format!("Saved checkpoint {}", path.display()));
                self.checkpoints.push(path);
            }
            Event::Crop(crop) => self.crop.restore(&crop),
            Event::SceneCells { cells, outside, splats } => {
                self.crop_to_scene_cells(*cells, outside, splats);
            }
            Event::Warning(message) => self.warning(message),
            Event::RunFailed { run, message, kept, .. } => {
                self.kept = kept.map(|step| (run, step));
                self.error(message);
            }
            Event::Error(message) => {
                if self.loading.take().is_some() {
                    self.dataset = None;
                }
                self.error(message);
            }
            Event::Pong { .. } => {}
            Event::Prediction { peak_bytes, budget_bytes, max_splats, images } => {
                self.prediction = Some((peak_bytes, budget_bytes, max_splats));
                self.images = images;
            }
        }
    }

    // ---- Viewport ----------------------------------------------------------------------

    /// What the viewport shows now.
    pub(super) fn source(&self) -> viewer::Source {
        match &self.viewed_file {
            Some(file) if self.show_file || self.run.is_none() => {
                viewer::Source::File(Arc::clone(&file.splats))
            }
            // The run's splats, or before any run the dataset's initial ones (the trainer
            // puts those in the same slot).
            _ if self.run.is_some() || self.dataset.is_some() => viewer::Source::Run,
            _ => viewer::Source::Nothing,
        }
    }

    /// Jumps to a dataset camera (its image shows beside the render).
    pub fn jump_to_camera(&mut self, index: usize) {
        let Some(loaded) = &self.dataset else { return };
        if let Some(view) = loaded.dataset.views().nth(index) {
            self.view = ViewController::from_camera(&view.camera, loaded.up, loaded.focus.1);
            self.view_mode = ViewMode::DatasetCamera(index);
        }
    }

    /// The dataset camera fitted into `available` pixels (same aspect and framing as its
    /// image), or the free camera filling them.
    pub(super) fn viewport_camera(&self, width: u32, height: u32) -> Option<Camera> {
        if let ViewMode::DatasetCamera(index) = self.view_mode
            && let Some(view) = self.dataset.as_ref().and_then(|d| d.dataset.views().nth(index))
        {
            let c = view.camera;
            let scale = (width as f32 / c.width as f32).min(height as f32 / c.height as f32);
            let w = ((c.width as f32 * scale).round() as u32).max(1);
            let h = ((c.height as f32 * scale).round() as u32).max(1);
            return Some(Camera {
                width: w,
                height: h,
                fx: c.fx * scale,
                fy: c.fy * scale,
                cx: c.cx * scale,
                cy: c.cy * scale,
                world_from_camera: c.world_from_camera,
            });
        }
        (width > 0 && height > 0).then(|| self.view.camera(width, height))
    }

    /// A summary for tests.
    #[must_use]
    pub fn ui_state(&self) -> UiState {
        UiState {
            task: self.task_state,
            dataset: self.dataset.as_ref().map(|d| d.path.clone()),
            init: self.init.clone(),
            run: self.run.as_ref().map(|r| r.id),
            step: self.run.as_ref().map_or(0, RunInfo::step),
            viewing_file: self.viewed_file.as_ref().map(|f| f.path.clone()),
            exported: self.exported.clone(),
            videos: self.videos.clone(),
            camera_paths: self.keyframes.saved.clone(),
            keyframes: self.keyframes.len(),
            checkpoints: self.checkpoints.clone(),
            errors: self.errors.clone(),
            frame: self.viewer.frame().map(|f| f.run_step),
            frame_splats: self.viewer.frame().map_or(0, |f| f.splats),
            frame_current: self
                .viewer
                .frame()
                .is_some_and(|f| Some(f.camera) == self.requested_camera),
            self_test: self.self_test.as_ref().and_then(SelfTestWindow::passed),
            poses_window: self.poses.is_some(),
            crop: self.crop.keep().clone(),
            crop_handles: self.layout.crop_handles.clone(),
            viewport: self.layout.rect,
        }
    }

    /// Clears the notification over the viewport (tests take snapshots without it).
    pub fn clear_notification(&mut self) {
        self.toast = None;
    }

    /// Shows or hides the log panel (its timestamps differ from run to run, so pixel-exact
    /// snapshots hide it).
    pub fn set_log_visible(&mut self, visible: bool) {
        self.panels.log = visible;
    }

    /// The GPU context (tests read the ledger).
    #[must_use]
    pub fn gpu(&self) -> &GpuContext {
        &self.gpu
    }
}

impl eframe::App for SplatApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.poll();
        self.handle_input(ui.ctx());
        self.draw(ui);
        self.self_test_window(ui.ctx());
        self.poses_window(ui.ctx());
        if matches!(self.task_state, TaskState::Loading | TaskState::Training) {
            // Progress and the viewport change continuously; events also wake us.
            ui.ctx().request_repaint_after(Duration::from_millis(100));
        }
        if self.current_toast().is_some() {
            ui.ctx().request_repaint_after(Duration::from_millis(500));
        }
        if self.video.is_some() {
            ui.ctx().request_repaint_after(Duration::from_millis(200));
        }
    }
}
