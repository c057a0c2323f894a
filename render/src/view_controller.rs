//! The viewport's interactive camera: orbit, pan, zoom and fly, in pure `glam` math.
//!
//! The UI feeds [`ViewController`] mouse drags in pixels, scroll amounts and key-held moves,
//! and asks it for a [`Camera`] of whatever size the viewport has. Nothing here knows egui.
//!
//! # Conventions
//!
//! - Camera axes are OpenCV's, as everywhere in this project: x right, y down, z forward. The
//!   orientation is the unit quaternion of `world_from_camera`'s rotation, so any dataset pose,
//!   roll included, is representable.
//! - The controller orbits a *target* at `distance` in front of the camera; the eye is
//!   `target − forward · distance`.
//! - World "up" is a unit vector chosen by the caller ([`scene_up`] estimates one from the
//!   dataset cameras; [`DEFAULT_UP`] when nothing is known). Yaw turns about world up;
//!   pitch turns about the horizontal axis `forward × up` (the camera's right axis when the
//!   camera has no roll). The *elevation* of the view direction (its angle above the horizontal
//!   plane) is clamped to ±[`MAX_ELEVATION`], so the camera never flips over a pole. A pose
//!   that starts beyond the clamp (a dataset camera looking straight down) is not snapped back:
//!   pitching further towards the pole is refused, pitching away is allowed.
//! - Roll (the angle about the view direction between the camera's up, −y, and world up
//!   projected onto the image plane) is kept exactly by [`ViewController::from_camera`], by
//!   yaw and by pitch (both rotations map the vertical plane through the view direction to
//!   itself). So that a tilted dataset pose does not stay tilted forever, each [`orbit`] and
//!   [`look`] step then *eases* the roll towards level: a drag of `n` pixels multiplies it by
//!   `exp(−n / ROLL_EASE_PIXELS)`. A small drag barely changes it, half a viewport of dragging
//!   removes most of it, and it never snaps. [`ViewController::level_roll`] removes it at once.
//! - Mouse conventions: [`orbit`] "grabs the world" (drag right: the scene turns right and the
//!   eye moves left around the target; drag down: the eye rises and looks further down).
//!   [`look`] turns the view with the mouse (drag right: look right; drag down: look down), so
//!   in both the view direction follows the same rule. [`pan`] keeps the point under the cursor
//!   at the target's depth under the cursor.
//! - Every method is total: non-finite or degenerate input leaves the state unchanged or falls
//!   back to a documented default, and no method panics or produces NaN.
//!
//! [`orbit`]: ViewController::orbit
//! [`look`]: ViewController::look
//! [`pan`]: ViewController::pan

use std::f32::consts::{PI, TAU};

use glam::{DMat3, DVec3, Mat3, Mat4, Quat, Vec2, Vec3};

use crate::Camera;

/// Orbit sensitivity: radians of yaw or pitch per pixel dragged. A drag across a typical
/// 800-pixel-wide viewport turns half way round the target.
pub const ORBIT_RADIANS_PER_PIXEL: f32 = PI / 800.0;

/// Fly-mode mouse-look sensitivity: radians per pixel dragged (90° per 800 pixels), gentler than
/// orbiting because turning the head moves the whole view.
pub const LOOK_RADIANS_PER_PIXEL: f32 = PI / 1600.0;

/// Zoom sensitivity: the target distance is multiplied by `exp(−scroll · ZOOM_PER_SCROLL_POINT)`,
/// so positive scroll (wheel up) moves closer. egui reports about 50 points per wheel notch,
/// which is then about 10% closer per notch; opposite scrolls cancel exactly.
pub const ZOOM_PER_SCROLL_POINT: f32 = 0.002;

/// Fly speed, in target distances per second for a unit `local_move`.
pub const FLY_SPEED: f32 = 1.0;

/// Fly speed never drops below `FLY_SPEED · FLY_MIN_SPEED_FRACTION · scene_radius` per second,
/// so flying still moves after zooming in very close to the target.
pub const FLY_MIN_SPEED_FRACTION: f32 = 0.05;

/// Largest elevation of the view direction above or below the horizontal plane (89°).
pub const MAX_ELEVATION: f32 = 89.0 * (PI / 180.0);

/// Roll left after an orbit or look drag of `n` pixels is `roll · exp(−n / ROLL_EASE_PIXELS)`.
pub const ROLL_EASE_PIXELS: f32 = 300.0;

/// Closest the zoom goes to the target, as a fraction of the scene radius.
pub const MIN_DISTANCE_FRACTION: f32 = 1e-3;

/// Farthest the zoom goes from the target, as a multiple of the scene radius.
pub const MAX_DISTANCE_FRACTION: f32 = 100.0;

/// Vertical field of view of [`ViewController::framing`] and of dataset cameras whose focal
/// length is unusable (50°).
pub const DEFAULT_FOV_Y: f32 = 50.0 * (PI / 180.0);

/// Narrowest vertical field of view (0.1°).
pub const MIN_FOV_Y: f32 = 0.1 * (PI / 180.0);

/// Widest vertical field of view (170°).
pub const MAX_FOV_Y: f32 = 170.0 * (PI / 180.0);

/// Elevation of the eye above the target in [`ViewController::framing`] (30°).
pub const FRAMING_ELEVATION: f32 = 30.0 * (PI / 180.0);

/// Azimuth of the eye in [`ViewController::framing`] (45°, a three-quarter view).
pub const FRAMING_AZIMUTH: f32 = 45.0 * (PI / 180.0);

/// [`ViewController::framing`] fits a sphere this much larger than the one asked for, so the
/// scene does not touch the viewport's edges.
pub const FRAMING_MARGIN: f32 = 1.1;

/// [`scene_focus`]'s radius is this fraction of the median camera distance to the focus: the
/// content of a capture usually lies within about half the camera distance of what the cameras
/// look at, and [`ViewController::framing`] then views it from about 1.3 camera distances.
pub const FOCUS_RADIUS_FACTOR: f32 = 0.5;

/// [`focus_from_points`] bounds each axis by this percentile from either end (2%), so up to 2%
/// of floaters on each side of each axis do not widen the view.
pub const POINT_PERCENTILE: f32 = 0.02;

/// Up vector used when nothing better is known. Our world frame for COLMAP scenes (and so for
/// most 3DGS PLY files) is the reconstruction's, which inherits the first camera's OpenCV y-down
/// axis, so −y is up more often than any other axis.
pub const DEFAULT_UP: Vec3 = Vec3::NEG_Y;

/// Below this length the mean of the cameras' up vectors is too uncertain to be an estimate.
const MIN_UP_AGREEMENT: f64 = 0.1;

/// Intrinsics of the dataset camera the view jumped to, reproduced exactly at the same size.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Intrinsics {
    width: u32,
    height: u32,
    fx: f32,
    fy: f32,
    cx: f32,
    cy: f32,
}

