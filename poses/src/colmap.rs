//! COLMAP, driven from the outside: which option names this version uses, its commands, the
//! progress lines it prints, and the models its mapper writes.
//!
//! Checked against COLMAP 3.8's sources and output: without `use_gpu 0` extraction and
//! matching open an OpenGL context and fail headless; 4.x renamed the option groups
//! `SiftExtraction` / `SiftMatching` to `FeatureExtraction` / `FeatureMatching`, so we read
//! `feature_extractor -h` to know which; `--log_to_stderr 1` keeps glog from writing log files
//! into the temporary folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::{Engine, Finished};
use crate::{Cancel, Matcher, PosesError};

/// How to get COLMAP on this system.
pub(crate) const ADVICE: &str = if cfg!(target_os = "macos") {
    "Install it with Homebrew (`brew install colmap`) or say where it is: `--colmap PATH` on \
     the command line, the COLMAP field in the window"
} else if cfg!(windows) {
    "Install it from https://github.com/colmap/colmap/releases (unzip, then point at \
     COLMAP.bat) or say where it is: `--colmap PATH` on the command line, the COLMAP field in \
     the window"
} else {
    "Install it with your distribution's package (Debian, Ubuntu: `sudo apt install \
     colmap`; Fedora: `sudo dnf install colmap`; Arch: from the AUR) or say where it is: \
     `--colmap PATH` on the command line, the COLMAP field in the window"
};

/// Lines COLMAP's mapper prints when no two images overlap enough to start from: no pair
/// passed its checks, or no pair matched at all.
const NO_INITIAL_PAIR: [&str; 2] =
    ["No good initial image pair found", "No images with matches found in the database"];

/// The COLMAP we found, and the names its options have.
pub(crate) struct Colmap {
    engine: Engine,
    /// As COLMAP prints it, e.g. `3.8`.
    pub version: String,
    /// Option group of feature extraction: `SiftExtraction` (3.x) or `FeatureExtraction` (4.x).
    extraction: &'static str,
    /// Option group of feature matching: `SiftMatching` (3.x) or `FeatureMatching` (4.x).
    matching: &'static str,
}

/// A camera that a group of images shares: its model's parameters when the images tell the
/// focal length, otherwise COLMAP's own guess.
pub(crate) struct CameraPrior {
    /// `SIMPLE_RADIAL`'s `f, cx, cy, k` in pixels.
    pub params: Option<[f64; 4]>,
}

impl Colmap {
    /// Finds COLMAP (`path`, or `colmap` on the `PATH`) and reads its version and option names.
    pub fn locate(
        path: Option<&Path>,
        idle_limit: Duration,
        cancel: &Cancel,
    ) -> Result<Self, PosesError> {
        let engine = Engine::new("COLMAP", path.or(Some(Path::new("colmap"))), ADVICE, idle_limit);
        let mut version = None;
        engine.run("COLMAP (its help)", &["-h"], cancel, &mut |line| {
            if version.is_none() {
                version = parse_version(line);
            }
        })?;
        let mut groups = None;
        let what = "COLMAP (feature_extractor's help)";
        let help = engine.run(what, &["feature_extractor", "-h"], cancel, &mut |line| {
            if line.contains("--SiftExtraction.use_gpu") {
                groups = Some(("SiftExtraction", "SiftMatching"));
            } else if line.contains("--FeatureExtraction.use_gpu") {
                groups = Some(("FeatureExtraction", "FeatureMatching"));
            }
        })?;
        let version = version.unwrap_or_else(|| "of an unknown version".to_owned());
        let Some((extraction, matching)) = groups else {
            return Err(PosesError::Failed {
                what: format!("COLMAP {version} at {}", engine.path.display()),
                status: help.status.to_string(),
                tail: "its feature_extractor names no `use_gpu` option (neither \
                       SiftExtraction nor FeatureExtraction): is it COLMAP 3.x or 4.x?"
                    .to_owned(),
            });
        };
        Ok(Self { engine, version, extraction, matching })
    }

