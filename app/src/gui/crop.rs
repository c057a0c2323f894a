//! The crop: which splats the view and the exports keep — a box, a sphere, an opacity floor
//! and a size limit ([`Filter`], the rule `convert --crop-box --crop-sphere --min-opacity
//! --max-size` applies) — with undo and redo.
//!
//! The box and the sphere have handles in the viewport too (`crop_handles`), and rectangles
//! drawn or brush strokes painted over the viewport hide what they hold, or keep only that
//! ([`Select`], [`Tool`]; at most [`MAX_SELECTIONS`]: each is a rule on the centres, like the
//! box, so it holds for the splats training adds later too).
//!
//! Non-destructive: hidden splats stay in the run and go on training (the loss still sees
//! them, so the picture the run learns does not change); the viewer culls them at the
//! projection (`RenderSettings::keep`) and an export leaves them out (the same filter on the
//! CPU, before levelling). A checkpoint the window saves holds the crop, and continuing it
//! brings the crop back.

use std::time::{Duration, Instant};

use glam::Vec3;
use splat_trainer::formats::filter::{
    CropBox, CropSphere, Filter, MAX_SELECTIONS, Selection, segment_distance_squared,
};

use super::event::UiEvent;

/// The brush's radius at first, in screen points.
const BRUSH_RADIUS: f32 = 20.0;

/// Edits closer together than this are one step of undo (a drag is many edits).
const COALESCE: Duration = Duration::from_millis(600);
/// Undo steps kept.
const UNDO_DEPTH: usize = 100;

/// The crop and its history.
#[derive(Debug)]
pub struct Crop {
    keep: Filter,
    undo: Vec<Filter>,
    redo: Vec<Filter>,
    /// When the last undo step was recorded.
    recorded: Option<Instant>,
    /// What a drag over the viewport does: orbit, or draw a selection.
    pub select: Select,
    /// What a selection is drawn with.
    pub tool: Tool,
    /// The brush's radius, in screen points.
    pub brush_radius: f32,
}

impl Default for Crop {
    fn default() -> Self {
        Self {
            keep: Filter::default(),
            undo: Vec::new(),
            redo: Vec::new(),
            recorded: None,
            select: Select::default(),
            tool: Tool::default(),
            brush_radius: BRUSH_RADIUS,
        }
    }
}

/// What a drag over the viewport draws while [`Select`] is on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tool {
    /// A rectangle from where the drag starts to where it ends.
    #[default]
    Rectangle,
    /// A brush stroke along the drag (a click is a dot).
    Brush,
}

/// What a selection drawn over the viewport does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Select {
    /// Nothing: a drag orbits the view.
    #[default]
    Off,
    /// Hides the splats inside.
    Hide,
    /// Keeps only the splats inside.
    Keep,
}

impl Crop {
    /// What the view and the exports keep.
    #[must_use]
    pub fn keep(&self) -> &Filter {
        &self.keep
    }

    /// Sets the crop, recording the one before for undo (edits within [`COALESCE`] of the
    /// last recorded one join it). Clears redo.
    pub fn set(&mut self, keep: &Filter) {
        if *keep == self.keep {
            return;
        }
        let now = Instant::now();
        if self.recorded.is_none_or(|t| now.duration_since(t) > COALESCE) {
            self.undo.push(self.keep.clone());
            if self.undo.len() > UNDO_DEPTH {
                self.undo.remove(0);
            }
        }
        self.recorded = Some(now);
        self.redo.clear();
        self.keep = keep.clone();
    }

    /// Adds a selection as an undo step of its own; `false` when the crop holds
    /// [`MAX_SELECTIONS`] already.
    pub fn add_selection(&mut self, selection: Selection) -> bool {
        let mut keep = self.keep.clone();
        let added = keep.add_selection(selection);
        if added {
            self.restore(&keep);
        }
        added
    }

    /// Sets the crop as an undo step of its own (a continued checkpoint's crop).
    pub fn restore(&mut self, keep: &Filter) {
        self.recorded = None;
        self.set(keep);
    }

    pub fn undo(&mut self) {
        if let Some(previous) = self.undo.pop() {
            self.redo.push(std::mem::replace(&mut self.keep, previous));
            self.recorded = None;
        }
    }

    pub fn redo(&mut self) {
        if let Some(next) = self.redo.pop() {
            self.undo.push(std::mem::replace(&mut self.keep, next));
            self.recorded = None;
        }
    }

    #[must_use]
    pub fn can_undo(&self) -> bool {
        !self.undo.is_empty()
    }

    #[must_use]
    pub fn can_redo(&self) -> bool {
        !self.redo.is_empty()
    }