/// Interactive viewport camera: orbit around a target, pan, zoom, fly. See the module docs for
/// the conventions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewController {
    /// Rotation of `world_from_camera` (OpenCV camera axes), unit length.
    rotation: Quat,
    /// Point orbited around and zoomed towards.
    target: Vec3,
    /// Distance from the eye to the target, finite and positive.
    distance: f32,
    /// Vertical field of view in radians, in `[MIN_FOV_Y, MAX_FOV_Y]`.
    fov_y: f32,
    /// World up, unit length.
    up: Vec3,
    /// Size of the scene: bounds the zoom and sets the slowest fly speed. Finite and positive.
    scene_radius: f32,
    /// The dataset camera's intrinsics after [`ViewController::from_camera`].
    native: Option<Intrinsics>,
}

impl Default for ViewController {
    /// A unit sphere at the origin with [`DEFAULT_UP`].
    fn default() -> Self {
        Self::framing(Vec3::ZERO, 1.0, DEFAULT_UP)
    }
}

/// Which point stays fixed when the view turns.
#[derive(Clone, Copy)]
enum Pivot {
    Target,
    Eye,
}

impl ViewController {
    /// A three-quarter view that shows the whole sphere of `radius` around `center`: the eye is
    /// [`FRAMING_ELEVATION`] above the horizontal plane at [`FRAMING_AZIMUTH`] (measured from an
    /// arbitrary but fixed horizontal axis), far enough that the sphere plus
    /// [`FRAMING_MARGIN`] fits the vertical field of view ([`DEFAULT_FOV_Y`]); landscape
    /// viewports then show all of it. The scene radius becomes `radius`.
    ///
    /// Non-finite `center` is taken as the origin, a non-finite or non-positive `radius` as 1, a
    /// zero or non-finite `up` as [`DEFAULT_UP`].
    #[must_use]
    pub fn framing(center: Vec3, radius: f32, up: Vec3) -> Self {
        Self::framing_at(center, radius, up, FRAMING_AZIMUTH)
    }

    /// [`ViewController::framing`] with the eye at `azimuth` radians (about `up`, from the same
    /// fixed horizontal axis) instead of [`FRAMING_AZIMUTH`]: a turntable video's frames. A
    /// non-finite azimuth is taken as [`FRAMING_AZIMUTH`].
    #[must_use]
    pub fn framing_at(center: Vec3, radius: f32, up: Vec3, azimuth: f32) -> Self {
        let azimuth = if azimuth.is_finite() { azimuth } else { FRAMING_AZIMUTH };
        let center = if center.is_finite() { center } else { Vec3::ZERO };
        let radius = if radius.is_finite() && radius > 0.0 { radius } else { 1.0 };
        let up = up.normalize_or(DEFAULT_UP);
        let (a, b) = horizontal_basis(up);
        let (sin_el, cos_el) = FRAMING_ELEVATION.sin_cos();
        let (sin_az, cos_az) = azimuth.sin_cos();
        let eye_direction = (a * cos_az + b * sin_az) * cos_el + up * sin_el;
        let forward = -eye_direction;
        let rotation = rotation_from_axes(forward.cross(up), forward).unwrap_or(Quat::IDENTITY);
        let distance = radius * FRAMING_MARGIN / (0.5 * DEFAULT_FOV_Y).sin();
        let view = Self {
            rotation,
            target: center,
            distance,
            fov_y: DEFAULT_FOV_Y,
            up,
            scene_radius: radius,
            native: None,
        };
        if view.is_valid() {
            view
        } else {
            // Only reachable when the radius or centre overflow; 1 and the origin cannot.
            Self::framing_at(Vec3::ZERO, 1.0, up, azimuth)
        }
    }

    /// Jumps to a dataset camera: the same pose (roll included) with the target
    /// `target_distance` in front of it, and the same intrinsics. `camera(c.width, c.height)`
    /// then reproduces `c`: intrinsics bit for bit, `world_from_camera` up to rounding. At other
    /// sizes the vertical field of view is kept, with square pixels and a centred principal
    /// point.
    ///
    /// A good `target_distance` is the depth of [`scene_focus`]'s point in this camera; the
    /// scene radius becomes `target_distance` (change it with
    /// [`ViewController::with_scene_radius`]).
    ///
    /// Degenerate input: a non-finite or non-positive distance becomes 1; a zero or non-finite
    /// `up` becomes the camera's own up (−y); the rotation is re-orthonormalised (a mirrored
    /// matrix loses its mirroring); unusable intrinsics (non-finite, non-positive focal length,
    /// zero size, field of view outside [`MIN_FOV_Y`]..[`MAX_FOV_Y`]) give [`DEFAULT_FOV_Y`];
    /// a non-finite pose gives [`ViewController::framing`] of a unit sphere at the origin.
    #[must_use]
    pub fn from_camera(camera: &Camera, up: Vec3, target_distance: f32) -> Self {
        let distance = if target_distance.is_finite() && target_distance > 0.0 {
            target_distance
        } else {
            1.0
        };
        let m = camera.world_from_camera;
        let position = m.w_axis.truncate();
        let Some(rotation) = rotation_from_axes(m.x_axis.truncate(), m.z_axis.truncate())
            .filter(|_| position.is_finite())
        else {
            return Self::framing(Vec3::ZERO, 1.0, up);
        };
        let up = up.normalize_or(rotation * Vec3::NEG_Y);
        let (fov_y, native) = match fov_from_focal(camera.fy, camera.height) {
            Some(fov_y)
                if camera.fx.is_finite()
                    && camera.fx > 0.0
                    && camera.cx.is_finite()
                    && camera.cy.is_finite()
                    && camera.width > 0 =>
            {
                let native = Intrinsics {
                    width: camera.width,
                    height: camera.height,
                    fx: camera.fx,
                    fy: camera.fy,
                    cx: camera.cx,
                    cy: camera.cy,
                };
                (fov_y, Some(native))
            }
            Some(fov_y) => (fov_y, None),
            None => (DEFAULT_FOV_Y, None),
        };
        let view = Self {
            rotation,
            target: position + rotation * Vec3::Z * distance,
            distance,
            fov_y,
            up,
            scene_radius: distance,
            native,
        };
        if view.is_valid() { view } else { Self::framing(Vec3::ZERO, 1.0, up) }
    }

    /// The camera for a viewport of `width` × `height` pixels. After
    /// [`ViewController::from_camera`] and at that camera's size the intrinsics are the
    /// dataset's; otherwise `fx = fy` from the vertical field of view and the principal point is
    /// the viewport's centre. A zero-size viewport gives zero focal lengths, never NaN.
    #[must_use]
    pub fn camera(&self, width: u32, height: u32) -> Camera {
        let (fx, fy, cx, cy) = match self.native {
            Some(n) if n.width == width && n.height == height => (n.fx, n.fy, n.cx, n.cy),
            _ => {
                let fy = self.focal_y(height as f32);
                (fy, fy, 0.5 * width as f32, 0.5 * height as f32)
            }
        };
        Camera {
            width,
            height,
            fx,
            fy,
            cx,
            cy,
            world_from_camera: Mat4::from_rotation_translation(self.rotation, self.position()),
        }
    }

    /// Orbits the eye around the target by a mouse drag of `delta` pixels
    /// ([`ORBIT_RADIANS_PER_PIXEL`]): `delta.x` yaws about world up, `delta.y` pitches, with the
    /// elevation clamp and roll easing of the module docs. Target and distance are unchanged.
    pub fn orbit(&mut self, delta: Vec2) {
        self.turn(delta, ORBIT_RADIANS_PER_PIXEL, Pivot::Target);
    }

