//! Drawing: menu, training panel, viewport, plots, memory panel, log; and the keyboard.

use egui::{Color32, Key, KeyboardShortcut, Modifiers, RichText, Sense, Vec2};
use egui_plot::{Legend, Line, Plot, PlotPoints};
use splat_trainer::appearance::Compensation;
use splat_trainer::config::{DEFAULT_ALPHA_LOSS_WEIGHT, Progressive, Transparency};
use splat_trainer::densify::Strategy;
use splat_trainer::render::{Category, Owner, ShPrecision};
use splat_trainer::task::TaskState;

use super::app::{Level, RunInfo, SplatApp, ViewMode};
use super::crop::{Select, Tool};
use super::crop_handles;
use super::files::{OpenKind, SaveKind};
use super::viewer;
use crate::human_bytes;
use splat_trainer::formats::filter::{MAX_SELECTIONS, MAX_STROKE_POINTS, Selection};

/// A grid row: `label` (with its tooltip), and a combo box setting `value` to one of
/// `choices` (value, text).
fn choice_row<T: PartialEq + Copy>(
    ui: &mut egui::Ui,
    (label, hint): (&str, Option<&str>),
    enabled: bool,
    value: &mut T,
    choices: &[(T, &str)],
) {
    let label_response = ui.label(label);
    ui.add_enabled_ui(enabled, |ui| {
        let selected = choices.iter().find(|(choice, _)| choice == value).map_or("", |c| c.1);
        let response = egui::ComboBox::from_id_salt(label)
            .selected_text(selected)
            .show_ui(ui, |ui| {
                for &(choice, text) in choices {
                    ui.selectable_value(value, choice, text);
                }
            })
            .response
            .labelled_by(label_response.id);
        if let Some(hint) = hint {
            response.on_hover_text(hint);
        }
    });
    ui.end_row();
}

/// What the strategies do, for the strategy setting's tooltip.
const STRATEGY_HINT: &str = "How splats grow and go. Compact (the default): 3DGS's rules with \
    growth paced and unneeded splats faded out: a fraction of the splats for a picture as good \
    on most captures (smaller files, faster steps). 3DGS: the original adaptive density control, grows wherever \
    the gradients are high. MCMC: relocates faint splats and grows to the max splats";

/// What the SH precision setting does, for its tooltip.
const SH_PRECISION_HINT: &str = "How the view-dependent colour (SH bands 1-3) and its optimizer \
    state are stored on the GPU: f16 takes 252 fewer bytes a splat at degree 3";

/// Height of the plots (and so of the bottom panel), in points.
const PLOT_HEIGHT: f32 = 190.0;
const OPEN: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::O);
const NEW_RUN: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::N);
const EXPORT: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::E);
const SAVE: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::S);
/// Fly speed keys: camera axes x right, y down, z forward.
const FLY_KEYS: [(Key, [f32; 3]); 6] = [
    (Key::W, [0.0, 0.0, 1.0]),
    (Key::S, [0.0, 0.0, -1.0]),
    (Key::A, [-1.0, 0.0, 0.0]),
    (Key::D, [1.0, 0.0, 0.0]),
    (Key::Q, [0.0, 1.0, 0.0]),
    (Key::E, [0.0, -1.0, 0.0]),
];

