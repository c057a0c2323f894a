//! Frames of a video for COLMAP, cut by ffmpeg: sampled at a few times the rate we keep, and
//! of each short window of samples the sharpest kept (the variance of the Laplacian, the
//! usual blur measure), so that motion blur costs as few views as possible.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rayon::prelude::*;

use crate::process::Engine;
use crate::{Cancel, Options, PosesError};

/// Video files we read, by extension (any case); ffmpeg reads many more, but a folder drop
/// needs to know a video when it sees one.
pub(crate) const VIDEO_EXTENSIONS: [&str; 12] =
    ["mp4", "mov", "m4v", "avi", "mkv", "webm", "mts", "m2ts", "3gp", "wmv", "mpg", "mpeg"];

/// Samples a kept frame is chosen from, at most.
const WINDOW: u32 = 4;
/// Long side of the grey image the sharpness is measured on: the same for every frame, and
/// cheap.
const SHARPNESS_SIZE: u32 = 480;

/// How to get ffmpeg on this system.
const FFMPEG_ADVICE: &str = if cfg!(target_os = "macos") {
    "Install it with Homebrew (`brew install ffmpeg`) or say where it is: `--ffmpeg PATH`"
} else if cfg!(windows) {
    "Install a build from https://ffmpeg.org/download.html or say where it is: `--ffmpeg PATH`"
} else {
    "Install it with your distribution's package (Debian, Ubuntu: `sudo apt install ffmpeg`) \
     or say where it is: `--ffmpeg PATH`"
};

/// What ffprobe says of a video.
#[derive(Clone, Copy, Debug)]
pub(crate) struct VideoInfo {
    pub duration_seconds: f64,
    pub frame_rate: f64,
}

/// How frames are taken: `kept_rate` frames a second, each the sharpest of `window`
/// consecutive samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FramePlan {
    pub kept_rate: f64,
    pub window: u32,
}

impl FramePlan {
    pub fn new(info: VideoInfo, options: &Options) -> Self {
        let mut kept_rate = options.frames_per_second.min(info.frame_rate);
        let max_frames = options.max_frames.max(1) as f64;
        if info.duration_seconds * kept_rate > max_frames {
            kept_rate = max_frames / info.duration_seconds;
        }
        let window = ((info.frame_rate / kept_rate).floor() as u32).clamp(1, WINDOW);
        Self { kept_rate, window }
    }

    pub fn sample_rate(self) -> f64 {
        self.kept_rate * f64::from(self.window)
    }
}

pub(crate) struct Ffmpeg {
    ffmpeg: Engine,
    ffprobe: Engine,
}

impl Ffmpeg {
    /// `ffmpeg` at `path` (or on the `PATH`), and the `ffprobe` beside it; either is stopped
    /// once idle for `idle_limit`.
    pub fn new(path: Option<&Path>, idle_limit: Duration) -> Self {
        let ffmpeg =
            Engine::new("ffmpeg", path.or(Some(Path::new("ffmpeg"))), FFMPEG_ADVICE, idle_limit);
        let ffprobe_path = match path {
            Some(path) => path.with_file_name(path.file_name().map_or_else(
                || "ffprobe".into(),
                |n| n.to_string_lossy().replacen("ffmpeg", "ffprobe", 1),
            )),
            None => PathBuf::from("ffprobe"),
        };
        let ffprobe = Engine::new("ffprobe", Some(&ffprobe_path), FFMPEG_ADVICE, idle_limit);
        Self { ffmpeg, ffprobe }
    }