    /// Fly-mode mouse look: turns the view about the eye by a drag of `delta` pixels
    /// ([`LOOK_RADIANS_PER_PIXEL`]), carrying the target along at the same distance. Same clamp
    /// and roll easing as [`ViewController::orbit`].
    pub fn look(&mut self, delta: Vec2) {
        self.turn(delta, LOOK_RADIANS_PER_PIXEL, Pivot::Eye);
    }

    /// Pans eye and target in the image plane by a drag of `delta` pixels in a viewport
    /// `viewport_height` pixels tall, so that points at the target's depth follow the cursor
    /// exactly (with square pixels, as [`ViewController::camera`] makes at any size other than a
    /// dataset camera's). A non-positive height does nothing.
    pub fn pan(&mut self, delta: Vec2, viewport_height: f32) {
        if !delta.is_finite()
            || delta == Vec2::ZERO
            || !(viewport_height.is_finite() && viewport_height > 0.0)
        {
            return;
        }
        // A point at depth `distance` moves `focal_y / distance` pixels per world unit.
        let world_per_pixel = self.distance / self.focal_y(viewport_height);
        let shift = self.rotation * delta.extend(0.0) * world_per_pixel;
        self.commit(Self { target: self.target - shift, ..*self });
    }

    /// Zooms by `scroll` points (positive: closer): the distance to the target is multiplied by
    /// `exp(−scroll · ZOOM_PER_SCROLL_POINT)` and clamped to
    /// `[MIN_DISTANCE_FRACTION, MAX_DISTANCE_FRACTION] · scene_radius` (widened to include the
    /// current distance, so a view outside the range is not snapped into it). The target stays.
    pub fn zoom(&mut self, scroll: f32) {
        if !scroll.is_finite() {
            return;
        }
        let factor = (-scroll * ZOOM_PER_SCROLL_POINT).exp();
        let (near, far) = self.distance_range();
        let distance =
            (self.distance * factor).clamp(near.min(self.distance), far.max(self.distance));
        self.commit(Self { distance, ..*self });
    }

    /// Flies eye and target by `local_move` in camera axes (x right, y down, z forward; a unit
    /// vector per held WASD/QE direction, longer to go faster) for `dt` seconds, at
    /// [`FLY_SPEED`] target distances per second (never below
    /// `FLY_SPEED · FLY_MIN_SPEED_FRACTION · scene_radius`), so flying suits any scene size.
    /// Non-positive or non-finite `dt` does nothing; the caller bounds `dt` after a stall.
    pub fn fly(&mut self, local_move: Vec3, dt: f32) {
        if !local_move.is_finite() || local_move == Vec3::ZERO || !(dt.is_finite() && dt > 0.0) {
            return;
        }
        let step = self.rotation * local_move * (self.fly_speed() * dt);
        self.commit(Self { target: self.target + step, ..*self });
    }

    /// Removes any roll: turns the camera about its view direction so its up (−y) lies in the
    /// vertical plane through the view direction. Does nothing while looking straight up or
    /// down, where roll is undefined.
    pub fn level_roll(&mut self) {
        let rotation = ease_roll(self.rotation, self.up, 1.0);
        self.commit(Self { rotation, ..*self });
    }

    /// Same view, scene radius `radius` (bounds the zoom, sets the slowest fly speed). A
    /// non-finite or non-positive radius is ignored.
    #[must_use]
    pub fn with_scene_radius(mut self, radius: f32) -> Self {
        self.set_scene_radius(radius);
        self
    }

    /// Sets the scene radius; a non-finite or non-positive radius is ignored.
    pub fn set_scene_radius(&mut self, radius: f32) {
        if radius.is_finite() && radius > 0.0 {
            self.commit(Self { scene_radius: radius, ..*self });
        }
    }

    /// Sets the vertical field of view in radians, clamped to [`MIN_FOV_Y`]..[`MAX_FOV_Y`];
    /// the dataset camera's intrinsics are forgotten. Non-finite values are ignored.
    pub fn set_fov_y(&mut self, fov_y: f32) {
        if fov_y.is_finite() {
            self.commit(Self { fov_y: fov_y.clamp(MIN_FOV_Y, MAX_FOV_Y), native: None, ..*self });
        }
    }

    /// Sets world up (normalised); the pose is unchanged. Zero or non-finite vectors are
    /// ignored.
    pub fn set_up(&mut self, up: Vec3) {
        if let Some(up) = up.try_normalize() {
            self.commit(Self { up, ..*self });
        }
    }

    /// Point orbited around and zoomed towards.
    #[must_use]
    pub fn target(&self) -> Vec3 {
        self.target
    }

    /// Distance from the eye to the target.
    #[must_use]
    pub fn distance(&self) -> f32 {
        self.distance
    }

    /// Eye position in world space.
    #[must_use]
    pub fn position(&self) -> Vec3 {
        self.target - self.forward() * self.distance
    }

    /// Unit view direction (the camera's +z) in world space.
    #[must_use]
    pub fn forward(&self) -> Vec3 {
        self.rotation * Vec3::Z
    }

    /// Rotation of `world_from_camera` (OpenCV camera axes).
    #[must_use]
    pub fn rotation(&self) -> Quat {
        self.rotation
    }

    /// World up, unit length.
    #[must_use]
    pub fn up(&self) -> Vec3 {
        self.up
    }

    /// Vertical field of view in radians.
    #[must_use]
    pub fn fov_y(&self) -> f32 {
        self.fov_y
    }

    /// Scene radius: bounds the zoom and sets the slowest fly speed.
    #[must_use]
    pub fn scene_radius(&self) -> f32 {
        self.scene_radius
    }

    /// Angle of the view direction above the horizontal plane, in radians (negative: looking
    /// down).
    #[must_use]
    pub fn elevation(&self) -> f32 {
        elevation(self.forward(), self.up)
    }

    /// Roll in radians: the angle about the view direction from level (world up projected onto
    /// the image plane) to the camera's up (−y), positive clockwise as seen from behind the
    /// camera, in (−π, π]. Zero while looking straight up or down, where it is undefined.
    #[must_use]
    pub fn roll(&self) -> f32 {
        roll(self.rotation, self.up).unwrap_or(0.0)
    }

    /// Yaw then pitch by a drag of `delta` pixels, about the target or the eye.
    fn turn(&mut self, delta: Vec2, radians_per_pixel: f32, pivot: Pivot) {
        if !delta.is_finite() || delta == Vec2::ZERO {
            return;
        }
        // View direction turns right for a drag right and down for a drag down (module docs).
        let mut yaw = -delta.x * radians_per_pixel;
        if yaw.abs() > PI {
            // Only wrap large angles: wrapping a small one would round it at the scale of π.
            yaw = (yaw + PI).rem_euclid(TAU) - PI;
        }
        let pitch = -delta.y * radians_per_pixel;
        let mut rotation = Quat::from_axis_angle(self.up, yaw) * self.rotation;

        let forward = rotation * Vec3::Z;
        let from = elevation(forward, self.up);
        let to = (from + pitch).clamp((-MAX_ELEVATION).min(from), MAX_ELEVATION.max(from));
        // Rotating about `forward × up` by +a raises the view direction's elevation by a.
        rotation = Quat::from_axis_angle(pitch_axis(rotation, self.up), to - from) * rotation;

        let ease = 1.0 - (-delta.length() / ROLL_EASE_PIXELS).exp();
        rotation = ease_roll(rotation, self.up, ease).normalize();

        let target = match pivot {
            Pivot::Target => self.target,
            Pivot::Eye => self.position() + rotation * Vec3::Z * self.distance,
        };
        self.commit(Self { rotation, target, ..*self });
    }