fn duration(seconds: f64) -> String {
    let s = seconds.round() as u64;
    if s >= 3600 {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl SplatApp {
    /// Keys and dropped files (the viewport's fly keys are read where it is drawn).
    pub(super) fn handle_input(&mut self, ctx: &egui::Context) {
        let dropped: Vec<_> =
            ctx.input(|i| i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).collect());
        for path in dropped {
            self.open_path(path);
        }
        let typing = ctx.egui_wants_keyboard_input();
        let (open, new_run, export, save) = ctx.input_mut(|i| {
            (
                i.consume_shortcut(&OPEN),
                i.consume_shortcut(&NEW_RUN),
                i.consume_shortcut(&EXPORT),
                i.consume_shortcut(&SAVE),
            )
        });
        let space = !typing && ctx.input_mut(|i| i.consume_key(Modifiers::NONE, Key::Space));
        if open {
            self.open_dialog(OpenKind::Dataset);
        }
        if new_run {
            self.new_run();
        }
        if export {
            self.export_ply();
        }
        if save {
            self.save_checkpoint();
        }
        if space {
            self.toggle_training();
        }
    }

    pub(super) fn draw(&mut self, ui: &mut egui::Ui) {
        egui::Panel::top("menu").show(ui, |ui| self.menu(ui));
        egui::Panel::bottom("status").show(ui, |ui| self.status_bar(ui));
        egui::Panel::left("training").resizable(true).default_size(300.0).show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| self.training_panel(ui));
        });
        if self.panels.memory || self.panels.log {
            egui::Panel::right("side").resizable(true).default_size(340.0).show(ui, |ui| {
                if self.panels.log {
                    let log = egui::Panel::bottom("log").resizable(true).default_size(260.0);
                    if self.panels.memory {
                        log.show(ui, |ui| self.log_panel(ui));
                    } else {
                        egui::CentralPanel::default().show(ui, |ui| self.log_panel(ui));
                    }
                }
                if self.panels.memory {
                    egui::ScrollArea::vertical().show(ui, |ui| self.memory_panel(ui));
                }
            });
        }
        if self.panels.plots {
            egui::Panel::bottom("plots").resizable(false).show(ui, |ui| self.plots(ui));
        }
        egui::CentralPanel::default().show(ui, |ui| self.viewport(ui));
    }

    fn menu(&mut self, ui: &mut egui::Ui) {
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                if ui.add(egui::Button::new("Open dataset…").shortcut_text("Ctrl+O")).clicked() {
                    self.open_dialog(OpenKind::Dataset);
                }
                if ui.button("Open dataset folder…").clicked() {
                    self.open_dialog(OpenKind::DatasetFolder);
                }
                if ui.button("Open splat file to view…").clicked() {
                    self.open_dialog(OpenKind::SplatFile);
                }
                if ui.button("Use point cloud as init.ply…").clicked() {
                    self.open_dialog(OpenKind::InitPly);
                }
                ui.separator();
                if ui.add(egui::Button::new("Export PLY").shortcut_text("Ctrl+E")).clicked() {
                    self.export_ply();
                }
                if ui.button("Export as…").clicked() {
                    self.save_dialog(SaveKind::Export);
                }
                if ui.add(egui::Button::new("Save checkpoint").shortcut_text("Ctrl+S")).clicked() {
                    self.save_checkpoint();
                }
                if ui.button("Save checkpoint as…").clicked() {
                    self.save_dialog(SaveKind::Checkpoint);
                }
                if ui.button("Load checkpoint…").clicked() {
                    self.open_dialog(OpenKind::Checkpoint);
                }
                ui.separator();
                if ui.button("Quit").clicked() {
                    ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
                }
            });
            ui.menu_button("View", |ui| {
                ui.checkbox(&mut self.panels.plots, "Plots");
                ui.checkbox(&mut self.panels.log, "Log");
                ui.checkbox(&mut self.panels.memory, "Memory");
                if ui.button("Reset camera").clicked() {
                    self.reset_view();
                }
            });
            ui.menu_button("Help", |ui| {
                if ui
                    .button("Self-test")
                    .on_hover_text(
                        "Check the rasterizer and training on this GPU against the CPU \
                         reference (about a minute); the report can go with a bug report.",
                    )
                    .clicked()
                {
                    self.start_self_test(ui.ctx());
                }
                ui.separator();
                ui.label(
                    "Space: start / pause / resume\nCtrl+N: new run\nCtrl+E: export PLY\n\
                     Ctrl+S: save checkpoint\nCtrl+O: open\n\nViewport: drag to orbit, \
                     right-drag to pan, scroll to zoom, Ctrl+drag to look around, \
                     W A S D Q E to fly, double-click to reset.\n\nDrop a dataset folder or \
                     .zip, a folder of photos or a video (camera poses by COLMAP), a splat \
                     file to view, a point-cloud .ply (init.ply) or a checkpoint onto the \
                     window.",
                );
            });
        });
    }

    fn status_bar(&self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.label(format!("{:?}", self.task_state));
            if let Some(run) = &self.run {
                ui.separator();
                ui.label(format!("run {} · step {}/{}", run.id, run.step(), run.planned_steps));
            }
            if let Some(snapshot) = &self.memory {
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

    fn training_panel(&mut self, ui: &mut egui::Ui) {
        self.dataset_section(ui);
        ui.separator();
        self.settings_section(ui);
        ui.separator();
        self.training_section(ui);
        ui.separator();
        ui.heading("View");
        self.view_controls(ui);
        ui.separator();
        ui.heading("Crop");
        let focus = match (&self.viewed_file, &self.dataset) {
            (Some(file), _) if self.show_file || self.run.is_none() => Some(file.focus),
            (_, Some(d)) => Some(d.focus),
            _ => None,
        };
        self.crop.ui(ui, focus);
        if ui
            .add_enabled(self.run.is_some(), egui::Button::new("Hide likely floaters"))
            .on_hover_text(
                "Hides the small clusters of splats apart from the dense scene, wherever \
                 they are (Undo shows them again)",
            )
            .clicked()
        {
            self.hide_likely_floaters();
        }
    }

    fn dataset_section(&mut self, ui: &mut egui::Ui) {
        ui.heading("Dataset");
        match (&self.dataset, &self.loading) {
            (_, Some(path)) => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(format!("Loading {}", file_name(path)));
                });
            }
            (Some(loaded), None) => {
                ui.label(RichText::new(file_name(&loaded.path)).strong())
                    .on_hover_text(loaded.path.display().to_string());
                let d = &loaded.dataset;
                let (w, h) = d.train.first().map_or((0, 0), |v| (v.camera.width, v.camera.height));
                ui.label(format!(
                    "{} · {} train + {} eval views · {w}×{h}",
                    d.format.name(),
                    d.train.len(),
                    d.eval.len()
                ));
                let init = match (&self.init, &d.init_points) {
                    (Some(path), _) => format!("init: {}", file_name(path)),
                    (None, Some(points)) if !points.is_empty() => {
                        format!("init: {} dataset points", points.len())
                    }
                    _ => "init: random points".into(),
                };
                ui.label(init);
            }
            (None, None) => {
                ui.label("Drop a dataset folder or .zip here, or press Ctrl+O.");
            }
        }
        if ui.button("Open…").clicked() {
            self.open_dialog(OpenKind::Dataset);
        }
    }

    fn settings_section(&mut self, ui: &mut egui::Ui) {
        ui.heading("Settings");
        let editable = matches!(self.task_state, TaskState::Ready | TaskState::Empty);
        let settings_before = self.settings.clone();
        let default_budget = format!("Default: {}", self.default_budget);
        egui::Grid::new("settings").num_columns(2).striped(true).show(ui, |ui| {
            let settings = &mut self.settings;
            let label = ui.label("Steps");
            ui.add(egui::DragValue::new(&mut settings.train.steps).range(1..=1_000_000).speed(100))
                .labelled_by(label.id);
            ui.end_row();
            strategy_row(ui, editable, &mut settings.train.strategy);
            let label = ui.label("Max splats");
            ui.add_enabled(
                editable,
                egui::DragValue::new(&mut settings.train.max_splats)
                    .range(1..=20_000_000)
                    .speed(1000),
            )
            .labelled_by(label.id);
            ui.end_row();
            let label = ui.label("SH degree");
            ui.add_enabled(editable, egui::Slider::new(&mut settings.train.sh_degree, 0..=3))
                .labelled_by(label.id);
            ui.end_row();
            let precisions = [ShPrecision::F32, ShPrecision::F16].map(|p| (p, p.name()));
            let label = ("SH precision", Some(SH_PRECISION_HINT));
            choice_row(ui, label, editable, &mut settings.train.sh_precision, &precisions);
            let label = ui.label("Resolution");
            ui.add(
                egui::DragValue::new(&mut settings.load.max_resolution)
                    .range(16..=8192)
                    .speed(8)
                    .suffix(" px"),
            )
            .labelled_by(label.id)
            .on_hover_text("Longest image side; applied when the dataset is (re)loaded");
            ui.end_row();
            ui.label("Masks");
            ui.checkbox(&mut settings.load.alpha_as_mask, "Alpha as mask").on_hover_text(
                "Leave out the pixels a transparent image's alpha is 0 at, instead of \
                 compositing them over the background; applied when the dataset is (re)loaded",
            );
            ui.end_row();
            transparency_row(ui, editable, &mut settings.train.transparency);
            progressive_row(ui, editable, &mut settings.train.progressive);
            appearance_row(ui, editable, &mut settings.train.appearance);
            let label = ui.label("Eval every");
            ui.add(
                egui::DragValue::new(&mut settings.train.eval_every)
                    .range(0..=100_000)
                    .suffix(" steps"),
            )
            .labelled_by(label.id);
            ui.end_row();
            let label = ui.label("Memory budget");
            ui.add_enabled(
                editable,
                egui::DragValue::new(&mut settings.memory_budget_mib)
                    .range(64..=1 << 20)
                    .speed(16)
                    .suffix(" MiB"),
            )
            .on_hover_text(default_budget)
            .labelled_by(label.id);
            ui.end_row();
        });
        if self.settings.train.steps != settings_before.train.steps
            && let Some(run) = self.run.as_mut()
            && matches!(self.task_state, TaskState::Training | TaskState::Paused)
        {
            // Steps can change during a run.
            run.planned_steps = self.settings.train.steps;
            let steps = self.settings.train.steps;
            if let Err(e) = self.task.send(splat_trainer::task::Command::SetSteps { steps }) {
                self.error(format!("the trainer did not take the command: {e}"));
            }
        }
        // What a run on the loaded dataset would reach (nothing to say without one).
        if self.dataset.is_some() {
            let splats = match self.expected_splats() {
                Some(most) => format!("Splats: up to {most} with these settings"),
                None => {
                    format!(
                        "Splats: as many as the images ask, up to {}",
                        self.settings.train.max_splats
                    )
                }
            };
            ui.label(splats);
        }
        if let Some((peak, fits)) = self.predicted() {
            let budget = self.settings.budget_bytes();
            let text = format!("Predicted peak {} of {}", human_bytes(peak), human_bytes(budget));
            if peak > budget {
                ui.colored_label(Color32::from_rgb(230, 160, 40), text)
                    .on_hover_text(format!("Over budget: the run will be capped at {fits} splats"));
            } else {
                ui.label(text);
            }
        }
        self.reload_button(ui);
    }

    /// A button to reload the dataset when it was loaded otherwise than the settings now say
    /// (a larger image than the resolution asks for, or the other alpha handling).
    fn reload_button(&mut self, ui: &mut egui::Ui) {
        let wanted = self.settings.load.clone();
        let stale = self.dataset.as_ref().is_some_and(|d| {
            let loaded = &d.dataset.options;
            let side = d.dataset.train.first().map_or(0, |v| v.camera.width.max(v.camera.height));
            loaded.alpha_as_mask != wanted.alpha_as_mask || side > wanted.max_resolution
        });
        if stale && ui.button("Reload with these settings").clicked() {
            self.reload_dataset();
        }
    }

    fn training_section(&mut self, ui: &mut egui::Ui) {
        ui.heading("Training");
        ui.horizontal_wrapped(|ui| {
            let state = self.task_state;
            if ui.add_enabled(state == TaskState::Ready, egui::Button::new("Start")).clicked() {
                self.start();
            }
            match state {
                TaskState::Training => {
                    if ui.button("Pause").clicked() {
                        self.pause();
                    }
                }
                TaskState::Paused => {
                    if ui.button("Resume").clicked() {
                        self.toggle_training();
                    }
                }
                _ => {
                    ui.add_enabled(false, egui::Button::new("Pause"));
                }
            }
            let running = matches!(state, TaskState::Training | TaskState::Paused);
            if ui.add_enabled(running, egui::Button::new("Stop")).clicked() {
                self.stop();
            }
            if ui
                .add_enabled(running || state == TaskState::Ready, egui::Button::new("New run"))
                .on_hover_text("Ctrl+N: start again from the init with these settings")
                .clicked()
            {
                self.new_run();
            }
        });
        if let Some(run) = &self.run {
            let step = run.step();
            let fraction = step as f32 / run.planned_steps.max(1) as f32;
            ui.add(
                egui::ProgressBar::new(fraction).text(format!("{step} / {}", run.planned_steps)),
            );
            match self.task_state {
                TaskState::Training => {
                    let rate = run.steps_per_second();
                    ui.label(format!(
                        "{} · ETA {}",
                        rate.map_or_else(|| "– steps/s".into(), |r| format!("{r:.1} steps/s")),
                        run_eta(run)
                    ));
                }
                TaskState::Paused if step >= run.planned_steps => {
                    ui.label("Finished: export it, or press Space to train on.");
                }
                _ => {
                    ui.label("Paused.");
                }
            }
            if let (Some(last), Some(metrics)) = (run.last, run.last_metrics) {
                ui.label(format!(
                    "loss {:.4} · train PSNR {:.2} dB · {} splats",
                    metrics.loss, metrics.train_psnr, last.splats
                ));
                let [width, height] = last.image_size;
                ui.label(format!("training at {width}×{height} px"));
            }
            if let Some(psnr) = self.history.eval_psnr.last() {
                ui.label(format!("eval PSNR {psnr:.2} dB"));
            }
        }
        ui.horizontal_wrapped(|ui| {
            let has_run = self.run.is_some();
            let has_splats = has_run || self.kept.is_some();
            if ui.add_enabled(has_splats, egui::Button::new("Export PLY")).clicked() {
                self.export_ply();
            }
            if ui.add_enabled(has_splats, egui::Button::new("Export…")).clicked() {
                self.save_dialog(SaveKind::Export);
            }
            if ui.add_enabled(has_run, egui::Button::new("Save checkpoint")).clicked() {
                self.save_checkpoint();
            }
            self.video_controls(ui, has_splats);
            ui.checkbox(&mut self.level_exports, "Level exports").on_hover_text(
                "Turn exported splats so that the cameras' up is −y, the up of 3DGS files and \
                 web viewers. Checkpoints keep the dataset's frame.",
            );
            let has_dataset = self.dataset.is_some();
            if ui.add_enabled(has_dataset, egui::Button::new("Load checkpoint…")).clicked() {
                self.open_dialog(OpenKind::Checkpoint);
            }
        });
        if let Some(dir) = self.exports_dir() {
            ui.small(format!("Exports go to {}", dir.display()));
        }
    }

    fn view_controls(&mut self, ui: &mut egui::Ui) {
        if let Some(file) = &self.viewed_file {
            let name = file_name(&file.path);
            ui.horizontal(|ui| {
                ui.radio_value(&mut self.show_file, false, "Training run");
                ui.radio_value(&mut self.show_file, true, name);
            });
        }
        let names: Vec<String> = self
            .dataset
            .as_ref()
            .map(|d| d.dataset.views().map(|v| v.name.clone()).collect())
            .unwrap_or_default();
        let selected = match self.view_mode {
            ViewMode::Free => "Free camera".to_string(),
            ViewMode::DatasetCamera(i) => names.get(i).cloned().unwrap_or_default(),
        };
        let mut jump = None;
        egui::ComboBox::from_label("Camera").selected_text(selected).height(400.0).show_ui(
            ui,
            |ui| {
                if ui.selectable_label(self.view_mode == ViewMode::Free, "Free camera").clicked() {
                    self.view_mode = ViewMode::Free;
                }
                for (i, name) in names.iter().enumerate() {
                    let on = self.view_mode == ViewMode::DatasetCamera(i);
                    if ui.selectable_label(on, name).clicked() {
                        jump = Some(i);
                    }
                }
            },
        );
        if let Some(i) = jump {
            self.jump_to_camera(i);
        }
        ui.horizontal(|ui| {
            if ui.add_enabled(!names.is_empty(), egui::Button::new("< Previous")).clicked() {
                self.step_camera(names.len(), -1);
            }
            if ui.add_enabled(!names.is_empty(), egui::Button::new("Next >")).clicked() {
                self.step_camera(names.len(), 1);
            }
            if ui.button("Reset").clicked() {
                self.reset_view();
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("Render scale");
            ui.add(egui::Slider::new(&mut self.render_scale, 0.25..=1.0).fixed_decimals(2))
                .labelled_by(label.id);
        });
    }

    /// Turntable video: the button and its length, or the running video's progress and
    /// Cancel.
    fn video_controls(&mut self, ui: &mut egui::Ui, has_splats: bool) {
        if let Some(job) = &self.video {
            let (rendered, encoded, total) = job.progress();
            let (done, what) =
                if rendered < total { (rendered, "rendering") } else { (encoded, "encoding") };
            ui.add(
                egui::ProgressBar::new(done as f32 / total.max(1) as f32)
                    .desired_width(140.0)
                    .text(format!("video: {what} {done}/{total}")),
            );
            if ui.add_enabled(!job.cancelled(), egui::Button::new("Cancel video")).clicked() {
                job.cancel();
            }
            return;
        }
        let can_film = has_splats || self.viewed_file.is_some();
        if ui
            .add_enabled(can_film, egui::Button::new("Turntable video"))
            .on_hover_text(
                "Once round the scene into an .mp4 in the exports folder (ffmpeg), as shown: crop \
             included",
            )
            .clicked()
        {
            self.start_turntable_video();
        }
        ui.add(egui::DragValue::new(&mut self.video_seconds).range(1.0..=120.0).suffix(" s"));
        self.camera_path_controls(ui, can_film);
    }

    /// The camera path: keyframes placed where the viewport's camera is, and its video.
    fn camera_path_controls(&mut self, ui: &mut egui::Ui, can_film: bool) {
        ui.horizontal(|ui| {
            if ui
                .add_enabled(self.requested_camera.is_some(), egui::Button::new("Add keyframe"))
                .on_hover_text(
                    "A keyframe of a camera path where the view is now: the path video goes \
                     smoothly through them, in order",
                )
                .clicked()
            {
                self.add_keyframe();
            }
            ui.add(
                egui::DragValue::new(&mut self.keyframes.gap)
                    .range(0.1..=60.0)
                    .speed(0.1)
                    .suffix(" s apart"),
            )
            .on_hover_text("Seconds from one keyframe to the next one added");
        });
        if self.keyframes.is_empty() {
            return;
        }
        ui.label(format!("{} keyframes, {} s", self.keyframes.len(), self.keyframes.duration()));
        ui.horizontal(|ui| {
            let has_path = self.keyframes.len() >= 2;
            if ui
                .add_enabled(can_film && has_path, egui::Button::new("Path video"))
                .on_hover_text("Along the keyframes into an .mp4 in the exports folder (ffmpeg)")
                .clicked()
            {
                self.start_path_video();
            }
            if ui
                .add_enabled(has_path, egui::Button::new("Save path"))
                .on_hover_text("The path as a file for splatforge render --path")
                .clicked()
            {
                self.save_camera_path();
            }
            if ui.button("Remove last").clicked() {
                self.keyframes.remove_last();
            }
            if ui.button("Clear").clicked() {
                self.keyframes.clear();
            }
        });
    }

    fn step_camera(&mut self, count: usize, delta: isize) {
        let current = match self.view_mode {
            ViewMode::DatasetCamera(i) => i as isize,
            ViewMode::Free => -1,
        };
        let next = (current + delta).rem_euclid(count as isize) as usize;
        self.jump_to_camera(next);
    }

    fn reset_view(&mut self) {
        let focus = match (&self.viewed_file, &self.dataset) {
            (Some(file), _) if self.show_file || self.run.is_none() => Some(file.focus),
            (_, Some(d)) => Some(d.focus),
            _ => None,
        };
        let up = self.dataset.as_ref().map_or(glam::Vec3::NEG_Y, |d| d.up);
        if let Some((center, radius)) = focus {
            self.view =
                splat_trainer::render::view_controller::ViewController::framing(center, radius, up);
        }
        self.view_mode = ViewMode::Free;
    }

    /// The viewer's last frame in `rect` (centred at its aspect), or a hint where there is
    /// none to show.
    fn paint_frame(&self, painter: &egui::Painter, rect: egui::Rect, pixels: f32, nothing: bool) {
        painter.rect_filled(rect, 0.0, Color32::BLACK);
        match self.viewer.frame() {
            Some(frame) if !nothing => {
                // Centred at the frame's aspect (a dataset camera's may differ from the rect's).
                let size = Vec2::new(frame.width as f32, frame.height as f32) / pixels;
                let image_rect = egui::Rect::from_center_size(rect.center(), size);
                painter.image(
                    frame.texture,
                    image_rect,
                    egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
                    Color32::WHITE,
                );
                // Run 0 is the trainer's preview of the initial splats.
                if self.task_state == TaskState::Ready && frame.run_step == Some((0, 0)) {
                    painter.text(
                        rect.center_bottom() - Vec2::new(0.0, 16.0),
                        egui::Align2::CENTER_BOTTOM,
                        "Initial splats: Space to train",
                        egui::FontId::proportional(16.0),
                        Color32::GRAY,
                    );
                }
            }
            _ => {
                let hint = match self.task_state {
                    TaskState::Loading => "Loading…",
                    TaskState::Ready => "Press Space (or Start) to train.",
                    TaskState::Empty => "Drop a dataset folder or .zip, or a splat file.",
                    _ => "Waiting for the first splats…",
                };
                painter.text(
                    rect.center(),
                    egui::Align2::CENTER_CENTER,
                    hint,
                    egui::FontId::proportional(18.0),
                    Color32::GRAY,
                );
            }
        }
    }

    fn viewport(&mut self, ui: &mut egui::Ui) {
        let available = ui.available_size();
        let ground_truth = match self.view_mode {
            ViewMode::DatasetCamera(i) => self.ground_truth_texture(ui.ctx(), i),
            ViewMode::Free => None,
        };
        // Side by side with the ground truth when looking through a dataset camera.
        let render_size = if ground_truth.is_some() {
            Vec2::new(available.x / 2.0, available.y)
        } else {
            available
        };
        let (rect, response) = ui.allocate_exact_size(render_size, Sense::click_and_drag());
        self.layout.rect = [rect.left(), rect.top(), rect.width(), rect.height()];
        self.camera_input(ui, &response, rect);

        let pixels = ui.ctx().pixels_per_point() * self.render_scale;
        let (w, h) = ((rect.width() * pixels) as u32, (rect.height() * pixels) as u32);
        let source = self.source();
        let nothing = matches!(source, viewer::Source::Nothing);
        self.requested_camera = self.viewport_camera(w, h);
        if let Some(camera) = self.requested_camera {
            let keep = self.crop.keep().clone();
            self.viewer.request(viewer::Request { source, camera, background: [0.0; 3], keep });
        }
        self.paint_frame(&ui.painter_at(rect), rect, pixels, nothing);
        self.layout.crop_handles.clear();
        if let Some(camera) = self.requested_camera.filter(|_| !nothing) {
            let center = glam::Vec2::new(rect.center().x, rect.center().y);
            let screen = super::screen::Screen { camera, center, pixels };
            self.keyframes.draw(&ui.painter_at(rect), &screen);
            let dragged = crop_handles::ui(
                ui,
                rect,
                self.crop.keep(),
                &screen,
                &mut self.layout.crop_handles,
            );
            if let Some(keep) = dragged {
                self.crop.set(&keep);
            }
        }
        self.paint_selecting(ui, &ui.painter_at(rect), rect);
        if let Some((texture, size)) = ground_truth {
            let gt_rect = egui::Rect::from_min_size(
                rect.right_top(),
                Vec2::new(available.x - rect.width(), available.y),
            );
            let scale = (gt_rect.width() / size.x).min(gt_rect.height() / size.y);
            let image_rect = egui::Rect::from_center_size(gt_rect.center(), size * scale);
            ui.painter().image(
                texture,
                image_rect,
                egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
                Color32::WHITE,
            );
            ui.painter().text(
                gt_rect.left_top() + Vec2::new(8.0, 8.0),
                egui::Align2::LEFT_TOP,
                "ground truth",
                egui::FontId::proportional(14.0),
                Color32::LIGHT_GRAY,
            );
        }
        if let Some((level, text)) = self.current_toast() {
            let color = if level == Level::Error {
                Color32::from_rgb(200, 60, 60)
            } else {
                Color32::from_rgb(200, 150, 40)
            };
            let toast = egui::Rect::from_min_size(
                rect.left_top() + Vec2::new(8.0, 8.0),
                Vec2::new((rect.width() - 16.0).max(0.0), 28.0),
            );
            ui.painter().rect_filled(toast, 4.0, color.gamma_multiply(0.9));
            ui.painter().text(
                toast.left_center() + Vec2::new(8.0, 0.0),
                egui::Align2::LEFT_CENTER,
                text,
                egui::FontId::proportional(14.0),
                Color32::WHITE,
            );
        }
        if ui.ctx().input(|i| !i.raw.hovered_files.is_empty()) {
            ui.painter().rect_filled(rect, 0.0, Color32::from_black_alpha(160));
            ui.painter().text(
                rect.center(),
                egui::Align2::CENTER_CENTER,
                "Drop to open",
                egui::FontId::proportional(24.0),
                Color32::WHITE,
            );
        }
    }

    /// The rectangle being drawn, and while the crop's Select is on, what a drag does.
    fn paint_selecting(&self, ui: &egui::Ui, painter: &egui::Painter, rect: egui::Rect) {
        let color = Color32::from_rgb(255, 190, 40);
        let line = egui::Stroke::new(1.5, color);
        if let Some((a, b)) = self.layout.selecting {
            painter.rect_stroke(
                egui::Rect::from_two_pos(a, b),
                0.0,
                line,
                egui::StrokeKind::Middle,
            );
        }
        let radius = self.crop.brush_radius;
        let paint = Color32::from_rgba_unmultiplied(255, 190, 40, 70);
        if let [first, .., last] | [first @ last] = self.layout.stroke.as_slice() {
            painter.add(egui::Shape::line(self.layout.stroke.clone(), (2.0 * radius, paint)));
            painter.circle_filled(*first, radius, paint);
            painter.circle_filled(*last, radius, paint);
        }
        let what = match (self.crop.select, self.crop.tool) {
            (Select::Off, _) => return,
            (Select::Hide, Tool::Rectangle) => "Drag to hide what a rectangle holds",
            (Select::Keep, Tool::Rectangle) => "Drag to keep only what a rectangle holds",
            (Select::Hide, Tool::Brush) => "Paint to hide what the brush covers",
            (Select::Keep, Tool::Brush) => "Paint to keep only what the brush covers",
        };
        if self.crop.tool == Tool::Brush
            && let Some(at) = ui.input(|i| i.pointer.hover_pos()).filter(|p| rect.contains(*p))
        {
            painter.circle_stroke(at, radius, line);
        }
        painter.text(
            rect.left_bottom() + Vec2::new(8.0, -8.0),
            egui::Align2::LEFT_BOTTOM,
            format!("{what} (Crop: Orbit turns the view again)"),
            egui::FontId::proportional(14.0),
            color,
        );
    }

    /// A rectangle drawn, or a brush stroke painted, with the primary button while the crop's
    /// Select is on (the viewport draws it as it goes, `paint_selecting`), a selection of the
    /// crop when it ends. A stroke past [`MAX_STROKE_POINTS`] points is thinned (`crop::thin`).
    /// `true` while it takes the pointer (the view does not orbit).
    fn selection_input(
        &mut self,
        ui: &egui::Ui,
        response: &egui::Response,
        rect: egui::Rect,
    ) -> bool {
        let keep = match self.crop.select {
            Select::Off => {
                self.layout.selecting = None;
                self.layout.stroke.clear();
                return false;
            }
            Select::Hide => false,
            Select::Keep => true,
        };
        let primary = ui.input(|i| i.pointer.primary_down() || i.pointer.primary_released());
        if !primary && self.layout.selecting.is_none() && self.layout.stroke.is_empty() {
            return false;
        }
        let pixels = ui.ctx().pixels_per_point() * self.render_scale;
        let center = glam::Vec2::new(rect.center().x, rect.center().y);
        let screen =
            self.requested_camera.map(|camera| super::screen::Screen { camera, center, pixels });
        let point = |p: egui::Pos2| glam::Vec2::new(p.x, p.y);
        let radius = self.crop.brush_radius;
        let ended = response.drag_stopped() || response.clicked();
        if let Some(at) = response.interact_pointer_pos() {
            match self.crop.tool {
                Tool::Rectangle => {
                    let start = self.layout.selecting.map_or(at, |(start, _)| start);
                    self.layout.selecting = Some((start, at));
                }
                Tool::Brush => {
                    // A point a quarter of the radius on from the last, and the last always.
                    let far =
                        self.layout.stroke.last().is_none_or(|p| p.distance(at) >= radius / 4.0);
                    if far || ended {
                        self.layout.stroke.push(at);
                    }
                    // Full: the points that bend the path least go (one gesture stays one
                    // selection: keep-only selections meet, so two halves would keep little).
                    if self.layout.stroke.len() > MAX_STROKE_POINTS {
                        super::crop::thin(&mut self.layout.stroke, MAX_STROKE_POINTS * 3 / 4);
                    }
                }
            }
        }
        if ended {
            if let Some(screen) = screen {
                if let Some((a, b)) = self.layout.selecting
                    && (point(a) - point(b)).abs().min_element() >= 2.0
                {
                    self.add_selection(screen.rectangle(point(a), point(b), keep));
                }
                if !self.layout.stroke.is_empty() {
                    let path: Vec<_> = self.layout.stroke.iter().map(|&p| point(p)).collect();
                    self.add_selection(screen.stroke(&path, radius, keep));
                }
            }
            self.layout.selecting = None;
            self.layout.stroke.clear();
        }
        true
    }

    /// Adds `selection` to the crop, or says why not.
    fn add_selection(&mut self, selection: Selection) {
        if !self.crop.add_selection(selection) {
            self.warning(format!(
                "The crop holds {MAX_SELECTIONS} selections already: Remove one, Undo, or Show \
                 all."
            ));
        }
    }

    /// Orbit, pan, zoom, look and fly from the pointer and keys over the viewport.
    fn camera_input(&mut self, ui: &egui::Ui, response: &egui::Response, rect: egui::Rect) {
        let before = self.view;
        // Not inside `ui.input`: a response reads the input itself (a lock within the lock).
        let delta = response.drag_delta();
        let (ctrl, secondary, middle, primary) = ui.input(|i| {
            (
                i.modifiers.command,
                i.pointer.secondary_down(),
                i.pointer.middle_down(),
                i.pointer.primary_down(),
            )
        });
        let delta = glam::Vec2::new(delta.x, delta.y);
        let shift = ui.input(|i| i.modifiers.shift);
        let selecting = !ctrl && !shift && self.selection_input(ui, response, rect);
        if response.dragged() && delta != glam::Vec2::ZERO && !selecting {
            if secondary || middle || (primary && shift) {
                self.view.pan(delta, rect.height());
            } else if ctrl {
                self.view.look(delta);
            } else {
                self.view.orbit(delta);
            }
        }
        if response.hovered() {
            let scroll = ui.input(|i| i.smooth_scroll_delta.y);
            if scroll != 0.0 {
                self.view.zoom(scroll);
            }
            if !ui.ctx().egui_wants_keyboard_input() {
                let (movement, dt) = ui.input(|i| {
                    let mut movement = glam::Vec3::ZERO;
                    for (key, axis) in FLY_KEYS {
                        if i.key_down(key) && i.modifiers.is_none() {
                            movement += glam::Vec3::from(axis);
                        }
                    }
                    (movement, i.stable_dt.min(0.1))
                });
                if movement != glam::Vec3::ZERO {
                    self.view.fly(movement, dt);
                    ui.ctx().request_repaint();
                }
            }
        }
        if response.double_clicked() {
            self.reset_view();
        } else if self.view != before {
            self.view_mode = ViewMode::Free;
        }
    }

    /// The dataset image of view `index` as an egui texture (made once per camera).
    fn ground_truth_texture(
        &mut self,
        ctx: &egui::Context,
        index: usize,
    ) -> Option<(egui::TextureId, Vec2)> {
        if self.ground_truth.as_ref().is_none_or(|(i, _)| *i != index) {
            let view = self.dataset.as_ref()?.dataset.views().nth(index)?;
            let (w, h) = view.image.dimensions();
            let image = egui::ColorImage::from_rgb([w as usize, h as usize], view.image.as_raw());
            let texture = ctx.load_texture("ground truth", image, egui::TextureOptions::LINEAR);
            self.ground_truth = Some((index, texture));
        }
        self.ground_truth.as_ref().map(|(_, t)| (t.id(), t.size_vec2()))
    }

    fn plots(&self, ui: &mut egui::Ui) {
        // A fixed height: a plot sized from the panel's height would grow the resizable panel
        // a little every frame.
        let height = PLOT_HEIGHT;
        let history = &self.history;
        let appearance = !history.appearance[0].is_empty();
        ui.columns(if appearance { 5 } else { 4 }, |columns| {
            plot_titled(&mut columns[0], "loss", height, false, |plot| {
                plot.line(Line::new("loss", PlotPoints::Borrowed(history.loss.points())));
            });
            plot_titled(&mut columns[1], "PSNR (dB)", height, true, |plot| {
                plot.line(Line::new("train", PlotPoints::Borrowed(history.train_psnr.points())));
                plot.line(Line::new("eval", PlotPoints::Borrowed(history.eval_psnr.points())));
            });
            plot_titled(&mut columns[2], "splats", height, false, |plot| {
                plot.line(Line::new("splats", PlotPoints::Borrowed(history.splats.points())));
            });
            plot_titled(&mut columns[3], "GPU memory (MiB)", height, true, |plot| {
                for (category, series) in &history.memory {
                    if series.points().iter().any(|p| p.y > 0.0) {
                        plot.line(Line::new(
                            category.name(),
                            PlotPoints::Borrowed(series.points()),
                        ));
                    }
                }
            });
            if appearance {
                plot_titled(&mut columns[4], "exposure by view (stops)", height, true, |plot| {
                    for (name, points) in
                        ["red", "green", "blue"].into_iter().zip(&history.appearance)
                    {
                        plot.points(
                            egui_plot::Points::new(name, PlotPoints::Borrowed(points)).radius(2.0),
                        );
                    }
                });
            }
        });
    }

    fn memory_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("GPU memory");
        self.refresh_ledger_view();
        let Some((_, snapshot)) = &self.ledger_view else { return };
        ui.label(format!(
            "Now {} · peak {}",
            human_bytes(snapshot.total_bytes),
            human_bytes(snapshot.peak_bytes)
        ));
        if let Some((peak, budget, splats)) = self.prediction {
            ui.label(format!(
                "Run predicted peak {} (budget {}, cap {splats} splats)",
                human_bytes(peak),
                human_bytes(budget)
            ));
        }
        // While training: a paused run keeps only its parameters on the GPU.
        if self.task_state == TaskState::Training
            && let Some((run, splats, model)) = self.run_now_predicted()
        {
            let measured = snapshot.owner_bytes(Owner::Run(run));
            let ratio = measured as f64 / model.max(1) as f64;
            ui.label(format!(
                "Run {run} now: {} measured, {} predicted for {splats} splats ({:+.1}%)",
                human_bytes(measured),
                human_bytes(model),
                (ratio - 1.0) * 100.0
            ));
        }
        let owners: Vec<Owner> = snapshot.by_owner.keys().copied().collect();
        ui.add_space(4.0);
        // A table wider than the panel scrolls sideways instead of widening the panel (its
        // width would then depend on which runs happened to be alive).
        egui::ScrollArea::horizontal().id_salt("ledger scroll").show(ui, |ui| {
            egui::Grid::new("ledger").striped(true).num_columns(owners.len() + 2).show(ui, |ui| {
                ui.strong("category");
                for owner in &owners {
                    ui.strong(owner.to_string());
                }
                ui.strong("total");
                ui.end_row();
                for category in Category::ALL {
                    let total = snapshot.category_bytes(category);
                    if total == 0 {
                        continue;
                    }
                    ui.label(category.name());
                    for owner in &owners {
                        let bytes: u64 = snapshot
                            .allocations
                            .iter()
                            .filter(|a| a.category == category && a.owner == *owner)
                            .map(|a| a.bytes)
                            .sum();
                        ui.label(if bytes > 0 { human_bytes(bytes) } else { "–".into() });
                    }
                    ui.label(human_bytes(total));
                    ui.end_row();
                }
                ui.strong("total");
                for owner in &owners {
                    ui.strong(human_bytes(snapshot.owner_bytes(*owner)));
                }
                ui.strong(human_bytes(snapshot.total_bytes));
                ui.end_row();
            });
        });
        ui.add_space(6.0);
        ui.collapsing(format!("{} allocations", snapshot.allocations.len()), |ui| {
            let mut allocations: Vec<_> = snapshot.allocations.iter().collect();
            allocations.sort_by_key(|a| std::cmp::Reverse(a.bytes));
            for a in allocations.iter().take(200) {
                ui.small(format!(
                    "{} · {} · {} · {}",
                    human_bytes(a.bytes),
                    a.owner,
                    a.category,
                    a.label
                ));
            }
        });
        ui.small(
            "Every GPU buffer goes through this ledger; a run's column goes back to zero when \
             it is torn down.",
        );
    }

    fn log_panel(&self, ui: &mut egui::Ui) {
        ui.strong("Log");
        egui::ScrollArea::vertical().stick_to_bottom(true).auto_shrink([false; 2]).show(ui, |ui| {
            for line in &self.log {
                let color = match line.level {
                    Level::Info => ui.visuals().text_color(),
                    Level::Warning => Color32::from_rgb(220, 160, 40),
                    Level::Error => Color32::from_rgb(230, 80, 80),
                };
                ui.label(
                    RichText::new(format!("{:>7.1}s  {}", line.seconds, line.text))
                        .color(color)
                        .monospace(),
                );
            }
        });
    }
}

