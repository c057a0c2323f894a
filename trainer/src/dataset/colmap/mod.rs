//! COLMAP sparse models, binary (`*.bin`) or text (`*.txt`).
//!
//! The model lies in `sparse/` or in numbered sub-models `sparse/0`, `sparse/1`, ...; with
//! several, the one with the most registered images is used. Images are read from `images/`
//! beside `sparse/`, in name order (which the every-n-th eval split follows).
//!
//! Poses: COLMAP stores world→camera as a unit quaternion (w, x, y, z) and a translation, in
//! the `OpenCV` convention (x right, y down, z forward), which we invert to
//! `world_from_camera`.
//!
//! Camera models: `PINHOLE`, `SIMPLE_PINHOLE`, `SIMPLE_RADIAL`, `RADIAL`, `OPENCV`,
//! `FULL_OPENCV`, `OPENCV_FISHEYE`, `SIMPLE_RADIAL_FISHEYE` and `RADIAL_FISHEYE`. Distorted
//! images are undistorted at load to the pinhole camera of the same intrinsics
//! (`distortion.rs`). `FOV` and `THIN_PRISM_FISHEYE` are an error.

mod binary;
mod text;

use std::collections::HashMap;

use glam::{DAffine3, DMat4, DQuat, DVec3, Mat4};
use splat_formats::PointCloud;

use super::distortion::Distortion;
use super::intrinsics::PixelIntrinsics;
use super::source::{DatasetSource, normalize_relative};
use super::views::{PendingView, missing_images_warning};
use super::{DatasetError, DatasetFormat, ParsedDataset};

/// Folder that holds the sparse model(s), relative to the dataset root.
const SPARSE_FOLDER: &str = "sparse";
/// Folder that holds the images, relative to the dataset root.
const IMAGES_FOLDER: &str = "images";

/// Names of the camera models we load, for messages.
pub const SUPPORTED_CAMERA_MODELS: &str = "PINHOLE, SIMPLE_PINHOLE, SIMPLE_RADIAL, RADIAL, \
    OPENCV, FULL_OPENCV, OPENCV_FISHEYE, SIMPLE_RADIAL_FISHEYE, RADIAL_FISHEYE";

/// A COLMAP camera model: its id in `cameras.bin`, name in `cameras.txt`, parameter count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CameraModel {
    pub id: i32,
    pub name: &'static str,
    pub param_count: usize,
}

/// Every model COLMAP defines (`src/colmap/sensor/models.h`), supported or not, so that an
/// unsupported one is named in the error and a binary file can still be sized.
const CAMERA_MODELS: [CameraModel; 11] = [
    CameraModel { id: 0, name: "SIMPLE_PINHOLE", param_count: 3 },
    CameraModel { id: 1, name: "PINHOLE", param_count: 4 },
    CameraModel { id: 2, name: "SIMPLE_RADIAL", param_count: 4 },
    CameraModel { id: 3, name: "RADIAL", param_count: 5 },
    CameraModel { id: 4, name: "OPENCV", param_count: 8 },
    CameraModel { id: 5, name: "OPENCV_FISHEYE", param_count: 8 },
    CameraModel { id: 6, name: "FULL_OPENCV", param_count: 12 },
    CameraModel { id: 7, name: "FOV", param_count: 5 },
    CameraModel { id: 8, name: "SIMPLE_RADIAL_FISHEYE", param_count: 4 },
    CameraModel { id: 9, name: "RADIAL_FISHEYE", param_count: 5 },
    CameraModel { id: 10, name: "THIN_PRISM_FISHEYE", param_count: 12 },
];

impl CameraModel {
    pub fn from_id(id: i32) -> Option<Self> {
        CAMERA_MODELS.iter().copied().find(|m| m.id == id)
    }

    pub fn from_name(name: &str) -> Option<Self> {
        CAMERA_MODELS.iter().copied().find(|m| m.name == name)
    }