    /// The video's length and frame rate.
    pub fn probe(&self, video: &Path, cancel: &Cancel) -> Result<VideoInfo, PosesError> {
        let args = [
            "-v".as_ref(),
            "error".as_ref(),
            "-select_streams".as_ref(),
            "v:0".as_ref(),
            "-show_entries".as_ref(),
            "stream=avg_frame_rate,r_frame_rate,duration:format=duration".as_ref(),
            "-of".as_ref(),
            "flat".as_ref(),
            video.as_os_str(),
        ];
        let (mut rate, mut base_rate, mut duration, mut stream_duration) = (None, None, None, None);
        let mut messages = Vec::new();
        let finished =
            self.ffprobe.run("ffprobe, reading the video", &args, cancel, &mut |line| {
                let Some((key, value)) = line.split_once('=') else {
                    messages.push(line.trim().to_owned());
                    return;
                };
                let value = value.trim().trim_matches('"');
                let seconds = || value.parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0);
                match key {
                    "streams.stream.0.avg_frame_rate" => rate = parse_rate(value),
                    // A variable-rate file may have no average (0/0): its base rate then.
                    "streams.stream.0.r_frame_rate" => base_rate = parse_rate(value),
                    "streams.stream.0.duration" => stream_duration = seconds(),
                    "format.duration" => duration = seconds(),
                    _ => {}
                }
            })?;
        let fail = |message: String| PosesError::Video { path: video.to_path_buf(), message };
        if !finished.status.success() {
            let said = messages.last().cloned().unwrap_or_else(|| finished.status.to_string());
            // ffprobe starts its messages with the file name: say it once.
            let prefix = format!("{}: ", video.display());
            return Err(fail(said.strip_prefix(&prefix).unwrap_or(&said).to_owned()));
        }
        let frame_rate =
            rate.or(base_rate).ok_or_else(|| fail("it holds no video stream".to_owned()))?;
        let duration_seconds = duration.or(stream_duration).ok_or_else(|| {
            fail("its length is unknown (a damaged or still-recording file?)".to_owned())
        })?;
        Ok(VideoInfo { duration_seconds, frame_rate })
    }

    /// Cuts samples of `video` into `samples` as JPEG, no larger than `max_size` on the long
    /// side (upright: ffmpeg applies the rotation the video is tagged with). `progress` gets
    /// the milliseconds of video done.
    pub fn extract(
        &self,
        video: &Path,
        (plan, max_size): (FramePlan, u32),
        samples: &Path,
        cancel: &Cancel,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), PosesError> {
        let filter = format!(
            "fps={:.6},scale=w='min(iw,{max_size})':h='min(ih,{max_size})':force_original_aspect_ratio=decrease",
            plan.sample_rate()
        );
        let pattern = samples.join("sample_%06d.jpg");
        let args = [
            "-nostdin".as_ref(),
            "-hide_banner".as_ref(),
            "-loglevel".as_ref(),
            "error".as_ref(),
            "-nostats".as_ref(),
            "-progress".as_ref(),
            "pipe:1".as_ref(),
            "-i".as_ref(),
            video.as_os_str(),
            "-vf".as_ref(),
            filter.as_ref(),
            "-q:v".as_ref(),
            "2".as_ref(),
            pattern.as_os_str(),
        ];
        let what = "ffmpeg, cutting frames of the video";
        let finished = self.ffmpeg.run(what, &args, cancel, &mut |line| {
            if let Some(micros) =
                line.strip_prefix("out_time_us=").and_then(|v| v.trim().parse::<u64>().ok())
            {
                progress(micros / 1000);
            }
        })?;
        if finished.status.success() { Ok(()) } else { Err(finished.failure(what)) }
    }
}

impl Ffmpeg {
    /// Whether ffmpeg runs and has the encoder `out`'s extension needs ([`video_codec`]):
    /// [`PosesError::Missing`] with the advice when it is not installed,
    /// [`PosesError::NoEncoder`] when its build lacks the codec, before minutes of rendering
    /// would be spent for nothing.
    pub fn check_encoder(&self, out: &Path, cancel: &Cancel) -> Result<(), PosesError> {
        let (encoder, purpose) = video_codec(out);
        let mut found = false;
        let what = "ffmpeg -encoders";
        let finished =
            self.ffmpeg.run(what, &["-hide_banner", "-encoders"], cancel, &mut |line| {
                // " V....D libx264   libx264 H.264 / AVC …": the name is the second field.
                found |= line.split_whitespace().nth(1) == Some(encoder);
            })?;
        if !finished.status.success() {
            return Err(finished.failure(what));
        }
        if found {
            Ok(())
        } else {
            Err(PosesError::NoEncoder { tried: self.ffmpeg.path.clone(), encoder, purpose })
        }
    }

    /// Encodes the numbered frames `pattern` (`frame_%05d.png`, from 0) at `fps` frames a
    /// second into `out`: H.264 (yuv420p, CRF 18: what every player plays) for `.mp4`, `.mov`
    /// and `.mkv`, VP9 for `.webm`. `progress` gets the frames encoded so far.
    pub fn encode(
        &self,
        pattern: &Path,
        fps: f64,
        out: &Path,
        cancel: &Cancel,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), PosesError> {
        let (encoder, _) = video_codec(out);
        let quality: &[&str] = match extension(out).as_str() {
            "webm" => &["-b:v", "0", "-crf", "31"],
            "mp4" | "mov" => &["-crf", "18", "-movflags", "+faststart"],
            _ => &["-crf", "18"],
        };
        let codec: Vec<&str> =
            ["-c:v", encoder].into_iter().chain(quality.iter().copied()).collect();
        let fps = format!("{fps}");
        let mut args: Vec<&std::ffi::OsStr> = Vec::new();
        let flags = [
            "-nostdin",
            "-hide_banner",
            "-loglevel",
            "error",
            "-nostats",
            "-progress",
            "pipe:1",
            "-y",
            "-framerate",
            &fps,
            "-start_number",
            "0",
            "-i",
        ];
        args.extend(flags.iter().map(std::ffi::OsStr::new));
        args.push(pattern.as_os_str());
        args.extend(codec.iter().chain(&["-pix_fmt", "yuv420p"]).map(std::ffi::OsStr::new));
        args.push(out.as_os_str());
        let what = "ffmpeg, encoding the video";
        let finished = self.ffmpeg.run(what, &args, cancel, &mut |line| {
            if let Some(frame) =
                line.strip_prefix("frame=").and_then(|v| v.trim().parse::<u64>().ok())
            {
                progress(frame);
            }
        })?;
        if finished.status.success() { Ok(()) } else { Err(finished.failure(what)) }
    }
}

