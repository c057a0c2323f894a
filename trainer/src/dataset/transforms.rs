//! `transforms.json` datasets (`NeRF` / instant-ngp / nerfstudio), in their dialects:
//! - Blender synthetic: `camera_angle_x` only, split files `transforms_train.json`,
//!   `transforms_test.json`, `transforms_val.json`, `file_path` often without extension
//!   (`./train/r_0`: `.png`, `.jpg`, `.jpeg` are tried);
//! - instant-ngp / nerfstudio: `fl_x fl_y cx cy w h` at the top level; `camera_angle_y`,
//!   `aabb_scale` and other keys are ignored;
//! - the same intrinsics inside each frame, overriding the top-level ones.
//!
//! `transform_matrix` is camera-to-world in the `OpenGL` / Blender convention (x right, y up,
//! z back); negating the camera's y and z axes turns it into `OpenCV`'s (x right, y down,
//! z forward). Intrinsics given for `w` × `h` are scaled to the image file's actual size.
//!
//! **Distortion**: `k1 k2 k3 p1 p2` are OpenCV's radial and tangential coefficients, or with
//! `"camera_model": "OPENCV_FISHEYE"` `k1..k4` its fisheye ones; the images are undistorted at
//! load (`distortion.rs`). Other camera models are an error.
//!
//! Frames whose image file is missing are skipped with one summary warning; only a dataset
//! with no image left is an error. The views keep the order of the file's frames.

use glam::{DMat4, Mat4};
use serde::Deserialize;

use super::distortion::Distortion;
use super::intrinsics::IntrinsicsSpec;
use super::source::{DatasetSource, normalize_relative};
use super::views::{PendingView, missing_images_warning};
use super::{DatasetError, DatasetFormat, ParsedDataset};

/// The file of a dataset without split: all its frames, split every n-th.
const ALL_FRAMES_FILE: &str = "transforms.json";
/// Blender split files.
const TRAIN_FILE: &str = "transforms_train.json";
const TEST_FILE: &str = "transforms_test.json";
const VAL_FILE: &str = "transforms_val.json";
/// Extensions tried, in order, for a `file_path` that names no existing file.
const IMAGE_EXTENSIONS: [&str; 3] = ["png", "jpg", "jpeg"];

/// Camera intrinsics and distortion keys, at the top level or in a frame.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
struct RawIntrinsics {
    camera_angle_x: Option<f64>,
    camera_angle_y: Option<f64>,
    fl_x: Option<f64>,
    fl_y: Option<f64>,
    cx: Option<f64>,
    cy: Option<f64>,
    w: Option<f64>,
    h: Option<f64>,
    k1: Option<f64>,
    k2: Option<f64>,
    k3: Option<f64>,
    k4: Option<f64>,
    p1: Option<f64>,
    p2: Option<f64>,
}

impl RawIntrinsics {
    /// These values, with `fallback`'s where these have none.
    fn or(self, fallback: Self) -> Self {
        Self {
            camera_angle_x: self.camera_angle_x.or(fallback.camera_angle_x),
            camera_angle_y: self.camera_angle_y.or(fallback.camera_angle_y),
            fl_x: self.fl_x.or(fallback.fl_x),
            fl_y: self.fl_y.or(fallback.fl_y),
            cx: self.cx.or(fallback.cx),
            cy: self.cy.or(fallback.cy),
            w: self.w.or(fallback.w),
            h: self.h.or(fallback.h),
            k1: self.k1.or(fallback.k1),
            k2: self.k2.or(fallback.k2),
            k3: self.k3.or(fallback.k3),
            k4: self.k4.or(fallback.k4),
            p1: self.p1.or(fallback.p1),
            p2: self.p2.or(fallback.p2),
        }
    }

