//! Camera poses for a folder of photos or a video, computed by COLMAP (a video's frames cut by
//! ffmpeg), written as an ordinary COLMAP dataset — `images/` and `sparse/0/` — that the
//! trainer reads like any other.
//!
//! Structure-from-motion is not ours to write: COLMAP is the engine the field trusts (the 3DGS
//! reference `convert.py`, nerfstudio's `ns-process-data`). What is ours is everything around
//! it that makes it work for people who are not COLMAP users: photos made upright with a
//! focal-length prior from EXIF and one camera per distinct size and focal length, the
//! sharpest frames of a video, the option names of the installed version, progress from its
//! output, cancel, the largest of its models, and failures said in words with what to try.
//!
//! The same engine runner encodes videos of a scene ([`encode_video`]: ffmpeg from numbered
//! frames) for `splatforge render --turntable` and `--path`.
//!
//! The run works in `OUT.incomplete` beside the output and renames it to `OUT` only when the
//! dataset is whole, so nothing half-written ever looks like a dataset.

mod align;
mod colmap;
mod error;
mod images;
mod process;
mod video;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;

pub use align::{PoseComparison, compare_poses};
pub use error::PosesError;

use colmap::{CameraPrior, Colmap};
use video::{Ffmpeg, FramePlan};

/// Below this fraction of images registered the run fails: the scene would be mostly
/// missing.
pub const MIN_REGISTERED: f64 = 0.4;
/// Below this fraction a warning says which images got no pose.
pub const WARN_REGISTERED: f64 = 0.8;
/// Fewest photos we start COLMAP on (it needs two; three is the least that can check itself,
/// twenty or more give a scene worth training).
pub const MIN_PHOTOS: usize = 3;
/// Photos prepared between two looks at the cancel flag and two progress reports.
const PREPARE_CHUNK: usize = 8;
/// How long an engine (COLMAP, ffmpeg) may print nothing and use no CPU time before it is
/// stopped with [`PosesError::Stalled`]: COLMAP prints a line every few seconds while it
/// works, and a silent stage (a bundle adjustment) still uses CPU time.
pub const DEFAULT_IDLE_LIMIT: Duration = Duration::from_secs(300);
/// The file that marks a work folder as ours (so a later run may remove it).
const MARKER: &str = ".splatforge-poses";

/// How to compute poses.
#[derive(Clone, Debug)]
pub struct Options {
    /// COLMAP's executable (default: `colmap` on the `PATH`).
    pub colmap: Option<PathBuf>,
    /// ffmpeg's executable, with ffprobe beside it (default: both on the `PATH`).
    pub ffmpeg: Option<PathBuf>,
    /// How images are paired for matching (default: exhaustive for photos, sequential for a
    /// video).
    pub matcher: Option<Matcher>,
    /// Longest image side, in pixels, of the images COLMAP sees and the dataset keeps.
    pub max_image_size: u32,
    /// Frames kept per second of video.
    pub frames_per_second: f64,
    /// Frames kept from a video at most (the rate drops for long videos).
    pub max_frames: usize,
    /// How long an engine may print nothing and use no CPU time before it is stopped
    /// (Linux; elsewhere a process's CPU time is not read and an engine is never stopped
    /// for being idle).
    pub idle_limit: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            colmap: None,
            ffmpeg: None,
            matcher: None,
            max_image_size: 1600,
            frames_per_second: 2.0,
            max_frames: 300,
            idle_limit: DEFAULT_IDLE_LIMIT,
        }
    }
}

/// Which image pairs COLMAP matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matcher {
    /// Every pair: any order of photos, cost grows with the square of their number (a few
    /// hundred photos at most).
    Exhaustive,
    /// Each image with its neighbours in name order: video frames, photos taken walking.
    Sequential,
}

impl Matcher {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Exhaustive => "exhaustive",
            Self::Sequential => "sequential",
        }
    }

    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "exhaustive" => Some(Self::Exhaustive),
            "sequential" => Some(Self::Sequential),
            _ => None,
        }
    }
}

/// What poses are computed for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Photos in a folder (or in its `images/`), sorted by name.
    Photos { folder: PathBuf, photos: Vec<PathBuf> },
    /// A video file.
    Video(PathBuf),
}