    /// The crop's controls. `focus` (the scene's centre and radius) places a new box around
    /// the scene; `has_run`: there is a run to find floaters in
    /// ([`UiEvent::HideLikelyFloaters`]).
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        focus: Option<(Vec3, f32)>,
        has_run: bool,
        events: &mut Vec<UiEvent>,
    ) {
        let mut keep = self.keep.clone();
        let (center, radius) = focus.unwrap_or((Vec3::ZERO, 1.0));
        // A drag of 200 pixels moves an edge by the scene's radius.
        let speed = f64::from(radius.max(1e-3)) / 200.0;
        let mut boxed = keep.crop_box.is_some();
        if ui
            .checkbox(&mut boxed, "Box")
            .on_hover_text("Keep only the splats whose centre is inside the box")
            .changed()
        {
            keep.crop_box = boxed.then(|| {
                CropBox::aligned(
                    (center - Vec3::splat(radius)).to_array(),
                    (center + Vec3::splat(radius)).to_array(),
                )
            });
        }
        if let Some(crop_box) = keep.crop_box.as_mut() {
            box_ui(ui, crop_box, speed);
        }
        let mut sphered = keep.crop_sphere.is_some();
        if ui
            .checkbox(&mut sphered, "Sphere")
            .on_hover_text("Keep only the splats whose centre is inside the sphere")
            .changed()
        {
            keep.crop_sphere =
                sphered.then(|| CropSphere { center: center.to_array(), radius: radius.max(1e-3) });
        }
        if let Some(sphere) = keep.crop_sphere.as_mut() {
            ui.horizontal(|ui| {
                for (axis, value) in ["x", "y", "z"].iter().zip(sphere.center.iter_mut()) {
                    ui.add(egui::DragValue::new(value).speed(speed).prefix(format!("{axis} ")));
                }
                ui.add(
                    egui::DragValue::new(&mut sphere.radius)
                        .speed(speed)
                        .range(1e-4..=f32::MAX)
                        .prefix("r "),
                );
            });
        }
        ui.horizontal(|ui| {
            let mut limited = keep.max_size.is_some();
            if ui
                .checkbox(&mut limited, "Size at most")
                .on_hover_text(
                    "Keep only the splats whose largest axis is at most this (scene units): \
                     drops the huge faint splats behind a scene",
                )
                .changed()
            {
                keep.max_size = limited.then_some(radius.max(1e-3) / 10.0);
            }
            if let Some(size) = keep.max_size.as_mut() {
                let most = radius.max(1e-3) * 2.0;
                ui.add(egui::Slider::new(size, most * 1e-4..=most).logarithmic(true));
            }
        });
        ui.horizontal(|ui| {
            let mut floored = keep.min_opacity.is_some();
            if ui.checkbox(&mut floored, "Opacity at least").changed() {
                keep.min_opacity = floored.then_some(0.1);
            }
            if let Some(floor) = keep.min_opacity.as_mut() {
                ui.add(egui::Slider::new(floor, 0.0..=1.0).fixed_decimals(2));
            }
        });
        floaters_ui(ui, &mut keep);
        self.set(&keep);
        self.select_ui(ui);
        ui.horizontal(|ui| {
            if ui.add_enabled(self.can_undo(), egui::Button::new("Undo")).clicked() {
                self.undo();
            }
            if ui.add_enabled(self.can_redo(), egui::Button::new("Redo")).clicked() {
                self.redo();
            }
            if ui.add_enabled(!self.keep.is_empty(), egui::Button::new("Show all")).clicked() {
                // A step of its own, never joined to the edit before it.
                self.restore(&Filter::default());
            }
        });
        ui.label(
            egui::RichText::new(
                "Hidden splats stay in the run and keep training; the view and exports leave \
                 them out.",
            )
            .small(),
        );
        if ui
            .add_enabled(has_run, egui::Button::new("Hide likely floaters"))
            .on_hover_text(
                "Hides the small clusters of splats apart from the dense scene, wherever \
                 they are (Undo shows them again)",
            )
            .clicked()
        {
            events.push(UiEvent::HideLikelyFloaters);
        }
    }

    /// Selections: what a drag over the viewport does and draws, and the selections held.
    fn select_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.label("Drag in the view").on_hover_text(
                "Draw a rectangle or paint with a brush over the view: the splats seen inside",
            );
            ui.selectable_value(&mut self.select, Select::Off, "Orbit");
            ui.selectable_value(&mut self.select, Select::Hide, "Hide");
            ui.selectable_value(&mut self.select, Select::Keep, "Keep only");
        });
        if self.select != Select::Off {
            ui.horizontal(|ui| {
                ui.selectable_value(&mut self.tool, Tool::Rectangle, "Rectangle");
                ui.selectable_value(&mut self.tool, Tool::Brush, "Brush");
                if self.tool == Tool::Brush {
                    ui.add(
                        egui::DragValue::new(&mut self.brush_radius)
                            .range(2.0..=200.0)
                            .prefix("radius ")
                            .suffix(" pt"),
                    );
                }
            });
        }
        let held = self.keep.selections.len();
        if held > 0 {
            ui.horizontal(|ui| {
                ui.label(format!("{held} of {MAX_SELECTIONS} selections"));
                if ui.button("Remove last selection").clicked() {
                    let mut keep = self.keep.clone();
                    keep.selections.pop();
                    self.restore(&keep);
                }
            });
        }
    }
}

