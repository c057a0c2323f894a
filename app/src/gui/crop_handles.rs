//! The crop's handles in the viewport: the box's edges with a handle on each face (drag it to
//! move that face alone, along the box's own axis, turned or not) and one at its centre (drag
//! it to move the box across the view), and the sphere's outline with a handle at its centre
//! and one on its rim (drag it to set the radius).
//!
//! The math is on the viewport's camera alone ([`Screen`]), so the tests check a drag without a
//! window: a face dragged by the screen length of one scene unit along its normal moves by
//! one unit, and the opposite face stays.

use glam::{DVec3, Vec2};
use splat_trainer::formats::filter::{CropBox, CropSphere, Filter};

use super::screen::{NEAR, Screen};

/// Screen radius of a handle, in points.
const HANDLE: f32 = 6.0;

/// A grip: which part of the crop a handle moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Grip {
    /// The box's face on `axis` (0, 1, 2: the box's own x, y, z), its max side when `high`.
    Face {
        axis: usize,
        high: bool,
    },
    BoxCenter,
    SphereCenter,
    SphereRim,
}

impl Grip {
    /// What the handle is, in words: "box x max", "sphere rim".
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Face { axis, high } => {
                ["box x min", "box x max", "box y min", "box y max", "box z min", "box z max"]
                    [axis * 2 + usize::from(high)]
            }
            Self::BoxCenter => "box centre",
            Self::SphereCenter => "sphere centre",
            Self::SphereRim => "sphere rim",
        }
    }
}

fn dvec(v: [f64; 3]) -> DVec3 {
    DVec3::from_array(v)
}

/// The box's half extents, in f64.
fn half(b: &CropBox) -> DVec3 {
    DVec3::from_array(std::array::from_fn(|a| (f64::from(b.max[a]) - f64::from(b.min[a])) / 2.0))
}

/// The box with centre `center` and half extents `half` (its turn kept).
fn with_center_half(b: &CropBox, center: DVec3, half: DVec3) -> CropBox {
    let (lo, hi) = (center - half, center + half);
    CropBox { min: lo.as_vec3().to_array(), max: hi.as_vec3().to_array(), turn: b.turn }
}

/// The centre of the face `axis`/`high` and its outward normal, in world coordinates.
fn face(b: &CropBox, axis: usize, high: bool) -> (DVec3, DVec3) {
    let normal = dvec(b.axes()[axis]) * if high { 1.0 } else { -1.0 };
    (dvec(b.center()) + normal * half(b)[axis], normal)
}

/// Each handle of `keep` and where it is on the screen.
#[must_use]
pub fn handles(keep: &Filter, screen: &Screen) -> Vec<(Grip, Vec2)> {
    let mut out = Vec::new();
    if let Some(b) = &keep.crop_box {
        for axis in 0..3 {
            for high in [false, true] {
                let (at, _) = face(b, axis, high);
                out.extend(screen.project(at).map(|p| (Grip::Face { axis, high }, p)));
            }
        }
        out.extend(screen.project(dvec(b.center())).map(|p| (Grip::BoxCenter, p)));
    }
    if let Some(s) = &keep.crop_sphere {
        let center = dvec(s.center.map(f64::from));
        if let Some(p) = screen.project(center) {
            out.push((Grip::SphereCenter, p));
            out.push((Grip::SphereRim, p + Vec2::X * sphere_screen_radius(s, screen)));
        }
    }
    out
}

/// The sphere's radius on the screen at its centre's depth, in points.
fn sphere_screen_radius(s: &CropSphere, screen: &Screen) -> f32 {
    let depth = screen.camera_point(dvec(s.center.map(f64::from))).z.max(NEAR);
    screen.camera.fx * s.radius / depth / screen.pixels
}