impl Input {
    /// What `path` is: a video file, or a folder of photos (directly or in `images/`). Too few
    /// photos are refused when poses are computed, not here, so that a folder of two is still
    /// told what it lacks.
    pub fn detect(path: &Path) -> Result<Self, PosesError> {
        let input_error = |message: String| PosesError::Input { path: path.to_path_buf(), message };
        let metadata = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => input_error("no such file or folder".to_owned()),
            _ => PosesError::io(path, e),
        })?;
        if metadata.is_file() {
            let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
            let known = |list: &[&str]| list.iter().any(|e| extension.eq_ignore_ascii_case(e));
            return if known(&video::VIDEO_EXTENSIONS) {
                Ok(Self::Video(path.to_path_buf()))
            } else if known(&images::PHOTO_EXTENSIONS) {
                Err(input_error(format!(
                    "a single photo: poses need a folder of overlapping photos (at least \
                     {MIN_PHOTOS}; twenty or more make a good scene)"
                )))
            } else {
                Err(input_error(format!(
                    "neither a video ({}) nor a folder of photos",
                    video::VIDEO_EXTENSIONS.join(", ")
                )))
            };
        }
        let mut folder = path.to_path_buf();
        let mut photos = images::list_photos(&folder)?;
        if photos.is_empty() && path.join("images").is_dir() {
            folder = path.join("images");
            photos = images::list_photos(&folder)?;
        }
        if photos.is_empty() {
            return Err(input_error(format!(
                "holds no photos ({}), directly or in images/",
                images::PHOTO_EXTENSIONS.map(|e| format!(".{e}")).join(", ")
            )));
        }
        Ok(Self::Photos { folder, photos })
    }

    /// In words: `23 photos in DIR` or `the video FILE`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Photos { folder, photos } => {
                format!("{} photos in {}", photos.len(), folder.display())
            }
            Self::Video(file) => format!("the video {}", file.display()),
        }
    }
}

/// Where the dataset goes unless the user says: `NAME_dataset` beside the input (a folder
/// of photos or a video; `.` is the folder it names).
#[must_use]
pub fn default_output(input: &Path) -> PathBuf {
    let input = std::fs::canonicalize(input).unwrap_or_else(|_| input.to_path_buf());
    let stem =
        input.file_stem().map_or_else(|| "poses".into(), |s| s.to_string_lossy().into_owned());
    input.with_file_name(format!("{stem}_dataset"))
}

/// The stages of a run, in order (a video's first two; photos' third).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// ffmpeg cuts samples of the video.
    Frames,
    /// The sharpest sample of each window is kept.
    Sharpest,
    /// Photos made upright and sized.
    Images,
    /// COLMAP finds features in every image.
    Features,
    /// COLMAP matches features between images.
    Matching,
    /// COLMAP's mapper registers images and triangulates points.
    Mapping,
}

impl Stage {
    /// In words, for progress bars.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Frames => "cutting frames (ffmpeg)",
            Self::Sharpest => "keeping the sharpest frames",
            Self::Images => "preparing photos",
            Self::Features => "finding features (COLMAP)",
            Self::Matching => "matching features (COLMAP)",
            Self::Mapping => "registering images (COLMAP)",
        }
    }

    /// A short name, for reports and JSON: `frames`, `sharpest`, `images`, `features`,
    /// `matching`, `mapping`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Frames => "frames",
            Self::Sharpest => "sharpest",
            Self::Images => "images",
            Self::Features => "features",
            Self::Matching => "matching",
            Self::Mapping => "mapping",
        }
    }

    /// The stages a run on `input` goes through.
    #[must_use]
    pub fn all_for(input: &Input) -> &'static [Stage] {
        match input {
            Input::Photos { .. } => &[Self::Images, Self::Features, Self::Matching, Self::Mapping],
            Input::Video(_) => {
                &[Self::Frames, Self::Sharpest, Self::Features, Self::Matching, Self::Mapping]
            }
        }
    }
}

/// How far a stage is: `done` of `total` (its own unit: images, blocks, milliseconds of
/// video).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub stage: Stage,
    pub done: u64,
    pub total: u64,
}

/// What a finished run made.
#[derive(Clone, Debug)]
pub struct Report {
    /// The dataset folder written.
    pub dataset: PathBuf,
    /// Images given to COLMAP.
    pub images: usize,
    /// Images in the kept model.
    pub registered: usize,
    /// COLMAP cameras (one per distinct size and focal length).
    pub cameras: usize,
    /// Registered images of the models left out, largest first.
    pub other_models: Vec<usize>,
    pub matcher: Matcher,
    pub colmap_version: String,
    /// Wall time of each stage, in order.
    pub stage_seconds: Vec<(Stage, f64)>,
    /// Things the user should know, each once, in words.
    pub warnings: Vec<String>,
}

