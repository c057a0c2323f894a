//! Drawing: menu, training panel, viewport, plots, memory panel, log; and the keyboard.

use egui::{Color32, Key, KeyboardShortcut, Modifiers, RichText, Sense, Vec2};
use egui_plot::{Legend, Line, Plot, PlotPoints};
use splat_trainer::task::TaskState;

use super::app::{Level, RunInfo, SplatApp, ViewMode};
use super::crop::{Select, Tool};
use super::crop_handles;
use super::files::{OpenKind, SaveKind};
use super::viewer;
use crate::human_bytes;
use splat_trainer::formats::filter::{MAX_SELECTIONS, MAX_STROKE_POINTS, Selection};

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