/// A plot under a title; a legend when it has several lines.
fn plot_titled<'a>(
    ui: &mut egui::Ui,
    title: &str,
    height: f32,
    legend: bool,
    lines: impl FnOnce(&mut egui_plot::PlotUi<'a>) + 'a,
) {
    ui.small(title);
    let mut plot = Plot::new(title).height(height - 16.0).allow_scroll(false);
    if legend {
        plot = plot.legend(Legend::default().position(egui_plot::Corner::LeftTop));
    }
    plot.show(ui, lines);
}

fn run_eta(run: &RunInfo) -> String {
    run.eta_seconds().map_or_else(|| "–".into(), duration)
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into())
}

/// The settings' coarse-to-fine row: its label and check box.
/// The settings' strategy row, by name: a choice gives the strategy's default settings.
fn strategy_row(ui: &mut egui::Ui, editable: bool, strategy: &mut Strategy) {
    let strategies = [("compact", "Compact"), ("3dgs", "3DGS"), ("mcmc", "MCMC")];
    let mut name = strategy.name();
    choice_row(ui, ("Strategy", Some(STRATEGY_HINT)), editable, &mut name, &strategies);
    if name != strategy.name()
        && let Ok(chosen) = Strategy::parse(name)
    {
        *strategy = chosen;
    }
}