/// `keep` after dragging `grip` by `delta` screen points.
#[must_use]
pub fn drag(keep: &Filter, grip: Grip, delta: Vec2, screen: &Screen) -> Filter {
    let mut keep = keep.clone();
    match (grip, keep.crop_box.as_mut(), keep.crop_sphere.as_mut()) {
        (Grip::Face { axis, high }, Some(b), _) => {
            let (at, normal) = face(b, axis, high);
            let Some(rate) = screen.screen_rate(at, normal, half(b).max_element()) else {
                return keep;
            };
            let mut h = half(b);
            // Along the outward normal, in scene units; a face stops at the other one.
            let along = (f64::from(delta.dot(rate) / rate.length_squared())).max(-2.0 * h[axis]);
            h[axis] += along / 2.0;
            *b = with_center_half(b, dvec(b.center()) + normal * (along / 2.0), h);
        }
        (Grip::BoxCenter, Some(b), _) => {
            let center = dvec(b.center());
            *b = with_center_half(b, center + screen.plane_move(center, delta), half(b));
        }
        (Grip::SphereCenter, _, Some(s)) => {
            let center = dvec(s.center.map(f64::from));
            s.center = (center + screen.plane_move(center, delta)).as_vec3().to_array();
        }
        (Grip::SphereRim, _, Some(s)) => {
            let on_screen = (sphere_screen_radius(s, screen) + delta.x).max(1.0);
            s.radius *= on_screen / sphere_screen_radius(s, screen).max(1e-6);
        }
        _ => {}
    }
    keep
}

