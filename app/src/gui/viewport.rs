//! The viewport: the viewer's frames, and the view the user moves through them (orbit, pan,
//! zoom, fly, a dataset's cameras); the crop's handles and selections drawn over it.

use egui::{Color32, Key, Sense, Vec2};
use splat_trainer::formats::filter::{MAX_STROKE_POINTS, Selection};
use splat_trainer::render::Camera;
use splat_trainer::render::view_controller::ViewController;
use splat_trainer::task::TaskState;

use super::crop::{self, Crop, Select, Tool};
use super::crop_handles;
use super::event::UiEvent;
use super::files::file_name;
use super::keyframes::Keyframes;
use super::log_pane::Level;
use super::screen::Screen;
use super::session::Session;
use super::viewer::{self, Viewer};

/// Fly speed keys: camera axes x right, y down, z forward.
const FLY_KEYS: [(Key, [f32; 3]); 6] = [
    (Key::W, [0.0, 0.0, 1.0]),
    (Key::S, [0.0, 0.0, -1.0]),
    (Key::A, [-1.0, 0.0, 0.0]),
    (Key::D, [1.0, 0.0, 0.0]),
    (Key::Q, [0.0, 1.0, 0.0]),
    (Key::E, [0.0, -1.0, 0.0]),
];

/// Where the viewport looks from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ViewMode {
    /// The user's orbit / fly camera.
    Free,
    /// Exactly a dataset camera (index into `Dataset::views()` order), its image beside.
    DatasetCamera(usize),
}

/// What the viewport laid out last: for its overlays, and what tests read.
#[derive(Debug, Default)]
pub(super) struct Layout {
    /// Where the viewport is (points): left, top, width, height.
    pub rect: [f32; 4],
    /// The crop's handles as drawn: each one's name and place (points).
    pub crop_handles: Vec<(&'static str, [f32; 2])>,
    /// A rectangle selection being drawn: where it started and where the pointer is.
    selecting: Option<(egui::Pos2, egui::Pos2)>,
    /// A brush stroke being painted: the pointer's path so far.
    stroke: Vec<egui::Pos2>,
}

/// What the viewport draws from and edits, beside its own state.
pub(super) struct Surroundings<'a> {
    pub session: &'a Session,
    /// Renders the frames the viewport asks for.
    pub viewer: &'a Viewer,
    /// What the view keeps: its handles are dragged, and selections drawn, over the viewport.
    pub crop: &'a mut Crop,
    /// The camera path, drawn over the frame.
    pub keyframes: &'a Keyframes,
    /// The notification to show over the frame.
    pub toast: Option<(Level, &'a str)>,
}

pub(super) struct Viewport {
    view: ViewController,
    mode: ViewMode,
    /// The viewport renders at this fraction of its pixels.
    render_scale: f32,
    /// The dataset image beside the render, and its view's index.
    ground_truth: Option<(usize, egui::TextureHandle)>,
    /// The camera the viewport asked the viewer for last.
    pub requested_camera: Option<Camera>,
    /// What the viewport laid out last.
    pub layout: Layout,
}

impl Viewport {
    /// `software`: a software rasterizer, which renders a quarter of the pixels to stay
    /// interactive.
    pub(super) fn new(software: bool) -> Self {
        Self {
            view: ViewController::framing(glam::Vec3::ZERO, 1.0, glam::Vec3::NEG_Y),
            mode: ViewMode::Free,
            render_scale: if software { 0.5 } else { 1.0 },
            ground_truth: None,
            requested_camera: None,
            layout: Layout::default(),
        }
    }

    /// Looks exactly through a dataset camera (its image shows beside the render).
    pub(super) fn jump_to_camera(&mut self, session: &Session, index: usize) {
        let Some(loaded) = &session.dataset else { return };
        if let Some(view) = loaded.dataset.views().nth(index) {
            self.view = ViewController::from_camera(&view.camera, loaded.up, loaded.focus.1);
            self.mode = ViewMode::DatasetCamera(index);
        }
    }

    /// Frames `(centre, radius)` from `up`, with the free camera.
    pub(super) fn frame_scene(&mut self, (center, radius): (glam::Vec3, f32), up: glam::Vec3) {
        self.view = ViewController::framing(center, radius, up);
        self.mode = ViewMode::Free;
    }

    /// Frames what the viewport shows (Reset, the menu's Reset camera, a double click).
    pub(super) fn reset(&mut self, session: &Session) {
        match session.focus() {
            Some(focus) => self.frame_scene(focus, session.up()),
            None => self.mode = ViewMode::Free,
        }
    }

    /// Forgets the dataset's cameras and images (another is being loaded).
    pub(super) fn forget_dataset(&mut self) {
        self.ground_truth = None;
        self.mode = ViewMode::Free;
    }