fn progressive_row(ui: &mut egui::Ui, editable: bool, progressive: &mut Progressive) {
    ui.label("Coarse to fine");
    let mut on = *progressive != Progressive::Off;
    ui.add_enabled(editable, egui::Checkbox::new(&mut on, "Progressive resolution")).on_hover_text(
        "The first tenth of the steps on images shrunk 4 times, the second tenth shrunk \
             twice, the rest at full size: those steps cost a fraction as much; measured, a \
             run 5-9% faster and 0.2-0.3 dB lower",
    );
    if on != (*progressive != Progressive::Off) {
        *progressive = if on { Progressive::On } else { Progressive::Off };
    }
    ui.end_row();
}

/// The settings' per-view appearance row: its label and combo box.
fn appearance_row(ui: &mut egui::Ui, editable: bool, appearance: &mut Compensation) {
    let label = ui.label("Appearance");
    let name = |c: Compensation| match c {
        Compensation::Auto => "Auto (from EXIF)",
        Compensation::On => "Per-view exposure and colour",
        Compensation::Off => "Off",
    };
    ui.add_enabled_ui(editable, |ui| {
        egui::ComboBox::from_id_salt("appearance")
            .selected_text(name(*appearance))
            .show_ui(ui, |ui| {
                for choice in [Compensation::Auto, Compensation::On, Compensation::Off] {
                    ui.selectable_value(appearance, choice, name(choice));
                }
            })
            .response
            .labelled_by(label.id)
    })
    .response
    .on_hover_text(
        "Learn a colour transform for each photo (exposure, white balance) that the loss sees \
         the render through: for phone captures whose exposure or colour changes between \
         photos. Each starts from its photo's EXIF exposure where every photo has one; Auto \
         turns it on where those differ by a third of a stop or more. The splats, exports and \
         evaluation stay untouched",
    );
    ui.end_row();
}

