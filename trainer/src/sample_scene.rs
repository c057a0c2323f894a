//! The built-in sample scene: a small synthetic dataset the project makes itself, so the app
//! has something to train on at first launch without shipping anyone's photos.
//!
//! The scene is defined in code as ground-truth splats ([`ground_truth`]): a checkered ground
//! disc, an upright tilted rainbow torus and three coloured spheres, with a fixed light baked
//! into the colours so the shapes read as 3D. [`write_zip`] renders it with our own rasterizer
//! from [`VIEW_COUNT`] cameras on two rings around it and writes a `transforms.json` dataset
//! (instant-ngp / nerfstudio dialect) with RGBA images and an `init.ply` point cloud taken from
//! the splat centres with a little noise, like the sparse points `SfM` would give.
//!
//! World up is **+z** (as in Blender and the `NeRF` synthetic scenes); the object sits at the
//! origin within a radius of about 1.06. Cameras are [`Camera`]s in the `OpenCV` convention;
//! `transforms.json` stores them in `OpenGL`'s (y and z axes negated).
//!
//! Everything is deterministic: a fixed seed of `splat_formats::random`, entries in a fixed order
//! with fixed timestamps and permissions. On one machine the archive is the same bytes every
//! time; across GPUs the rendered pixels may differ by a unit of the last 8-bit place.
//! `assets/sample-scene.zip` is this module's output, and `trainer/tests/it/sample_scene.rs`
//! checks that it still is.

use std::f32::consts::{PI, TAU};
use std::io::{Cursor, Write};
use std::path::Path;

use glam::{DMat4, DVec3, Quat, Vec3};
use image::ImageEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use serde::Serialize;
use splat_formats::random::SplitMix64;
use splat_formats::{PointCloud, SH_C0, Splats};
use splat_render::{
    Camera, FrameScratch, GpuContext, GpuError, GpuSplats, Owner, RenderSettings, Renderer,
};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use crate::checkpoint::{CheckpointError, write_atomically};

/// Side of the square images, in pixels: small enough that the archive stays well under
/// 1.5 MB and a step is cheap on software Vulkan, large enough that the checker and the torus
/// show.
pub const IMAGE_SIZE: u32 = 128;
/// Focal length in pixels (both axes). The object (radius 1.06) at [`CAMERA_DISTANCE`] spans
/// at most 20.7° from the image centre; this gives a half field of view of 24.6°, a margin of
/// a few pixels at every side.
pub const FOCAL_PX: f64 = 140.0;
/// Distance of every camera from the origin, in world units.
pub const CAMERA_DISTANCE: f64 = 3.0;
/// Elevations of the two camera rings above the ground plane, in degrees: a low ring that sees
/// the sides of the spheres and the torus, and a high one that sees the checker.
pub const RING_ELEVATIONS_DEG: [f64; 2] = [22.0, 52.0];
/// Cameras on each ring, evenly spaced; the upper ring is turned by half a step so the two
/// rings together cover azimuth every 11.25°.
pub const VIEWS_PER_RING: usize = 16;
/// Number of views: both rings, lower ring first.
pub const VIEW_COUNT: usize = VIEWS_PER_RING * RING_ELEVATIONS_DEG.len();
/// Points in `init.ply`: about a third of the splats, as a sparse `SfM` cloud would give.
pub const INIT_POINT_COUNT: usize = 1500;
/// Top-level folder inside the archive (the loader treats a single top folder as the root),
/// so unzipping it does not scatter files.
pub const ARCHIVE_FOLDER: &str = "sample-scene";

/// Seed of the generator behind every random choice here.
const SEED: u64 = 0x5eed_5a3b_1e5c_e4e0;
/// Opacity (after the sigmoid) of every ground-truth splat: high, so the surfaces are solid,
/// but not 1, so the trainer's opacity has a gradient everywhere.
const OPACITY: f32 = 0.92;
/// Direction towards the baked-in light (normalised at use): above, in front and to the side.
const LIGHT_DIRECTION: Vec3 = Vec3::new(0.4, -0.3, 0.87);
/// Fraction of a surface's colour that is lit regardless of the light.
const AMBIENT: f32 = 0.4;
/// Timestamp of every archive entry: the zip epoch (1980-01-01 00:00), the usual choice of
/// reproducible builds, so the archive does not depend on when it is made.
const ENTRY_TIME: DateTime = DateTime::DEFAULT;