/// Thins a brush's path to `to` points: the interior point nearest the segment between its
/// neighbours goes, one at a time (it bends the path least: the stroke covers nearly what it
/// did, and the ends stay).
pub fn thin(path: &mut Vec<egui::Pos2>, to: usize) {
    let bend = |path: &[egui::Pos2], i: usize| {
        let [a, p, b] = [path[i - 1], path[i], path[i + 1]].map(|q| [q.x, q.y].map(f64::from));
        segment_distance_squared(p, a, b)
    };
    while path.len() > to.max(2) {
        let least = (1..path.len() - 1).min_by(|&i, &j| bend(path, i).total_cmp(&bend(path, j)));
        let Some(least) = least else { return };
        path.remove(least);
    }
}

/// "Likely floaters hidden", while the crop keeps the dense scene's cells: untick to show them.
fn floaters_ui(ui: &mut egui::Ui, keep: &mut Filter) {
    if let Some(cells) = &keep.scene_cells {
        let mut hidden = true;
        let label = format!("Likely floaters hidden ({} cells of scene)", cells.count());
        if ui
            .checkbox(&mut hidden, label)
            .on_hover_text(
                "Keeps only the splats in the dense scene's cells (Hide likely floaters); \
                 untick to show the floaters again",
            )
            .changed()
            && !hidden
        {
            keep.scene_cells = None;
        }
    }
}

/// The box's edges and turn, `speed` scene units a pixel of drag.
fn box_ui(ui: &mut egui::Ui, crop_box: &mut CropBox, speed: f64) {
    egui::Grid::new("crop box").num_columns(4).show(ui, |ui| {
        for (name, corner) in [("min", &mut crop_box.min), ("max", &mut crop_box.max)] {
            ui.label(name);
            for (axis, value) in ["x", "y", "z"].iter().zip(corner.iter_mut()) {
                ui.add(egui::DragValue::new(value).speed(speed).prefix(format!("{axis} ")));
            }
            ui.end_row();
        }
        ui.label("turn").on_hover_text(
            "Degrees the box is turned about its centre: about x, then y, then z \
             (convert --crop-box-turn)",
        );
        for (axis, value) in ["x", "y", "z"].iter().zip(crop_box.turn.iter_mut()) {
            ui.add(
                egui::DragValue::new(value)
                    .speed(0.5)
                    .range(-180.0..=180.0)
                    .prefix(format!("{axis} "))
                    .suffix("°"),
            );
        }
        ui.end_row();
    });
    // A box turned inside out keeps nothing: keep each min at most its max.
    for axis in 0..3 {
        if crop_box.min[axis] > crop_box.max[axis] {
            crop_box.max[axis] = crop_box.min[axis];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gui::event::{UiEvent, clicks};

    #[test]
    fn hide_likely_floaters_asks_for_them_when_there_is_a_run() {
        let mut crop = Crop::default();
        let mut pane = |has_run| {
            clicks(&["Hide likely floaters"], |ui, events| crop.ui(ui, None, has_run, events))
        };
        assert_eq!(pane(true), [UiEvent::HideLikelyFloaters]);
        assert_eq!(pane(false), []);
    }

    fn floor(m: f32) -> Filter {
        Filter { min_opacity: Some(m), ..Filter::default() }
    }

    #[test]
    fn undo_and_redo_walk_the_history() {
        let mut crop = Crop::default();
        crop.set(&floor(0.1));
        crop.recorded = None; // a later, separate edit
        crop.set(&floor(0.2));
        crop.recorded = None;
        crop.set(&floor(0.3));
        crop.undo();
        assert_eq!(*crop.keep(), floor(0.2));
        crop.undo();
        crop.undo();
        assert_eq!(*crop.keep(), Filter::default());
        assert!(!crop.can_undo());
        crop.redo();
        assert_eq!(*crop.keep(), floor(0.1));
        // A new edit drops what could be redone.
        crop.set(&floor(0.5));
        assert!(!crop.can_redo());
    }

    #[test]
    fn a_drag_is_one_step_of_undo() {
        let mut crop = Crop::default();
        for m in [0.1, 0.11, 0.12, 0.13] {
            crop.set(&floor(m));
        }
        crop.undo();
        assert_eq!(*crop.keep(), Filter::default());
    }

    #[test]
    fn thinning_a_path_keeps_its_ends_and_corners() {
        // An L of 300 points: 200 along x, then 100 down y, with a little wobble.
        let mut path: Vec<egui::Pos2> = (0..200)
            .map(|i| egui::pos2(i as f32, if i % 2 == 0 { 0.0 } else { 0.01 }))
            .chain((1..=100).map(|j| egui::pos2(199.0, j as f32)))
            .collect();
        let (first, corner, last) = (path[0], path[199], path[299]);
        thin(&mut path, 192);
        assert_eq!(path.len(), 192);
        assert_eq!((path[0], path[191]), (first, last), "the ends stay");
        assert!(path.contains(&corner), "the corner stays");
        // Every point left is on the L.
        assert!(path.iter().all(|p| p.y <= 0.01 || (p.x - 199.0).abs() < 1e-6), "{path:?}");
        thin(&mut path, 0);
        assert_eq!(path, [first, last]);
    }
}