impl Report {
    /// One sentence: what COLMAP registered, with how many cameras and which matching.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "COLMAP {} gave poses to {} of {} images ({} camera{}, {} matching).",
            self.colmap_version,
            self.registered,
            self.images,
            self.cameras,
            if self.cameras == 1 { "" } else { "s" },
            self.matcher.name(),
        )
    }
}

/// Says [`PosesError::Missing`] (with how to install it) when ffmpeg — `ffmpeg` at `path`, or
/// on the `PATH` — does not run, and [`PosesError::NoEncoder`] when it cannot write `out`'s
/// kind of video.
pub fn check_video_encoder(
    path: Option<&Path>,
    out: &Path,
    cancel: &Cancel,
) -> Result<(), PosesError> {
    Ffmpeg::new(path, DEFAULT_IDLE_LIMIT).check_encoder(out, cancel)
}

/// Encodes numbered PNG frames into a video with ffmpeg (`ffmpeg` at `path`, or on the
/// `PATH`), in its own process group like every engine here: `pattern` is
/// `folder/frame_%05d.png` numbered from 0, `out`'s extension picks the codec (`.webm`: VP9;
/// anything else: H.264), both sides of the frames must be even. `progress` gets the frames
/// encoded so far. Blocks until done, failed or cancelled.
pub fn encode_video(
    path: Option<&Path>,
    pattern: &Path,
    fps: f64,
    out: &Path,
    cancel: &Cancel,
    progress: &mut dyn FnMut(u64),
) -> Result<(), PosesError> {
    Ffmpeg::new(path, DEFAULT_IDLE_LIMIT).encode(pattern, fps, out, cancel, progress)
}