    /// Extracts features of the images listed in `list` (names relative to `images`), all
    /// sharing one new camera.
    pub fn extract_features(
        &self,
        (database, images, list): (&Path, &Path, &Path),
        camera: &CameraPrior,
        cancel: &Cancel,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), PosesError> {
        let mut args = vec![
            "feature_extractor".into(),
            "--database_path".into(),
            path_arg(database),
            "--image_path".into(),
            path_arg(images),
            "--image_list_path".into(),
            path_arg(list),
            "--ImageReader.camera_model".into(),
            "SIMPLE_RADIAL".into(),
            "--ImageReader.single_camera".into(),
            "1".into(),
            format!("--{}.use_gpu", self.extraction),
            "0".into(),
            "--log_to_stderr".into(),
            "1".into(),
        ];
        if let Some([f, cx, cy, k]) = camera.params {
            args.push("--ImageReader.camera_params".into());
            args.push(format!("{f},{cx},{cy},{k}"));
        }
        let what = self.stage("feature extraction");
        let finished = self.engine.run(&what, &args, cancel, &mut |line| {
            if let Some((done, _)) = bracketed_count(line, "Processed file [") {
                progress(done);
            }
        })?;
        check(&finished, &what)
    }

    /// Matches features between images: every pair, or each image with its neighbours in
    /// name order. `progress` gets (done, total).
    pub fn match_features(
        &self,
        database: &Path,
        matcher: Matcher,
        cancel: &Cancel,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), PosesError> {
        let command = match matcher {
            Matcher::Exhaustive => "exhaustive_matcher",
            Matcher::Sequential => "sequential_matcher",
        };
        let args = [
            command.to_owned(),
            "--database_path".into(),
            path_arg(database),
            format!("--{}.use_gpu", self.matching),
            "0".into(),
            "--log_to_stderr".into(),
            "1".into(),
        ];
        let what = self.stage("feature matching");
        let finished = self.engine.run(&what, &args, cancel, &mut |line| {
            if let Some((done, total)) = matching_progress(line) {
                progress(done, total);
            }
        })?;
        check(&finished, &what)
    }

    /// Runs the incremental mapper into `models` (one folder a model). `progress` gets the
    /// images registered so far in the model being built.
    pub fn map(
        &self,
        (database, images, models): (&Path, &Path, &Path),
        cancel: &Cancel,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), PosesError> {
        let args = [
            "mapper".into(),
            "--database_path".into(),
            path_arg(database),
            "--image_path".into(),
            path_arg(images),
            "--output_path".into(),
            path_arg(models),
            "--log_to_stderr".into(),
            "1".into(),
        ];
        let mut no_initial_pair = false;
        let what = self.stage("mapper");
        let finished = self.engine.run(&what, &args, cancel, &mut |line| {
            if NO_INITIAL_PAIR.iter().any(|marker| line.contains(marker)) {
                no_initial_pair = true;
            } else if line.contains("Initializing with image pair") {
                progress(2);
            } else if let Some(registered) = registered_count(line) {
                progress(registered);
            }
        })?;
        if no_initial_pair && largest_model(models)?.is_none() {
            return Err(PosesError::NoInitialPair);
        }
        check(&finished, &what)
    }

    /// How errors name a stage: `COLMAP 3.8 (mapper)`.
    fn stage(&self, name: &str) -> String {
        format!("COLMAP {} ({name})", self.version)
    }
}

/// A stage's run that ended by itself: fine, or its failure named `what`.
fn check(finished: &Finished, what: &str) -> Result<(), PosesError> {
    if finished.status.success() { Ok(()) } else { Err(finished.failure(what)) }
}

/// COLMAP's version from the first line of `colmap -h` (`COLMAP 3.8 -- Structure-from-Motion…`).
fn parse_version(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix("COLMAP ")?;
    let version = rest.split_whitespace().next()?;
    version.starts_with(|c: char| c.is_ascii_digit()).then(|| version.to_owned())
}