    fn step_camera(&mut self, session: &Session, count: usize, delta: isize) {
        let current = match self.mode {
            ViewMode::DatasetCamera(i) => i as isize,
            ViewMode::Free => -1,
        };
        let next = (current + delta).rem_euclid(count as isize) as usize;
        self.jump_to_camera(session, next);
    }

    /// The dataset camera fitted into `width` × `height` pixels (same aspect and framing as
    /// its image), or the free camera filling them.
    fn camera(&self, session: &Session, width: u32, height: u32) -> Option<Camera> {
        if let ViewMode::DatasetCamera(index) = self.mode
            && let Some(view) = session.dataset.as_ref().and_then(|d| d.dataset.views().nth(index))
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

    /// The View section: the run or the viewed file, the dataset's cameras, the render scale.
    pub(super) fn controls_ui(
        &mut self,
        ui: &mut egui::Ui,
        session: &Session,
        events: &mut Vec<UiEvent>,
    ) {
        if let Some(file) = &session.viewed_file {
            let name = file_name(&file.path);
            let mut show_file = session.show_file;
            ui.horizontal(|ui| {
                ui.radio_value(&mut show_file, false, "Training run");
                ui.radio_value(&mut show_file, true, name);
            });
            if show_file != session.show_file {
                events.push(UiEvent::ShowFile(show_file));
            }
        }
        let names: Vec<String> = session
            .dataset
            .as_ref()
            .map(|d| d.dataset.views().map(|v| v.name.clone()).collect())
            .unwrap_or_default();
        let selected = match self.mode {
            ViewMode::Free => "Free camera".to_string(),
            ViewMode::DatasetCamera(i) => names.get(i).cloned().unwrap_or_default(),
        };
        let mut jump = None;
        egui::ComboBox::from_label("Camera").selected_text(selected).height(400.0).show_ui(
            ui,
            |ui| {
                if ui.selectable_label(self.mode == ViewMode::Free, "Free camera").clicked() {
                    self.mode = ViewMode::Free;
                }
                for (i, name) in names.iter().enumerate() {
                    let on = self.mode == ViewMode::DatasetCamera(i);
                    if ui.selectable_label(on, name).clicked() {
                        jump = Some(i);
                    }
                }
            },
        );
        if let Some(i) = jump {
            self.jump_to_camera(session, i);
        }
        ui.horizontal(|ui| {
            if ui.add_enabled(!names.is_empty(), egui::Button::new("< Previous")).clicked() {
                self.step_camera(session, names.len(), -1);
            }
            if ui.add_enabled(!names.is_empty(), egui::Button::new("Next >")).clicked() {
                self.step_camera(session, names.len(), 1);
            }
            if ui.button("Reset").clicked() {
                self.reset(session);
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("Render scale");
            ui.add(egui::Slider::new(&mut self.render_scale, 0.25..=1.0).fixed_decimals(2))
                .labelled_by(label.id);
        });
    }

    /// The viewer's last frame in `rect` (centred at its aspect), or a hint where there is
    /// none to show.
    fn paint_frame(
        painter: &egui::Painter,
        rect: egui::Rect,
        frame: Option<viewer::Frame>,
        pixels: f32,
        state: TaskState,
        nothing: bool,
    ) {
        painter.rect_filled(rect, 0.0, Color32::BLACK);
        match frame {
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
                if state == TaskState::Ready && frame.run_step == Some((0, 0)) {
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
                let hint = match state {
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

    /// The viewer's last frame (beside the dataset image when looking through its camera),
    /// the crop's handles and selections drawn over it, the keyframes, the notification
    /// `toast`; the pointer and keys over it move the view or draw on the crop. Asks `viewer`
    /// for the frame of the camera it shows now.
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        with: Surroundings<'_>,
        events: &mut Vec<UiEvent>,
    ) {
        let Surroundings { session, viewer, crop, keyframes, toast } = with;
        let available = ui.available_size();
        let ground_truth = match self.mode {
            ViewMode::DatasetCamera(i) => self.ground_truth_texture(ui.ctx(), session, i),
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
        self.camera_input(ui, &response, rect, session, (crop, events));

        let pixels = ui.ctx().pixels_per_point() * self.render_scale;
        let (w, h) = ((rect.width() * pixels) as u32, (rect.height() * pixels) as u32);
        let source = session.source();
        let nothing = matches!(source, viewer::Source::Nothing);
        self.requested_camera = self.camera(session, w, h);
        if let Some(camera) = self.requested_camera {
            let keep = crop.keep().clone();
            viewer.request(viewer::Request { source, camera, background: [0.0; 3], keep });
        }
        let (frame, state) = (viewer.frame(), session.task_state);
        Self::paint_frame(&ui.painter_at(rect), rect, frame, pixels, state, nothing);
        self.layout.crop_handles.clear();
        if let Some(camera) = self.requested_camera.filter(|_| !nothing) {
            let center = glam::Vec2::new(rect.center().x, rect.center().y);
            let screen = Screen { camera, center, pixels };
            keyframes.draw(&ui.painter_at(rect), &screen);
            let dragged =
                crop_handles::ui(ui, rect, crop.keep(), &screen, &mut self.layout.crop_handles);
            if let Some(keep) = dragged {
                crop.set(&keep);
            }
        }
        self.paint_selecting(ui, &ui.painter_at(rect), rect, crop);
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
        if let Some((level, text)) = toast {
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
    fn paint_selecting(
        &self,
        ui: &egui::Ui,
        painter: &egui::Painter,
        rect: egui::Rect,
        crop: &Crop,
    ) {
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
        let radius = crop.brush_radius;
        let paint = Color32::from_rgba_unmultiplied(255, 190, 40, 70);
        if let [first, .., last] | [first @ last] = self.layout.stroke.as_slice() {
            painter.add(egui::Shape::line(self.layout.stroke.clone(), (2.0 * radius, paint)));
            painter.circle_filled(*first, radius, paint);
            painter.circle_filled(*last, radius, paint);
        }
        let what = match (crop.select, crop.tool) {
            (Select::Off, _) => return,
            (Select::Hide, Tool::Rectangle) => "Drag to hide what a rectangle holds",
            (Select::Keep, Tool::Rectangle) => "Drag to keep only what a rectangle holds",
            (Select::Hide, Tool::Brush) => "Paint to hide what the brush covers",
            (Select::Keep, Tool::Brush) => "Paint to keep only what the brush covers",
        };
        if crop.tool == Tool::Brush
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
    /// Select is on (the viewport draws it as it goes, [`Self::paint_selecting`]), a selection of the
    /// crop when it ends. A stroke past [`MAX_STROKE_POINTS`] points is thinned (`crop::thin`).
    /// `true` while it takes the pointer (the view does not orbit).
    fn selection_input(
        &mut self,
        ui: &egui::Ui,
        response: &egui::Response,
        rect: egui::Rect,
        edits: (&mut Crop, &mut Vec<UiEvent>),
    ) -> bool {
        let (crop, events) = edits;
        let keep = match crop.select {
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
        let screen = self.requested_camera.map(|camera| Screen { camera, center, pixels });
        let point = |p: egui::Pos2| glam::Vec2::new(p.x, p.y);
        let radius = crop.brush_radius;
        let ended = response.drag_stopped() || response.clicked();
        if let Some(at) = response.interact_pointer_pos() {
            match crop.tool {
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
                        crop::thin(&mut self.layout.stroke, MAX_STROKE_POINTS * 3 / 4);
                    }
                }
            }
        }
        if ended {
            if let Some(screen) = screen {
                if let Some((a, b)) = self.layout.selecting
                    && (point(a) - point(b)).abs().min_element() >= 2.0
                {
                    add_selection(crop, events, screen.rectangle(point(a), point(b), keep));
                }
                if !self.layout.stroke.is_empty() {
                    let path: Vec<_> = self.layout.stroke.iter().map(|&p| point(p)).collect();
                    add_selection(crop, events, screen.stroke(&path, radius, keep));
                }
            }
            self.layout.selecting = None;
            self.layout.stroke.clear();
        }
        true
    }

    /// Orbit, pan, zoom, look and fly from the pointer and keys over the viewport.
    fn camera_input(
        &mut self,
        ui: &egui::Ui,
        response: &egui::Response,
        rect: egui::Rect,
        session: &Session,
        edits: (&mut Crop, &mut Vec<UiEvent>),
    ) {
        let (crop, events) = edits;
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
        let selecting = !ctrl && !shift && self.selection_input(ui, response, rect, (crop, events));
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
            self.reset(session);
        } else if self.view != before {
            self.mode = ViewMode::Free;
        }
    }

    /// The dataset image of view `index` as an egui texture (made once per camera).
    fn ground_truth_texture(
        &mut self,
        ctx: &egui::Context,
        session: &Session,
        index: usize,
    ) -> Option<(egui::TextureId, Vec2)> {
        if self.ground_truth.as_ref().is_none_or(|(i, _)| *i != index) {
            let view = session.dataset.as_ref()?.dataset.views().nth(index)?;
            let (w, h) = view.image.dimensions();
            let image = egui::ColorImage::from_rgb([w as usize, h as usize], view.image.as_raw());
            let texture = ctx.load_texture("ground truth", image, egui::TextureOptions::LINEAR);
            self.ground_truth = Some((index, texture));
        }
        self.ground_truth.as_ref().map(|(_, t)| (t.id(), t.size_vec2()))
    }
}

/// Adds `selection` to the crop, or says it is full.
fn add_selection(crop: &mut Crop, events: &mut Vec<UiEvent>, selection: Selection) {
    if !crop.add_selection(selection) {
        events.push(UiEvent::SelectionsFull);
    }
}