    /// Replaces the state with `candidate` if that is valid, so no update can leave NaN behind.
    fn commit(&mut self, candidate: Self) {
        if candidate.is_valid() {
            *self = candidate;
        }
    }

    fn is_valid(&self) -> bool {
        self.rotation.is_finite()
            && self.target.is_finite()
            && self.distance.is_finite()
            && self.distance > 0.0
            && (MIN_FOV_Y..=MAX_FOV_Y).contains(&self.fov_y)
            && self.up.is_finite()
            && self.scene_radius.is_finite()
            && self.scene_radius > 0.0
            && self.position().is_finite()
    }

    /// Focal length in pixels that gives the vertical field of view over `height` pixels.
    fn focal_y(&self, height: f32) -> f32 {
        0.5 * height / (0.5 * self.fov_y).tan()
    }

    fn distance_range(&self) -> (f32, f32) {
        (
            (self.scene_radius * MIN_DISTANCE_FRACTION).max(f32::MIN_POSITIVE),
            self.scene_radius * MAX_DISTANCE_FRACTION,
        )
    }

    fn fly_speed(&self) -> f32 {
        FLY_SPEED * self.distance.max(FLY_MIN_SPEED_FRACTION * self.scene_radius)
    }
}

/// Estimates world up from dataset cameras: the normalised mean of their up vectors (−y of
/// `world_from_camera`, OpenCV). People hold cameras roughly level and rings of cameras tilt
/// inwards symmetrically, so the mean points up even when single cameras do not.
///
/// Cameras with a non-finite or zero up vector are skipped. [`DEFAULT_UP`] when none is left
/// or when the cameras disagree so much that the mean is shorter than 0.1 (no reliable
/// estimate: as many cameras upside down as upright).
#[must_use]
pub fn scene_up(cameras: &[Camera]) -> Vec3 {
    let mut sum = DVec3::ZERO;
    let mut count = 0_u32;
    for camera in cameras {
        if let Some(up) = (-camera.world_from_camera.y_axis.truncate()).try_normalize() {
            sum += up.as_dvec3();
            count += 1;
        }
    }
    if count == 0 {
        return DEFAULT_UP;
    }
    let mean = sum / f64::from(count);
    if mean.length() < MIN_UP_AGREEMENT {
        return DEFAULT_UP;
    }
    mean.normalize().as_vec3().normalize_or(DEFAULT_UP)
}

/// The point the dataset cameras look at, and a radius for [`ViewController::framing`].
///
/// The point is the least-squares closest point to all optical axes (lines through each camera
/// centre along its +z), solved in f64 with a tiny Tikhonov term (1e-6 per camera) pulling
/// towards the centroid of the camera centres: it changes a well-posed answer by about a
/// millionth and makes degenerate ones (one camera, parallel axes) take the centroid's
/// coordinate along the undetermined directions. The radius is [`FOCUS_RADIUS_FACTOR`] times
/// the median distance from the camera centres to the point.
///
/// Cameras with a non-finite pose are skipped; none left gives the origin and radius 1. When
/// the cameras sit on the point (identical cameras, or one camera) there is no scale: the
/// point is put one unit along their mean view direction and the radius is 1.
#[must_use]
pub fn scene_focus(cameras: &[Camera]) -> (Vec3, f32) {
    let rays: Vec<(DVec3, DVec3)> = cameras
        .iter()
        .filter_map(|camera| {
            let origin = camera.position();
            let direction = camera.world_from_camera.z_axis.truncate().try_normalize()?;
            origin.is_finite().then(|| (origin.as_dvec3(), direction.as_dvec3()))
        })
        .collect();
    if rays.is_empty() {
        return (Vec3::ZERO, 1.0);
    }
    let n = rays.len() as f64;
    let centroid = rays.iter().map(|(o, _)| *o).sum::<DVec3>() / n;
    let mean_direction = rays.iter().map(|(_, d)| *d).sum::<DVec3>() / n;

    // Minimise Σ |(I − d dᵀ)(p − o)|² + λ |p − c|²: (Σ (I − d dᵀ) + λ I) p = Σ (I − d dᵀ) o + λ c.
    let lambda = 1e-6 * n;
    let mut normal = DMat3::from_diagonal(DVec3::splat(lambda));
    let mut rhs = centroid * lambda;
    for (origin, direction) in &rays {
        let projector = DMat3::IDENTITY - outer(*direction, *direction);
        normal += projector;
        rhs += projector * *origin;
    }
    let determinant = normal.determinant();
    let mut focus = if determinant.is_finite() && determinant > 0.0 {
        normal.inverse() * rhs
    } else {
        centroid
    };
    if !focus.is_finite() {
        focus = centroid;
    }

    let mut distances: Vec<f64> = rays.iter().map(|(o, _)| o.distance(focus)).collect();
    distances.sort_unstable_by(f64::total_cmp);
    let median = distances[distances.len() / 2];
    let scale = 1.0 + centroid.abs().max_element();
    let (focus, radius) = if median > 1e-6 * scale {
        (focus, median * f64::from(FOCUS_RADIUS_FACTOR))
    } else {
        (centroid + mean_direction.normalize_or_zero(), 1.0)
    };

    let (focus, radius) = (focus.as_vec3(), radius as f32);
    if focus.is_finite() && radius.is_finite() && radius > 0.0 {
        (focus, radius)
    } else {
        (Vec3::ZERO, 1.0)
    }
}

/// Centre and radius of a point cloud (splat means) for viewing a file with no cameras: the
/// box between the [`POINT_PERCENTILE`] and `1 − POINT_PERCENTILE` percentiles of each axis,
/// its centre and half its diagonal. Percentiles rather than min/max, so a few far floaters do
/// not shrink the scene to a dot. Non-finite points are skipped; no points give the origin and
/// radius 1, a single point (or all equal) radius 1.
#[must_use]
pub fn focus_from_points(points: &[[f32; 3]]) -> (Vec3, f32) {
    let finite: Vec<&[f32; 3]> =
        points.iter().filter(|p| p.iter().all(|v| v.is_finite())).collect();
    if finite.is_empty() {
        return (Vec3::ZERO, 1.0);
    }
    let low_index = ((finite.len() - 1) as f32 * POINT_PERCENTILE).round() as usize;
    let high_index = ((finite.len() - 1) as f32 * (1.0 - POINT_PERCENTILE)).round() as usize;
    let mut values = Vec::with_capacity(finite.len());
    let mut low = Vec3::ZERO;
    let mut high = Vec3::ZERO;
    for axis in 0..3 {
        values.clear();
        values.extend(finite.iter().map(|p| p[axis]));
        low[axis] = *values.select_nth_unstable_by(low_index, f32::total_cmp).1;
        // Everything from low_index on is ≥ the low value; the high one is among them.
        let rest = &mut values[low_index..];
        high[axis] = *rest.select_nth_unstable_by(high_index - low_index, f32::total_cmp).1;
    }
    let center = low * 0.5 + high * 0.5;
    let radius = (high * 0.5 - low * 0.5).length();
    if radius.is_finite() && radius > 0.0 { (center, radius) } else { (center, 1.0) }
}

