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
mod tests;
