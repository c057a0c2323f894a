//! Training datasets: posed photos plus an optional point cloud to start from.
//!
//! A dataset is a folder or a `.zip` of one, in one of these layouts:
//! - COLMAP sparse models, binary or text (`sparse/` or `sparse/N/`, images in `images/`);
//! - `transforms.json` in its dialects (Blender synthetic, instant-ngp / nerfstudio, per-frame
//!   intrinsics), with `transforms_test.json` / `_val` as eval views.
//!
//! Images decode in parallel, are downscaled so their long side is at most
//! [`LoadOptions::max_resolution`], and stay on the CPU as 8-bit RGB (with their transparency,
//! [`View::alpha`], where an RGBA source had any). Cameras use the `OpenCV` convention (x
//! right, y down, z forward) whatever the source format.
//!
//! Lens distortion (COLMAP's radial, `OpenCV` and fisheye models, `transforms.json`'s `k1 k2
//! k3 k4 p1 p2`) is undistorted at load to the pinhole camera of the same intrinsics
//! ([`distortion`]); other COLMAP models are an error.
//!
//! Entry point: [`load_dataset`].

mod colmap;
pub mod distortion;
mod error;
pub mod exposure;
mod images;
mod intrinsics;
mod source;
mod transforms;
mod views;

use std::path::{Path, PathBuf};

use glam::Vec3;
use splat_formats::PointCloud;

use crate::appearance::drift::PixelDrift;

pub use error::DatasetError;
pub use exposure::Exposure;
pub use source::MAX_ZIP_ENTRY_BYTES;

use source::DatasetSource;
use splat_formats::random::SplitMix64;
use views::PendingView;

/// Point clouds looked for at the dataset root, in order, to initialise splats from.
const INIT_POINT_FILES: [&str; 2] = ["init.ply", "points3D.ply"];
/// Colour of random initial points (0..1).
const NEUTRAL_GREY: [f32; 3] = [0.5; 3];
/// A random initial point is kept where at least this fraction of the training cameras see
/// it (in front of the camera, inside its image). Half, not all: a camera that frames the
/// subject tightly, or sees it from below, should not cut off what the others agree on; and
/// of lego's cameras, which all frame the whole object, half already bound a region of
/// 2–3 units across where the padded camera box is ~10 (`trainer/tests/it/dataset.rs`).
const COMMON_VIEW_FRACTION: f64 = 0.5;
/// Points on random camera rays that find the region the cameras see in common.
const PROBE_POINTS: usize = 16_384;
/// Draws per wanted point before [`Dataset::random_init_points`] stops filtering (a region
/// seen in common that fills under 1/64 of its own bounding box).
const MAX_DRAWS_PER_POINT: usize = 64;

pub use splat_render::Camera;

/// One posed photo.
#[derive(Clone, Debug)]
pub struct View {
    /// Position in the dataset's own order (train split first where the dataset has its own
    /// test split): a stable id for "camera I" in the command line and the UI.
    pub index: usize,
    /// File name relative to the dataset root, for messages and the UI.
    pub name: String,
    pub camera: Camera,
    /// RGB, 8 bits a channel, `camera.width` × `camera.height`; RGBA sources are composited
    /// over [`LoadOptions::background`] (unless their alpha is the mask). Undistorted to the
    /// pinhole `camera` where the source camera had lens distortion.
    pub image: image::RgbImage,
    /// Which pixels count, 0 (left out of the loss and of evaluation) to 255, at the image's
    /// size: from a `masks/` file, the alpha channel ([`LoadOptions::alpha_as_mask`]), and
    /// the pixels undistortion had no source for. `None`: every pixel counts.
    pub mask: Option<image::GrayImage>,
    /// The source's transparency, 0 (transparent) to 255 (opaque), at the image's size, when
    /// it had an alpha channel that is not opaque everywhere and was composited over
    /// [`LoadOptions::background`] (not used as the mask). Training uses it to put the image
    /// over another colour (`image + (colour − background)·(1 − α)`) or to supervise the
    /// rendered alpha (`train::Transparency`). `None`: opaque.
    pub alpha: Option<image::GrayImage>,
    /// What the image file's EXIF says about its exposure (nothing, for most datasets): per-view
    /// appearance starts from it.
    pub exposure: Exposure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatasetFormat {
    Colmap,
    Transforms,
}

impl DatasetFormat {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Colmap => "colmap",
            Self::Transforms => "transforms",
        }
    }
}