/// Height of the ground disc's plane.
const GROUND_Z: f32 = -0.35;
const GROUND_RADIUS: f32 = 1.0;
/// Spacing of the ground disc's splat grid; the splats' scale is about half of it, so
/// neighbours overlap into a closed surface.
const GROUND_SPACING: f32 = 0.045;
/// Side of the ground's checker squares.
const CHECKER: f32 = 0.25;
const CHECKER_COLOURS: [[f32; 3]; 2] = [[0.86, 0.82, 0.72], [0.22, 0.28, 0.40]];

const TORUS_CENTRE: Vec3 = Vec3::new(0.0, 0.0, 0.25);
const TORUS_MAJOR: f32 = 0.45;
const TORUS_MINOR: f32 = 0.13;
/// Tilt of the torus's axis from +z about the x axis: it stands up, leaning back.
const TORUS_TILT_RAD: f32 = 1.05;
const TORUS_STEPS_AROUND: usize = 100;
const TORUS_STEPS_TUBE: usize = 20;

const SPHERE_RADIUS: f32 = 0.18;
/// Distance of the spheres' centres from the z axis, and their azimuths: clear of the torus.
const SPHERE_RING: f32 = 0.74;
const SPHERES: [(f32, [f32; 3]); 3] =
    [(90.0, [0.90, 0.20, 0.15]), (210.0, [0.20, 0.72, 0.30]), (330.0, [0.22, 0.38, 0.92])];
const SPHERE_SPLATS: usize = 340;

/// Why the sample scene could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SampleSceneError {
    /// Rendering the views failed (no device, out of memory, a kernel error).
    #[error("cannot render the sample scene: {0}")]
    Gpu(GpuError),
    /// An image could not be encoded as PNG.
    #[error("cannot encode {file}: {cause}")]
    Png { file: String, cause: image::ImageError },
    /// The camera file could not be serialised.
    #[error("cannot write transforms.json: {0}")]
    Json(serde_json::Error),
    /// Assembling the archive failed.
    #[error("cannot build the sample scene archive: {0}")]
    Zip(zip::result::ZipError),
    /// Writing the archive to disk failed; the message names the file.
    #[error(transparent)]
    Write(#[from] CheckpointError),
}

// Not `#[from]`: that would make each cause a `source()` too, and its text, already in the
// message, would be said twice by a chain printer.
impl From<GpuError> for SampleSceneError {
    fn from(e: GpuError) -> Self {
        Self::Gpu(e)
    }
}

impl From<serde_json::Error> for SampleSceneError {
    fn from(e: serde_json::Error) -> Self {
        Self::Json(e)
    }
}

impl From<zip::result::ZipError> for SampleSceneError {
    fn from(e: zip::result::ZipError) -> Self {
        Self::Zip(e)
    }
}

/// Uniform in [−1, 1).
fn signed(rng: &mut SplitMix64) -> f32 {
    2.0 * rng.next_f32() - 1.0
}

/// Builds the ground-truth splats one surface patch at a time.
struct SceneBuilder {
    splats: Splats,
    opacity_logit: f32,
    light: Vec3,
}

impl SceneBuilder {
    fn new() -> Self {
        Self {
            splats: Splats::with_capacity(5_000, 0),
            opacity_logit: (OPACITY / (1.0 - OPACITY)).ln(),
            light: LIGHT_DIRECTION.normalize(),
        }
    }

    /// A flat splat at `position` on a surface of unit `normal`: `tangent_scale` across the
    /// surface, a tenth of it through, its colour `albedo` lit by the fixed light.
    fn surfel(&mut self, position: Vec3, normal: Vec3, tangent_scale: f32, albedo: [f32; 3]) {
        let rotation = Quat::from_rotation_arc(Vec3::Z, normal);
        let shade = AMBIENT + (1.0 - AMBIENT) * normal.dot(self.light).max(0.0);
        let s = &mut self.splats;
        s.means.push(position.to_array());
        s.log_scales.push([tangent_scale.ln(), tangent_scale.ln(), (0.1 * tangent_scale).ln()]);
        s.rotations.push([rotation.w, rotation.x, rotation.y, rotation.z]);
        s.opacity_logits.push(self.opacity_logit);
        s.sh_dc.push(albedo.map(|c| ((c * shade).clamp(0.0, 1.0) - 0.5) / SH_C0));
    }