    /// Pinhole intrinsics and the lens distortion (`None`: a pinhole camera); `None` for the
    /// models we do not load. `params` has `param_count` values, in COLMAP's order.
    fn camera(
        self,
        width: f64,
        height: f64,
        params: &[f64],
    ) -> Option<(PixelIntrinsics, Option<Distortion>)> {
        let pixels = |fx, fy, cx, cy| PixelIntrinsics { width, height, fx, fy, cx, cy };
        let radial = |k: [f64; 6], p: [f64; 2]| Distortion::Radial { k, p }.nonzero();
        let fisheye = |k: [f64; 4]| Some(Distortion::Fisheye { k });
        Some(match (self.name, params) {
            ("SIMPLE_PINHOLE", &[f, cx, cy]) => (pixels(f, f, cx, cy), None),
            ("PINHOLE", &[fx, fy, cx, cy]) => (pixels(fx, fy, cx, cy), None),
            ("SIMPLE_RADIAL", &[f, cx, cy, k]) => {
                (pixels(f, f, cx, cy), radial([k, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0; 2]))
            }
            ("RADIAL", &[f, cx, cy, k1, k2]) => {
                (pixels(f, f, cx, cy), radial([k1, k2, 0.0, 0.0, 0.0, 0.0], [0.0; 2]))
            }
            ("OPENCV", &[fx, fy, cx, cy, k1, k2, p1, p2]) => {
                (pixels(fx, fy, cx, cy), radial([k1, k2, 0.0, 0.0, 0.0, 0.0], [p1, p2]))
            }
            ("FULL_OPENCV", &[fx, fy, cx, cy, k1, k2, p1, p2, k3, k4, k5, k6]) => {
                (pixels(fx, fy, cx, cy), radial([k1, k2, k3, k4, k5, k6], [p1, p2]))
            }
            ("OPENCV_FISHEYE", &[fx, fy, cx, cy, k1, k2, k3, k4]) => {
                (pixels(fx, fy, cx, cy), fisheye([k1, k2, k3, k4]))
            }
            ("SIMPLE_RADIAL_FISHEYE", &[f, cx, cy, k]) => {
                (pixels(f, f, cx, cy), fisheye([k, 0.0, 0.0, 0.0]))
            }
            ("RADIAL_FISHEYE", &[f, cx, cy, k1, k2]) => {
                (pixels(f, f, cx, cy), fisheye([k1, k2, 0.0, 0.0]))
            }
            _ => return None,
        })
    }
}

/// One entry of `cameras.bin` / `cameras.txt`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ColmapCamera {
    pub id: u32,
    pub model: CameraModel,
    pub intrinsics: PixelIntrinsics,
    /// The lens distortion; `None` for a pinhole camera.
    pub distortion: Option<Distortion>,
}

impl ColmapCamera {
    /// Builds a camera from a file's raw values; errors name no file.
    pub fn new(
        file: &str,
        id: u32,
        model: CameraModel,
        width: u64,
        height: u64,
        params: &[f64],
    ) -> Result<Self, DatasetError> {
        let Some((intrinsics, distortion)) = model.camera(width as f64, height as f64, params)
        else {
            return Err(DatasetError::UnsupportedCameraModel {
                file: file.to_owned(),
                camera_id: id,
                model: model.name.to_owned(),
            });
        };
        if width > u64::from(u32::MAX) || height > u64::from(u32::MAX) {
            return Err(DatasetError::invalid(
                file,
                format!("camera {id}: size {width}x{height} is too large"),
            ));
        }
        intrinsics
            .validate()
            .map_err(|e| DatasetError::invalid(file, format!("camera {id}: {e}")))?;
        Ok(Self { id, model, intrinsics, distortion })
    }
}

/// One entry of `images.bin` / `images.txt`: a registered image and its pose.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ColmapImage {
    pub id: u32,
    /// World→camera rotation, unit quaternion (w, x, y, z).
    pub camera_from_world_qvec: [f64; 4],
    /// World→camera translation.
    pub camera_from_world_tvec: [f64; 3],
    pub camera_id: u32,
    /// File name relative to the images folder.
    pub name: String,
}

impl ColmapImage {
    /// Camera-to-world transform (`OpenCV` convention); `None` when the pose is not finite or the
    /// quaternion is zero.
    pub fn world_from_camera(&self) -> Option<Mat4> {
        let [w, x, y, z] = self.camera_from_world_qvec;
        let rotation = DQuat::from_xyzw(x, y, z, w);
        let translation = DVec3::from(self.camera_from_world_tvec);
        let norm = rotation.length();
        if !(norm.is_finite() && norm > f64::EPSILON && translation.is_finite()) {
            return None;
        }
        let camera_from_world = DAffine3::from_rotation_translation(rotation / norm, translation);
        Some(DMat4::from(camera_from_world.inverse()).as_mat4())
    }
}

/// How a model's files are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Binary,
    Text,
}

impl Encoding {
    fn extension(self) -> &'static str {
        match self {
            Self::Binary => "bin",
            Self::Text => "txt",
        }
    }
}

/// A folder holding `cameras.*` and `images.*`.
#[derive(Clone, Debug)]
struct ModelFolder {
    /// Dataset-relative folder (`sparse` or `sparse/0`).
    folder: String,
    encoding: Encoding,
}

impl ModelFolder {
    /// Path of `cameras`, `images` or `points3D` in this model.
    fn file(&self, stem: &str) -> String {
        format!("{}/{stem}.{}", self.folder, self.encoding.extension())
    }
}

/// Whether the dataset holds a COLMAP model.
pub(crate) fn is_colmap(source: &DatasetSource) -> bool {
    !model_folders(source).is_empty()
}

