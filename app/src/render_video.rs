//! `splatforge render SCENE --turntable SECONDS | --path PATH.json --out OUT`: a video of a
//! splat scene ([`splatforge::video`]), with progress bars on a terminal. Ctrl+C cancels: the
//! renders and ffmpeg stop and nothing half-written stays.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use splat_poses::Cancel;
use splat_trainer::formats::Splats;
use splat_trainer::render::view_controller::{
    DEFAULT_UP, focus_from_points, scene_focus, scene_up,
};
use splat_trainer::render::{GpuContext, GpuSplats, Owner, RenderSettings};
use splatforge::video::{self, Stage};

/// How the camera moves.
pub enum Motion {
    /// Once round the scene in this many seconds.
    Turntable { seconds: f64 },
    /// Through the keyframes of a path file.
    Path(PathBuf),
}

pub struct VideoArgs {
    pub motion: Motion,
    /// Frames a second.
    pub fps: f64,
    pub width: u32,
    pub height: u32,
    /// A dataset whose cameras give the turntable its centre, size and up.
    pub cameras_from: Option<PathBuf>,
    pub ffmpeg: Option<PathBuf>,
}

pub fn run(
    splats: &Splats,
    args: &VideoArgs,
    out: &std::path::Path,
    settings: &RenderSettings,
) -> anyhow::Result<()> {
    let cancel = Cancel::default();
    let on_signal = cancel.clone();
    ctrlc::set_handler(move || on_signal.cancel()).context("cannot catch Ctrl+C")?;
    let size = (args.width, args.height);
    let cameras = match &args.motion {
        Motion::Turntable { seconds } => {
            let framing = if let Some(dataset) = &args.cameras_from {
                let cameras = splatforge::dataset_cameras(dataset)?;
                let (center, radius) = scene_focus(&cameras);
                (center, radius, scene_up(&cameras))
            } else {
                let (center, radius) = focus_from_points(&splats.means);
                (center, radius, DEFAULT_UP)
            };
            video::turntable(framing, *seconds, args.fps, size)?
        }
        Motion::Path(file) => video::along_path(file, args.fps, size)?,
    };
    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let gpu = GpuSplats::upload(&ctx, splats, Owner::Viewer)?;
    let total = cameras.len() as u64;
    let (rendering, encoding) = (progress_bar(total, "rendering"), progress_bar(total, "encoding"));
    video::write(
        &ctx,
        &gpu,
        &cameras,
        settings,
        out,
        (args.fps, args.ffmpeg.as_deref()),
        &cancel,
        &mut |stage, done| match stage {
            Stage::Rendering => rendering.set_position(done),
            Stage::Encoding => encoding.set_position(done),
        },
    )?;
    rendering.finish_and_clear();
    encoding.finish_and_clear();
    eprintln!(
        "{total} frames ({}×{}, {} a second) written to {}",
        args.width,
        args.height,
        args.fps,
        out.display()
    );
    Ok(())
}

fn progress_bar(len: u64, what: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} frames {eta}") {
        bar.set_style(style);
    }
    bar.set_message(what);
    bar
}

/// `--size 1280x720`.
pub fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let parse = |v: &str| v.trim().parse::<u32>().ok().filter(|v| (16..=8192).contains(v));
    text.split_once(['x', 'X'])
        .and_then(|(w, h)| Some((parse(w)?, parse(h)?)))
        .ok_or_else(|| format!("{text:?}: WIDTHxHEIGHT, each 16 to 8192 pixels"))
}

/// `--turntable 10`, `--fps 30`: a positive number.
pub fn parse_positive(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?}: a number above 0")),
    }
}
