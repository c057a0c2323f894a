//! `splatforge render SCENE --turntable SECONDS | --path PATH.json --out OUT`: a video of a
//! splat scene, one GPU render a frame. `OUT` with a video extension (`.mp4`, `.mov`, `.mkv`,
//! `.webm`) is encoded by ffmpeg from PNG frames written beside it and removed after;
//! anything else is a folder that gets the PNG frames themselves (`frame_00000.png`, …), which
//! needs no ffmpeg. Ctrl+C cancels: the renders and ffmpeg stop and nothing half-written stays.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use splat_poses::Cancel;
use splat_trainer::formats::Splats;
use splat_trainer::render::camera_path::{CameraPath, PathFile, turntable_view};
use splat_trainer::render::view_controller::{
    DEFAULT_UP, focus_from_points, scene_focus, scene_up,
};
use splat_trainer::render::{
    Camera, FrameScratch, GpuContext, GpuSplats, Owner, RenderSettings, Renderer,
};

/// Extensions ffmpeg encodes for us; any other `--out` is a folder of PNG frames.
const VIDEO_EXTENSIONS: [&str; 4] = ["mp4", "mov", "mkv", "webm"];
/// Frames rendered ahead of the PNG writer.
const FRAMES_IN_FLIGHT: usize = 4;
/// A video of more frames than this is surely a mistake (an hour at 60 frames a second).
const MAX_FRAMES: u64 = 216_000;

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

/// Where the frames go and what becomes of them.
struct Output {
    frames: PathBuf,
    /// The video ffmpeg writes from the frames, if any.
    video: Option<PathBuf>,
}

pub fn run(
    splats: &Splats,
    video: &VideoArgs,
    out: &Path,
    settings: &RenderSettings,
) -> anyhow::Result<()> {
    let cancel = Cancel::default();
    let on_signal = cancel.clone();
    ctrlc::set_handler(move || on_signal.cancel()).context("cannot catch Ctrl+C")?;

    let output = plan_output(out, video)?;
    let cameras = frame_cameras(splats, video)?;
    if let Some(path) = &output.video {
        splat_poses::check_video_encoder(video.ffmpeg.as_deref(), path, &cancel)?;
    }
    // A cancelled or failed run leaves nothing behind: the folder if it made it, else the
    // frames it wrote.
    let made = !output.frames.exists();
    std::fs::create_dir_all(&output.frames)
        .with_context(|| format!("{}: cannot make the folder", output.frames.display()))?;
    let mut frames = WrittenFrames { folder: Some(output.frames.clone()), made };

    let bar = progress_bar(cameras.len() as u64, "rendering");
    render_frames(splats, &cameras, settings, &output.frames, &cancel, &bar)?;
    bar.finish_and_clear();

    let Some(path) = &output.video else {
        frames.keep();
        eprintln!("{} frames written to {}", cameras.len(), output.frames.display());
        return Ok(());
    };
    // ffmpeg writes beside the video and the file is renamed when whole, so a cancelled or
    // failed encode leaves no half video under the name asked for.
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let extension = path.extension().unwrap_or_default().to_string_lossy();
    let partial = path.with_file_name(format!("{stem}.incomplete.{extension}"));
    let bar = progress_bar(cameras.len() as u64, "encoding");
    let pattern = output.frames.join("frame_%05d.png");
    let encoded = splat_poses::encode_video(
        video.ffmpeg.as_deref(),
        &pattern,
        video.fps,
        &partial,
        &cancel,
        &mut |frame| bar.set_position(frame),
    )
    .map_err(anyhow::Error::from)
    .and_then(|()| {
        std::fs::rename(&partial, path)
            .with_context(|| format!("{}: cannot write the video", path.display()))
    });
    bar.finish_and_clear();
    if let Err(error) = encoded {
        let _ = std::fs::remove_file(&partial);
        if cancel.is_cancelled() {
            return Err(error);
        }
        // The frames cost minutes: kept, and said where.
        frames.keep();
        return Err(error.context(format!(
            "the video was not made; its frames are in {}",
            output.frames.display()
        )));
    }
    eprintln!(
        "{} frames ({}×{}, {} a second) written to {}",
        cameras.len(),
        video.width,
        video.height,
        video.fps,
        path.display()
    );
    Ok(())
}

/// Checks `out` and the size against what the output can hold, before anything is rendered.
fn plan_output(out: &Path, video: &VideoArgs) -> anyhow::Result<Output> {
    let is_video = out
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| VIDEO_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
    if !is_video {
        if out.exists() && std::fs::read_dir(out).map_or(true, |mut d| d.next().is_some()) {
            bail!(
                "--out {}: the PNG frames need a new or empty folder (or give a .mp4, .mov, \
                 .mkv or .webm file for a video)",
                out.display()
            );
        }
        return Ok(Output { frames: out.to_path_buf(), video: None });
    }
    if !video.width.is_multiple_of(2) || !video.height.is_multiple_of(2) {
        bail!(
            "--size {}x{}: a video's width and height must be even (its colour is stored at half \
             resolution)",
            video.width,
            video.height
        );
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        bail!("--out {}: the folder it would go in does not exist", out.display());
    }
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".frames");
    let frames = parent.join(name);
    if frames.exists() {
        bail!(
            "{}: is in the way (the frames of the video go there while it is made)",
            frames.display()
        );
    }
    Ok(Output { frames, video: Some(out.to_path_buf()) })
}