    /// The lens distortion of these keys: OpenCV's radial and tangential model (`k1 k2 k3
    /// p1 p2`), or with `fisheye` its fisheye model (`k1..k4`); `None` for a pinhole camera.
    fn distortion(&self, fisheye: bool) -> Option<Distortion> {
        let k = |value: Option<f64>| value.unwrap_or(0.0);
        if fisheye {
            return Some(Distortion::Fisheye {
                k: [k(self.k1), k(self.k2), k(self.k3), k(self.k4)],
            });
        }
        Distortion::Radial {
            k: [k(self.k1), k(self.k2), k(self.k3), 0.0, 0.0, 0.0],
            p: [k(self.p1), k(self.p2)],
        }
        .nonzero()
    }

    fn spec(&self) -> IntrinsicsSpec {
        IntrinsicsSpec {
            reference_size: self.w.zip(self.h),
            fx: self.fl_x,
            fy: self.fl_y,
            fov_x_rad: self.camera_angle_x,
            fov_y_rad: self.camera_angle_y,
            cx: self.cx,
            cy: self.cy,
        }
    }
}

#[derive(Debug, Deserialize)]
struct TransformsFile {
    #[serde(flatten)]
    intrinsics: RawIntrinsics,
    /// nerfstudio's lens model: `OPENCV` (the default) or `OPENCV_FISHEYE`.
    camera_model: Option<String>,
    frames: Vec<Frame>,
}

#[derive(Debug, Deserialize)]
struct Frame {
    file_path: String,
    /// Camera-to-world, `OpenGL` convention, rows; 3 or 4 rows of 4.
    transform_matrix: Vec<[f64; 4]>,
    #[serde(flatten)]
    intrinsics: RawIntrinsics,
}

/// Whether the dataset is a `transforms.json` one.
pub(crate) fn is_transforms(source: &DatasetSource) -> bool {
    source.is_file(ALL_FRAMES_FILE) || source.is_file(TRAIN_FILE)
}

/// Reads the transforms file(s) and lists the views whose images exist.
pub(crate) fn read(source: &DatasetSource) -> Result<ParsedDataset, DatasetError> {
    let main_file = if source.is_file(TRAIN_FILE) { TRAIN_FILE } else { ALL_FRAMES_FILE };
    let eval_file = [TEST_FILE, VAL_FILE].into_iter().find(|file| source.is_file(file));

    let mut warnings = Vec::new();
    let mut read_file = |rel: &str| -> Result<Vec<PendingView>, DatasetError> {
        let file = source.display(rel);
        let parsed = parse_file(&file, &source.read(rel)?)?;
        let (views, missing) = frames_to_views(source, &file, &parsed)?;
        if !missing.is_empty() {
            warnings.push(missing_images_warning(&file, &missing, parsed.frames.len()));
        }
        Ok(views)
    };
    let views = read_file(main_file)?;
    let eval_views = eval_file.map(&mut read_file).transpose()?;

    let view_count = views.len() + eval_views.as_ref().map_or(0, Vec::len);
    if view_count == 0 {
        return Err(DatasetError::NoImages {
            file: source.display(main_file),
            message: "none of the frames' image files exists".to_owned(),
        });
    }
    Ok(ParsedDataset {
        format: DatasetFormat::Transforms,
        views,
        eval_views,
        camera_count: None,
        points: None,
        warnings,
    })
}

fn parse_file(file: &str, bytes: &[u8]) -> Result<TransformsFile, DatasetError> {
    serde_json::from_slice(bytes)
        .map_err(|e| DatasetError::invalid(file, format!("invalid transforms JSON: {e}")))
}

/// The views of the frames whose image exists, and the `file_path`s of those whose does not.
fn frames_to_views(
    source: &DatasetSource,
    file: &str,
    parsed: &TransformsFile,
) -> Result<(Vec<PendingView>, Vec<String>), DatasetError> {
    let fisheye = match parsed.camera_model.as_deref() {
        None | Some("OPENCV") => false,
        Some("OPENCV_FISHEYE") => true,
        Some(other) => {
            return Err(DatasetError::invalid(
                file,
                format!("camera_model {other} is not supported (OPENCV or OPENCV_FISHEYE)"),
            ));
        }
    };
    let mut views = Vec::with_capacity(parsed.frames.len());
    let mut missing = Vec::new();
    for (index, frame) in parsed.frames.iter().enumerate() {
        let frame_error = |message: String| {
            DatasetError::invalid(file, format!("frame {index} ({}): {message}", frame.file_path))
        };
        let world_from_camera = opencv_from_opengl(&frame.transform_matrix).map_err(frame_error)?;
        let Some(image_path) = find_image(source, &frame.file_path) else {
            missing.push(frame.file_path.clone());
            continue;
        };
        let intrinsics = frame.intrinsics.or(parsed.intrinsics);
        views.push(PendingView {
            image_path,
            described_in: file.to_owned(),
            intrinsics: intrinsics.spec(),
            distortion: intrinsics.distortion(fisheye),
            world_from_camera,
        });
    }
    Ok((views, missing))
}