/// The lowercase extension of `path`.
fn extension(path: &Path) -> String {
    path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).unwrap_or_default()
}

/// The encoder a video file needs, by its extension, and what for: VP9 for `.webm`, H.264
/// (what every player plays) for anything else.
fn video_codec(out: &Path) -> (&'static str, &'static str) {
    if extension(out) == "webm" {
        ("libvpx-vp9", "a .webm video")
    } else {
        ("libx264", "an H.264 video")
    }
}

/// `30000/1001` or `25` as frames a second.
fn parse_rate(text: &str) -> Option<f64> {
    let text = text.trim();
    let rate = match text.split_once('/') {
        Some((n, d)) => n.parse::<f64>().ok()? / d.parse::<f64>().ok()?,
        None => text.parse().ok()?,
    };
    (rate.is_finite() && rate > 0.0).then_some(rate)
}

/// Of the samples in `samples` (in name order), the sharpest of each window of `window`,
/// moved into `images` as `frame_000001.jpg`, … in order. Returns how many were kept.
pub(crate) fn keep_sharpest(
    samples: &Path,
    window: u32,
    images: &Path,
    cancel: &Cancel,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<usize, PosesError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(samples)
        .map_err(|e| PosesError::io(samples, e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "jpg"))
        .collect();
    files.sort();
    let total = files.len() as u64;
    let (mut kept, mut done) = (0, 0);
    for (index, group) in files.chunks(window.max(1) as usize).enumerate() {
        if cancel.is_cancelled() {
            return Err(PosesError::Cancelled);
        }
        let scores =
            group.par_iter().map(|file| sharpness(file)).collect::<Result<Vec<f64>, _>>()?;
        let best =
            scores.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
        let target = images.join(format!("frame_{:06}.jpg", index + 1));
        std::fs::rename(&group[best], &target).map_err(|e| PosesError::io(&target, e))?;
        kept += 1;
        done += group.len() as u64;
        progress(done, total);
    }
    Ok(kept)
}

/// The variance of the 4-neighbour Laplacian of the image's grey levels, at a fixed size:
/// high for sharp edges, low for blur.
pub(crate) fn sharpness(file: &Path) -> Result<f64, PosesError> {
    let image = image::open(file)
        .map_err(|e| PosesError::Image { path: file.to_path_buf(), message: e.to_string() })?;
    let grey = image.thumbnail(SHARPNESS_SIZE, SHARPNESS_SIZE).to_luma8();
    Ok(laplacian_variance(&grey))
}

fn laplacian_variance(grey: &image::GrayImage) -> f64 {
    let (w, h) = grey.dimensions();
    if w < 3 || h < 3 {
        return 0.0;
    }
    let at = |x: u32, y: u32| f64::from(grey.get_pixel(x, y).0[0]);
    let (mut sum, mut square, mut count) = (0.0, 0.0, 0.0);
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            let l = at(x - 1, y) + at(x + 1, y) + at(x, y - 1) + at(x, y + 1) - 4.0 * at(x, y);
            sum += l;
            square += l * l;
            count += 1.0;
        }
    }
    let mean = sum / count;
    square / count - mean * mean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blurred_image_is_less_sharp() {
        let sharp = image::GrayImage::from_fn(64, 48, |x, y| {
            image::Luma([if (x / 4 + y / 4) % 2 == 0 { 20 } else { 230 }])
        });
        let blurred = image::imageops::blur(&sharp, 2.0);
        let flat = image::GrayImage::from_pixel(64, 48, image::Luma([128]));
        let (s, b, f) =
            (laplacian_variance(&sharp), laplacian_variance(&blurred), laplacian_variance(&flat));
        assert!(s > 4.0 * b && b > f, "sharp {s}, blurred {b}, flat {f}");
        assert!(f.abs() < 1e-12);
    }

    #[test]
    fn frame_plans() {
        let options = Options { frames_per_second: 2.0, max_frames: 300, ..Options::default() };
        let phone = VideoInfo { duration_seconds: 30.0, frame_rate: 30.0 };
        assert_eq!(FramePlan::new(phone, &options), FramePlan { kept_rate: 2.0, window: 4 });
        // A long video keeps at most max_frames.
        let long = VideoInfo { duration_seconds: 600.0, frame_rate: 30.0 };
        assert_eq!(FramePlan::new(long, &options), FramePlan { kept_rate: 0.5, window: 4 });
        // A slow video keeps its own frames, never a sample twice.
        let slow = VideoInfo { duration_seconds: 10.0, frame_rate: 5.0 };
        let plan = FramePlan::new(slow, &Options { frames_per_second: 5.0, ..options.clone() });
        assert_eq!(plan, FramePlan { kept_rate: 5.0, window: 1 });
        assert!(plan.sample_rate() <= slow.frame_rate);
        assert_eq!(parse_rate("30000/1001").map(|r| (r * 1000.0).round()), Some(29970.0));
        assert_eq!(parse_rate("0/0"), None);
    }
}
