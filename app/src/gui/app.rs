//! The window: the panes it is made of, the state it owns, and the routing between them.
//! Each pane draws itself and sends [`UiEvent`]s; events from the trainer (`task_events.rs`),
//! the file worker (`file_events.rs`) and the viewer come in on the UI thread; commands go out.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use splat_trainer::config::TrainConfig;
use splat_trainer::dataset::LoadOptions;
use splat_trainer::memory::default_budget;
use splat_trainer::render::GpuContext;
use splat_trainer::task::{Command, TaskHandle, TaskState};

use super::crop::Crop;
use super::event::{UiEvent, VideoMotion};
use super::files::{Files, OpenKind, SaveKind};
use super::history::History;
use super::log_pane::LogPane;
use super::memory_pane::MemoryPane;
use super::menu::{self, Panels};
use super::poses::{self, PosesWindow};
use super::self_test::{self, SelfTestWindow};
use super::session::{RunInfo, Session};
use super::settings_pane::{Settings, SettingsPane};
use super::training_pane::TrainingPane;
use super::video_pane::{VideoPane, VideoSubject};
use super::viewer::Viewer;
use super::viewport::{Surroundings, Viewport};
use super::{GuiArgs, sample};
use crate::human_bytes;

/// Steps of a run started from the window unless the user sets another number.
pub const DEFAULT_STEPS: u32 = 7000;
/// Events handled per frame at most, so a flood never stalls a frame.
const EVENTS_PER_FRAME: usize = 512;

/// What the window shows, for tests.
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

pub struct SplatApp {
    gpu: GpuContext,
    task: TaskHandle,
    viewer: Viewer,
    files: Files,
    /// The session as the window knows it: the dataset, the run, the viewed file.
    pub(super) session: Session,
    // The panes.
    pub(super) log: LogPane,
    settings: SettingsPane,
    training: TrainingPane,
    pub(super) crop: Crop,
    pub(super) viewport: Viewport,
    pub(super) video: VideoPane,
    pub(super) history: History,
    pub(super) memory: MemoryPane,
    panels: Panels,
    /// Help → Self-test: its window while running or shown, and the report being saved.
    self_test: Option<SelfTestWindow>,
    pub(super) self_test_json: Option<String>,
    /// Camera poses for dropped photos or a video: the question, then the run.
    pub(super) poses: Option<PosesWindow>,
    /// COLMAP's executable and the engines' idle limit for those runs.
    engines: poses::EngineSettings,
    /// Start training once the first dataset (the command line's, or the sample scene) is
    /// loaded: `--start`.
    pub(super) start_when_loaded: bool,
    pub(super) exported: Vec<PathBuf>,
    pub(super) checkpoints: Vec<PathBuf>,
}

