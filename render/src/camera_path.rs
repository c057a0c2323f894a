//! Camera paths for videos: keyframes placed by hand (or read from a path file) and the
//! smooth motion through them, and the turntable orbit around a scene.
//!
//! The motion through keyframes is a cubic Hermite spline in time for the position, the
//! orientation (the quaternion's components, each keyframe's sign chosen to agree with the one
//! before, renormalised) and the field of view. Each interior keyframe's tangent is the
//! finite difference of its neighbours over their time span (Catmull–Rom for uneven times), so
//! velocity is continuous through it; the first and last keyframes have zero velocity, so a
//! video eases in and out. Every keyframe is passed exactly at its time.

use std::f32::consts::TAU;

use glam::{Mat4, Quat, Vec3, Vec4};
use serde::{Deserialize, Serialize};

use crate::Camera;
use crate::view_controller::{
    DEFAULT_FOV_Y, DEFAULT_UP, FRAMING_AZIMUTH, MAX_FOV_Y, MIN_FOV_Y, ViewController, look_rotation,
};

/// One pose of a path: where the camera is at `time` seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Keyframe {
    pub time: f32,
    pub position: Vec3,
    /// Rotation of `world_from_camera` (OpenCV axes: x right, y down, z forward), unit length.
    pub rotation: Quat,
    /// Vertical field of view, radians.
    pub fov_y: f32,
}

/// Why keyframes do not make a path.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CameraPathError {
    #[error("a camera path needs at least two keyframes, this one has {0}")]
    TooFewKeyframes(usize),
    #[error("keyframe {index}: its time {time} must be a number after the previous keyframe's")]
    TimeOutOfOrder { index: usize, time: f32 },
    #[error("keyframe {index}: {what}")]
    BadKeyframe { index: usize, what: &'static str },
    #[error("its `up` must be three finite numbers, not all zero")]
    BadUp,
}

/// Keyframes in time order, at least two, each valid: a path a video can follow.
#[derive(Clone, Debug, PartialEq)]
pub struct CameraPath {
    keyframes: Vec<Keyframe>,
}

impl CameraPath {
    /// Checks the keyframes: at least two, times finite and strictly increasing, positions
    /// finite, rotations finite and non-zero (normalised here), fields of view within
    /// [`MIN_FOV_Y`]..=[`MAX_FOV_Y`].
    pub fn new(mut keyframes: Vec<Keyframe>) -> Result<Self, CameraPathError> {
        if keyframes.len() < 2 {
            return Err(CameraPathError::TooFewKeyframes(keyframes.len()));
        }
        let mut previous = f32::NEG_INFINITY;
        for (index, key) in keyframes.iter_mut().enumerate() {
            let bad = |what| CameraPathError::BadKeyframe { index, what };
            if !key.time.is_finite() || key.time <= previous {
                return Err(CameraPathError::TimeOutOfOrder { index, time: key.time });
            }
            previous = key.time;
            if !key.position.is_finite() {
                return Err(bad("its position is not three finite numbers"));
            }
            key.rotation = Vec4::from(key.rotation)
                .try_normalize()
                .map(Quat::from_vec4)
                .ok_or_else(|| bad("its rotation is zero or not finite"))?;
            if !(MIN_FOV_Y..=MAX_FOV_Y).contains(&key.fov_y) {
                return Err(bad("its field of view is outside 0.1° to 170°"));
            }
        }
        Ok(Self { keyframes })
    }

    #[must_use]
    pub fn keyframes(&self) -> &[Keyframe] {
        &self.keyframes
    }

    /// Seconds from the first keyframe to the last.
    #[must_use]
    pub fn duration(&self) -> f32 {
        self.end() - self.start()
    }

    /// Time of the first keyframe.
    #[must_use]
    pub fn start(&self) -> f32 {
        self.keyframes[0].time
    }

    fn end(&self) -> f32 {
        self.keyframes[self.keyframes.len() - 1].time
    }