/// Model folders: `sparse` itself and its sub-folders (numeric ones in numeric order), each
/// when it holds a cameras and an images file of the same encoding (binary preferred).
fn model_folders(source: &DatasetSource) -> Vec<ModelFolder> {
    let mut subfolders = source.subfolders(SPARSE_FOLDER);
    subfolders.sort_by_key(|name| (name.parse::<u64>().unwrap_or(u64::MAX), name.clone()));
    std::iter::once(SPARSE_FOLDER.to_owned())
        .chain(subfolders.into_iter().map(|name| format!("{SPARSE_FOLDER}/{name}")))
        .filter_map(|folder| {
            [Encoding::Binary, Encoding::Text].into_iter().find_map(|encoding| {
                let model = ModelFolder { folder: folder.clone(), encoding };
                (source.is_file(&model.file("cameras")) && source.is_file(&model.file("images")))
                    .then_some(model)
            })
        })
        .collect()
}

/// Reads the COLMAP model with the most registered images and lists its views.
pub(crate) fn read(source: &DatasetSource) -> Result<ParsedDataset, DatasetError> {
    let (model, mut images) = pick_model(source)?;
    let cameras_file = model.file("cameras");
    let cameras = read_cameras(source, &model)?;
    let points = read_points(source, &model)?;

    if !source.is_dir(IMAGES_FOLDER) {
        return Err(DatasetError::invalid(
            source.display(IMAGES_FOLDER),
            format!(
                "image folder is missing (COLMAP images must be in {IMAGES_FOLDER}/ beside \
                 {SPARSE_FOLDER}/)"
            ),
        ));
    }

    images.sort_by(|a, b| a.name.cmp(&b.name));
    let images_file = source.display(&model.file("images"));
    let (views, missing) = list_views(source, &images, &cameras, &images_file, &cameras_file)?;

    let mut warnings = Vec::new();
    if !missing.is_empty() {
        warnings.push(missing_images_warning(&images_file, &missing, images.len()));
    }
    if views.is_empty() {
        return Err(DatasetError::NoImages {
            file: images_file,
            message: format!("none of its {} images is in {IMAGES_FOLDER}/", images.len()),
        });
    }
    Ok(ParsedDataset {
        format: DatasetFormat::Colmap,
        views,
        eval_views: None,
        camera_count: Some(cameras.len()),
        points,
        warnings,
    })
}

/// The views of `images` (in order) whose file exists in the images folder, and the names of
/// those whose file is missing.
fn list_views(
    source: &DatasetSource,
    images: &[ColmapImage],
    cameras: &[ColmapCamera],
    images_file: &str,
    cameras_file: &str,
) -> Result<(Vec<PendingView>, Vec<String>), DatasetError> {
    let cameras_by_id: HashMap<u32, &ColmapCamera> = cameras.iter().map(|c| (c.id, c)).collect();
    let mut views = Vec::with_capacity(images.len());
    let mut missing = Vec::new();
    for image in images {
        let image_error = |what: String| {
            DatasetError::invalid(
                images_file,
                format!("image {} ({}) {what}", image.id, image.name),
            )
        };
        let camera = cameras_by_id.get(&image.camera_id).ok_or_else(|| {
            image_error(format!(
                "uses camera {}, which {cameras_file} does not define",
                image.camera_id
            ))
        })?;
        let world_from_camera = image
            .world_from_camera()
            .ok_or_else(|| image_error("has an invalid pose".to_owned()))?;
        let image_path = normalize_relative(&format!("{IMAGES_FOLDER}/{}", image.name))
            .filter(|path| source.is_file(path));
        match image_path {
            Some(image_path) => views.push(PendingView {
                image_path,
                described_in: images_file.to_owned(),
                intrinsics: camera.intrinsics.into(),
                distortion: camera.distortion,
                world_from_camera,
            }),
            None => missing.push(image.name.clone()),
        }
    }
    Ok((views, missing))
}

/// The model with the most registered images (the first of equals), with its images.
fn pick_model(source: &DatasetSource) -> Result<(ModelFolder, Vec<ColmapImage>), DatasetError> {
    let mut best: Option<(ModelFolder, Vec<ColmapImage>)> = None;
    for model in model_folders(source) {
        let images = read_images(source, &model)?;
        if best.as_ref().is_none_or(|(_, best_images)| images.len() > best_images.len()) {
            best = Some((model, images));
        }
    }
    best.ok_or_else(|| DatasetError::NotADataset {
        file: source.display(SPARSE_FOLDER),
        message: "no cameras and images files".to_owned(),
    })
}

fn read_cameras(
    source: &DatasetSource,
    model: &ModelFolder,
) -> Result<Vec<ColmapCamera>, DatasetError> {
    let rel = model.file("cameras");
    let (file, bytes) = (source.display(&rel), source.read(&rel)?);
    match model.encoding {
        Encoding::Binary => binary::read_cameras(&file, &bytes),
        Encoding::Text => text::read_cameras(&file, text_of(&file, &bytes)?),
    }
}