/// The settings' transparency row: its label and combo box.
fn transparency_row(ui: &mut egui::Ui, editable: bool, transparency: &mut Transparency) {
    let label = ui.label("Transparency");
    ui.add_enabled_ui(editable, |ui| transparency_choice(ui, transparency).labelled_by(label.id))
        .response
        .on_hover_text(
            "How a transparent image's alpha is learnt: each step over a random colour, an L1 \
             loss on the rendered alpha, or not at all (only the colour it was composited \
             over)",
        );
    ui.end_row();
}

/// The transparency combo box of the settings.
fn transparency_choice(ui: &mut egui::Ui, transparency: &mut Transparency) -> egui::Response {
    let name = |t: &Transparency| match t {
        Transparency::RandomBackground => "Random background",
        Transparency::AlphaLoss(_) => "Alpha loss",
        Transparency::Composite => "Composite",
    };
    egui::ComboBox::from_id_salt("transparency")
        .selected_text(name(transparency))
        .show_ui(ui, |ui| {
            for choice in [
                Transparency::RandomBackground,
                Transparency::AlphaLoss(DEFAULT_ALPHA_LOSS_WEIGHT),
                Transparency::Composite,
            ] {
                let selected =
                    std::mem::discriminant(transparency) == std::mem::discriminant(&choice);
                if ui.selectable_label(selected, name(&choice)).clicked() {
                    *transparency = choice;
                }
            }
        })
        .response
}
