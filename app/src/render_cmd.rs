//! `splatforge render SCENE --camera camera.json --out image.png`: one image of any splat
//! file that `info` reads, rendered by the GPU rasterizer (videos: [`crate::render_video`]).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use glam::Mat4;
use serde::Deserialize;
use splat_trainer::dataset::{self, LoadOptions};
use splat_trainer::formats::{self, Loaded, Splats};
use splat_trainer::render::{
    Camera, FrameScratch, GpuContext, GpuSplats, Owner, RenderSettings, Renderer,
};

/// Largest image side we render from the command line.
const MAX_SIDE: u32 = 16_384;

pub struct RenderArgs {
    pub scene: PathBuf,
    pub camera: Option<PathBuf>,
    pub camera_from: Option<PathBuf>,
    pub index: usize,
    pub out: PathBuf,
    pub background: [f32; 3],
    pub antialiased: bool,
    /// A video instead of one image.
    pub video: Option<crate::render_video::VideoArgs>,
}

/// camera.json: intrinsics, image size and a row-major 4×4 `world_from_camera` (OpenCV).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CameraFile {
    width: u32,
    height: u32,
    fx: f32,
    fy: f32,
    cx: f32,
    cy: f32,
    world_from_camera: [f32; 16],
}

pub fn run(args: &RenderArgs) -> anyhow::Result<()> {
    let settings = RenderSettings {
        background: args.background,
        antialiased: args.antialiased,
        sh_degree: None,
        ..RenderSettings::default()
    };
    if let Some(video) = &args.video {
        return crate::render_video::run(&load_scene(&args.scene)?, video, &args.out, &settings);
    }
    let camera = match (&args.camera, &args.camera_from) {
        (Some(path), None) => read_camera(path)?,
        (None, Some(dataset)) => dataset_camera(dataset, args.index)?,
        _ => bail!(
            "give --camera FILE or --camera-from DATASET for an image, --turntable SECONDS or \
             --path PATH.json for a video"
        ),
    };
    let splats = load_scene(&args.scene)?;
    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let renderer = Renderer::new(&ctx)?;
    let gpu = GpuSplats::upload(&ctx, &splats, Owner::Viewer)?;
    let mut scratch = FrameScratch::new(&ctx, &renderer, Owner::Viewer)?;
    let stats = renderer.forward(&ctx, &gpu, &camera, &settings, &mut scratch)?;
    let n = splats.len().max(1) as f64;
    println!(
        "{} splats, {} visible, {} tile intersections ({:.2} a splat, {:.2} a visible splat)",
        splats.len(),
        stats.visible,
        stats.intersections,
        f64::from(stats.intersections) / n,
        f64::from(stats.intersections) / f64::from(stats.visible.max(1)),
    );
    let pixels = scratch.read_image(&ctx)?;
    splatforge::video::write_png(&args.out, camera.width, camera.height, &pixels)
}

fn load_scene(path: &Path) -> anyhow::Result<Splats> {
    match formats::load_file(path)? {
        Loaded::Splats { splats, .. } => Ok(splats),
        Loaded::Points(_) => bail!("{}: is a point cloud, not a splat scene", path.display()),
    }
}

fn read_camera(path: &Path) -> anyhow::Result<Camera> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read camera file", path.display()))?;
    let file: CameraFile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a camera file", path.display()))?;
    camera_from_file(&file).with_context(|| format!("{}: bad camera", path.display()))
}

fn camera_from_file(file: &CameraFile) -> anyhow::Result<Camera> {
    if file.width == 0 || file.height == 0 || file.width > MAX_SIDE || file.height > MAX_SIDE {
        bail!("image size {}x{} (each side must be 1..={MAX_SIDE})", file.width, file.height);
    }
    let intrinsics = [file.fx, file.fy, file.cx, file.cy];
    if !intrinsics.iter().all(|v| v.is_finite()) || file.fx <= 0.0 || file.fy <= 0.0 {
        bail!("focal lengths must be positive and all intrinsics finite");
    }
    if !file.world_from_camera.iter().all(|v| v.is_finite()) {
        bail!("world_from_camera has a non-finite value");
    }
    // Row-major in the file; glam reads columns, so read it as columns and transpose.
    let world_from_camera = Mat4::from_cols_array(&file.world_from_camera).transpose();
    if world_from_camera.row(3) != glam::Vec4::W || world_from_camera.determinant().abs() < 1e-12 {
        bail!("world_from_camera must be a rigid transform with last row 0 0 0 1");
    }
    Ok(Camera {
        width: file.width,
        height: file.height,
        fx: file.fx,
        fy: file.fy,
        cx: file.cx,
        cy: file.cy,
        world_from_camera,
    })
}

fn dataset_camera(path: &Path, index: usize) -> anyhow::Result<Camera> {
    let data =
        dataset::load_dataset(path, &LoadOptions::default()).context("cannot load dataset")?;
    let count = data.train.len() + data.eval.len();
    data.view(index).map(|v| v.camera).ok_or_else(|| {
        anyhow::anyhow!("{}: no camera {index} (the dataset has {count})", path.display())
    })
}