    /// The pose at `time` seconds (clamped to the path's span; NaN gives the start).
    #[must_use]
    pub fn pose_at(&self, time: f32) -> Keyframe {
        let time = if time.is_nan() { self.start() } else { time.clamp(self.start(), self.end()) };
        let keys = &self.keyframes;
        // The segment [keys[i], keys[i + 1]] holding `time`.
        let i = keys.partition_point(|k| k.time <= time).clamp(1, keys.len() - 1) - 1;
        let (a, b) = (&keys[i], &keys[i + 1]);
        let span = b.time - a.time;
        let u = ((time - a.time) / span).clamp(0.0, 1.0);
        // Quaternions as 4-vectors, each on the side of the sphere of the one before, so
        // interpolation takes the short way round.
        let aligned = |j: usize, reference: Vec4| {
            let q = Vec4::from(keys[j].rotation);
            if q.dot(reference) < 0.0 { -q } else { q }
        };
        let qa = Vec4::from(a.rotation);
        let qb = aligned(i + 1, qa);
        let before = (i > 0).then(|| (keys[i - 1].time, aligned(i - 1, qa)));
        let after = (i + 2 < keys.len()).then(|| (keys[i + 2].time, aligned(i + 2, qb)));

        let position = hermite(
            (a.time, a.position, b.time, b.position),
            before.map(|_| (keys[i - 1].time, keys[i - 1].position)),
            after.map(|_| (keys[i + 2].time, keys[i + 2].position)),
            u,
        );
        let rotation = hermite((a.time, qa, b.time, qb), before, after, u);
        let fov_y = hermite(
            (a.time, a.fov_y, b.time, b.fov_y),
            before.map(|_| (keys[i - 1].time, keys[i - 1].fov_y)),
            after.map(|_| (keys[i + 2].time, keys[i + 2].fov_y)),
            u,
        );
        Keyframe {
            time,
            position,
            // Between two unit quaternions on the same side the blend is never near zero.
            rotation: Quat::from_vec4(rotation.try_normalize().unwrap_or(qa)),
            fov_y: fov_y.clamp(MIN_FOV_Y, MAX_FOV_Y),
        }
    }

    /// The camera at `time` for a `width` × `height` image: square pixels, centred principal
    /// point.
    #[must_use]
    pub fn camera_at(&self, time: f32, width: u32, height: u32) -> Camera {
        let pose = self.pose_at(time);
        let fy = 0.5 * height as f32 / (0.5 * pose.fov_y).tan();
        Camera {
            width,
            height,
            fx: fy,
            fy,
            cx: 0.5 * width as f32,
            cy: 0.5 * height as f32,
            world_from_camera: Mat4::from_rotation_translation(pose.rotation, pose.position),
        }
    }
}

/// Whether `m`'s upper 3×3 is a rotation (orthonormal columns, determinant +1) within f32
/// rounding of a matrix typed with six or seven digits.
fn is_rigid(m: &Mat4) -> bool {
    let r = glam::Mat3::from_mat4(*m);
    let gram = r.transpose() * r;
    gram.abs_diff_eq(glam::Mat3::IDENTITY, 1e-4) && (r.determinant() - 1.0).abs() < 1e-4
}

/// Values interpolation works on: positions, quaternions as 4-vectors, angles.
trait Lerp: Copy + std::ops::Add<Output = Self> + std::ops::Sub<Output = Self> {
    fn scale(self, by: f32) -> Self;
}
impl Lerp for Vec3 {
    fn scale(self, by: f32) -> Self {
        self * by
    }
}
impl Lerp for Vec4 {
    fn scale(self, by: f32) -> Self {
        self * by
    }
}
impl Lerp for f32 {
    fn scale(self, by: f32) -> Self {
        self * by
    }
}

/// Cubic Hermite between `(t0, p0)` and `(t1, p1)` at fraction `u`, the tangent at each end
/// the difference of its neighbours over their times (zero at a path's first and last key).
fn hermite<T: Lerp>(
    (t0, p0, t1, p1): (f32, T, f32, T),
    before: Option<(f32, T)>,
    after: Option<(f32, T)>,
    u: f32,
) -> T {
    let zero = p0.scale(0.0);
    // Tangents in value per second.
    let m0 = before.map_or(zero, |(tb, pb)| (p1 - pb).scale(1.0 / (t1 - tb)));
    let m1 = after.map_or(zero, |(ta, pa)| (pa - p0).scale(1.0 / (ta - t0)));
    let span = t1 - t0;
    let (u2, u3) = (u * u, u * u * u);
    let h00 = 2.0 * u3 - 3.0 * u2 + 1.0;
    let h10 = u3 - 2.0 * u2 + u;
    let h01 = -2.0 * u3 + 3.0 * u2;
    let h11 = u3 - u2;
    p0.scale(h00) + m0.scale(h10 * span) + p1.scale(h01) + m1.scale(h11 * span)
}