    /// The ground: a disc of flat splats on a jittered grid, in a two-colour checker.
    fn ground(&mut self, rng: &mut SplitMix64) {
        let half = (GROUND_RADIUS / GROUND_SPACING).ceil() as i32;
        for j in -half..=half {
            for i in -half..=half {
                let jitter = 0.25 * GROUND_SPACING;
                let x = i as f32 * GROUND_SPACING + jitter * signed(rng);
                let y = j as f32 * GROUND_SPACING + jitter * signed(rng);
                if x.hypot(y) > GROUND_RADIUS {
                    continue;
                }
                let cell = (x / CHECKER).floor() as i32 + (y / CHECKER).floor() as i32;
                let colour = CHECKER_COLOURS[cell.rem_euclid(2) as usize];
                self.surfel(Vec3::new(x, y, GROUND_Z), Vec3::Z, 0.6 * GROUND_SPACING, colour);
            }
        }
    }

    /// The torus: a grid in its two angles, denser around the tube's outside where the
    /// surface is larger, coloured by hue around the ring.
    fn torus(&mut self) {
        let tilt = Quat::from_rotation_x(TORUS_TILT_RAD);
        for a in 0..TORUS_STEPS_AROUND {
            let u = TAU * a as f32 / TORUS_STEPS_AROUND as f32;
            let colour = hue(a as f32 / TORUS_STEPS_AROUND as f32);
            let radial = Vec3::new(u.cos(), u.sin(), 0.0);
            for b in 0..TORUS_STEPS_TUBE {
                // Half a step of offset on every other ring, so the grid does not line up.
                let v = TAU * (b as f32 + 0.5 * (a % 2) as f32) / TORUS_STEPS_TUBE as f32;
                let normal = tilt * (radial * v.cos() + Vec3::Z * v.sin());
                let centre = TORUS_CENTRE + tilt * (radial * TORUS_MAJOR);
                let position = centre + normal * TORUS_MINOR;
                // Neighbour distance around the ring grows with the distance from the axis.
                let around =
                    TAU * (TORUS_MAJOR + TORUS_MINOR * v.cos()) / TORUS_STEPS_AROUND as f32;
                let scale = 0.6 * around.max(TAU * TORUS_MINOR / TORUS_STEPS_TUBE as f32);
                self.surfel(position, normal, scale, colour);
            }
        }
    }

    /// A sphere resting on the ground: splats on a Fibonacci lattice (even spacing).
    fn sphere(&mut self, azimuth_deg: f32, colour: [f32; 3]) {
        let azimuth = azimuth_deg.to_radians();
        let centre = Vec3::new(
            SPHERE_RING * azimuth.cos(),
            SPHERE_RING * azimuth.sin(),
            GROUND_Z + SPHERE_RADIUS,
        );
        let spacing = (4.0 * PI / SPHERE_SPLATS as f32).sqrt() * SPHERE_RADIUS;
        let golden_angle = PI * (3.0 - 5f32.sqrt());
        for k in 0..SPHERE_SPLATS {
            let z = 1.0 - 2.0 * (k as f32 + 0.5) / SPHERE_SPLATS as f32;
            let r = (1.0 - z * z).sqrt();
            let phi = golden_angle * k as f32;
            let normal = Vec3::new(r * phi.cos(), r * phi.sin(), z);
            self.surfel(centre + normal * SPHERE_RADIUS, normal, 0.6 * spacing, colour);
        }
    }
}

/// Fully saturated colour of hue `t` (0..1, red → yellow → green → cyan → blue → magenta),
/// toned down a little so it stays inside what the splats can show after shading.
fn hue(t: f32) -> [f32; 3] {
    let channel = |offset: f32| {
        let k = (t * 6.0 + offset).rem_euclid(6.0);
        1.0 - (k.min(4.0 - k).clamp(0.0, 1.0))
    };
    [channel(5.0), channel(3.0), channel(1.0)].map(|c| 0.15 + 0.8 * c)
}