/// How to load a dataset: the settings of a capture (the command line's `train` and `info`,
/// the window's, and checkpoints', which keep how their run's dataset was loaded).
#[derive(Clone, Debug, PartialEq, clap::Parser, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Loading the capture")]
pub struct LoadOptions {
    /// Longest image side after loading, in pixels; larger images are downscaled and their
    /// intrinsics scaled with them. 0 = no limit.
    #[arg(long, default_value_t = 1600)]
    pub max_resolution: u32,
    /// Colour that transparent pixels are composited over, r,g,b in 0..1. Compositing happens
    /// on the stored 8-bit values (`rgb·α + background·255·(1 − α)`), as `NeRF` loaders do, so
    /// the value is in the images' encoding; 0 and 1 mean the same either way.
    #[arg(long, default_value = "0,0,0", value_parser = parse_background)]
    #[serde(with = "crate::exact")]
    pub background: [f32; 3],
    /// Without a dataset test split, every `eval_every`-th image (starting with the first)
    /// becomes an eval view. 0 = no eval views; so does a split that would leave no train view
    /// (1, or a one-image dataset).
    #[arg(skip = EVAL_EVERY)]
    pub eval_every: usize,
    /// Use RGBA images' alpha as their mask (pixels at 0 are left out of the loss and of
    /// evaluation) instead of compositing them over the background.
    #[arg(long)]
    #[serde(default)]
    pub alpha_as_mask: bool,
}

/// [`LoadOptions::eval_every`] by default: 3DGS's and Mip-NeRF 360's split, every 8th image.
pub const EVAL_EVERY: usize = 8;

impl Default for LoadOptions {
    /// What the command line gives when no option is given.
    fn default() -> Self {
        <Self as clap::Parser>::try_parse_from(["defaults"]).expect("the defaults parse")
    }
}

/// A colour `r,g,b`, each in 0..1 (`--background`).
pub fn parse_background(text: &str) -> Result<[f32; 3], String> {
    let values: Vec<f32> = text
        .split(',')
        .map(|v| v.trim().parse::<f32>().map_err(|e| format!("'{v}': {e}")))
        .collect::<Result<_, _>>()?;
    match values.as_slice() {
        [r, g, b] if values.iter().all(|v| (0.0..=1.0).contains(v)) => Ok([*r, *g, *b]),
        _ => Err(format!("expected r,g,b with each in 0..1, got '{text}'")),
    }
}

/// A loaded dataset.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub format: DatasetFormat,
    /// The folder or zip it came from.
    pub source: PathBuf,
    pub train: Vec<View>,
    pub eval: Vec<View>,
    /// Number of distinct cameras (intrinsics entries) the source defines.
    pub camera_count: usize,
    /// `init.ply` beside the dataset, else COLMAP's `points3D`, else `None` (random init).
    pub init_points: Option<PointCloud>,
    /// How far the train views' exposure and colour drift against the initial points'
    /// colours, read when it loads; `None` where they have none. Set it again after changing
    /// the train images.
    pub pixel_drift: Option<PixelDrift>,
    /// How it was loaded (a checkpoint carries them, to load it the same way again).
    pub options: LoadOptions,
    /// Things a user should know that did not stop loading (skipped frames, ignored
    /// distortion, ...).
    pub warnings: Vec<String>,
}

