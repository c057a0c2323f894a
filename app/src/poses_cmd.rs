//! `splatforge poses INPUT`: camera poses for a folder of photos or a video, by COLMAP, as a
//! dataset that `train` and the window open. Ctrl+C cancels: the engines stop and nothing is
//! left behind.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use splat_poses::{Cancel, Input, Matcher, Options, PoseComparison, Progress, Report, Stage};
use splat_trainer::dataset::{self, LoadOptions};

/// `splatforge poses`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PosesArgs {
    /// A folder of photos (.jpg, .jpeg, .png; directly or in images/) or a video file.
    pub input: PathBuf,
    /// The dataset folder to write (default: the input's name + "_dataset", beside it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Which image pairs are matched: exhaustive (every pair; photos) or sequential
    /// (neighbours in name order; video frames) [default: by the input].
    #[arg(long, value_parser = parse_matcher)]
    pub matcher: Option<Matcher>,
    /// Longest image side, in pixels, of the images COLMAP sees and the dataset keeps.
    #[arg(long, default_value_t = 1600, value_parser = clap::value_parser!(u32).range(100..))]
    pub max_image_size: u32,
    /// Frames kept a second of video (each the sharpest of a few around it).
    #[arg(long, default_value_t = 2.0, value_parser = crate::render_video::parse_positive)]
    pub fps: f64,
    /// Frames kept from a video at most (a long video keeps fewer a second).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(3..))]
    pub max_frames: u64,
    /// COLMAP's executable [default: colmap on the PATH].
    #[arg(long)]
    pub colmap: Option<PathBuf>,
    /// ffmpeg's executable, ffprobe beside it [default: both on the PATH].
    #[arg(long)]
    pub ffmpeg: Option<PathBuf>,
    /// Seconds an engine (COLMAP, ffmpeg) may print nothing and use no CPU time before it is
    /// stopped and the run fails, naming the stage (Linux).
    #[arg(long, value_name = "SECONDS", default_value_t = splat_poses::DEFAULT_IDLE_LIMIT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_limit: u64,
    /// Compare the poses with this dataset's own (same image names) and print how far
    /// they are after a similarity alignment: for benchmarks.
    #[arg(long)]
    pub compare: Option<PathBuf>,
    /// Write the report (and the comparison) as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn parse_matcher(text: &str) -> Result<Matcher, String> {
    Matcher::from_name(text.trim()).ok_or_else(|| format!("{text:?}: exhaustive or sequential"))
}