/// The ground-truth scene: 4,579 splats of SH degree 0 (a ground disc of radius 1 at
/// z = −0.35, a torus and three spheres), world up +z, within a radius of 1.06 of the origin.
/// The same splats on every call and every machine.
#[must_use]
pub fn ground_truth() -> Splats {
    let mut rng = SplitMix64::new(SEED);
    let mut scene = SceneBuilder::new();
    scene.ground(&mut rng);
    scene.torus();
    for (azimuth_deg, colour) in SPHERES {
        scene.sphere(azimuth_deg, colour);
    }
    scene.splats
}

/// World-from-camera poses (`OpenCV`: x right, y down, z forward) of the views, in f64 so that
/// `transforms.json` holds them exactly: the lower ring, then the upper one, each starting at
/// azimuth 0 (the +x side) and going counter-clockwise seen from above.
fn poses() -> Vec<DMat4> {
    let mut poses = Vec::with_capacity(VIEW_COUNT);
    for (ring, elevation_deg) in RING_ELEVATIONS_DEG.into_iter().enumerate() {
        let elevation = elevation_deg.to_radians();
        for k in 0..VIEWS_PER_RING {
            let step = (k as f64 + 0.5 * ring as f64) / VIEWS_PER_RING as f64;
            let azimuth = std::f64::consts::TAU * step;
            let eye = CAMERA_DISTANCE
                * DVec3::new(
                    elevation.cos() * azimuth.cos(),
                    elevation.cos() * azimuth.sin(),
                    elevation.sin(),
                );
            poses.push(look_at_origin(eye));
        }
    }
    poses
}

/// `OpenCV` world-from-camera of a camera at `eye` looking at the origin with +z up: forward
/// towards the origin, x = forward × up (right), y = forward × x (down in the image).
fn look_at_origin(eye: DVec3) -> DMat4 {
    let forward = (-eye).normalize();
    let right = forward.cross(DVec3::Z).normalize();
    let down = forward.cross(right);
    DMat4::from_cols(right.extend(0.0), down.extend(0.0), forward.extend(0.0), eye.extend(1.0))
}

/// The cameras of the views, in file order, exactly as the dataset loader reads them from the
/// archive (`OpenCV` convention, [`IMAGE_SIZE`] square, principal point at the centre).
#[must_use]
pub fn cameras() -> Vec<Camera> {
    let centre = 0.5 * f64::from(IMAGE_SIZE);
    poses()
        .into_iter()
        .map(|pose| Camera {
            width: IMAGE_SIZE,
            height: IMAGE_SIZE,
            fx: FOCAL_PX as f32,
            fy: FOCAL_PX as f32,
            cx: centre as f32,
            cy: centre as f32,
            world_from_camera: pose.as_mat4(),
        })
        .collect()
}

/// Name of view `index`'s image inside the dataset.
fn image_name(index: usize) -> String {
    format!("images/view_{index:02}.png")
}

/// `transforms.json` in the instant-ngp / nerfstudio dialect. Fields are in this order in the
/// file.
#[derive(Serialize)]
struct TransformsFile {
    camera_model: &'static str,
    fl_x: f64,
    fl_y: f64,
    cx: f64,
    cy: f64,
    w: u32,
    h: u32,
    frames: Vec<TransformsFrame>,
}

#[derive(Serialize)]
struct TransformsFrame {
    file_path: String,
    /// Camera-to-world in the `OpenGL` convention, as rows.
    transform_matrix: [[f64; 4]; 4],
}

/// The camera file: intrinsics at the top, one frame a view, poses converted from `OpenCV` to
/// `OpenGL` by negating the camera's y and z axes (the loader negates them back).
fn transforms_json() -> Result<Vec<u8>, serde_json::Error> {
    let centre = 0.5 * f64::from(IMAGE_SIZE);
    let frames = poses()
        .into_iter()
        .enumerate()
        .map(|(index, opencv)| {
            let opengl =
                DMat4::from_cols(opencv.x_axis, -opencv.y_axis, -opencv.z_axis, opencv.w_axis);
            TransformsFrame {
                file_path: image_name(index),
                // `+ 0.0` writes negative zeros as `0.0` (IEEE: −0 + 0 = +0).
                transform_matrix: opengl
                    .transpose()
                    .to_cols_array_2d()
                    .map(|row| row.map(|v| v + 0.0)),
            }
        })
        .collect();
    let file = TransformsFile {
        camera_model: "OPENCV",
        fl_x: FOCAL_PX,
        fl_y: FOCAL_PX,
        cx: centre,
        cy: centre,
        w: IMAGE_SIZE,
        h: IMAGE_SIZE,
        frames,
    };
    let mut json = serde_json::to_vec_pretty(&file)?;
    json.push(b'\n');
    Ok(json)
}