/// The turntable orbit's view at `fraction` of the way round (0 and 1 are the same view):
/// [`ViewController::framing_at`] of the scene's centre and radius, the eye at the framing's
/// elevation, starting at [`FRAMING_AZIMUTH`] (the window's first view of a scene) and turning
/// once about `up`, counter-clockwise seen from above.
#[must_use]
pub fn turntable_view(center: Vec3, radius: f32, up: Vec3, fraction: f32) -> ViewController {
    ViewController::framing_at(center, radius, up, FRAMING_AZIMUTH + TAU * fraction)
}

/// A camera path file (JSON), as people write it by hand (or [`PathFile::from_path`] writes
/// it):
///
/// ```json
/// { "fov_y_degrees": 50, "up": [0, -1, 0],
///   "keyframes": [
///     { "time": 0, "position": [0, -1, -4], "look_at": [0, 0, 0] },
///     { "time": 4, "world_from_camera": [1,0,0,0, 0,1,0,0, 0,0,1,-4, 0,0,0,1] } ] }
/// ```
///
/// Each keyframe gives its pose as a `position` and a `look_at` point (level about `up`,
/// default −y) or as a row-major 4×4 `world_from_camera` (OpenCV, as `render --camera`
/// reads); `fov_y_degrees` there overrides the file's (default 50°).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PathFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fov_y_degrees: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<[f32; 3]>,
    pub keyframes: Vec<PathFileKeyframe>,
}