/// The camera of every frame.
fn frame_cameras(splats: &Splats, video: &VideoArgs) -> anyhow::Result<Vec<Camera>> {
    let (width, height) = (video.width, video.height);
    match &video.motion {
        Motion::Turntable { seconds } => {
            let count = frame_count(*seconds, video.fps)?;
            let (center, radius, up) = if let Some(dataset) = &video.cameras_from {
                let cameras = splatforge::dataset_cameras(dataset)?;
                let (center, radius) = scene_focus(&cameras);
                (center, radius, scene_up(&cameras))
            } else {
                let (center, radius) = focus_from_points(&splats.means);
                (center, radius, DEFAULT_UP)
            };
            // Frame `count` would be frame 0 again: the video loops without a repeated frame.
            Ok((0..count)
                .map(|i| {
                    let fraction = i as f32 / count as f32;
                    turntable_view(center, radius, up, fraction).camera(width, height)
                })
                .collect())
        }
        Motion::Path(file) => {
            let path = read_path(file)?;
            let count = frame_count(f64::from(path.duration()), video.fps)? + 1;
            Ok((0..count)
                .map(|i| {
                    let time = path.start() + (i as f64 / video.fps) as f32;
                    path.camera_at(time, width, height)
                })
                .collect())
        }
    }
}

/// Whole frames in `seconds` at `fps`, at least one.
fn frame_count(seconds: f64, fps: f64) -> anyhow::Result<u64> {
    let frames = (seconds * fps).round();
    if !(frames.is_finite() && frames <= MAX_FRAMES as f64) {
        bail!("{seconds} s at {fps} frames a second is more than {MAX_FRAMES} frames");
    }
    Ok((frames as u64).max(1))
}

fn read_path(file: &Path) -> anyhow::Result<CameraPath> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("{}: cannot read the camera path", file.display()))?;
    let parsed: PathFile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a camera path file", file.display()))?;
    parsed.to_path().with_context(|| format!("{}: not a usable camera path", file.display()))
}

/// Renders each camera into `frames/frame_NNNNN.png`: the GPU renders the next frame while a
/// writer thread encodes the last.
fn render_frames(
    splats: &Splats,
    cameras: &[Camera],
    settings: &RenderSettings,
    frames: &Path,
    cancel: &Cancel,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let renderer = Renderer::new(&ctx)?;
    let gpu = GpuSplats::upload(&ctx, splats, Owner::Viewer)?;
    let mut scratch = FrameScratch::new(&ctx, &renderer, Owner::Viewer)?;
    let (tx, rx) = sync_channel::<(PathBuf, Camera, Vec<[f32; 4]>)>(FRAMES_IN_FLIGHT);
    let writer = std::thread::Builder::new()
        .name("video-frames".into())
        .spawn(move || -> anyhow::Result<()> {
            for (path, camera, pixels) in rx {
                crate::render_cmd::write_png(&path, camera.width, camera.height, &pixels)?;
            }
            Ok(())
        })
        .context("cannot start a thread to write the frames")?;
    let mut rendered = Ok(());
    for (i, camera) in cameras.iter().enumerate() {
        if cancel.is_cancelled() {
            rendered = Err(anyhow::anyhow!("cancelled"));
            break;
        }
        let frame = renderer
            .forward(&ctx, &gpu, camera, settings, &mut scratch)
            .and_then(|_| scratch.read_image(&ctx));
        match frame {
            Ok(pixels) => {
                let path = frames.join(format!("frame_{i:05}.png"));
                // The writer only hangs up when it failed: its error is the one to say.
                if tx.send((path, *camera, pixels)).is_err() {
                    break;
                }
            }
            Err(error) => {
                rendered = Err(error.into());
                break;
            }
        }
        bar.inc(1);
    }
    drop(tx);
    let written = writer.join().map_err(|_| anyhow::anyhow!("the frame writer stopped"))?;
    rendered.and(written)
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

/// The frames of a video: removed when dropped (the folder if this run made it, else the
/// frames in it), unless kept.
struct WrittenFrames {
    folder: Option<PathBuf>,
    made: bool,
}

impl WrittenFrames {
    fn keep(&mut self) {
        self.folder = None;
    }
}

impl Drop for WrittenFrames {
    fn drop(&mut self) {
        let Some(folder) = self.folder.take() else { return };
        if self.made {
            let _ = std::fs::remove_dir_all(folder);
        } else if let Ok(entries) = std::fs::read_dir(&folder) {
            // The folder was empty before: everything in it is ours.
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
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