/// The starting cloud: [`INIT_POINT_COUNT`] splat centres chosen at random, each moved by up to
/// 0.02 (1 % of the scene's width) per axis and its colour changed by up to 0.04 per channel,
/// like the sparse, slightly noisy points of structure from motion. Colours are the splats'
/// shaded colours.
fn init_points(splats: &Splats) -> PointCloud {
    let mut rng = SplitMix64::new(SEED ^ 0x1417_c10d);
    // A partial Fisher-Yates shuffle picks the points; sorting keeps them in scene order.
    let mut order: Vec<usize> = (0..splats.len()).collect();
    let count = INIT_POINT_COUNT.min(order.len());
    for i in 0..count {
        let j = i + (rng.next_u64() % (order.len() - i) as u64) as usize;
        order.swap(i, j);
    }
    let mut chosen = order[..count].to_vec();
    chosen.sort_unstable();
    let mut cloud = PointCloud {
        positions: Vec::with_capacity(count),
        colors: Vec::with_capacity(count),
        has_color: true,
    };
    for i in chosen {
        let [x, y, z] = splats.means[i];
        cloud.positions.push([
            x + 0.02 * signed(&mut rng),
            y + 0.02 * signed(&mut rng),
            z + 0.02 * signed(&mut rng),
        ]);
        let colour = splats.sh_dc[i].map(|dc| 0.5 + SH_C0 * dc);
        cloud.colors.push(colour.map(|c| (c + 0.04 * signed(&mut rng)).clamp(0.0, 1.0)));
    }
    cloud
}

/// A binary little-endian PLY of `x y z` floats and `red green blue` bytes, the layout COLMAP
/// and most tools write for point clouds (the formats crate writes only splat PLYs).
fn point_cloud_ply(cloud: &PointCloud) -> Vec<u8> {
    let header = format!(
        "ply\nformat binary_little_endian 1.0\ncomment splatforge sample scene: points sampled \
         from the ground truth\nelement vertex {}\nproperty float x\nproperty float y\nproperty \
         float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n",
        cloud.len()
    );
    let mut bytes = Vec::with_capacity(header.len() + cloud.len() * 15);
    bytes.extend_from_slice(header.as_bytes());
    for (position, colour) in cloud.positions.iter().zip(&cloud.colors) {
        for v in position {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend(colour.map(to_u8));
    }
    bytes
}

/// 0..1 to 0..255, rounded; values outside are clamped.
fn to_u8(value: f32) -> u8 {
    (value.clamp(0.0, 1.0) * 255.0).round() as u8
}

/// A rendered image (`[H, W]` of premultiplied rgb + alpha over black) as 8-bit RGBA with
/// straight colour, so that compositing it over black, as the loader does, gives the render
/// back. Fully transparent pixels are (0, 0, 0, 0), so they do not depend on float noise.
fn straight_rgba8(pixels: &[[f32; 4]]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(pixels.len() * 4);
    for &[r, g, b, alpha] in pixels {
        let alpha8 = to_u8(alpha);
        if alpha8 == 0 {
            bytes.extend([0; 4]);
        } else {
            bytes.extend([r, g, b].map(|c| to_u8(c / alpha)));
            bytes.push(alpha8);
        }
    }
    bytes
}

/// Renders every view of the ground truth: RGBA PNGs, in view order.
fn render_views(ctx: &GpuContext) -> Result<Vec<Vec<u8>>, SampleSceneError> {
    let splats = GpuSplats::upload(ctx, &ground_truth(), Owner::Shared)?;
    let renderer = Renderer::new(ctx)?;
    let mut scratch = FrameScratch::new(ctx, &renderer, Owner::Shared)?;
    // Black, so the image's rgb is the splats' premultiplied colour and `straight_rgba8` can
    // divide the background back out exactly.
    let settings = RenderSettings { background: [0.0; 3], ..RenderSettings::default() };
    let mut pngs = Vec::with_capacity(VIEW_COUNT);
    for (index, camera) in cameras().iter().enumerate() {
        renderer.forward(ctx, &splats, camera, &settings, &mut scratch)?;
        let rgba = straight_rgba8(&scratch.read_image(ctx)?);
        let mut png = Vec::new();
        // The best compression: made once, read often, and the archive ships with the app.
        PngEncoder::new_with_quality(&mut png, CompressionType::Best, FilterType::Adaptive)
            .write_image(&rgba, camera.width, camera.height, image::ExtendedColorType::Rgba8)
            .map_err(|cause| SampleSceneError::Png { file: image_name(index), cause })?;
        pngs.push(png);
    }
    Ok(pngs)
}

/// Packs `files` (name inside [`ARCHIVE_FOLDER`], bytes, whether to deflate) in order, each
/// with the same timestamp and permissions.
fn archive(files: &[(String, Vec<u8>, bool)]) -> Result<Vec<u8>, SampleSceneError> {
    let options = SimpleFileOptions::default()
        .last_modified_time(ENTRY_TIME)
        .unix_permissions(0o644)
        .system(zip::System::Unix);
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, bytes, deflate) in files {
        let method = if *deflate { CompressionMethod::Deflated } else { CompressionMethod::Stored };
        writer
            .start_file(format!("{ARCHIVE_FOLDER}/{name}"), options.compression_method(method))?;
        writer.write_all(bytes).map_err(zip::result::ZipError::Io)?;
    }
    Ok(writer.finish()?.into_inner())
}