/// What a format parser found, before any image is decoded.
pub(crate) struct ParsedDataset {
    format: DatasetFormat,
    /// The views (all, or the train split when `eval_views` is given), in split order.
    views: Vec<PendingView>,
    /// The dataset's own test split, if it has one.
    eval_views: Option<Vec<PendingView>>,
    /// Number of cameras the source defines; `None` = count distinct intrinsics.
    camera_count: Option<usize>,
    points: Option<PointCloud>,
    warnings: Vec<String>,
}

/// Whether `path` (a folder or `.zip`) holds camera poses we read: a `transforms.json` or a
/// COLMAP model. Nothing is decoded; a path that cannot be opened has none.
#[must_use]
pub fn has_poses(path: &Path) -> bool {
    DatasetSource::open(path)
        .is_ok_and(|source| transforms::is_transforms(&source) || colmap::is_colmap(&source))
}

/// Loads a dataset folder or `.zip`: parses its cameras, decodes its images in parallel
/// (downscaled to `options.max_resolution`), splits train / eval views and reads the point
/// cloud to start from.
pub fn load_dataset(path: &Path, options: &LoadOptions) -> Result<Dataset, DatasetError> {
    let source = DatasetSource::open(path)?;
    let parsed = if transforms::is_transforms(&source) {
        transforms::read(&source)?
    } else if colmap::is_colmap(&source) {
        colmap::read(&source)?
    } else {
        return Err(DatasetError::NotADataset {
            file: path.display().to_string(),
            message: "expected transforms.json, transforms_train.json, or a COLMAP model in \
                      sparse/ or sparse/N/"
                .to_owned(),
        });
    };
    // Before decoding images, so that a broken init.ply fails fast.
    let init_points = read_init_points(&source)?.or(parsed.points);

    let (train, eval) = if let Some(eval_views) = parsed.eval_views {
        let mut train = views::load_views(&source, parsed.views, options)?;
        let mut eval = views::load_views(&source, eval_views, options)?;
        number_views(train.iter_mut().chain(&mut eval));
        (train, eval)
    } else {
        let mut all = views::load_views(&source, parsed.views, options)?;
        number_views(all.iter_mut());
        views::split_every_nth(all, options.eval_every)
    };
    let camera_count = parsed.camera_count.unwrap_or_else(|| {
        views::distinct_intrinsics(train.iter().chain(&eval).map(|view| &view.camera))
    });
    let pixel_drift = init_points.as_ref().and_then(|points| PixelDrift::measure(&train, points));
    Ok(Dataset {
        format: parsed.format,
        source: path.to_path_buf(),
        train,
        eval,
        camera_count,
        init_points,
        pixel_drift,
        options: options.clone(),
        warnings: parsed.warnings,
    })
}

fn number_views<'a>(views: impl Iterator<Item = &'a mut View>) {
    for (index, view) in views.enumerate() {
        view.index = index;
    }
}

/// The first of [`INIT_POINT_FILES`] at the dataset root, read; `None` when there is none.
fn read_init_points(source: &DatasetSource) -> Result<Option<PointCloud>, DatasetError> {
    let Some(rel) = INIT_POINT_FILES.into_iter().find(|rel| source.is_file(rel)) else {
        return Ok(None);
    };
    let bytes = source.read(rel)?;
    let points = splat_formats::ply::read_points(&bytes)
        .map_err(|e| DatasetError::Points { file: source.display(rel), cause: e })?;
    Ok(Some(points))
}

impl Dataset {
    /// All views, train then eval.
    pub fn views(&self) -> impl Iterator<Item = &View> {
        self.train.iter().chain(&self.eval)
    }

    /// The largest width and height of any view (at least 1×1): what per-image buffers are
    /// sized for.
    #[must_use]
    pub fn largest_image(&self) -> (u32, u32) {
        self.views().fold((1, 1), |(w, h), v| (w.max(v.camera.width), h.max(v.camera.height)))
    }