/// The dataset path of a frame's image: `file_path` itself, else with an image extension
/// added. `None` when no such file exists (or the path leaves the dataset).
fn find_image(source: &DatasetSource, file_path: &str) -> Option<String> {
    let path = normalize_relative(file_path)?;
    if source.is_file(&path) {
        return Some(path);
    }
    IMAGE_EXTENSIONS
        .iter()
        .map(|ext| format!("{path}.{ext}"))
        .find(|candidate| source.is_file(candidate))
}

/// Converts an `OpenGL`-convention camera-to-world matrix (rows) to the `OpenCV` convention by
/// negating the camera's y and z axes (columns 1 and 2).
fn opencv_from_opengl(rows: &[[f64; 4]]) -> Result<Mat4, String> {
    let [row0, row1, row2, rest @ ..] = rows else {
        return Err(format!("transform_matrix has {} rows, expected 3 or 4", rows.len()));
    };
    if rest.len() > 1 {
        return Err(format!("transform_matrix has {} rows, expected 3 or 4", rows.len()));
    }
    if rows.iter().flatten().any(|v| !v.is_finite()) {
        return Err("transform_matrix holds a value that is not a finite number".to_owned());
    }
    let opengl =
        DMat4::from_cols_array_2d(&[*row0, *row1, *row2, [0.0, 0.0, 0.0, 1.0]]).transpose();
    let opencv = DMat4::from_cols(opengl.x_axis, -opengl.y_axis, -opengl.z_axis, opengl.w_axis);
    Ok(opencv.as_mat4())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opengl_to_opencv_flips_y_and_z() {
        let rows = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 2.0], [0.0, 0.0, 1.0, 3.0]];
        let m = opencv_from_opengl(&rows).expect("valid");
        assert_eq!(m.y_axis, glam::Vec4::new(0.0, -1.0, 0.0, 0.0));
        assert_eq!(m.z_axis, glam::Vec4::new(0.0, 0.0, -1.0, 0.0));
        assert_eq!(m.w_axis, glam::Vec4::new(1.0, 2.0, 3.0, 1.0));
        assert!(opencv_from_opengl(&rows[..2]).is_err());
    }

    #[test]
    fn frame_intrinsics_override_top_level() {
        let top =
            RawIntrinsics { fl_x: Some(10.0), w: Some(100.0), h: Some(50.0), ..Default::default() };
        let frame = RawIntrinsics { fl_x: Some(20.0), ..Default::default() };
        let merged = frame.or(top);
        assert_eq!((merged.fl_x, merged.w), (Some(20.0), Some(100.0)));
    }

    #[test]
    fn parses_blender_dialect() {
        let json = br#"{"camera_angle_x": 0.69, "frames": [{"file_path": "./train/r_0",
            "rotation": 0.01, "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,4],[0,0,0,1]]}]}"#;
        let parsed = parse_file("t.json", json).expect("valid");
        assert_eq!(parsed.frames.len(), 1);
        assert_eq!(parsed.intrinsics.camera_angle_x, Some(0.69));
        assert_eq!(parsed.intrinsics.distortion(false), None);
    }

    #[test]
    fn invalid_json_names_file() {
        let error = parse_file("t.json", b"{\"frames\": [").expect_err("truncated JSON");
        assert!(error.to_string().starts_with("t.json: invalid transforms JSON: "), "{error}");
    }
}