/// `(a, b)` from `…marker a/b]…`, e.g. `Processed file [3/23]`.
fn bracketed_count(line: &str, marker: &str) -> Option<(u64, u64)> {
    let start = line.find(marker)? + marker.len();
    let (numbers, _) = line[start..].split_once(']')?;
    let (done, total) = numbers.split_once('/')?;
    Some((done.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// Progress of either matcher: `Matching block [a/A, b/B]` (exhaustive: blocks of images
/// against blocks, row by row) or `Matching image [i/N]` (sequential).
fn matching_progress(line: &str) -> Option<(u64, u64)> {
    if let Some(image) = bracketed_count(line, "Matching image [") {
        return Some(image);
    }
    let marker = "Matching block [";
    let start = line.find(marker)? + marker.len();
    let (numbers, _) = line[start..].split_once(']')?;
    let (row, column) = numbers.split_once(',')?;
    let (row, rows) = row.split_once('/')?;
    let (column, columns) = column.split_once('/')?;
    let [row, rows, column, columns]: [u64; 4] = [row, rows, column, columns]
        .map(|n| n.trim().parse().ok())
        .into_iter()
        .collect::<Option<Vec<_>>>()?
        .try_into()
        .ok()?;
    Some(((row.checked_sub(1)? * columns) + column, rows * columns))
}

/// `n` from the mapper's `Registering image #id (n)`: images in the model so far.
fn registered_count(line: &str) -> Option<u64> {
    let marker = "Registering image #";
    let rest = &line[line.find(marker)? + marker.len()..];
    let (_, count) = rest.split_once('(')?;
    count.split_once(')')?.0.trim().parse().ok()
}

/// The models the mapper wrote (`models/0`, `models/1`, …, numbered by when they were made,
/// not by size), largest first: (folder, registered images).
pub(crate) fn models(models: &Path) -> Result<Vec<(PathBuf, usize)>, PosesError> {
    let entries = match std::fs::read_dir(models) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(PosesError::io(models, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let folder = entry.map_err(|e| PosesError::io(models, e))?.path();
        if let Some(count) = registered_images(&folder)? {
            found.push((folder, count));
        }
    }
    // Largest first; among equals the one made first.
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| model_number(&a.0).cmp(&model_number(&b.0))));
    Ok(found)
}

fn largest_model(folder: &Path) -> Result<Option<(PathBuf, usize)>, PosesError> {
    Ok(models(folder)?.into_iter().next())
}

fn model_number(folder: &Path) -> u64 {
    folder.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse().ok()).unwrap_or(u64::MAX)
}

/// Registered images of a binary model: the count `images.bin` starts with (a little-endian
/// u64). `None` for a folder that holds no model.
fn registered_images(folder: &Path) -> Result<Option<usize>, PosesError> {
    let file = folder.join("images.bin");
    match std::fs::read(&file) {
        Ok(bytes) => {
            let count = bytes.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
            Ok(count.map(|c| usize::try_from(c).unwrap_or(usize::MAX)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PosesError::io(file, e)),
    }
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as COLMAP 3.8 prints them (and 4.x, behind glog's prefix).
    #[test]
    fn progress_lines() {
        assert_eq!(bracketed_count("Processed file [3/23]", "Processed file ["), Some((3, 23)));
        assert_eq!(
            bracketed_count(
                "I20250101 12:00:00.1 feature_extraction.cc:257] Processed file [12/40]",
                "Processed file ["
            ),
            Some((12, 40))
        );
        assert_eq!(matching_progress("Matching block [1/1, 1/1] in 16.495s"), Some((1, 1)));
        assert_eq!(matching_progress("Matching block [2/3, 1/3] in 3.1s"), Some((4, 9)));
        assert_eq!(matching_progress("Matching image [7/29] in 0.9s"), Some((7, 29)));
        assert_eq!(registered_count("Registering image #6 (3)"), Some(3));
        assert_eq!(registered_count("  => Image sees 120 / 300 points"), None);
        assert_eq!(parse_version("COLMAP 3.8 -- Structure-from-Motion"), Some("3.8".into()));
        assert_eq!(parse_version("COLMAP 4.0.1 (Commit 1a2b)"), Some("4.0.1".into()));
        assert_eq!(parse_version("Usage:"), None);
    }
}
