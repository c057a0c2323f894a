//! Where the viewport's camera puts the scene on the screen: the projection the overlays
//! drawn over the viewport (the crop's handles, the camera path's keyframes) share.

use glam::{DVec3, Vec2, Vec3};
use splat_trainer::formats::filter::{Selection, Shape};
use splat_trainer::render::Camera;

/// The near plane, in scene units in front of the camera: nearer is not drawn.
pub const NEAR: f32 = 1e-3;

/// Where the viewport's camera puts the scene on the screen: its frame is drawn centred at
/// `center` (in points), `pixels` of the camera's pixels to a point.
#[derive(Clone, Copy, Debug)]
pub struct Screen {
    pub camera: Camera,
    pub center: Vec2,
    pub pixels: f32,
}

impl Screen {
    /// A point in camera coordinates (x right, y down, z forward).
    pub fn camera_point(&self, world: DVec3) -> Vec3 {
        self.camera.camera_from_world().transform_point3(world.as_vec3())
    }

    /// Camera coordinates to the screen, in points (`None` behind the near plane).
    fn project_camera(&self, p: Vec3) -> Option<Vec2> {
        (p.z > NEAR).then(|| {
            let c = &self.camera;
            let pixel = Vec2::new(c.fx * p.x / p.z + c.cx, c.fy * p.y / p.z + c.cy);
            let size = Vec2::new(c.width as f32, c.height as f32);
            self.center + (pixel - size / 2.0) / self.pixels
        })
    }

    /// A world point on the screen, in points (`None` behind the near plane).
    #[must_use]
    pub fn project(&self, world: DVec3) -> Option<Vec2> {
        self.project_camera(self.camera_point(world))
    }

    /// The segment `a`–`b` on the screen, cut at the near plane (`None` when all of it is
    /// behind).
    pub fn segment(&self, a: DVec3, b: DVec3) -> Option<(Vec2, Vec2)> {
        let (mut a, mut b) = (self.camera_point(a), self.camera_point(b));
        let near = NEAR * 2.0;
        if a.z < near && b.z < near {
            return None;
        }
        if a.z < near {
            a = a.lerp(b, (near - a.z) / (b.z - a.z));
        } else if b.z < near {
            b = b.lerp(a, (near - b.z) / (a.z - b.z));
        }
        Some((self.project_camera(a)?, self.project_camera(b)?))
    }

    /// Screen points per scene unit along `direction` at `at`, as a screen vector (`None`
    /// where `at` is behind the camera or the direction points at the viewer).
    pub fn screen_rate(&self, at: DVec3, direction: DVec3, scale: f64) -> Option<Vec2> {
        let step = scale.max(1e-6);
        let (a, b) = (self.project(at)?, self.project(at + direction * step)?);
        let rate = (b - a) / step as f32;
        (rate.length() > 1e-3).then_some(rate)
    }

    /// A screen drag `delta` at `at` as a move in the camera's image plane, in scene units.
    pub fn plane_move(&self, at: DVec3, delta: Vec2) -> DVec3 {
        let depth = f64::from(self.camera_point(at).z.max(NEAR));
        let c = &self.camera;
        let right = c.world_from_camera.x_axis.truncate().as_dvec3();
        let down = c.world_from_camera.y_axis.truncate().as_dvec3();
        let scale = f64::from(self.pixels) * depth;
        right * (f64::from(delta.x) * scale / f64::from(c.fx))
            + down * (f64::from(delta.y) * scale / f64::from(c.fy))
    }
}

impl Screen {
    /// The camera's pixel under screen point `at` (points).
    fn pixel(&self, at: Vec2) -> Vec2 {
        let c = &self.camera;
        (at - self.center) * self.pixels + Vec2::new(c.width as f32, c.height as f32) / 2.0
    }

    /// Screen point `p` on the camera's image plane at depth 1.
    fn plane(&self, p: Vec2) -> Vec2 {
        let c = &self.camera;
        let pixel = self.pixel(p);
        Vec2::new((pixel.x - c.cx) / c.fx, (pixel.y - c.cy) / c.fy)
    }

    /// A selection of what this camera sees inside `shape` (`keep`: keep only that, else
    /// hide it).
    fn selection(&self, shape: Shape, keep: bool) -> Selection {
        let (_, rotation, position) = self.camera.world_from_camera.to_scale_rotation_translation();
        Selection {
            camera_from_world: rotation.normalize().inverse().to_array(),
            position: position.to_array(),
            shape,
            keep,
        }
    }

    /// The rectangle between screen points `a` and `b` as a selection of what this camera sees
    /// there (`keep`: keep only that, else hide it).
    #[must_use]
    pub fn rectangle(&self, a: Vec2, b: Vec2, keep: bool) -> Selection {
        let (lo, hi) = (self.plane(a).min(self.plane(b)), self.plane(a).max(self.plane(b)));
        self.selection(Shape::Rect([lo.x, lo.y, hi.x, hi.y]), keep)
    }