fn read_images(
    source: &DatasetSource,
    model: &ModelFolder,
) -> Result<Vec<ColmapImage>, DatasetError> {
    let rel = model.file("images");
    let (file, bytes) = (source.display(&rel), source.read(&rel)?);
    match model.encoding {
        Encoding::Binary => binary::read_images(&file, &bytes),
        Encoding::Text => text::read_images(&file, text_of(&file, &bytes)?),
    }
}

/// The model's `points3D`, or `None` when the model has no such file.
fn read_points(
    source: &DatasetSource,
    model: &ModelFolder,
) -> Result<Option<PointCloud>, DatasetError> {
    let rel = model.file("points3D");
    if !source.is_file(&rel) {
        return Ok(None);
    }
    let (file, bytes) = (source.display(&rel), source.read(&rel)?);
    let points = match model.encoding {
        Encoding::Binary => binary::read_points(&file, &bytes)?,
        Encoding::Text => text::read_points(&file, text_of(&file, &bytes)?)?,
    };
    Ok(Some(points))
}

fn text_of<'a>(file: &str, bytes: &'a [u8]) -> Result<&'a str, DatasetError> {
    std::str::from_utf8(bytes)
        .map_err(|e| DatasetError::invalid(file, format!("not UTF-8 text: {e}")))
}

/// Colour of a COLMAP point, 0..255, as a 0..1 value.
fn color_from_u8(rgb: [u8; 3]) -> [f32; 3] {
    rgb.map(|c| f32::from(c) / 255.0)
}

/// Checks a COLMAP point position.
fn check_point(file: &str, point_id: u64, position: [f64; 3]) -> Result<[f32; 3], DatasetError> {
    if position.iter().all(|v| v.is_finite()) {
        Ok(position.map(|v| v as f32))
    } else {
        Err(DatasetError::invalid(
            file,
            format!("point {point_id}: position {position:?} is not finite"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_pose_inverts_translation() {
        let image = ColmapImage {
            id: 1,
            camera_from_world_qvec: [1.0, 0.0, 0.0, 0.0],
            camera_from_world_tvec: [1.0, 2.0, 3.0],
            camera_id: 1,
            name: "a.jpg".to_owned(),
        };
        let world_from_camera = image.world_from_camera().expect("valid pose");
        assert_eq!(world_from_camera.w_axis.truncate(), glam::Vec3::new(-1.0, -2.0, -3.0));
    }

    #[test]
    fn zero_quaternion_is_invalid() {
        let image = ColmapImage {
            id: 1,
            camera_from_world_qvec: [0.0; 4],
            camera_from_world_tvec: [0.0; 3],
            camera_id: 1,
            name: "a.jpg".to_owned(),
        };
        assert!(image.world_from_camera().is_none());
    }

    #[test]
    fn models_map_to_pinhole_and_distortion() {
        let opencv = CameraModel::from_name("OPENCV").expect("known");
        let (k, distortion) = opencv
            .camera(100.0, 50.0, &[10.0, 11.0, 50.0, 25.0, 0.1, 0.2, 0.3, 0.4])
            .expect("supported");
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (10.0, 11.0, 50.0, 25.0));
        assert_eq!(
            distortion,
            Some(Distortion::Radial { k: [0.1, 0.2, 0.0, 0.0, 0.0, 0.0], p: [0.3, 0.4] })
        );
        // FULL_OPENCV lists p1 p2 before k3..k6.
        let full = CameraModel::from_name("FULL_OPENCV").expect("known");
        let params = [10.0, 11.0, 50.0, 25.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let (_, distortion) = full.camera(100.0, 50.0, &params).expect("supported");
        assert_eq!(
            distortion,
            Some(Distortion::Radial { k: [1.0, 2.0, 5.0, 6.0, 7.0, 8.0], p: [3.0, 4.0] })
        );
        // Zero coefficients are a pinhole camera; fisheye never is.
        let radial = CameraModel::from_name("SIMPLE_RADIAL").expect("known");
        assert_eq!(radial.camera(1.0, 1.0, &[1.0, 0.5, 0.5, 0.0]).expect("supported").1, None);
        let fisheye = CameraModel::from_id(5).expect("known");
        let (_, distortion) =
            fisheye.camera(1.0, 1.0, &[1.0, 1.0, 0.5, 0.5, 0.1, 0.0, 0.0, 0.0]).expect("supported");
        assert_eq!(distortion, Some(Distortion::Fisheye { k: [0.1, 0.0, 0.0, 0.0] }));
        let fov = CameraModel::from_name("FOV").expect("known");
        assert!(fov.camera(1.0, 1.0, &[1.0, 1.0, 0.5, 0.5, 0.1]).is_none());
    }
}