    /// The view with [`View::index`] `index`.
    #[must_use]
    pub fn view(&self, index: usize) -> Option<&View> {
        self.views().find(|view| view.index == index)
    }

    /// Whether any view has transparency ([`View::alpha`]).
    #[must_use]
    pub fn has_transparency(&self) -> bool {
        self.views().any(|view| view.alpha.is_some())
    }

    /// Axis-aligned bounds (min, max) of the camera centres of all views, in world units;
    /// `(0, 0)` for a dataset without views.
    #[must_use]
    pub fn scene_bounds(&self) -> (Vec3, Vec3) {
        let mut centres = self.views().map(|view| view.camera.position());
        let Some(first) = centres.next() else {
            return (Vec3::ZERO, Vec3::ZERO);
        };
        centres.fold((first, first), |(min, max), p| (min.min(p), max.max(p)))
    }

    /// [`Self::scene_bounds`] padded by a tenth of its largest side (at least one world
    /// unit), so that cameras in a plane or a single camera still give a box with volume.
    #[must_use]
    pub fn padded_camera_box(&self) -> (Vec3, Vec3) {
        let (min, max) = self.scene_bounds();
        let pad = Vec3::splat(((max - min).max_element() * 0.1).max(1.0));
        (min - pad, max + pad)
    }

    /// `count` points drawn uniformly in [`Self::padded_camera_box`], neutral grey. The same
    /// `seed` gives the same points. What the memory measurements and `bench-train` start
    /// from (a spread of splats in and out of view, as their figures were taken with);
    /// training starts from [`Self::random_init_points`].
    #[must_use]
    pub fn random_points(&self, count: usize, seed: u64) -> PointCloud {
        let (min, max) = self.padded_camera_box();
        let mut rng = SplitMix64::new(seed);
        let positions: Vec<[f32; 3]> = (0..count).map(|_| draw(&mut rng, min, max)).collect();
        grey_cloud(positions)
    }