/// Rotation of a camera looking along `forward`, level about `up` (its x axis horizontal, its
/// −y axis towards `up`): `None` when `forward` is zero, non-finite or along `up`.
#[must_use]
pub fn look_rotation(forward: Vec3, up: Vec3) -> Option<Quat> {
    let right = forward.cross(up);
    if !(right.is_finite() && right.length_squared() > 1e-12 * forward.length_squared()) {
        return None;
    }
    rotation_from_axes(right, forward)
}

/// Rotation whose camera x axis is `right` (made orthogonal to `forward`) and z axis `forward`;
/// y is `forward × right` (down), so the result is a proper rotation even for mirrored input.
fn rotation_from_axes(right: Vec3, forward: Vec3) -> Option<Quat> {
    let z = forward.try_normalize()?;
    let x = (right - z * right.dot(z)).try_normalize()?;
    let y = z.cross(x);
    let rotation = Quat::from_mat3(&Mat3::from_cols(x, y, z)).normalize();
    rotation.is_finite().then_some(rotation)
}

/// Angle of unit `direction` above the plane perpendicular to unit `up`. `atan2` of the
/// vertical and horizontal parts stays accurate near the poles, where `asin` of the dot product
/// would amplify its rounding fifty-fold at 89°.
fn elevation(direction: Vec3, up: Vec3) -> f32 {
    direction.dot(up).atan2(direction.cross(up).length())
}

/// Unit horizontal axis perpendicular to the view direction, pointing to the camera's right
/// when it has no roll: `forward × up`, or, looking straight up or down where that vanishes,
/// the camera's right axis (then horizontal) made exactly horizontal.
fn pitch_axis(rotation: Quat, up: Vec3) -> Vec3 {
    let forward = rotation * Vec3::Z;
    let horizontal = forward.cross(up);
    if horizontal.length_squared() > 1e-8 {
        return horizontal.normalize();
    }
    let right = rotation * Vec3::X;
    (right - up * right.dot(up)).normalize_or(right)
}

/// Roll of `rotation` about its view direction relative to `up` (see [`ViewController::roll`]),
/// `None` while the view direction is within about 0.06° of vertical.
fn roll(rotation: Quat, up: Vec3) -> Option<f32> {
    let forward = rotation * Vec3::Z;
    let level_up = up - forward * up.dot(forward);
    if level_up.length_squared() < 1e-6 {
        return None;
    }
    let level_up = level_up.normalize();
    let camera_up = rotation * Vec3::NEG_Y;
    Some(forward.dot(level_up.cross(camera_up)).atan2(level_up.dot(camera_up)))
}

/// Removes `fraction` (0..=1) of the roll by turning about the view direction.
fn ease_roll(rotation: Quat, up: Vec3, fraction: f32) -> Quat {
    match roll(rotation, up) {
        Some(angle) if fraction > 0.0 => {
            Quat::from_axis_angle(rotation * Vec3::Z, -angle * fraction) * rotation
        }
        _ => rotation,
    }
}

/// Two unit vectors spanning the plane perpendicular to unit `up`, deterministic: the first is
/// the world axis least aligned with `up` (x, then y, then z on ties), made horizontal.
fn horizontal_basis(up: Vec3) -> (Vec3, Vec3) {
    let axis = [Vec3::X, Vec3::Y, Vec3::Z]
        .into_iter()
        .min_by(|a, b| a.dot(up).abs().total_cmp(&b.dot(up).abs()))
        .unwrap_or(Vec3::X);
    let a = (axis - up * axis.dot(up)).normalize_or_zero();
    let a = if a == Vec3::ZERO { up.any_orthonormal_vector() } else { a };
    (a, up.cross(a))
}

/// Vertical field of view of focal length `fy` over `height` pixels, if usable.
fn fov_from_focal(fy: f32, height: u32) -> Option<f32> {
    if !(fy.is_finite() && fy > 0.0) || height == 0 {
        return None;
    }
    let fov = 2.0 * (0.5 * height as f32 / fy).atan();
    (MIN_FOV_Y..=MAX_FOV_Y).contains(&fov).then_some(fov)
}

fn outer(a: DVec3, b: DVec3) -> DMat3 {
    DMat3::from_cols(a * b.x, a * b.y, a * b.z)
}

#[cfg(test)]
mod tests {
    use splat_formats::random::SplitMix64;

    use super::*;

    fn vec3(rng: &mut SplitMix64, lo: f32, hi: f32) -> Vec3 {
        Vec3::new(rng.range(lo, hi), rng.range(lo, hi), rng.range(lo, hi))
    }

    /// Uniform random rotation (rejection sampling in the 4-ball).
    fn rotation(rng: &mut SplitMix64) -> Quat {
        loop {
            let q = Quat::from_xyzw(
                rng.range(-1.0, 1.0),
                rng.range(-1.0, 1.0),
                rng.range(-1.0, 1.0),
                rng.range(-1.0, 1.0),
            );
            let length = q.length();
            if length > 0.1 && length <= 1.0 {
                return q.normalize();
            }
        }
    }

    /// A dataset-like camera with non-square pixels and an off-centre principal point.
    fn dataset_camera(rotation: Quat, position: Vec3) -> Camera {
        Camera {
            width: 1297,
            height: 840,
            fx: 1011.3,
            fy: 1008.7,
            cx: 650.2,
            cy: 418.9,
            world_from_camera: Mat4::from_rotation_translation(rotation, position),
        }
    }

    /// Camera looking from `eye` at `at` with no roll about `up`.
    fn look_at(eye: Vec3, at: Vec3, up: Vec3) -> Quat {
        let forward = (at - eye).normalize();
        rotation_from_axes(forward.cross(up), forward).unwrap()
    }

    /// Pixel position of world point `p`, and its depth.
    fn project(camera: &Camera, p: Vec3) -> (Vec2, f32) {
        let c = camera.camera_from_world().transform_point3(p);
        (Vec2::new(camera.fx * c.x / c.z + camera.cx, camera.fy * c.y / c.z + camera.cy), c.z)
    }

    fn max_abs_diff(a: Mat4, b: Mat4) -> f32 {
        (a - b).to_cols_array().iter().fold(0.0_f32, |m, v| m.max(v.abs()))
    }

    fn all_finite(camera: &Camera) -> bool {
        [camera.fx, camera.fy, camera.cx, camera.cy].iter().all(|v| v.is_finite())
            && camera.world_from_camera.is_finite()
    }

