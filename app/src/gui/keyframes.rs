//! A camera path placed in the viewer: each "Add keyframe" takes the viewport's camera as it
//! is (position, orientation, field of view), `gap` seconds after the one before; the path
//! through them is `render::camera_path`'s (smooth, easing in and out), the one
//! `render --path` follows, and "Save path" writes it as that command's file. Over the
//! viewport, the keyframes are numbered dots and the path between them a line. A path is in
//! its scene's coordinates: opening another dataset or splat file clears it.

use splat_trainer::render::Camera;
use splat_trainer::render::camera_path::{CameraPath, CameraPathError, Keyframe, PathFile};

use super::screen::Screen;

/// Points drawn along each segment of the path between two keyframes.
const SAMPLES: usize = 24;

/// The keyframes placed so far.
#[derive(Debug)]
pub struct Keyframes {
    keys: Vec<Keyframe>,
    /// Seconds from one keyframe to the next.
    pub gap: f32,
    /// The files the path was saved to ("Save path").
    pub saved: Vec<std::path::PathBuf>,
}

impl Default for Keyframes {
    fn default() -> Self {
        Self { keys: Vec::new(), gap: 2.0, saved: Vec::new() }
    }
}

impl Keyframes {
    /// Adds a keyframe where `camera` is, `gap` seconds after the last (the first at 0).
    pub fn add(&mut self, camera: &Camera) {
        let time = self.keys.last().map_or(0.0, |k| k.time + self.gap.max(0.1));
        self.keys.push(keyframe(camera, time));
    }

    pub fn remove_last(&mut self) {
        self.keys.pop();
    }

    pub fn clear(&mut self) {
        self.keys.clear();
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Seconds from the first keyframe to the last.
    #[must_use]
    pub fn duration(&self) -> f32 {
        self.keys.last().map_or(0.0, |k| k.time)
    }

    /// The smooth path through the keyframes (at least two).
    pub fn path(&self) -> Result<CameraPath, CameraPathError> {
        CameraPath::new(self.keys.clone())
    }

    /// The path as `render --path` reads it, pretty-printed JSON.
    pub fn file_text(&self) -> Result<String, CameraPathError> {
        let file = PathFile::from_path(&self.path()?);
        Ok(serde_json::to_string_pretty(&file).unwrap_or_default())
    }

    /// Draws the path and its keyframes over the viewport (`painter` clipped to it).
    pub fn draw(&self, painter: &egui::Painter, screen: &Screen) {
        let color = egui::Color32::from_rgb(90, 200, 255);
        let point = |v: glam::Vec2| egui::pos2(v.x, v.y);
        if let Ok(path) = self.path() {
            let count = SAMPLES * (self.keys.len() - 1);
            let at = |i: usize| {
                let time = path.start() + path.duration() * i as f32 / count as f32;
                path.pose_at(time).position.as_dvec3()
            };
            for i in 0..count {
                if let Some((a, b)) = screen.segment(at(i), at(i + 1)) {
                    painter.line_segment([point(a), point(b)], egui::Stroke::new(1.5, color));
                }
            }
        }
        for (number, key) in self.keys.iter().enumerate() {
            let Some(at) = screen.project(key.position.as_dvec3()) else { continue };
            painter.circle(point(at), 5.0, color, egui::Stroke::new(1.0, egui::Color32::BLACK));
            painter.text(
                point(at) + egui::vec2(7.0, -7.0),
                egui::Align2::LEFT_BOTTOM,
                (number + 1).to_string(),
                egui::FontId::proportional(13.0),
                color,
            );
        }
    }
}

/// The keyframe at `time` of `camera`: its position, its orientation and its vertical field
/// of view.
fn keyframe(camera: &Camera, time: f32) -> Keyframe {
    let (_, rotation, position) = camera.world_from_camera.to_scale_rotation_translation();
    let fov_y = 2.0 * (0.5 * camera.height as f32 / camera.fy).atan();
    Keyframe { time, position, rotation: rotation.normalize(), fov_y }
}

#[cfg(test)]
mod tests {
    use glam::{Quat, Vec3};

    use super::super::screen::looking_at_the_origin;
    use super::*;

    fn pose(camera: &Camera) -> (Vec3, Quat) {
        let (_, rotation, position) = camera.world_from_camera.to_scale_rotation_translation();
        (position, rotation)
    }

    #[test]
    fn a_path_through_the_viewers_cameras_passes_each_as_it_was() {
        let first = looking_at_the_origin().camera;
        let mut second = first;
        second.world_from_camera = glam::Mat4::from_rotation_y(0.7) * first.world_from_camera;
        second.fy *= 1.5;
        second.fx *= 1.5;
        let mut keys = Keyframes { gap: 3.0, ..Keyframes::default() };
        assert!(keys.path().is_err(), "no path from no keyframe");
        keys.add(&first);
        keys.add(&second);
        assert_eq!((keys.len(), keys.duration().to_bits()), (2, 3.0f32.to_bits()));
        let path = keys.path().unwrap();
        for (time, camera) in [(0.0, first), (3.0, second)] {
            let again = path.camera_at(time, camera.width, camera.height);
            let ((p, q), (p2, q2)) = (pose(&camera), pose(&again));
            assert!((p - p2).length() < 1e-5, "{time}: {p} {p2}");
            assert!(q.dot(q2).abs() > 1.0 - 1e-6, "{time}: {q} {q2}");
            assert!((again.fy - camera.fy).abs() < 1e-2, "{time}: {} {}", again.fy, camera.fy);
        }
        // The file `render --path` reads gives the same path back.
        let file: PathFile = serde_json::from_str(&keys.file_text().unwrap()).unwrap();
        let read = file.to_path().unwrap();
        for (a, b) in read.keyframes().iter().zip(path.keyframes()) {
            assert!((a.position - b.position).length() < 1e-5);
            assert!(a.rotation.dot(b.rotation).abs() > 1.0 - 1e-6);
            assert!((a.fov_y - b.fov_y).abs() < 1e-5);
        }
        keys.remove_last();
        assert_eq!(keys.len(), 1);
        keys.clear();
        assert!(keys.is_empty());
    }
}
