//! Videos of a splat scene: the camera of every frame (a turntable, a camera path), each
//! frame rendered by the GPU into a PNG, and the PNGs encoded by ffmpeg. The command line
//! (`render --turntable/--path`) and the window share it.
//!
//! An output with a video extension (`.mp4`, `.mov`, `.mkv`, `.webm`) is encoded by ffmpeg
//! (checked, with its encoder, before anything is rendered) from PNG frames written beside it
//! and removed after, and written under `NAME.incomplete.EXT` until whole; any other output is
//! a folder that gets the PNG frames themselves (`frame_00000.png`, …) and needs no ffmpeg.
//! Cancelled or failed, nothing half-written stays, but frames whose encoding failed are kept
//! and said where.

use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;

use anyhow::{Context as _, bail};
use glam::Vec3;
use splat_poses::Cancel;
use splat_trainer::render::camera_path::{CameraPath, PathFile, turntable_view};
use splat_trainer::render::{
    Camera, FrameScratch, GpuContext, GpuSplats, Owner, RenderSettings, Renderer,
};

/// Extensions ffmpeg encodes for us; any other output is a folder of PNG frames.
pub const VIDEO_EXTENSIONS: [&str; 4] = ["mp4", "mov", "mkv", "webm"];
/// Frames rendered ahead of the PNG writer.
const FRAMES_IN_FLIGHT: usize = 4;
/// A video of more frames than this is surely a mistake (an hour at 60 frames a second).
const MAX_FRAMES: u64 = 216_000;

/// What a video's progress reports: frames rendered, then frames encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Rendering,
    Encoding,
}

/// Where the frames go and what becomes of them.
struct Output {
    frames: PathBuf,
    /// The video ffmpeg writes from the frames, if any.
    video: Option<PathBuf>,
}

/// The cameras of a turntable video: once round `center` in `seconds` at `fps`, from the
/// window's first view of a sphere of `radius` ([`turntable_view`]). Frame `count` would be
/// frame 0 again, so the video loops without a repeated frame.
pub fn turntable(
    (center, radius, up): (Vec3, f32, Vec3),
    seconds: f64,
    fps: f64,
    (width, height): (u32, u32),
) -> anyhow::Result<Vec<Camera>> {
    let count = frame_count(seconds, fps)?;
    Ok((0..count)
        .map(|i| {
            let fraction = i as f32 / count as f32;
            turntable_view(center, radius, up, fraction).camera(width, height)
        })
        .collect())
}

/// The cameras along the camera path file `file` at `fps`, both ends included.
pub fn along_path(
    file: &Path,
    fps: f64,
    (width, height): (u32, u32),
) -> anyhow::Result<Vec<Camera>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("{}: cannot read the camera path", file.display()))?;
    let parsed: PathFile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a camera path file", file.display()))?;
    let path: CameraPath = parsed
        .to_path()
        .with_context(|| format!("{}: not a usable camera path", file.display()))?;
    path_cameras(&path, fps, (width, height))
}

/// The cameras along `path` at `fps`, both ends included.
pub fn path_cameras(
    path: &CameraPath,
    fps: f64,
    (width, height): (u32, u32),
) -> anyhow::Result<Vec<Camera>> {
    let count = frame_count(f64::from(path.duration()), fps)? + 1;
    Ok((0..count)
        .map(|i| path.camera_at(path.start() + (i as f64 / fps) as f32, width, height))
        .collect())
}

/// Whole frames in `seconds` at `fps`, at least one.
pub fn frame_count(seconds: f64, fps: f64) -> anyhow::Result<u64> {
    let frames = (seconds * fps).round();
    if !(frames.is_finite() && frames <= MAX_FRAMES as f64) {
        bail!("{seconds} s at {fps} frames a second is more than {MAX_FRAMES} frames");
    }
    Ok((frames as u64).max(1))
}