    #[test]
    fn from_camera_round_trips_random_poses() {
        let mut rng = SplitMix64::new(1);
        for _ in 0..200 {
            // Random rotations include every roll; positions and distances span scene size 1–10.
            let camera = dataset_camera(rotation(&mut rng), vec3(&mut rng, -5.0, 5.0));
            let up = vec3(&mut rng, -1.0, 1.0);
            let distance = rng.range(0.5, 10.0);
            let back = ViewController::from_camera(&camera, up, distance)
                .camera(camera.width, camera.height);
            // f32 rounding of the target (≲ 15 units away) and the quaternion round trip: a few
            // ulp of 16 (1.9e-6 each).
            let error = max_abs_diff(back.world_from_camera, camera.world_from_camera);
            assert!(error <= 1e-5, "world_from_camera off by {error}");
            assert_eq!((back.width, back.height), (camera.width, camera.height));
            for (a, b) in [
                (back.fx, camera.fx),
                (back.fy, camera.fy),
                (back.cx, camera.cx),
                (back.cy, camera.cy),
            ] {
                assert_eq!(a.to_bits(), b.to_bits(), "intrinsics must be reproduced exactly");
            }
        }
    }

    #[test]
    fn from_camera_at_another_size_keeps_the_vertical_fov() {
        let camera = dataset_camera(Quat::from_rotation_z(0.3), Vec3::new(1.0, 2.0, 3.0));
        let view = ViewController::from_camera(&camera, Vec3::NEG_Y, 4.0);
        let other = view.camera(640, 360);
        // fy scales with the height (relative f32 rounding of atan/tan, ~1e-6).
        let expected_fy = camera.fy * 360.0 / camera.height as f32;
        assert!((other.fy - expected_fy).abs() <= 1e-4 * expected_fy);
        assert_eq!(other.fx.to_bits(), other.fy.to_bits());
        assert_eq!((other.cx, other.cy), (320.0, 180.0));
        assert!(max_abs_diff(other.world_from_camera, camera.world_from_camera) <= 1e-5);
    }

    #[test]
    fn set_fov_forgets_the_dataset_intrinsics() {
        let camera = dataset_camera(Quat::IDENTITY, Vec3::ZERO);
        let mut view = ViewController::from_camera(&camera, Vec3::NEG_Y, 2.0);
        view.set_fov_y(1.0);
        let back = view.camera(camera.width, camera.height);
        assert_eq!(back.fx.to_bits(), back.fy.to_bits());
        assert_eq!(back.cx.to_bits(), (0.5 * camera.width as f32).to_bits());
        assert!((view.fov_y() - 1.0).abs() < 1e-7);
    }