/// Renders the sample scene on `ctx` and writes it to `out` as a zip dataset: in one folder
/// [`ARCHIVE_FOLDER`], `transforms.json` ([`VIEW_COUNT`] frames, [`IMAGE_SIZE`]² pixels),
/// `init.ply` ([`INIT_POINT_COUNT`] coloured points) and `images/view_NN.png` (RGBA, straight
/// colour, transparent where no splat is). The file is replaced atomically: readers see the
/// old archive or the new one, never half of it.
pub fn write_zip(ctx: &GpuContext, out: &Path) -> Result<(), SampleSceneError> {
    let mut files = vec![
        // The JSON is text and compresses well; the PLY's floats barely do but the colours do.
        ("transforms.json".to_owned(), transforms_json()?, true),
        ("init.ply".to_owned(), point_cloud_ply(&init_points(&ground_truth())), true),
    ];
    // PNGs are compressed already.
    let pngs = render_views(ctx)?;
    files.extend(pngs.into_iter().enumerate().map(|(index, png)| (image_name(index), png, false)));
    let bytes = archive(&files)?;
    write_atomically(out, |file| {
        file.write_all(&bytes).map_err(|e| CheckpointError::io("cannot write", e))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ground_truth_is_deterministic_and_valid() {
        let splats = ground_truth();
        assert_eq!(splats, ground_truth());
        splats.validate().expect("finite, consistent arrays");
        assert!((3_000..=8_000).contains(&splats.len()), "{} splats", splats.len());
        assert_eq!(splats.sh_degree, 0);
        for (i, mean) in splats.means.iter().enumerate() {
            let radius = Vec3::from_array(*mean).length();
            assert!(radius < 1.07, "splat {i} at {mean:?} is {radius} from the origin");
            assert!(mean[2] >= GROUND_Z - 1e-6, "splat {i} is below the ground");
        }
        for q in &splats.rotations {
            let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "quaternion {q:?}");
        }
        for dc in &splats.sh_dc {
            let colour = dc.map(|d| 0.5 + SH_C0 * d);
            assert!(colour.iter().all(|c| (0.0..=1.0).contains(c)), "colour {colour:?}");
        }
    }

    #[test]
    fn surfels_are_flat_along_their_normal() {
        // A splat on a surface facing +x: its thin axis (local z) must map to +x.
        let mut scene = SceneBuilder::new();
        scene.surfel(Vec3::ZERO, Vec3::X, 0.05, [0.5; 3]);
        let [w, x, y, z] = scene.splats.rotations[0];
        let thin_axis = Quat::from_xyzw(x, y, z, w) * Vec3::Z;
        assert!(thin_axis.distance(Vec3::X) < 1e-6, "{thin_axis}");
        let [sx, sy, sz] = scene.splats.log_scales[0].map(f32::exp);
        assert!(sz < 0.2 * sx && sz < 0.2 * sy);
    }

    #[test]
    fn cameras_look_at_the_object_with_up_upwards() {
        let cameras = cameras();
        let splats = ground_truth();
        assert_eq!(cameras.len(), VIEW_COUNT);
        for (i, camera) in cameras.iter().enumerate() {
            let pose = camera.world_from_camera;
            let forward = pose.z_axis.truncate();
            assert!(forward.dot(-camera.position().normalize()) > 0.9999, "view {i}");
            assert!((camera.position().length() - CAMERA_DISTANCE as f32).abs() < 1e-4);
            // Rotation part is orthonormal and right-handed.
            let (x, y) = (pose.x_axis.truncate(), pose.y_axis.truncate());
            assert!(x.cross(y).distance(forward) < 1e-5, "view {i}");
            // +z (world up) is above the origin in the image (OpenCV: y grows downwards), and
            // every ground-truth splat is inside the frame.
            let camera_from_world = camera.camera_from_world();
            let project = |p: Vec3| {
                let c = camera_from_world.transform_point3(p);
                (camera.fx * c.x / c.z + camera.cx, camera.fy * c.y / c.z + camera.cy)
            };
            assert!(project(Vec3::Z).1 < project(Vec3::ZERO).1, "view {i}");
            for mean in &splats.means {
                let (u, v) = project(Vec3::from_array(*mean));
                assert!((2.0..126.0).contains(&u) && (2.0..126.0).contains(&v), "view {i}");
            }
        }
    }

    #[test]
    fn transforms_json_holds_opengl_poses_of_the_cameras() {
        let json: serde_json::Value =
            serde_json::from_slice(&transforms_json().expect("serialises")).expect("valid JSON");
        let frames = json["frames"].as_array().expect("frames");
        assert_eq!(frames.len(), VIEW_COUNT);
        assert_eq!(json["fl_x"], FOCAL_PX);
        assert_eq!(json["w"], IMAGE_SIZE);
        let camera = cameras()[3];
        let row = |r: usize| -> Vec<f64> {
            frames[3]["transform_matrix"][r]
                .as_array()
                .expect("row")
                .iter()
                .map(|v| v.as_f64().expect("number"))
                .collect()
        };
        // OpenGL's camera y (column 1) is OpenCV's negated; the position is the same.
        let pose = camera.world_from_camera;
        for r in 0..3 {
            let gl = row(r);
            assert!((gl[0] as f32 - pose.x_axis[r]).abs() < 1e-6);
            assert!((gl[1] as f32 + pose.y_axis[r]).abs() < 1e-6);
            assert!((gl[2] as f32 + pose.z_axis[r]).abs() < 1e-6);
            assert!((gl[3] as f32 - pose.w_axis[r]).abs() < 1e-6);
        }
        assert_eq!(row(3), vec![0.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn init_ply_reads_back_as_the_sampled_points() {
        let cloud = init_points(&ground_truth());
        assert_eq!(cloud.len(), INIT_POINT_COUNT);
        let read = splat_formats::ply::read_points(&point_cloud_ply(&cloud)).expect("valid PLY");
        assert_eq!(read.positions, cloud.positions);
        assert!(read.has_color);
        for (a, b) in read.colors.iter().zip(&cloud.colors) {
            assert!(a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 0.5 / 255.0 + 1e-6));
        }
        assert_eq!(init_points(&ground_truth()), cloud, "deterministic");
    }

    #[test]
    fn straight_alpha_undoes_premultiplication() {
        let rgba =
            straight_rgba8(&[[0.25, 0.1, 0.0, 0.5], [0.3, 0.3, 0.3, 0.0], [0.9, 0.0, 0.0, 0.9]]);
        assert_eq!(rgba, vec![128, 51, 0, 128, 0, 0, 0, 0, 255, 0, 0, 230]);
    }

    #[test]
    fn hue_wheel_starts_red_and_reaches_blue() {
        let close = |a: [f32; 3], b: [f32; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        assert!(close(hue(0.0), [0.95, 0.15, 0.15]), "{:?}", hue(0.0));
        assert!(close(hue(4.0 / 6.0), [0.15, 0.15, 0.95]), "{:?}", hue(4.0 / 6.0));
    }
}