/// Renders `splats` from each of `cameras` and writes the frames, or the video ffmpeg makes of
/// them, to `out` (module docs). `progress` hears each frame rendered and encoded.
#[expect(clippy::too_many_arguments, reason = "one video: each is needed")]
pub fn write(
    ctx: &GpuContext,
    splats: &GpuSplats,
    cameras: &[Camera],
    settings: &RenderSettings,
    out: &Path,
    (fps, ffmpeg): (f64, Option<&Path>),
    cancel: &Cancel,
    progress: &mut dyn FnMut(Stage, u64),
) -> anyhow::Result<()> {
    let (width, height) = cameras.first().map_or((0, 0), |c| (c.width, c.height));
    let output = plan_output(out, width, height)?;
    if let Some(path) = &output.video {
        splat_poses::check_video_encoder(ffmpeg, path, cancel)?;
    }
    // A cancelled or failed run leaves nothing behind: the folder if it made it, else the
    // frames it wrote.
    let made = !output.frames.exists();
    std::fs::create_dir_all(&output.frames)
        .with_context(|| format!("{}: cannot make the folder", output.frames.display()))?;
    let mut frames = WrittenFrames { folder: Some(output.frames.clone()), made };
    render_frames(ctx, splats, cameras, settings, &output.frames, cancel, &mut |done| {
        progress(Stage::Rendering, done);
    })?;
    let Some(path) = &output.video else {
        frames.keep();
        return Ok(());
    };
    // ffmpeg writes beside the video and the file is renamed when whole, so a cancelled or
    // failed encode leaves no half video under the name asked for.
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let extension = path.extension().unwrap_or_default().to_string_lossy();
    let partial = path.with_file_name(format!("{stem}.incomplete.{extension}"));
    let pattern = output.frames.join("frame_%05d.png");
    let encoded =
        splat_poses::encode_video(ffmpeg, &pattern, fps, &partial, cancel, &mut |frame| {
            progress(Stage::Encoding, frame);
        })
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            std::fs::rename(&partial, path)
                .with_context(|| format!("{}: cannot write the video", path.display()))
        });
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
    Ok(())
}

/// Checks `out` and the size against what the output can hold, before anything is rendered.
fn plan_output(out: &Path, width: u32, height: u32) -> anyhow::Result<Output> {
    let is_video = out
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| VIDEO_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
    if !is_video {
        if out.exists() && std::fs::read_dir(out).map_or(true, |mut d| d.next().is_some()) {
            bail!(
                "{}: the PNG frames need a new or empty folder (or give a .mp4, .mov, \
                 .mkv or .webm file for a video)",
                out.display()
            );
        }
        return Ok(Output { frames: out.to_path_buf(), video: None });
    }
    if !width.is_multiple_of(2) || !height.is_multiple_of(2) {
        bail!(
            "{width}x{height}: a video's width and height must be even (its colour is stored \
             at half resolution)"
        );
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        bail!("{}: the folder it would go in does not exist", out.display());
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

/// Renders each camera into `frames/frame_NNNNN.png`: the GPU renders the next frame while a
/// writer thread encodes the last.
fn render_frames(
    ctx: &GpuContext,
    gpu: &GpuSplats,
    cameras: &[Camera],
    settings: &RenderSettings,
    frames: &Path,
    cancel: &Cancel,
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<()> {
    let renderer = Renderer::new(ctx)?;
    let mut scratch = FrameScratch::new(ctx, &renderer, Owner::Viewer)?;
    let (tx, rx) = sync_channel::<(PathBuf, Camera, Vec<[f32; 4]>)>(FRAMES_IN_FLIGHT);
    let writer = std::thread::Builder::new()
        .name("video-frames".into())
        .spawn(move || -> anyhow::Result<()> {
            for (path, camera, pixels) in rx {
                write_png(&path, camera.width, camera.height, &pixels)?;
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
            .forward(ctx, gpu, camera, settings, &mut scratch)
            .and_then(|_| scratch.read_image(ctx));
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
        progress(i as u64 + 1);
    }
    drop(tx);
    let written = writer.join().map_err(|_| anyhow::anyhow!("the frame writer stopped"))?;
    rendered.and(written)
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

/// Writes linear-as-trained RGB (clamped to 0..1) as an 8-bit PNG.
pub fn write_png(path: &Path, width: u32, height: u32, pixels: &[[f32; 4]]) -> anyhow::Result<()> {
    let bytes: Vec<u8> = pixels
        .iter()
        .flat_map(|p| [p[0], p[1], p[2]])
        .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect();
    let image = image::RgbImage::from_raw(width, height, bytes)
        .context("rendered image has the wrong size")?;
    image.save(path).with_context(|| format!("{}: cannot write image", path.display()))
}