    #[test]
    fn orbit_keeps_the_target_and_the_distance() {
        let mut rng = SplitMix64::new(2);
        for _ in 0..20 {
            let camera = dataset_camera(rotation(&mut rng), vec3(&mut rng, -5.0, 5.0));
            let mut view = ViewController::from_camera(&camera, Vec3::NEG_Y, rng.range(0.5, 10.0));
            let (target, distance) = (view.target(), view.distance());
            for _ in 0..50 {
                view.orbit(Vec2::new(rng.range(-200.0, 200.0), rng.range(-200.0, 200.0)));
                assert_eq!(view.target(), target);
                assert_eq!(view.distance().to_bits(), distance.to_bits());
                // The eye is `distance` from the target up to f32 rounding at ~15 units.
                let actual = view.position().distance(target);
                assert!((actual - distance).abs() <= 1e-5, "{actual} vs {distance}");
                assert!((view.rotation().length() - 1.0).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn full_yaw_returns_to_the_start() {
        let start = ViewController::framing(Vec3::new(1.0, -2.0, 0.5), 3.0, Vec3::NEG_Y);
        let full_turn = TAU / ORBIT_RADIANS_PER_PIXEL;

        let mut once = start;
        once.orbit(Vec2::new(full_turn, 0.0));
        let mut steps = start;
        for _ in 0..100 {
            steps.orbit(Vec2::new(full_turn / 100.0, 0.0));
        }
        let reference = start.camera(800, 600).world_from_camera;
        for view in [once, steps] {
            // Eye ~8 units from a target ~2 from the origin; 100 composed rotations drift ~1e-6.
            let error = max_abs_diff(view.camera(800, 600).world_from_camera, reference);
            assert!(error <= 1e-5, "off by {error}");
        }

        // Half a turn puts the eye on the opposite side, at the same height.
        let mut half = start;
        half.orbit(Vec2::new(full_turn / 2.0, 0.0));
        let (a, b) = (start.position() - start.target(), half.position() - half.target());
        assert!((a.dot(start.up()) - b.dot(start.up())).abs() < 1e-5);
        let horizontal = |v: Vec3| v - start.up() * v.dot(start.up());
        assert!((horizontal(a) + horizontal(b)).length() < 1e-4);
    }

    #[test]
    fn orbit_and_look_follow_the_documented_directions() {
        let start = ViewController::framing(Vec3::ZERO, 1.0, Vec3::Y);
        let right = start.rotation() * Vec3::X;

        let mut view = start;
        view.orbit(Vec2::new(20.0, 0.0));
        assert!((view.position() - start.position()).dot(right) < 0.0, "eye moves left");
        assert!(view.forward().dot(right) > 0.0, "view turns right");

        let mut view = start;
        view.orbit(Vec2::new(0.0, 20.0));
        assert!(view.position().dot(Vec3::Y) > start.position().dot(Vec3::Y), "eye rises");
        let expected = start.elevation() - 20.0 * ORBIT_RADIANS_PER_PIXEL;
        assert!((view.elevation() - expected).abs() < 1e-5);

        let mut view = start;
        view.look(Vec2::new(20.0, 10.0));
        assert!(view.position().distance(start.position()) < 1e-5, "the eye stays");
        assert!((view.target().distance(view.position()) - start.distance()).abs() < 1e-5);
        assert!(view.forward().dot(right) > 0.0, "look right");
        let expected = start.elevation() - 10.0 * LOOK_RADIANS_PER_PIXEL;
        assert!((view.elevation() - expected).abs() < 1e-5, "look down");
    }

    #[test]
    fn pitch_is_clamped_and_never_flips() {
        let start = ViewController::framing(Vec3::ZERO, 1.0, Vec3::Z);
        for (drag, limit) in [(1e5, -MAX_ELEVATION), (-1e5, MAX_ELEVATION)] {
            let mut once = start;
            once.orbit(Vec2::new(0.0, drag));
            let mut steps = start;
            for _ in 0..2000 {
                steps.orbit(Vec2::new(3.0, drag / 1e4));
                assert!(steps.elevation().abs() <= MAX_ELEVATION + 1e-5);
                // Camera up (−y) keeps pointing to the upper hemisphere: no flip over the pole.
                assert!((steps.rotation() * Vec3::NEG_Y).dot(Vec3::Z) > 0.0);
            }
            for view in [once, steps] {
                assert!((view.elevation() - limit).abs() < 1e-4, "{}", view.elevation());
            }
        }
        let mut look = start;
        look.look(Vec2::new(0.0, -1e6));
        assert!((look.elevation() - MAX_ELEVATION).abs() < 1e-4);
    }

    #[test]
    fn a_pose_beyond_the_clamp_is_not_snapped() {
        // A dataset camera looking straight down.
        let rotation = look_at(Vec3::new(0.0, 0.0, 5.0), Vec3::ZERO, Vec3::Y);
        let camera = dataset_camera(rotation, Vec3::new(0.0, 0.0, 5.0));
        let start = ViewController::from_camera(&camera, Vec3::Z, 5.0);
        assert!((start.elevation() + PI / 2.0).abs() < 1e-3);

        let mut further = start;
        further.orbit(Vec2::new(0.0, 5.0));
        assert!((further.elevation() - start.elevation()).abs() < 1e-6, "no further down");

        let mut back = start;
        back.orbit(Vec2::new(0.0, -5.0));
        let expected = start.elevation() + 5.0 * ORBIT_RADIANS_PER_PIXEL;
        assert!((back.elevation() - expected).abs() < 1e-4, "a small step, not a snap");
    }

    #[test]
    fn roll_survives_the_jump_and_eases_out_while_orbiting() {
        let eye = Vec3::new(4.0, -1.0, 0.5);
        let level = look_at(eye, Vec3::ZERO, Vec3::NEG_Y);
        let rolled = Quat::from_axis_angle(level * Vec3::Z, 0.5) * level;
        let view = ViewController::from_camera(&dataset_camera(rolled, eye), Vec3::NEG_Y, 4.0);
        assert!((view.roll() - 0.5).abs() < 1e-5, "roll {}", view.roll());

        // Yaw and pitch keep the roll; only the easing changes it, by exp(−pixels / 300).
        for delta in [Vec2::new(10.0, 0.0), Vec2::new(0.0, 10.0), Vec2::new(-6.0, 8.0)] {
            let mut moved = view;
            moved.orbit(delta);
            let expected = 0.5 * (-delta.length() / ROLL_EASE_PIXELS).exp();
            assert!((moved.roll() - expected).abs() < 1e-4, "{} vs {expected}", moved.roll());
            assert!(moved.roll() > 0.45, "a small drag never snaps the roll");
        }

        let mut long = view;
        for _ in 0..100 {
            long.orbit(Vec2::new(30.0, 0.0));
        }
        assert!(long.roll().abs() < 1e-3, "roll {}", long.roll());

        let mut levelled = view;
        levelled.level_roll();
        assert!(levelled.roll().abs() < 1e-5);
        assert!(levelled.forward().distance(view.forward()) < 1e-5);
    }

    #[test]
    fn pan_moves_the_target_by_exactly_the_mouse_delta() {
        let framed = ViewController::framing(Vec3::new(0.5, 1.0, -2.0), 2.0, Vec3::NEG_Y);
        let camera = dataset_camera(Quat::from_rotation_y(0.4), Vec3::new(1.0, 0.0, -3.0));
        // fx = fy so the horizontal motion is exact at the dataset camera's own size too.
        let square = Camera { fx: camera.fy, ..camera };
        let jumped = ViewController::from_camera(&square, Vec3::NEG_Y, 3.0);
        for (view, (w, h)) in [(framed, (800, 600)), (jumped, (square.width, square.height))] {
            let before = view.camera(w, h);
            let (start, _) = project(&before, view.target());
            assert!(start.distance(Vec2::new(before.cx, before.cy)) < 1e-3);
            for delta in [Vec2::new(37.0, -12.0), Vec2::new(-250.0, 400.0), Vec2::new(0.5, 0.0)] {
                let mut moved = view;
                moved.pan(delta, h as f32);
                let (pixel, depth) = project(&moved.camera(w, h), view.target());
                // f32 rounding of a point ~5 units away, seen at ~1000 px focal length: ~1e-3 px.
                assert!((pixel - (start + delta)).length() < 5e-3, "{pixel} vs {}", start + delta);
                assert!((depth - view.distance()).abs() < 1e-5);
                assert_eq!(moved.rotation(), view.rotation());
            }
        }
    }

    #[test]
    fn zoom_is_multiplicative_and_never_reaches_zero() {
        let start = ViewController::framing(Vec3::ONE, 2.0, Vec3::Y);
        let mut view = start;
        view.zoom(50.0);
        assert!(view.distance() < start.distance());
        assert_eq!(view.target(), start.target());
        view.zoom(-50.0);
        assert!((view.distance() / start.distance() - 1.0).abs() < 1e-6);

        for _ in 0..1000 {
            view.zoom(1e4);
            assert!(view.distance() > 0.0);
        }
        assert!((view.distance() - 2.0 * MIN_DISTANCE_FRACTION).abs() < 1e-7);
        view.zoom(f32::MAX);
        assert!(view.distance() > 0.0);
        view.zoom(-f32::MAX);
        assert!((view.distance() - 2.0 * MAX_DISTANCE_FRACTION).abs() < 1e-3);
        assert!(view.camera(640, 480).world_from_camera.is_finite());
    }

    #[test]
    fn fly_moves_along_the_camera_axes() {
        let mut rng = SplitMix64::new(3);
        let camera = dataset_camera(rotation(&mut rng), vec3(&mut rng, -5.0, 5.0));
        let start = ViewController::from_camera(&camera, Vec3::NEG_Y, 2.0);
        let expected_step = FLY_SPEED * 2.0 * 0.25;

        let mut view = start;
        view.fly(Vec3::Z, 0.25);
        let moved = view.position() - start.position();
        assert!(moved.distance(start.forward() * expected_step) < 1e-5);
        assert!((view.target() - start.target()).distance(moved) < 1e-5);
        assert_eq!(view.rotation(), start.rotation());
        assert_eq!(view.distance().to_bits(), start.distance().to_bits());

        let mut view = start;
        view.fly(Vec3::new(1.0, 1.0, 0.0), 0.25);
        let axes = (start.rotation() * Vec3::X) + (start.rotation() * Vec3::Y);
        assert!((view.position() - start.position()).distance(axes * expected_step) < 1e-5);

        // Zoomed very close, the speed floor still moves at a fraction of the scene radius.
        let mut close = start.with_scene_radius(10.0);
        close.zoom(1e5);
        let before = close.position();
        close.fly(Vec3::Z, 1.0);
        let step = close.position().distance(before);
        assert!((step - FLY_SPEED * FLY_MIN_SPEED_FRACTION * 10.0).abs() < 1e-4);
    }

    #[test]
    fn framing_shows_the_whole_sphere_from_above() {
        let center = Vec3::new(3.0, -1.0, 2.0);
        let up = Vec3::new(0.2, -1.0, 0.1).normalize();
        let view = ViewController::framing(center, 2.5, up);
        assert_eq!(view.target(), center);
        let height = (view.position() - center).dot(up) / view.distance();
        assert!((height - FRAMING_ELEVATION.sin()).abs() < 1e-5);
        assert!(view.roll().abs() < 1e-5);

        let camera = view.camera(800, 600);
        let mut rng = SplitMix64::new(4);
        for _ in 0..1000 {
            let direction = vec3(&mut rng, -1.0, 1.0).normalize_or(Vec3::X);
            let (pixel, depth) = project(&camera, center + direction * 2.5);
            assert!(depth > 0.0);
            assert!(
                pixel.x > 0.0 && pixel.x < 800.0 && pixel.y > 0.0 && pixel.y < 600.0,
                "{pixel}"
            );
        }
    }

    /// Cameras on a ring of `radius` around `center` at `height` along `axis`, looking at the
    /// centre, level about `axis`, for the given angles.
    fn ring(center: Vec3, axis: Vec3, radius: f32, height: f32, angles: &[f32]) -> Vec<Camera> {
        let (a, b) = horizontal_basis(axis);
        angles
            .iter()
            .map(|angle| {
                let eye = center + (a * angle.cos() + b * angle.sin()) * radius + axis * height;
                dataset_camera(look_at(eye, center, axis), eye)
            })
            .collect()
    }

    #[test]
    fn scene_up_recovers_the_axis_of_a_ring() {
        let axis = Vec3::new(0.3, 0.8, -0.5).normalize();
        let angles: Vec<f32> = (0..24).map(|i| i as f32 * TAU / 24.0).collect();
        let cameras = ring(Vec3::new(1.0, 2.0, 3.0), axis, 4.0, 1.5, &angles);
        assert!(scene_up(&cameras).distance(axis) < 1e-5);

        // With some roll jitter on each camera the estimate is still close.
        let mut rng = SplitMix64::new(5);
        let jittered: Vec<Camera> = cameras
            .iter()
            .map(|camera| {
                let rotation = Quat::from_mat4(&camera.world_from_camera);
                let roll = Quat::from_axis_angle(rotation * Vec3::Z, rng.range(-0.15, 0.15));
                Camera {
                    world_from_camera: Mat4::from_rotation_translation(
                        roll * rotation,
                        camera.position(),
                    ),
                    ..*camera
                }
            })
            .collect();
        assert!(scene_up(&jittered).angle_between(axis) < 0.05);
    }

    #[test]
    fn scene_focus_recovers_the_centre() {
        let center = Vec3::new(2.0, -1.0, 0.5);
        // Half a ring: the centroid of the cameras is far from the centre they look at.
        let angles: Vec<f32> = (0..12).map(|i| i as f32 * PI / 11.0).collect();
        let cameras = ring(center, Vec3::NEG_Y, 4.0, 1.0, &angles);
        let (focus, radius) = scene_focus(&cameras);
        // The Tikhonov term moves it by ~2e-6 of the centroid offset (~3 units).
        assert!(focus.distance(center) < 1e-4, "{focus}");
        let camera_distance = (4.0_f32 * 4.0 + 1.0).sqrt();
        assert!((radius - FOCUS_RADIUS_FACTOR * camera_distance).abs() < 1e-4);
    }

    #[test]
    fn focus_from_points_ignores_outliers() {
        let mut rng = SplitMix64::new(6);
        let center = Vec3::new(10.0, -3.0, 4.0);
        let mut points: Vec<[f32; 3]> =
            (0..9_900).map(|_| (center + vec3(&mut rng, -1.0, 1.0)).to_array()).collect();
        // 1% floaters far away, all on one side.
        points.extend(
            (0..100).map(|_| (center + Vec3::splat(500.0) + vec3(&mut rng, 0.0, 500.0)).to_array()),
        );
        let (focus, radius) = focus_from_points(&points);
        assert!(focus.distance(center) < 0.1, "{focus}");
        // Half the diagonal of the (trimmed) cube of side 2 is √3.
        assert!(radius > 1.5 && radius < 1.8, "{radius}");
    }

    #[test]
    fn degenerate_inputs_give_finite_results() {
        let nan_camera = Camera {
            world_from_camera: Mat4::from_cols_array(&[f32::NAN; 16]),
            fy: f32::NAN,
            ..dataset_camera(Quat::IDENTITY, Vec3::ZERO)
        };
        let zero_camera = Camera {
            width: 0,
            height: 0,
            fx: 0.0,
            fy: 0.0,
            cx: 0.0,
            cy: 0.0,
            world_from_camera: Mat4::ZERO,
        };
        let one = dataset_camera(Quat::from_rotation_x(0.3), Vec3::ONE);

        for cameras in [
            vec![],
            vec![nan_camera],
            vec![zero_camera],
            vec![one],
            vec![one; 5],
            vec![one, nan_camera, zero_camera],
        ] {
            let up = scene_up(&cameras);
            assert!(up.is_finite() && (up.length() - 1.0).abs() < 1e-5);
            let (focus, radius) = scene_focus(&cameras);
            assert!(focus.is_finite() && radius.is_finite() && radius > 0.0);
        }
        let up = Vec3::new(0.0, 1.0, 0.0);
        let mirrored =
            Camera { world_from_camera: Mat4::from_scale(Vec3::new(1.0, -1.0, 1.0)), ..one };
        // As many cameras upside down as upright: no estimate.
        let mut upside_down = [dataset_camera(Quat::IDENTITY, Vec3::ZERO); 4];
        for camera in &mut upside_down[..2] {
            camera.world_from_camera = Mat4::from_rotation_z(PI);
        }
        assert_eq!(scene_up(&upside_down), DEFAULT_UP);

        for points in [
            vec![],
            vec![[f32::NAN; 3]],
            vec![[1.0, 2.0, 3.0]; 7],
            vec![[f32::MAX, -f32::MAX, 0.0], [-f32::MAX, f32::MAX, 0.0]],
        ] {
            let (focus, radius) = focus_from_points(&points);
            assert!(focus.is_finite() && radius.is_finite() && radius > 0.0);
        }

        let views = [
            ViewController::framing(Vec3::NAN, f32::NAN, Vec3::ZERO),
            ViewController::framing(Vec3::ZERO, 0.0, Vec3::INFINITY),
            ViewController::framing(Vec3::splat(f32::MAX), f32::MAX, up),
            ViewController::from_camera(&nan_camera, Vec3::NAN, f32::NAN),
            ViewController::from_camera(&zero_camera, up, 0.0),
            ViewController::from_camera(&mirrored, up, -1.0),
            ViewController::from_camera(&one, Vec3::ZERO, f32::INFINITY),
            ViewController::default(),
        ];
        for start in views {
            for (w, h) in [(0, 0), (0, 10), (10, 0), (1, 1), (4096, 2160)] {
                assert!(all_finite(&start.camera(w, h)), "{start:?} at {w}x{h}");
            }

            // Non-finite and zero input leaves the state exactly as it was.
            let mut view = start;
            for bad in [Vec2::NAN, Vec2::new(f32::INFINITY, 0.0), Vec2::ZERO] {
                view.orbit(bad);
                view.look(bad);
                view.pan(bad, 600.0);
            }
            view.pan(Vec2::ONE, 0.0);
            view.pan(Vec2::ONE, f32::NAN);
            view.zoom(f32::NAN);
            view.zoom(0.0);
            view.fly(Vec3::NAN, 0.1);
            view.fly(Vec3::Z, f32::NAN);
            view.fly(Vec3::Z, -1.0);
            view.fly(Vec3::ZERO, 0.1);
            view.set_scene_radius(f32::NAN);
            view.set_scene_radius(-1.0);
            view.set_fov_y(f32::INFINITY);
            view.set_up(Vec3::ZERO);
            assert_eq!(view, start);

            // Huge input stays finite.
            view.orbit(Vec2::splat(1e30));
            view.look(Vec2::splat(-1e30));
            view.pan(Vec2::splat(1e30), 1.0);
            view.zoom(1e30);
            view.zoom(-1e30);
            view.fly(Vec3::splat(1e30), 1e30);
            view.set_fov_y(-5.0);
            view.level_roll();
            let camera = view.camera(800, 600);
            assert!(all_finite(&camera), "{view:?}");
            assert!(view.distance() > 0.0 && view.position().is_finite());
        }
    }
}