impl SplatApp {
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
            // A first run shorter than the command line's and evaluated more often: the window
            // is where people try a capture.
            train: TrainConfig {
                steps: args.steps.unwrap_or(DEFAULT_STEPS).max(1),
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
            session: Session::new(args.out.clone()),
            log: LogPane::new(),
            settings: SettingsPane::new(settings, budget),
            training: TrainingPane::default(),
            crop: Crop::default(),
            viewport: Viewport::new(software),
            video: VideoPane::default(),
            history: History::default(),
            memory: MemoryPane::default(),
            panels: Panels { plots: true, log: true, memory: true },
            self_test: None,
            self_test_json: None,
            poses: None,
            engines: poses::EngineSettings::default(),
            start_when_loaded: args.start,
            exported: Vec::new(),
            checkpoints: Vec::new(),
        };
        let adapter = &app.gpu.adapter_info;
        app.log.info(format!(
            "GPU: {} ({:?}, {:?})",
            adapter.name, adapter.backend, adapter.device_type
        ));
        match args.path {
            Some(path) => app.open_path(path),
            None => match sample::ensure_on_disk(&sample::data_dir()) {
                Ok(path) => {
                    app.log.info("Loading the built-in sample scene: press Space to train it.");
                    app.open_path(path);
                }
                Err(e) => app.log.error(format!("cannot write the sample scene: {e}")),
            },
        }
        Ok(app)
    }

    // ---- The panes, laid out -----------------------------------------------------------

    /// Draws every pane; returns what they asked for.
    fn draw(&mut self, ui: &mut egui::Ui) -> Vec<UiEvent> {
        let mut events = Vec::new();
        egui::Panel::top("menu").show(ui, |ui| menu::ui(ui, &mut self.panels, &mut events));
        egui::Panel::bottom("status").show(ui, |ui| self.status_bar(ui));
        egui::Panel::left("training").resizable(true).default_size(300.0).show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| self.left_panes(ui, &mut events));
        });
        let Panels { plots, log, memory } = self.panels;
        if memory || log {
            egui::Panel::right("side").resizable(true).default_size(340.0).show(ui, |ui| {
                if log {
                    let panel = egui::Panel::bottom("log").resizable(true).default_size(260.0);
                    if memory {
                        panel.show(ui, |ui| self.log.ui(ui));
                    } else {
                        egui::CentralPanel::default().show(ui, |ui| self.log.ui(ui));
                    }
                }
                if memory {
                    let train = &self.settings.next.train;
                    egui::ScrollArea::vertical().show(ui, |ui| {
                        self.memory.ui(ui, self.gpu.ledger(), &self.session, train);
                    });
                }
            });
        }
        if plots {
            egui::Panel::bottom("plots").resizable(false).show(ui, |ui| self.history.ui(ui));
        }
        egui::CentralPanel::default().show(ui, |ui| {
            let with = Surroundings {
                session: &self.session,
                viewer: &self.viewer,
                crop: &mut self.crop,
                keyframes: &self.video.keyframes,
                toast: self.log.toast(),
            };
            self.viewport.ui(ui, with, &mut events);
        });
        events
    }

    /// The left side: the dataset, the settings, training, the view and the crop.
    fn left_panes(&mut self, ui: &mut egui::Ui, events: &mut Vec<UiEvent>) {
        let session = &self.session;
        TrainingPane::dataset_ui(ui, session, events);
        ui.separator();
        self.settings.ui(ui, session, events);
        ui.separator();
        let has_camera = self.viewport.requested_camera.is_some();
        let video = &mut self.video;
        let eval_psnr = self.history.eval_psnr.last();
        self.training.ui(ui, session, eval_psnr, events, |ui, can_film, events| {
            video.ui(ui, can_film, has_camera, events);
        });
        ui.separator();
        ui.heading("View");
        self.viewport.controls_ui(ui, session, events);
        ui.separator();
        ui.heading("Crop");
        self.crop.ui(ui, session.focus(), session.run.is_some(), events);
    }

    fn status_bar(&self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.label(format!("{:?}", self.session.task_state));
            if let Some(run) = &self.session.run {
                ui.separator();
                ui.label(format!("run {} · step {}/{}", run.id, run.step(), run.planned_steps));
            }
            if let Some(snapshot) = &self.memory.from_trainer {
                ui.separator();
                ui.label(format!("GPU {}", human_bytes(snapshot.total_bytes)));
            }
            if let Some(frame) = self.viewer.frame() {
                ui.separator();
                // The render time changes every frame: in the tooltip, so the bar stays still.
                ui.label(format!(
                    "view {}×{} · {} splats",
                    frame.width, frame.height, frame.splats
                ))
                .on_hover_text(format!("last frame rendered in {:.1} ms", frame.milliseconds));
            }
            ui.separator();
            ui.label(&self.gpu.adapter_info.name);
        });
    }

    /// Does what a pane asked for.
    fn route(&mut self, ctx: &egui::Context, event: UiEvent) {
        match event {
            UiEvent::Open(path) => self.open_path(path),
            UiEvent::OpenDialog(kind) => self.open_dialog(kind),
            UiEvent::SaveDialog(kind) => self.save_dialog(kind),
            UiEvent::ExportPly => self.export_ply(),
            UiEvent::SaveCheckpoint => self.save_checkpoint(),
            UiEvent::Start => self.start(),
            UiEvent::Pause => self.send(Command::Pause),
            UiEvent::ToggleTraining => self.toggle_training(),
            UiEvent::Stop => self.send(Command::Stop),
            UiEvent::NewRun => self.new_run(),
            UiEvent::SetSteps(steps) => {
                if let Some(run) = self.session.run.as_mut() {
                    run.planned_steps = steps;
                }
                self.send(Command::SetSteps { steps });
            }
            UiEvent::ReloadDataset => {
                if let Some(path) = self.session.dataset.as_ref().map(|d| d.path.clone()) {
                    self.load_dataset(path);
                }
            }
            UiEvent::HideLikelyFloaters => self.hide_likely_floaters(),
            UiEvent::SelectionsFull => self.log.warning(format!(
                "The crop holds {} selections already: Remove one, Undo, or Show all.",
                splat_trainer::formats::filter::MAX_SELECTIONS
            )),
            UiEvent::ShowFile(show) => self.session.show_file = show,
            UiEvent::ResetView => self.viewport.reset(&self.session),
            UiEvent::StartVideo(motion) => self.start_video(motion),
            UiEvent::AddKeyframe => self.add_keyframe(),
            UiEvent::SaveCameraPath => self.save_camera_path(),
            UiEvent::SelfTest => self.start_self_test(ctx),
        }
    }

    // ---- Commands ----------------------------------------------------------------------

    pub(super) fn send(&mut self, command: Command) {
        if let Err(e) = self.task.send(command) {
            self.log.error(format!("the trainer did not take the command: {e}"));
        }
    }

    /// Opens a dropped, chosen or command-line path (decided on the file thread).
    fn open_path(&mut self, path: PathBuf) {
        if let Err(e) = self.files.open(path) {
            self.log.error(e);
        }
    }

    fn open_dialog(&self, kind: OpenKind) {
        let dataset = self.session.dataset.as_ref();
        let start = dataset.and_then(|d| d.path.parent().map(Path::to_path_buf));
        self.files.open_dialog(kind, start);
    }

    fn save_dialog(&mut self, kind: SaveKind) {
        let extension = if kind == SaveKind::Export { "ply" } else { "ckpt" };
        match self.session.output_path(extension) {
            Some(path) => self.files.save_dialog(kind, path),
            None => self.log.warning("Start a run first."),
        }
    }

    pub(super) fn load_dataset(&mut self, path: PathBuf) {
        // Drop our handle on the old images before the trainer reads the new ones.
        self.session.dataset = None;
        self.viewport.forget_dataset();
        self.session.init = None;
        // The task lets a failed run's kept splats go with the old dataset.
        self.session.kept = None;
        self.session.loading = Some(path.clone());
        self.log.info(format!("Loading {}", path.display()));
        self.send(Command::LoadDataset { path, options: self.settings.next.load.clone() });
    }

    /// Space: start, pause or resume, whichever makes sense.
    fn toggle_training(&mut self) {
        match self.session.task_state {
            TaskState::Ready => self.start(),
            TaskState::Training => self.send(Command::Pause),
            TaskState::Paused => {
                if let Some(run) = self.session.run.as_mut().filter(|r| r.finished()) {
                    // Continue past the plan: as many steps again as the settings say.
                    run.planned_steps = run.step() + self.settings.next.train.steps;
                    let steps = run.planned_steps;
                    self.send(Command::SetSteps { steps });
                }
                self.send(Command::Resume);
            }
            TaskState::Empty | TaskState::Loading => {
                self.log.warning("Open a dataset first (Ctrl+O, or drop a folder or .zip here).");
            }
        }
    }

    pub(super) fn start(&mut self) {
        if self.session.task_state != TaskState::Ready {
            let state = self.session.task_state;
            self.log.warning(format!("Cannot start while {state:?}."));
            return;
        }
        self.send(Command::SetMemoryBudget { bytes: self.settings.next.budget_bytes() });
        self.send(Command::Start { config: self.settings.next.train.clone() });
        self.session.show_file = false;
    }

    /// Ctrl+N: tear the run down and start again from the init with the current settings.
    fn new_run(&mut self) {
        match self.session.task_state {
            TaskState::Ready => self.start(),
            TaskState::Training | TaskState::Paused => {
                self.send(Command::SetMemoryBudget { bytes: self.settings.next.budget_bytes() });
                self.send(Command::NewRun { config: Some(self.settings.next.train.clone()) });
                self.session.show_file = false;
            }
            TaskState::Empty | TaskState::Loading => {
                self.log.warning("Open a dataset first (Ctrl+O).");
            }
        }
    }

    /// The up an export is levelled to −y by: the dataset cameras', when the setting is on.
    fn export_up(&self) -> Option<[f32; 3]> {
        let dataset = self.session.dataset.as_ref().filter(|_| self.training.level_exports)?;
        Some(dataset.up.to_array())
    }

    /// Ctrl+E: the run's splats as PLY into the exports folder.
    fn export_ply(&mut self) {
        match self.session.output_path("ply") {
            Some(path) => self.export(path),
            None => self.log.warning("Nothing to export: start a run first."),
        }
    }

    /// The run's splats, cropped and levelled as the panes say, into `path`.
    pub(super) fn export(&mut self, path: PathBuf) {
        let (up, keep) = (self.export_up(), self.crop.keep().clone());
        self.send(Command::Export { path, up, keep });
    }

    /// "Hide likely floaters": asks the task for the dense scene's cells, which the crop
    /// keeps when they come (an undo step of its own).
    pub fn hide_likely_floaters(&mut self) {
        self.send(Command::FindSceneCells);
    }

    /// Ctrl+S: a checkpoint into the exports folder.
    fn save_checkpoint(&mut self) {
        match self.session.output_path("ckpt") {
            Some(path) => self.checkpoint(path),
            None => self.log.warning("Nothing to save: start a run first."),
        }
    }

    /// A checkpoint of the run, with the crop, into `path`.
    pub(super) fn checkpoint(&mut self, path: PathBuf) {
        let crop = self.crop.keep().clone();
        self.send(Command::SaveCheckpoint { path, crop });
    }

    /// Starts a video of what the viewport shows (the run's splats or a file's, with the
    /// crop) into the exports folder: once round the scene, or along the keyframes.
    fn start_video(&mut self, motion: VideoMotion) {
        if self.video.busy() {
            return;
        }
        let suffix = match motion {
            VideoMotion::Turntable => "turntable",
            VideoMotion::Path => "path",
        };
        if let Some(subject) = self.video_subject(&format!("{suffix}.mp4")) {
            self.video.start(motion, subject, self.crop.keep(), &self.gpu, &mut self.log);
        }
    }

    /// What a video films (the splats the viewport shows: a file's, or the run's), the
    /// scene's framing for a turntable, and the path `NAME-{suffix}` it goes to (beside the
    /// file, or in the exports folder); `None`, with a warning, when nothing is shown.
    fn video_subject(&mut self, suffix: &str) -> Option<VideoSubject> {
        if let Some(file) = self.session.shown_file() {
            let dir =
                self.session.out.clone().or_else(|| file.path.parent().map(Path::to_path_buf))?;
            let stem = file.path.file_stem()?.to_string_lossy().into_owned();
            let (center, radius) = file.focus;
            let up = splat_trainer::render::view_controller::DEFAULT_UP;
            return Some(VideoSubject {
                splats: Arc::clone(&file.splats),
                framing: (center, radius, up),
                path: dir.join(format!("{stem}-{suffix}")),
            });
        }
        let session = &self.session;
        let (Some(latest), Some(dataset), Some(path)) =
            (self.task.viewer().latest(), session.dataset.as_ref(), session.output_path("mp4"))
        else {
            self.log.warning("Nothing to film: start a run or open a splat file first.");
            return None;
        };
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Some(VideoSubject {
            splats: latest.splats,
            framing: (dataset.focus.0, dataset.focus.1, dataset.up),
            path: path.with_file_name(format!("{name}-{suffix}")),
        })
    }

    /// Adds a keyframe of the camera path where the viewport's camera is.
    fn add_keyframe(&mut self) {
        if let Some(camera) = self.viewport.requested_camera {
            self.video.add_keyframe(&camera, &mut self.log);
        }
    }

    /// Writes the camera path to the exports folder as the file `render --path` reads.
    fn save_camera_path(&mut self) {
        if let Some(subject) = self.video_subject("path.json") {
            self.video.save_camera_path(subject.path, &mut self.log);
        }
    }

    /// Help → Self-test: starts it on the window's device (one at a time).
    fn start_self_test(&mut self, ctx: &egui::Context) {
        if self.self_test.as_ref().is_some_and(SelfTestWindow::is_running) {
            return;
        }
        match SelfTestWindow::start(self.gpu.clone(), self.settings.budget(), ctx.clone()) {
            Ok(window) => {
                self.log.info(if self.session.task_state == TaskState::Training {
                    "Self-test started (about a minute; training goes on meanwhile)."
                } else {
                    "Self-test started (about a minute)."
                });
                self.self_test = Some(window);
            }
            Err(e) => self.log.error(format!("cannot start the self-test: {e}")),
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
                self.log.info(summary);
                for warning in warnings {
                    self.log.warning(warning);
                }
                if self.session.running() {
                    // Opening it would end the run: the user opens it when they choose.
                    self.log.info(format!(
                        "The run goes on; open {} (drop it or File / Open) to train on it.",
                        dataset.display()
                    ));
                } else {
                    self.load_dataset(dataset);
                }
            }
            poses::Action::Ended(Ok(message)) => self.log.info(message),
            poses::Action::Ended(Err(message)) => self.log.error(message),
        }
    }

    /// Handles what the other threads sent since the last frame.
    fn poll(&mut self) {
        for _ in 0..EVENTS_PER_FRAME {
            let Some(event) = self.task.try_event() else { break };
            self.on_task_event(event);
        }
        while let Some(event) = self.files.try_event() {
            self.on_file_event(event);
        }
        if let Some(e) = self.viewer.take_error() {
            self.log.error(e);
        }
        self.video.poll(&mut self.log);
    }

    // ---- For tests and scripts ---------------------------------------------------------

    /// Jumps to a dataset camera (its image shows beside the render).
    pub fn jump_to_camera(&mut self, index: usize) {
        self.viewport.jump_to_camera(&self.session, index);
    }

    /// Crops the view and the exports (as the Crop panel does).
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
        self.training.level_exports = on;
    }

    /// The length and frame size of the next turntable video (the panel's fields).
    pub fn set_video(&mut self, seconds: f64, size: (u32, u32)) {
        self.video.seconds = seconds;
        self.video.size = size;
    }

    /// A summary for tests.
    #[must_use]
    pub fn ui_state(&self) -> UiState {
        let session = &self.session;
        let frame = self.viewer.frame();
        UiState {
            task: session.task_state,
            dataset: session.dataset.as_ref().map(|d| d.path.clone()),
            init: session.init.clone(),
            run: session.run.as_ref().map(|r| r.id),
            step: session.run.as_ref().map_or(0, RunInfo::step),
            viewing_file: session.viewed_file.as_ref().map(|f| f.path.clone()),
            exported: self.exported.clone(),
            videos: self.video.videos.clone(),
            camera_paths: self.video.keyframes.saved.clone(),
            keyframes: self.video.keyframes.len(),
            checkpoints: self.checkpoints.clone(),
            errors: self.log.errors().to_vec(),
            frame: frame.as_ref().map(|f| f.run_step),
            frame_splats: frame.as_ref().map_or(0, |f| f.splats),
            frame_current: frame
                .as_ref()
                .is_some_and(|f| Some(f.camera) == self.viewport.requested_camera),
            self_test: self.self_test.as_ref().and_then(SelfTestWindow::passed),
            poses_window: self.poses.is_some(),
            crop: self.crop.keep().clone(),
            crop_handles: self.viewport.layout.crop_handles.clone(),
            viewport: self.viewport.layout.rect,
        }
    }

    /// Clears the notification over the viewport (tests take snapshots without it).
    pub fn clear_notification(&mut self) {
        self.log.clear_toast();
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
        let mut input = Vec::new();
        menu::input(ui.ctx(), &mut input);
        for event in input {
            self.route(ui.ctx(), event);
        }
        for event in self.draw(ui) {
            self.route(ui.ctx(), event);
        }
        self.self_test_window(ui.ctx());
        self.poses_window(ui.ctx());
        if matches!(self.session.task_state, TaskState::Loading | TaskState::Training) {
            // Progress and the viewport change continuously; events also wake us.
            ui.ctx().request_repaint_after(Duration::from_millis(100));
        }
        if self.log.toast().is_some() {
            ui.ctx().request_repaint_after(Duration::from_millis(500));
        }
        if self.video.busy() {
            ui.ctx().request_repaint_after(Duration::from_millis(200));
        }
    }
}