    /// A brush of `radius` screen points drawn through screen points `path` as a selection of
    /// what this camera sees under it (the viewer's cameras have square pixels: fx = fy).
    #[must_use]
    pub fn stroke(&self, path: &[Vec2], radius: f32, keep: bool) -> Selection {
        let points = path.iter().map(|&p| self.plane(p).to_array()).collect();
        let radius = radius * self.pixels / self.camera.fx;
        self.selection(Shape::Stroke { radius, points }, keep)
    }
}

/// A screen for tests: a 640 × 480 camera at (1.5, −1, −5) looking at the origin, shown at 2
/// pixels a point around (400, 300).
#[cfg(test)]
pub fn looking_at_the_origin() -> Screen {
    use glam::Mat4;
    let eye = Vec3::new(1.5, -1.0, -5.0);
    // OpenCV's axes: z forward (at the origin), y down (towards world +y), x = y × z.
    let forward = -eye.normalize();
    let down = (Vec3::Y - forward * Vec3::Y.dot(forward)).normalize();
    let world_from_camera = Mat4::from_cols(
        down.cross(forward).extend(0.0),
        down.extend(0.0),
        forward.extend(0.0),
        eye.extend(1.0),
    );
    let camera = Camera {
        width: 640,
        height: 480,
        fx: 500.0,
        fy: 500.0,
        cx: 320.0,
        cy: 240.0,
        world_from_camera,
    };
    Screen { camera, center: Vec2::new(400.0, 300.0), pixels: 2.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks `selection` at a grid of world points (2·`half` + 1 a side, `spacing` apart,
    /// around the origin) against where the screen shows them: inside where `margin` (of the
    /// point's place on the screen) is above 0. Points within 1e-3 of an edge are skipped (f32
    /// on one side, f64 on the other). Returns how many were inside and outside.
    fn check_against_screen(
        s: &Screen,
        selection: &Selection,
        half: i32,
        spacing: f64,
        margin: impl Fn(Vec2) -> f32,
    ) -> (usize, usize) {
        let (mut inside, mut outside) = (0, 0);
        for x in -half..=half {
            for y in -half..=half {
                for z in -half..=half {
                    let world = DVec3::new(f64::from(x), f64::from(y), f64::from(z)) * spacing;
                    let point = world.as_vec3().to_array();
                    let Some(at) = s.project(world) else {
                        assert!(!selection.contains(point), "{world} is behind the camera");
                        continue;
                    };
                    let margin = margin(at);
                    if margin.abs() > 1e-3 {
                        assert_eq!(selection.contains(point), margin > 0.0, "{world} at {at}");
                        inside += usize::from(margin > 0.0);
                        outside += usize::from(margin < 0.0);
                    }
                }
            }
        }
        (inside, outside)
    }

    #[test]
    fn a_selection_holds_what_the_screen_shows_inside_its_rectangle() {
        let s = looking_at_the_origin();
        let (a, b) = (s.center - Vec2::new(30.0, 20.0), s.center + Vec2::new(50.0, 10.0));
        let selection = s.rectangle(b, a, false);
        let margin = |at: Vec2| (at - a).min(b - at).min_element();
        let (inside, _) = check_against_screen(&s, &selection, 10, 0.3, margin);
        assert!(inside > 20, "{inside} inside");
        // The origin is at the screen's centre, inside: hidden by this one, kept by its twin.
        assert!(!selection.passes([0.0; 3]));
        assert!(Selection { keep: true, ..selection }.passes([0.0; 3]));
    }

    #[test]
    fn a_stroke_holds_what_the_screen_shows_within_its_radius_of_the_path() {
        let s = looking_at_the_origin();
        // An L through the centre, 12 points wide.
        let path =
            [Vec2::new(-40.0, -30.0), Vec2::ZERO, Vec2::new(60.0, 0.0)].map(|p| s.center + p);
        let radius = 12.0;
        let selection = s.stroke(&path, radius, true);
        let distance = |at: Vec2| {
            path.windows(2)
                .map(|w| {
                    let (a, ab) = (w[0], w[1] - w[0]);
                    let t = ((at - a).dot(ab) / ab.length_squared()).clamp(0.0, 1.0);
                    (at - a - t * ab).length()
                })
                .fold(f32::INFINITY, f32::min)
        };
        let margin = |at: Vec2| radius - distance(at);
        let (inside, outside) = check_against_screen(&s, &selection, 20, 0.15, margin);
        assert!(inside > 100 && outside > 1000, "{inside} inside, {outside} outside");
        assert!(selection.passes([0.0; 3]), "the origin is under the path: kept");
    }
}