/// Draws the crop's outlines and handles over the viewport (clipped to `clip`) and applies
/// their drags; returns the crop after them (`None` when nothing was dragged). `drawn` gets
/// each handle drawn: its name and place.
pub fn ui(
    ui: &egui::Ui,
    clip: egui::Rect,
    keep: &Filter,
    screen: &Screen,
    drawn: &mut Vec<(&'static str, [f32; 2])>,
) -> Option<Filter> {
    let painter = ui.painter_at(clip);
    let line = egui::Stroke::new(1.5, egui::Color32::from_rgb(255, 190, 40));
    let point = |v: Vec2| egui::pos2(v.x, v.y);
    if let Some(b) = &keep.crop_box {
        let corners = b.corners().map(dvec);
        for i in 0..8usize {
            for bit in [1, 2, 4] {
                if i & bit == 0
                    && let Some((a, z)) = screen.segment(corners[i], corners[i | bit])
                {
                    painter.line_segment([point(a), point(z)], line);
                }
            }
        }
    }
    if let Some(s) = &keep.crop_sphere
        && let Some(c) = screen.project(dvec(s.center.map(f64::from)))
    {
        painter.circle_stroke(point(c), sphere_screen_radius(s, screen), line);
    }
    let mut dragged: Option<Filter> = None;
    for (grip, at) in handles(keep, screen) {
        if !clip.contains(point(at)) {
            continue;
        }
        let rect = egui::Rect::from_center_size(point(at), egui::vec2(HANDLE, HANDLE) * 2.5);
        let response =
            ui.interact(rect, ui.scope_id().with(("crop handle", grip)), egui::Sense::drag());
        let hot = response.hovered() || response.dragged();
        let fill = if hot { egui::Color32::WHITE } else { line.color };
        let radius = if grip == Grip::BoxCenter || grip == Grip::SphereCenter {
            HANDLE * 0.8
        } else {
            HANDLE
        };
        painter.circle(point(at), radius, fill, egui::Stroke::new(1.0, egui::Color32::BLACK));
        drawn.push((grip.name(), at.to_array()));
        let delta = response.drag_delta();
        if delta != egui::Vec2::ZERO {
            let before = dragged.as_ref().unwrap_or(keep);
            dragged = Some(drag(before, grip, Vec2::new(delta.x, delta.y), screen));
        }
    }
    dragged
}

#[cfg(test)]
mod tests {
    use super::super::screen::looking_at_the_origin as screen;
    use super::*;

    fn boxed(turn: [f32; 3]) -> Filter {
        let b = CropBox { turn, ..CropBox::aligned([-1.0, -0.5, -0.5], [1.0, 0.5, 0.5]) };
        Filter { crop_box: Some(b), ..Filter::default() }
    }

    #[test]
    fn the_camera_sees_the_box_in_front_of_it() {
        let s = screen();
        let c = s.project(DVec3::ZERO).unwrap();
        assert!((c - s.center).length() < 1.0, "{c} {}", s.center);
        assert!(s.project(DVec3::new(3.0, -2.0, -10.0)).is_none(), "behind the camera");
    }

    #[test]
    fn a_face_dragged_one_unit_on_the_screen_moves_one_unit_and_alone() {
        let s = screen();
        for turn in [[0.0; 3], [20.0, -35.0, 50.0]] {
            let keep = boxed(turn);
            let before = keep.crop_box.unwrap();
            for axis in 0..3 {
                for high in [false, true] {
                    let (at, normal) = face(&before, axis, high);
                    let rate = s.screen_rate(at, normal, 1.0).unwrap();
                    let after = drag(&keep, Grip::Face { axis, high }, rate, &s).crop_box.unwrap();
                    // The grabbed face moved out by one unit, the other stayed.
                    let (moved, _) = face(&after, axis, high);
                    let out = (moved - at).dot(normal);
                    assert!((out - 1.0).abs() < 1e-5, "{turn:?} {axis} {high}: {out}");
                    assert!((moved - at - normal * out).length() < 1e-5, "it slid sideways");
                    let (stayed, _) = face(&after, axis, !high);
                    let (was, _) = face(&before, axis, !high);
                    assert!(
                        (stayed - was).length() < 1e-5,
                        "{turn:?} {axis}: the other face moved"
                    );
                    assert_eq!(after.turn.map(f32::to_bits), turn.map(f32::to_bits));
                }
            }
        }
    }

    #[test]
    fn a_face_stops_at_the_other_and_the_centre_moves_the_box_under_the_pointer() {
        let s = screen();
        let keep = boxed([0.0, 0.0, 30.0]);
        let b = keep.crop_box.unwrap();
        let (at, normal) = face(&b, 0, true);
        let rate = s.screen_rate(at, normal, 1.0).unwrap();
        let flat = drag(&keep, Grip::Face { axis: 0, high: true }, -rate * 10.0, &s);
        assert!(half(&flat.crop_box.unwrap()).x.abs() < 1e-6, "{flat:?}");

        let delta = Vec2::new(30.0, -12.0);
        let moved = drag(&keep, Grip::BoxCenter, delta, &s).crop_box.unwrap();
        let on_screen = s.project(dvec(moved.center())).unwrap();
        let was = s.project(dvec(b.center())).unwrap();
        assert!((on_screen - was - delta).length() < 0.05, "{on_screen} {was}");
        assert!((half(&moved) - half(&b)).length() < 1e-6);
    }

    #[test]
    fn the_sphere_follows_its_centre_and_rim() {
        let s = screen();
        let keep = Filter {
            crop_sphere: Some(CropSphere { center: [0.0; 3], radius: 1.0 }),
            ..Filter::default()
        };
        let sphere = keep.crop_sphere.unwrap();
        let grown = drag(&keep, Grip::SphereRim, Vec2::new(10.0, 3.0), &s).crop_sphere.unwrap();
        let r = sphere_screen_radius(&sphere, &s);
        assert!((sphere_screen_radius(&grown, &s) - (r + 10.0)).abs() < 1e-3);
        let moved = drag(&keep, Grip::SphereCenter, Vec2::new(-20.0, 5.0), &s).crop_sphere.unwrap();
        let at = s.project(dvec(moved.center.map(f64::from))).unwrap();
        assert!((at - s.center - Vec2::new(-20.0, 5.0)).length() < 0.05, "{at}");
        assert_eq!(handles(&keep, &s).len(), 2);
        assert_eq!(handles(&boxed([0.0; 3]), &s).len(), 7);
    }
}