pub fn run(args: &PosesArgs) -> anyhow::Result<()> {
    let input = Input::detect(&args.input)?;
    let out = args.out.clone().unwrap_or_else(|| splat_poses::default_output(&args.input));
    let options = Options {
        colmap: args.colmap.clone(),
        ffmpeg: args.ffmpeg.clone(),
        matcher: args.matcher,
        max_image_size: args.max_image_size,
        frames_per_second: args.fps,
        max_frames: usize::try_from(args.max_frames).unwrap_or(usize::MAX),
        idle_limit: std::time::Duration::from_secs(args.idle_limit),
    };
    // What would fail after minutes of COLMAP is refused before it starts.
    if let Some(reference) = args.compare.as_ref().filter(|r| !dataset::has_poses(r)) {
        bail!("--compare {}: not a dataset with camera poses", reference.display());
    }
    if let Some(json) = &args.json {
        let parent = json.parent().filter(|p| !p.as_os_str().is_empty());
        if parent.is_some_and(|p| !p.is_dir()) {
            bail!("--json {}: the folder it would go in does not exist", json.display());
        }
    }
    let cancel = Cancel::default();
    let on_signal = cancel.clone();
    ctrlc::set_handler(move || on_signal.cancel()).context("cannot catch Ctrl+C")?;

    eprintln!("camera poses for {} → {}", input.describe(), out.display());
    let mut bars = StageBars::new();
    let report = splat_poses::compute_poses(&input, &out, &options, &cancel, &mut |progress| {
        bars.update(progress);
    });
    bars.finish(report.is_ok());
    let report = report?;
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    eprintln!("{}", report.summary());
    let comparison = match &args.compare {
        Some(reference) => Some(compare(&report.dataset, reference)?),
        None => None,
    };
    if let Some(path) = &args.json {
        let value = report_json(&report, comparison.as_ref());
        std::fs::write(path, serde_json::to_string_pretty(&value)? + "\n")
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    eprintln!(
        "dataset written to {}; train it with: splatforge train {}",
        out.display(),
        out.display()
    );
    Ok(())
}

/// Compares the poses just computed with `reference`'s own COLMAP or transforms.json poses,
/// by image name, and prints how far they are.
fn compare(ours: &Path, reference: &Path) -> anyhow::Result<PoseComparison> {
    // Only the poses matter: the smallest images that load.
    let options = LoadOptions { max_resolution: 16, ..LoadOptions::default() };
    let poses = |path: &Path| -> anyhow::Result<Vec<(String, glam::DMat4)>> {
        let data = dataset::load_dataset(path, &options)
            .with_context(|| format!("cannot load {} to compare", path.display()))?;
        Ok(data.views().map(|v| (v.name.clone(), v.camera.world_from_camera.as_dmat4())).collect())
    };
    let (ours, reference_poses) = (poses(ours)?, poses(reference)?);
    let comparison = splat_poses::compare_poses(&ours, &reference_poses).with_context(|| {
        format!("fewer than three images in both this dataset and {}", reference.display())
    })?;
    eprintln!(
        "against {}'s own poses ({} images in both, {} in it): rotation error median {:.3}°, \
         max {:.3}°; camera centre error median {:.2}%, max {:.2}% of the cameras' extent",
        reference.display(),
        comparison.matched,
        reference_poses.len(),
        comparison.median_rotation_deg(),
        comparison.max_rotation_deg(),
        100.0 * comparison.median_centre_error(),
        100.0 * comparison.max_centre_error(),
    );
    Ok(comparison)
}

fn report_json(report: &Report, comparison: Option<&PoseComparison>) -> serde_json::Value {
    json!({
        "dataset": report.dataset,
        "images": report.images,
        "registered": report.registered,
        "cameras": report.cameras,
        "other_models": report.other_models,
        "matcher": report.matcher.name(),
        "colmap_version": report.colmap_version,
        "stage_seconds": report
            .stage_seconds
            .iter()
            .map(|(stage, seconds)| (stage.name().to_owned(), json!(seconds)))
            .collect::<serde_json::Map<_, _>>(),
        "warnings": report.warnings,
        "comparison": comparison.map(|c| json!({
            "matched": c.matched,
            "median_rotation_deg": c.median_rotation_deg(),
            "max_rotation_deg": c.max_rotation_deg(),
            "median_centre_error": c.median_centre_error(),
            "max_centre_error": c.max_centre_error(),
            "scale": c.scale,
        })),
    })
}

/// A progress bar a stage on a terminal; otherwise a line at each tenth of a stage.
struct StageBars {
    terminal: bool,
    current: Option<(Stage, Instant, Option<ProgressBar>, u64)>,
}

impl StageBars {
    fn new() -> Self {
        Self { terminal: std::io::stderr().is_terminal(), current: None }
    }

    fn update(&mut self, progress: Progress) {
        if self.current.as_ref().is_none_or(|(stage, ..)| *stage != progress.stage) {
            self.finish(true);
            let bar = self.terminal.then(|| {
                let bar = ProgressBar::new(progress.total.max(1));
                bar.set_style(
                    ProgressStyle::with_template("{msg:34} {bar:30} {pos}/{len} {elapsed}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_message(progress.stage.label());
                bar
            });
            if bar.is_none() {
                eprintln!("{}…", progress.stage.label());
            }
            self.current = Some((progress.stage, Instant::now(), bar, 0));
        }
        let Some((_, _, bar, last_tenth)) = &mut self.current else { return };
        match bar {
            Some(bar) => {
                bar.set_length(progress.total.max(1));
                bar.set_position(progress.done);
            }
            None if progress.total > 0 => {
                let tenth = progress.done * 10 / progress.total;
                if tenth > *last_tenth {
                    *last_tenth = tenth;
                    eprintln!("  {}/{}", progress.done, progress.total);
                }
            }
            None => {}
        }
    }

    /// Ends the current stage's bar; `done`: it finished (its time is printed).
    fn finish(&mut self, done: bool) {
        if let Some((stage, start, bar, _)) = self.current.take() {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            if done {
                eprintln!("{} done in {:.1} s", stage.label(), start.elapsed().as_secs_f64());
            }
        }
    }
}