    /// `count` random points, neutral grey, where the training cameras look in common: for
    /// datasets without an initial point cloud. A point is kept when at least half the
    /// training cameras ([`COMMON_VIEW_FRACTION`]) see it (in front, inside the image). The
    /// same `seed` gives the same points.
    ///
    /// How: [`PROBE_POINTS`] probes on random camera rays (a random training camera, pixel
    /// and depth up to the padded camera box's diagonal) find the region; the points are then
    /// uniform in it, drawn by rejection inside the bounding box of the probes that passed
    /// (grown by their spacing). Probes on rays rather than in the camera box: what the
    /// cameras see may lie outside their own box (an object below a ring of cameras, a
    /// scene in front of a forward-facing capture).
    ///
    /// Why not the padded camera box: for an object capture, most of that box is empty space
    /// that every view sees as background. A random splat there is never in front of the
    /// object in a training view, so nothing pulls it away, and in novel views it is a haze
    /// in front of the object (lego: 18 dB on unseen views, BENCHMARKS.md); and most of the
    /// box's splats are outside every view, costing memory and projection for nothing.
    ///
    /// Where no probe is seen by half the cameras, the fraction halves until some probe is
    /// (down to one camera); where the region fills under 1/[`MAX_DRAWS_PER_POINT`] of its
    /// bounding box, the last points are drawn in that box unfiltered. A dataset without
    /// views gets [`Self::random_points`].
    #[must_use]
    pub fn random_init_points(&self, count: usize, seed: u64) -> PointCloud {
        let cameras: Vec<&Camera> = if self.train.is_empty() {
            self.views().map(|v| &v.camera).collect()
        } else {
            self.train.iter().map(|v| &v.camera).collect()
        };
        if cameras.is_empty() {
            return self.random_points(count, seed);
        }
        let visibility = Visibility::new(&cameras);
        let (box_min, box_max) = self.padded_camera_box();
        let far = (box_max - box_min).length();
        let mut rng = SplitMix64::new(seed);
        let probes: Vec<Vec3> = (0..PROBE_POINTS)
            .map(|_| {
                let camera = cameras[(rng.next_u64() % cameras.len() as u64) as usize];
                let (u, v) =
                    (rng.next_f32() * camera.width as f32, rng.next_f32() * camera.height as f32);
                // (0, far]: a point at the camera's centre is seen by nothing.
                let depth = (1.0 - rng.next_f32()) * far;
                let ray = Vec3::new((u - camera.cx) / camera.fx, (v - camera.cy) / camera.fy, 1.0);
                camera.world_from_camera.transform_point3(ray * depth)
            })
            .collect();
        let seen_by: Vec<usize> = probes.iter().map(|&p| visibility.seen_by(p)).collect();
        let mut needed = ((cameras.len() as f64 * COMMON_VIEW_FRACTION).ceil() as usize).max(1);
        let (lo, hi, passed) = loop {
            let passed: Vec<Vec3> = probes
                .iter()
                .zip(&seen_by)
                .filter(|&(_, &seen)| seen >= needed)
                .map(|(&p, _)| p)
                .collect();
            if let Some(&first) = passed.first() {
                let (lo, hi) =
                    passed.iter().fold((first, first), |(lo, hi), &p| (lo.min(p), hi.max(p)));
                break (lo, hi, passed.len());
            }
            // Every probe is seen by its own camera, so this ends at one camera.
            needed = (needed / 2).max(1);
        };
        // The passed probes' spacing: the region's true edge lies up to about this beyond.
        let size = (hi - lo).max(Vec3::splat(f32::EPSILON));
        let spacing = (size.x * size.y * size.z / passed as f32).cbrt();
        let (lo, hi) = (lo - spacing, hi + spacing);
        let mut positions = Vec::with_capacity(count);
        let mut draws = 0;
        while positions.len() < count {
            let p = draw(&mut rng, lo, hi);
            draws += 1;
            if draws > count.saturating_mul(MAX_DRAWS_PER_POINT)
                || visibility.seen_by(Vec3::from(p)) >= needed
            {
                positions.push(p);
            }
        }
        grey_cloud(positions)
    }
}

/// A point drawn uniformly in the box `min`..`max`.
fn draw(rng: &mut SplitMix64, min: Vec3, max: Vec3) -> [f32; 3] {
    let unit = Vec3::new(rng.next_f32(), rng.next_f32(), rng.next_f32());
    (min + unit * (max - min)).to_array()
}

fn grey_cloud(positions: Vec<[f32; 3]>) -> PointCloud {
    PointCloud { colors: vec![NEUTRAL_GREY; positions.len()], positions, has_color: false }
}

/// Which cameras see a point: in front of the camera and inside its image.
struct Visibility {
    /// Per camera: world-to-camera, and the intrinsics with the image size.
    cameras: Vec<(glam::Affine3A, [f32; 6])>,
}

impl Visibility {
    fn new(cameras: &[&Camera]) -> Self {
        let cameras = cameras
            .iter()
            .map(|c| {
                let world_from_camera = glam::Affine3A::from_mat4(c.world_from_camera);
                (
                    world_from_camera.inverse(),
                    [c.fx, c.fy, c.cx, c.cy, c.width as f32, c.height as f32],
                )
            })
            .collect();
        Self { cameras }
    }

    /// How many of the cameras see `point`.
    fn seen_by(&self, point: Vec3) -> usize {
        self.cameras
            .iter()
            .filter(|(camera_from_world, [fx, fy, cx, cy, width, height])| {
                let p = camera_from_world.transform_point3(point);
                if p.z <= 0.0 {
                    return false;
                }
                let (u, v) = (fx * p.x / p.z + cx, fy * p.y / p.z + cy);
                (0.0..*width).contains(&u) && (0.0..*height).contains(&v)
            })
            .count()
    }
}