/// One keyframe of a [`PathFile`].
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PathFileKeyframe {
    pub time: f32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<[f32; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub look_at: Option<[f32; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_from_camera: Option<[f32; 16]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fov_y_degrees: Option<f32>,
}

impl PathFile {
    /// The path the file describes.
    pub fn to_path(&self) -> Result<CameraPath, CameraPathError> {
        let up = self.up.map_or(DEFAULT_UP, Vec3::from);
        if up.try_normalize().is_none() {
            return Err(CameraPathError::BadUp);
        }
        let default_fov = self.fov_y_degrees.map_or(DEFAULT_FOV_Y, f32::to_radians);
        let keyframes = self
            .keyframes
            .iter()
            .enumerate()
            .map(|(index, key)| {
                let bad = |what| CameraPathError::BadKeyframe { index, what };
                let fov_y = key.fov_y_degrees.map_or(default_fov, f32::to_radians);
                let (position, rotation) = match (key.position, key.look_at, key.world_from_camera)
                {
                    (Some(position), Some(look_at), None) => {
                        let position = Vec3::from(position);
                        let rotation = look_rotation(Vec3::from(look_at) - position, up)
                            .ok_or_else(|| {
                                bad("it looks at its own position, straight along `up`, or at a non-finite point")
                            })?;
                        (position, rotation)
                    }
                    (None, None, Some(m)) => {
                        // Row-major in the file; glam reads columns.
                        let m = Mat4::from_cols_array(&m).transpose();
                        let position = m.w_axis.truncate();
                        let rotation = look_rotation(m.z_axis.truncate(), -m.y_axis.truncate())
                            .filter(|_| m.row(3) == Vec4::W && is_rigid(&m))
                            .ok_or_else(|| {
                                bad("world_from_camera must be a rigid transform with last row 0 0 0 1")
                            })?;
                        (position, rotation)
                    }
                    _ => {
                        return Err(bad(
                            "give either `position` and `look_at`, or `world_from_camera`",
                        ));
                    }
                };
                Ok(Keyframe { time: key.time, position, rotation, fov_y })
            })
            .collect::<Result<Vec<_>, _>>()?;
        CameraPath::new(keyframes)
    }

    /// The file for `path` (each pose as `world_from_camera`).
    #[must_use]
    pub fn from_path(path: &CameraPath) -> Self {
        let keyframes = path
            .keyframes()
            .iter()
            .map(|key| PathFileKeyframe {
                time: key.time,
                position: None,
                look_at: None,
                world_from_camera: Some(
                    Mat4::from_rotation_translation(key.rotation, key.position)
                        .transpose()
                        .to_cols_array(),
                ),
                fov_y_degrees: Some(key.fov_y.to_degrees()),
            })
            .collect();
        Self { fov_y_degrees: None, up: None, keyframes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(time: f32, position: Vec3, yaw: f32, fov_deg: f32) -> Keyframe {
        Keyframe {
            time,
            position,
            rotation: Quat::from_rotation_y(yaw),
            fov_y: fov_deg.to_radians(),
        }
    }

    fn path() -> CameraPath {
        CameraPath::new(vec![
            key(0.0, Vec3::new(0.0, 0.0, -4.0), 0.0, 50.0),
            key(1.0, Vec3::new(3.0, -1.0, -3.0), 0.6, 40.0),
            key(3.5, Vec3::new(4.0, -2.0, 1.0), 1.7, 60.0),
            key(4.0, Vec3::new(1.0, 0.0, 4.0), 2.9, 50.0),
        ])
        .unwrap()
    }

    #[test]
    fn passes_every_keyframe_at_its_time() {
        let path = path();
        for k in path.keyframes() {
            let pose = path.pose_at(k.time);
            assert!(pose.position.distance(k.position) < 1e-5, "{pose:?} {k:?}");
            assert!(pose.rotation.dot(k.rotation).abs() > 1.0 - 1e-6);
            assert!((pose.fov_y - k.fov_y).abs() < 1e-6);
        }
        assert!((path.duration() - 4.0).abs() < 1e-6);
    }

    #[test]
    fn motion_is_smooth_through_the_keyframes_and_still_at_the_ends() {
        // Velocity just before and just after each interior keyframe agree (C1); at the ends
        // it is zero, so a video eases in and out. One-sided differences extrapolated from
        // steps h and 2h (Richardson), so the acceleration's jump at a key (the spline is C1,
        // not C2) does not show as a velocity jump.
        let path = path();
        let h = 4e-3_f32;
        let slope = |f: &dyn Fn(f32) -> Vec3, t: f32, h: f32| {
            let d = |h: f32| (f(t + h) - f(t)) / h;
            d(h) * 2.0 - d(2.0 * h)
        };
        let position = |t: f32| path.pose_at(t).position;
        let rotation = |t: f32| Vec4::from(path.pose_at(t).rotation).truncate();
        for k in &path.keyframes()[1..3] {
            for f in [&position as &dyn Fn(f32) -> Vec3, &rotation] {
                let (left, right) = (slope(f, k.time, -h), slope(f, k.time, h));
                assert!(left.distance(right) < 0.01 * left.length().max(1.0), "{left} {right}");
            }
        }
        assert!(slope(&position, 0.0, h).length() < 1e-2);
        assert!(slope(&position, 4.0, -h).length() < 1e-2);
    }

    #[test]
    fn a_keyframe_given_as_the_negated_quaternion_does_not_spin_the_camera() {
        // q and −q are the same rotation: the path between them must not turn at all.
        let q = Quat::from_rotation_y(0.3);
        let a = Keyframe { time: 0.0, position: Vec3::ZERO, rotation: q, fov_y: 0.8 };
        let b = Keyframe { rotation: -q, time: 1.0, ..a };
        let path = CameraPath::new(vec![a, b]).unwrap();
        for i in 0..=10 {
            let pose = path.pose_at(i as f32 / 10.0);
            assert!(pose.rotation.dot(q).abs() > 1.0 - 1e-6);
            assert!(pose.rotation.is_normalized());
        }
    }

    #[test]
    fn bad_keyframes_are_refused_with_the_reason() {
        let a = key(0.0, Vec3::ZERO, 0.0, 50.0);
        assert_eq!(CameraPath::new(vec![a]), Err(CameraPathError::TooFewKeyframes(1)));
        let same_time = CameraPath::new(vec![a, a]).unwrap_err();
        assert!(matches!(same_time, CameraPathError::TimeOutOfOrder { index: 1, .. }));
        let nan = Keyframe { time: f32::NAN, ..a };
        assert!(CameraPath::new(vec![a, nan]).is_err());
        let zero = Keyframe { time: 1.0, rotation: Quat::from_xyzw(0.0, 0.0, 0.0, 0.0), ..a };
        assert!(CameraPath::new(vec![a, zero]).unwrap_err().to_string().contains("rotation"));
        let wide = Keyframe { time: 1.0, fov_y: 3.1, ..a };
        assert!(CameraPath::new(vec![a, wide]).unwrap_err().to_string().contains("field of view"));
    }

    #[test]
    fn a_path_file_reads_both_pose_forms_and_round_trips() {
        let text = r#"{ "fov_y_degrees": 40, "keyframes": [
            { "time": 0, "position": [0, 0, -4], "look_at": [0, 0, 0] },
            { "time": 2, "world_from_camera": [1,0,0,1, 0,1,0,0, 0,0,1,-4, 0,0,0,1], "fov_y_degrees": 60 } ] }"#;
        let file: PathFile = serde_json::from_str(text).unwrap();
        let path = file.to_path().unwrap();
        let first = path.pose_at(0.0);
        // Looking from −z at the origin, level about −y: the identity rotation.
        assert!(first.rotation.dot(Quat::IDENTITY).abs() > 1.0 - 1e-6, "{first:?}");
        assert!((first.fov_y - 40_f32.to_radians()).abs() < 1e-6);
        let last = path.pose_at(2.0);
        assert!(last.position.distance(Vec3::new(1.0, 0.0, -4.0)) < 1e-6);
        assert!((last.fov_y - 60_f32.to_radians()).abs() < 1e-6);
        // Written back and read again: the same path.
        let again = PathFile::from_path(&path).to_path().unwrap();
        for t in [0.0, 0.7, 1.3, 2.0] {
            let (a, b) = (path.pose_at(t), again.pose_at(t));
            assert!(a.position.distance(b.position) < 1e-5);
            assert!(a.rotation.dot(b.rotation).abs() > 1.0 - 1e-6);
            assert!((a.fov_y - b.fov_y).abs() < 1e-5);
        }
    }

    #[test]
    fn a_path_file_with_a_keyframe_in_neither_form_names_it() {
        let file = PathFile {
            fov_y_degrees: None,
            up: None,
            keyframes: vec![
                PathFileKeyframe {
                    time: 0.0,
                    position: Some([0.0; 3]),
                    look_at: Some([0.0, 0.0, 1.0]),
                    world_from_camera: None,
                    fov_y_degrees: None,
                },
                PathFileKeyframe {
                    time: 1.0,
                    position: Some([0.0; 3]),
                    look_at: None,
                    world_from_camera: None,
                    fov_y_degrees: None,
                },
            ],
        };
        let error = file.to_path().unwrap_err().to_string();
        assert!(error.starts_with("keyframe 1: give either"), "{error}");
    }

    #[test]
    fn the_turntable_goes_once_round_at_a_fixed_distance_and_height() {
        let (center, radius, up) = (Vec3::new(1.0, 2.0, 3.0), 2.0, Vec3::NEG_Y);
        let start = turntable_view(center, radius, up, 0.0);
        assert_eq!(start, ViewController::framing(center, radius, up));
        let end = turntable_view(center, radius, up, 1.0);
        assert!(start.position().distance(end.position()) < 1e-4);
        let half = turntable_view(center, radius, up, 0.5);
        // Half way round: the eye opposite, at the same height and distance.
        let offset = |v: &ViewController| v.position() - center;
        let (a, b) = (offset(&start), offset(&half));
        assert!((a.dot(up) - b.dot(up)).abs() < 1e-4);
        assert!((a.length() - b.length()).abs() < 1e-4);
        let horizontal = |v: Vec3| v - up * v.dot(up);
        assert!(horizontal(a).normalize().dot(horizontal(b).normalize()) < -0.9999);
    }
}