/// Stops a run from another thread.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Computes poses for `input` and writes the dataset to `out` (which must not exist, or be
/// an empty folder). `progress` hears every stage's progress on this thread. Blocks until
/// done, failed or cancelled; on failure or cancel nothing is left behind.
pub fn compute_poses(
    input: &Input,
    out: &Path,
    options: &Options,
    cancel: &Cancel,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, PosesError> {
    if let Input::Photos { folder, photos } = input
        && photos.len() < MIN_PHOTOS
    {
        return Err(PosesError::Input {
            path: folder.clone(),
            message: format!(
                "holds {} photo{}: poses need at least {MIN_PHOTOS} overlapping photos, twenty \
                 or more make a good scene",
                photos.len(),
                if photos.len() == 1 { "" } else { "s" },
            ),
        });
    }
    let colmap = Colmap::locate(options.colmap.as_deref(), options.idle_limit, cancel)?;
    let work = WorkFolder::create(out)?;
    let images_dir = work.path.join("images");
    std::fs::create_dir(&images_dir).map_err(|e| PosesError::io(&images_dir, e))?;
    let mut run = Run { progress, stage_seconds: Vec::new(), warnings: Vec::new() };

    // Images, each in a camera group.
    let (groups, matcher) = match input {
        Input::Video(file) => {
            let ffmpeg = Ffmpeg::new(options.ffmpeg.as_deref(), options.idle_limit);
            let frames = run.video_frames(&ffmpeg, file, options, &work.path, cancel)?;
            (vec![(CameraPrior { params: None }, frames)], Matcher::Sequential)
        }
        Input::Photos { photos, .. } => {
            (run.photos(photos, &images_dir, options.max_image_size, cancel)?, Matcher::Exhaustive)
        }
    };
    let matcher = options.matcher.unwrap_or(matcher);
    let image_count: usize = groups.iter().map(|(_, names)| names.len()).sum();

    let database = work.path.join("database.db");
    run.stage(Stage::Features, |report| {
        let mut offset = 0;
        for (index, (camera, names)) in groups.iter().enumerate() {
            let list = work.path.join(format!("camera_{index}.txt"));
            std::fs::write(&list, names.join("\n")).map_err(|e| PosesError::io(&list, e))?;
            colmap.extract_features(
                (&database, &images_dir, &list),
                camera,
                cancel,
                &mut |done| {
                    report(offset + done, image_count as u64);
                },
            )?;
            offset += names.len() as u64;
        }
        Ok(())
    })?;
    run.stage(Stage::Matching, |report| {
        colmap.match_features(&database, matcher, cancel, &mut |done, total| report(done, total))
    })?;
    let models = work.path.join("models");
    std::fs::create_dir(&models).map_err(|e| PosesError::io(&models, e))?;
    run.stage(Stage::Mapping, |report| {
        colmap.map((&database, &images_dir, &models), cancel, &mut |registered| {
            report(registered, image_count as u64);
        })
    })?;

    let found = colmap::models(&models)?;
    let Some((largest, registered)) = found.first().cloned() else {
        return Err(too_few_registered(0, image_count));
    };
    run.check_registered(registered, image_count)?;
    let other_models: Vec<usize> = found.iter().skip(1).map(|(_, count)| *count).collect();
    if !other_models.is_empty() {
        run.warnings.push(format!(
            "COLMAP made {} separate models: kept the largest ({registered} images); the others \
             ({} images) could not be joined to it, so those views are left out. The capture \
             has parts that do not overlap: photos that link them would join them",
            found.len(),
            other_models.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    let sparse = work.path.join("sparse");
    std::fs::create_dir(&sparse).map_err(|e| PosesError::io(&sparse, e))?;
    let kept = sparse.join("0");
    std::fs::rename(&largest, &kept).map_err(|e| PosesError::io(&kept, e))?;
    let dataset = work.finish(out)?;
    Ok(Report {
        dataset,
        images: image_count,
        registered,
        cameras: groups.len(),
        other_models,
        matcher,
        colmap_version: colmap.version,
        stage_seconds: run.stage_seconds,
        warnings: run.warnings,
    })
}

/// A run's progress reporting, stage times and warnings.
struct Run<'a> {
    progress: &'a mut dyn FnMut(Progress),
    stage_seconds: Vec<(Stage, f64)>,
    warnings: Vec<String>,
}

impl Run<'_> {
    /// Runs one stage, timing it; `body` reports (done, total).
    fn stage<T>(
        &mut self,
        stage: Stage,
        body: impl FnOnce(&mut dyn FnMut(u64, u64)) -> Result<T, PosesError>,
    ) -> Result<T, PosesError> {
        let start = Instant::now();
        let progress = &mut *self.progress;
        progress(Progress { stage, done: 0, total: 0 });
        let result = body(&mut |done, total| progress(Progress { stage, done, total }))?;
        self.stage_seconds.push((stage, start.elapsed().as_secs_f64()));
        Ok(result)
    }

    /// Prepares the photos into `images`, grouped by camera: (prior, names) per group.
    fn photos(
        &mut self,
        photos: &[PathBuf],
        images: &Path,
        max_size: u32,
        cancel: &Cancel,
    ) -> Result<Vec<(CameraPrior, Vec<String>)>, PosesError> {
        let prepared = self.stage(Stage::Images, |report| {
            let mut prepared = Vec::with_capacity(photos.len());
            for chunk in photos.chunks(PREPARE_CHUNK) {
                if cancel.is_cancelled() {
                    return Err(PosesError::Cancelled);
                }
                let done: Vec<images::Prepared> = chunk
                    .par_iter()
                    .map(|photo| images::prepare(photo, images, max_size))
                    .collect::<Result<_, _>>()?;
                prepared.extend(done);
                report(prepared.len() as u64, photos.len() as u64);
            }
            Ok(prepared)
        })?;
        let groups = images::camera_groups(prepared, images)?;
        Ok(groups
            .into_iter()
            .map(|group| {
                let (cx, cy) = (f64::from(group.width) / 2.0, f64::from(group.height) / 2.0);
                let prior = CameraPrior { params: group.focal_px.map(|f| [f, cx, cy, 0.0]) };
                (prior, group.names)
            })
            .collect())
    }

    /// Cuts the video's frames into `work/images`: their names, in order.
    fn video_frames(
        &mut self,
        ffmpeg: &Ffmpeg,
        file: &Path,
        options: &Options,
        work: &Path,
        cancel: &Cancel,
    ) -> Result<Vec<String>, PosesError> {
        let info = ffmpeg.probe(file, cancel)?;
        let plan = FramePlan::new(info, options);
        let samples = work.join("samples");
        std::fs::create_dir(&samples).map_err(|e| PosesError::io(&samples, e))?;
        let duration_ms = (info.duration_seconds * 1000.0) as u64;
        self.stage(Stage::Frames, |report| {
            ffmpeg.extract(file, (plan, options.max_image_size), &samples, cancel, &mut |ms| {
                report(ms.min(duration_ms), duration_ms);
            })
        })?;
        let images = work.join("images");
        let kept = self.stage(Stage::Sharpest, |report| {
            video::keep_sharpest(&samples, plan.window, &images, cancel, report)
        })?;
        std::fs::remove_dir_all(&samples).map_err(|e| PosesError::io(&samples, e))?;
        if kept < MIN_PHOTOS {
            return Err(PosesError::Input {
                path: file.to_path_buf(),
                message: format!(
                    "gave {kept} frame{} at {:.2} a second: too few for poses (a longer \
                     video, or a higher --fps)",
                    if kept == 1 { "" } else { "s" },
                    plan.kept_rate
                ),
            });
        }
        Ok((1..=kept).map(|i| format!("frame_{i:06}.jpg")).collect())
    }

    fn check_registered(&mut self, registered: usize, images: usize) -> Result<(), PosesError> {
        let fraction = registered as f64 / images.max(1) as f64;
        if fraction < MIN_REGISTERED {
            return Err(too_few_registered(registered, images));
        }
        if fraction < WARN_REGISTERED {
            self.warnings.push(format!(
                "COLMAP gave poses to {registered} of {images} images ({:.0}%): the others are \
                 left out of the dataset. Likely causes: blurred images, too little overlap \
                 with their neighbours, or exposure changes",
                100.0 * fraction
            ));
        }
        Ok(())
    }
}

fn too_few_registered(registered: usize, images: usize) -> PosesError {
    PosesError::TooFewRegistered {
        registered,
        images,
        percent: 100.0 * registered as f64 / images.max(1) as f64,
        min_percent: 100.0 * MIN_REGISTERED,
    }
}

/// `OUT.incomplete`: where a run writes until its dataset is whole. Removed on drop unless
/// renamed to the output.
struct WorkFolder {
    path: PathBuf,
    /// Renamed to the output: nothing to remove.
    finished: bool,
}

impl WorkFolder {
    fn create(out: &Path) -> Result<Self, PosesError> {
        let refuse =
            |message: &str| PosesError::Input { path: out.to_path_buf(), message: message.into() };
        let Some(name) = out.file_name() else {
            return Err(refuse("not a folder name to write the dataset to"));
        };
        let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(refuse("the folder it would go in does not exist"));
        }
        if out.exists() {
            let empty = out.is_dir()
                && std::fs::read_dir(out).map_err(|e| PosesError::io(out, e))?.next().is_none();
            if !empty {
                return Err(PosesError::OutputExists { path: out.to_path_buf() });
            }
        }
        let path = out.with_file_name(format!("{}.incomplete", name.to_string_lossy()));
        let marker = path.join(MARKER);
        if path.exists() {
            // Left by a run that was killed: ours to remove; anything else, or a run that is
            // still going, is not.
            let owner = std::fs::read_to_string(&marker).ok();
            let alive = owner
                .as_deref()
                .and_then(|text| text.trim().parse().ok())
                .is_some_and(process_alive);
            if owner.is_none() || alive {
                return Err(PosesError::OutputExists { path });
            }
            std::fs::remove_dir_all(&path).map_err(|e| PosesError::io(&path, e))?;
        }
        // `create_dir`, not `_all`: of two runs racing for the folder, one gets it.
        std::fs::create_dir(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => PosesError::OutputExists { path: path.clone() },
            _ => PosesError::io(&path, e),
        })?;
        let folder = Self { path, finished: false };
        // The marker holds our process id: a later run removes the folder only once we are gone.
        std::fs::write(&marker, format!("{}\n", std::process::id()))
            .map_err(|e| PosesError::io(&marker, e))?;
        Ok(folder)
    }

    /// Leaves only `images/` and `sparse/` and renames the folder to `out`.
    fn finish(mut self, out: &Path) -> Result<PathBuf, PosesError> {
        let entries = std::fs::read_dir(&self.path).map_err(|e| PosesError::io(&self.path, e))?;
        for entry in entries {
            let path = entry.map_err(|e| PosesError::io(&self.path, e))?.path();
            let keep = path.file_name().is_some_and(|n| n == "images" || n == "sparse");
            if keep {
                continue;
            }
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| PosesError::io(&path, e))?;
        }
        if out.is_dir() {
            std::fs::remove_dir(out).map_err(|e| PosesError::io(out, e))?;
        }
        std::fs::rename(&self.path, out).map_err(|e| PosesError::io(out, e))?;
        self.finished = true;
        Ok(out.to_path_buf())
    }
}

/// Whether process `pid` still runs (where that can be asked; elsewhere assumed gone).
fn process_alive(pid: i32) -> bool {
    #[cfg(unix)]
    {
        // Another user's process answers EPERM: it runs all the same.
        rustix::process::Pid::from_raw(pid).is_some_and(|pid| {
            !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH))
        })
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

impl Drop for WorkFolder {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            log::warn!("cannot remove {}: {e}", self.path.display());
        }
    }
}
