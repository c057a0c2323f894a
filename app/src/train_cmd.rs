//! `splatforge train DATASET`: a headless training run through the trainer task, with a
//! progress bar, writing `splats.ply` and `metrics.json` (and checkpoints) into the output
//! folder.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use splat_trainer::appearance::{Compensation, ViewAppearance};
use splat_trainer::checkpoint;
use splat_trainer::dataset::LoadOptions;
use splat_trainer::densify::{CompactConfig, DefaultConfig, McmcConfig, Strategy};
use splat_trainer::formats::Loaded;
use splat_trainer::formats::filter::Filter;
use splat_trainer::loss::LossWeights;
use splat_trainer::render::Camera;
use splat_trainer::render::view_controller::scene_up;
use splat_trainer::render::{GpuContext, ShPrecision};
use splat_trainer::task::{Command, EXPORT_EXTENSIONS, Event, TaskHandle, write_atomically};
use splat_trainer::train::{
    DEFAULT_ALPHA_LOSS_WEIGHT, EvalStats, LearningRates, Progressive, StepMetrics, TrainConfig,
    Transparency,
};
use splatforge::human_bytes;

pub struct TrainArgs {
    pub dataset: Option<PathBuf>,
    pub init: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub steps: u32,
    /// `None`: the default, or the checkpoint's when resuming (so for the background).
    pub max_resolution: Option<u32>,
    pub strategy: String,
    pub max_splats: u32,
    pub sh_degree: u32,
    pub sh_precision: ShPrecision,
    pub eval_every: u32,
    pub memory_budget: Option<u64>,
    pub checkpoint_every: u32,
    /// Extensions of the files the trained splats are written to (`splats.EXT`).
    pub export: Vec<String>,
    /// Level the exports (turn the cameras' up to −y).
    pub level_exports: bool,
    pub out: Option<PathBuf>,
    pub seed: u64,
    pub background: Option<[f32; 3]>,
    pub alpha_as_mask: bool,
    /// `None`: the default, or the checkpoint's when resuming.
    pub transparency: Option<Transparency>,
    /// Coarse-to-fine ([`Progressive::for_steps`]); `None`: off, or the checkpoint's when
    /// resuming.
    pub progressive: Option<bool>,
    /// Per-view appearance compensation; `None`: auto, or the checkpoint's when resuming.
    pub appearance: Option<Compensation>,
}

/// `--appearance`: `auto`, `on` or `off`.
pub fn parse_compensation(text: &str) -> Result<Compensation, String> {
    match text {
        "auto" => Ok(Compensation::Auto),
        "on" => Ok(Compensation::On),
        "off" => Ok(Compensation::Off),
        _ => Err(format!("'{text}': auto, on or off")),
    }
}

/// `--progressive`: `on` or `off`.
pub fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("'{text}': on or off")),
    }
}

/// `--transparency`: `random-background`, `alpha-loss`, `alpha-loss=WEIGHT` or `composite`.
pub fn parse_transparency(text: &str) -> Result<Transparency, String> {
    match text.split_once('=') {
        None if text == "random-background" => Ok(Transparency::RandomBackground),
        None if text == "composite" => Ok(Transparency::Composite),
        None if text == "alpha-loss" => Ok(Transparency::AlphaLoss(DEFAULT_ALPHA_LOSS_WEIGHT)),
        Some(("alpha-loss", weight)) => match weight.parse::<f32>() {
            Ok(w) if w.is_finite() && w >= 0.0 => Ok(Transparency::AlphaLoss(w)),
            _ => Err(format!("'{weight}': the alpha loss's weight is a number ≥ 0")),
        },
        _ => {
            Err(format!("'{text}': random-background, alpha-loss, alpha-loss=WEIGHT or composite"))
        }
    }
}

/// Drives the trainer task: load, start (or continue a checkpoint), follow its events.
pub fn run(args: &TrainArgs) -> anyhow::Result<()> {
    if args.steps == 0 {
        bail!("--steps must be at least 1");
    }
    if args.max_splats == 0 {
        bail!("--max-splats must be at least 1");
    }
    if let Some(other) = args.export.iter().find(|e| !EXPORT_EXTENSIONS.contains(&e.as_str())) {
        bail!("--export {other}: ply, spz, splat or sog");
    }
    let strategy = match args.strategy.as_str() {
        "compact" => Strategy::Compact(CompactConfig::default()),
        "3dgs" => Strategy::Default(DefaultConfig::default()),
        "mcmc" => Strategy::Mcmc(McmcConfig { cap: args.max_splats, ..McmcConfig::default() }),
        "default" => bail!("--strategy default: now named 3dgs (compact is the default)"),
        other => bail!("unknown strategy '{other}' (compact, 3dgs or mcmc)"),
    };
    if args.resume.is_some() && args.transparency.is_some() {
        bail!("--transparency: the checkpoint continues as it trained (leave the option out)");
    }
    if args.resume.is_some() && args.progressive.is_some() {
        bail!("--progressive: the checkpoint continues as it trained (leave the option out)");
    }
    if args.resume.is_some() && args.appearance.is_some() {
        bail!("--appearance: the checkpoint continues as it trained (leave the option out)");
    }
    let (dataset, options) = match (&args.dataset, &args.resume) {
        (dataset, Some(checkpoint)) => {
            let identity =
                checkpoint::load_dataset_identity(checkpoint).context("cannot resume")?;
            let dataset = dataset.clone().unwrap_or_else(|| PathBuf::from(&identity.path));
            (dataset, resume_options(args, identity.options)?)
        }
        (Some(dataset), None) => {
            splatforge::refuse_without_poses(dataset)?;
            (dataset.clone(), load_options(args))
        }
        (None, None) => bail!("give a DATASET to train on, or --resume CHECKPOINT"),
    };
    let out = args.out.clone().unwrap_or_else(|| default_out_dir(&dataset));
    std::fs::create_dir_all(&out)
        .with_context(|| format!("{}: cannot create output folder", out.display()))?;

    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let task = TaskHandle::spawn(ctx.clone())?;
    let background = options.background;
    task.send(Command::LoadDataset { path: dataset.clone(), options })?;
    if let Some(bytes) = args.memory_budget {
        task.send(Command::SetMemoryBudget { bytes })?;
    } else {
        eprintln!("memory budget: {}", splat_trainer::memory::default_budget(&ctx));
    }
    if let Some(init) = &args.init {
        task.send(Command::LoadInit { path: init.clone() })?;
    }
    if let Some(checkpoint) = &args.resume {
        task.send(Command::LoadCheckpoint { path: checkpoint.clone() })?;
        task.send(Command::SetSteps { steps: args.steps })?;
        task.send(Command::Resume)?;
    } else {
        let config = TrainConfig {
            steps: args.steps,
            sh_degree: args.sh_degree,
            sh_degree_interval: 1000,
            sh_precision: args.sh_precision,
            strategy,
            max_splats: args.max_splats,
            eval_every: args.eval_every,
            seed: args.seed,
            background,
            learning_rates: LearningRates::default(),
            loss_weights: LossWeights::default(),
            transparency: args.transparency.unwrap_or_default(),
            progressive: if args.progressive.unwrap_or(false) {
                Progressive::for_steps(args.steps)
            } else {
                Progressive::OFF
            },
            appearance: args.appearance.unwrap_or_default(),
        };
        task.send(Command::Start { config })?;
    }
    follow(&task, args, &out)
}

/// How to load the dataset of a new run: the options given, else the defaults.
fn load_options(args: &TrainArgs) -> LoadOptions {
    let defaults = LoadOptions::default();
    LoadOptions {
        max_resolution: args.max_resolution.unwrap_or(defaults.max_resolution),
        background: args.background.unwrap_or(defaults.background),
        alpha_as_mask: args.alpha_as_mask,
        ..defaults
    }
}

/// How to load the dataset of a resumed run: as the checkpoint's run loaded it (a checkpoint
/// written before it kept them: the options given). Options that contradict it are refused:
/// the run continues on the images it trained on.
fn resume_options(args: &TrainArgs, saved: Option<LoadOptions>) -> anyhow::Result<LoadOptions> {
    let Some(saved) = saved else { return Ok(load_options(args)) };
    if let Some(given) = args.max_resolution.filter(|&r| r != saved.max_resolution) {
        bail!(
            "--max-resolution {given}: the checkpoint trained at {} and continues there (leave \
             the option out)",
            saved.max_resolution
        );
    }
    // Exact: both were parsed from the same kind of text, and a checkpoint keeps f32 bits.
    #[expect(clippy::float_cmp, reason = "the same colour is the same bits")]
    let other_background = args.background.filter(|&c| c != saved.background);
    if let Some([r, g, b]) = other_background {
        let [r0, g0, b0] = saved.background;
        bail!(
            "--background {r},{g},{b}: the checkpoint trained over {r0},{g0},{b0} and continues \
             so (leave the option out)"
        );
    }
    if args.alpha_as_mask && !saved.alpha_as_mask {
        bail!("--alpha-as-mask: the checkpoint trained with alpha composited (leave it out)");
    }
    Ok(saved)
}

/// What [`follow`] gathers from a run's events for its summary and metrics.json.
struct Tally {
    evals: Vec<EvalPoint>,
    peak: u64,
    start: Instant,
    first_step: Option<u32>,
    /// Σ intersections and steps, for the mean GPU work of a step.
    intersections: (u64, u64),
    /// With per-view appearance, the transforms as of the last evaluation.
    appearance: Vec<ViewAppearance>,
    /// With `--level-exports`, the dataset cameras' up.
    up: Option<[f32; 3]>,
}

impl Tally {
    /// Exports the splats, prints the summary and writes metrics.json.
    fn finish(
        &self,
        task: &TaskHandle,
        args: &TrainArgs,
        out: &Path,
        progress: &Progress,
        step: u32,
    ) -> anyhow::Result<()> {
        let seconds = self.start.elapsed().as_secs_f64();
        let last = self.evals.last().map(|point| point.eval);
        let mut written = 0;
        let mut files = Vec::new();
        for extension in &args.export {
            let path = out.join(format!("splats.{extension}"));
            task.send(Command::Export {
                path: path.clone(),
                up: self.up,
                keep: Filter::default(),
            })?;
            written = wait_for_export(task)?;
            let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
            files.push(format!("splats.{extension} {}", human_bytes(bytes)));
        }
        let quality = last.map_or_else(String::new, |e| {
            format!(", eval PSNR {:.2} dB, SSIM {:.4}{}", e.psnr, e.ssim, compensated(&e))
        });
        progress.finish(&format!(
            "done: {step} steps, {written} splats{quality}; {} in {}",
            files.join(", "),
            out.display()
        ));
        let steps_run = step - self.first_step.unwrap_or(1) + 1;
        let (intersections, steps) = self.intersections;
        let mut metrics = json!({
            "steps": step,
            "seconds": seconds,
            "steps_per_second": f64::from(steps_run) / seconds,
            "final_psnr": last.map(|e| e.psnr),
            "final_ssim": last.map(|e| e.ssim),
            "final_compensated_psnr": last.and_then(|e| e.compensated_psnr),
            "splats": written,
            "intersections_per_step": intersections as f64 / steps.max(1) as f64,
            "peak_gpu_bytes": self.peak,
            "eval": self.evals.iter().map(EvalPoint::json).collect::<Vec<_>>(),
        });
        if !self.appearance.is_empty() {
            metrics["appearance"] = self
                .appearance
                .iter()
                .map(|v| json!({"view": v.name, "matrix": v.matrix, "offset": v.offset, "stops": v.stops()}))
                .collect::<Vec<_>>()
                .into();
        }
        write_atomically(
            &out.join("metrics.json"),
            serde_json::to_string_pretty(&metrics)?.as_bytes(),
        )
        .map_err(anyhow::Error::msg)
    }
}

/// " (compensated PSNR … dB: right halves)" where the views had two halves, else nothing.
fn compensated(eval: &EvalStats) -> String {
    eval.compensated_psnr
        .map_or_else(String::new, |p| format!(" (compensated PSNR {p:.2} dB: right halves)"))
}

/// One evaluation and where the run stood at it: for metrics.json's curve of the run.
struct EvalPoint {
    eval: EvalStats,
    splats: u32,
    /// Since the run started.
    seconds: f64,
    /// The most GPU memory the ledger has held so far.
    peak_gpu_bytes: u64,
}

impl EvalPoint {
    fn json(&self) -> serde_json::Value {
        let EvalPoint { eval, splats, seconds, peak_gpu_bytes } = self;
        json!({
            "step": eval.step,
            "psnr": eval.psnr,
            "ssim": eval.ssim,
            "compensated_psnr": eval.compensated_psnr,
            "splats": splats,
            "seconds": seconds,
            "peak_gpu_bytes": peak_gpu_bytes,
        })
    }
}

/// Follows the task's events to the end of the run, then exports and writes the metrics.
fn follow(task: &TaskHandle, args: &TrainArgs, out: &Path) -> anyhow::Result<()> {
    let progress = Progress::new(u64::from(args.steps));
    let mut tally = Tally {
        evals: Vec::new(),
        peak: 0,
        start: Instant::now(),
        first_step: None,
        intersections: (0, 0),
        appearance: Vec::new(),
        up: None,
    };
    let mut gpu = 0_u64;
    let mut latest = None;
    // The last step's splat count (a step's event comes before its evaluation's).
    let mut splats = 0;
    let checkpoint = out.join("checkpoint.ckpt");
    loop {
        let Some(event) = task.event_timeout(Duration::from_secs(1)) else { continue };
        match event {
            Event::Error(message) => bail!("{message}"),
            Event::RunFailed { message, kept, .. } => {
                // The last good step's splats where the task kept them, as a finished run's
                // would be written; the exit status still says the run failed.
                if kept.is_some() && !args.export.is_empty() {
                    let written = args.export.iter().try_for_each(|extension| {
                        let path = out.join(format!("splats.{extension}"));
                        task.send(Command::Export { path, up: tally.up, keep: Filter::default() })?;
                        wait_for_export(task).map(|_| ())
                    });
                    match written {
                        Ok(()) => bail!("{message} (written to {})", out.display()),
                        Err(e) => bail!("{message} (writing them failed: {e:#})"),
                    }
                }
                bail!("{message}");
            }
            Event::Warning(message) => progress.println(&format!("warning: {message}")),
            Event::RunStarted { splats, steps, .. } => {
                progress.println(&format!("training {splats} splats for {steps} steps"));
                tally.start = Instant::now();
            }
            Event::Memory(snapshot) => {
                tally.peak = tally.peak.max(snapshot.peak_bytes);
                gpu = snapshot.total_bytes;
            }
            Event::Eval(eval) => {
                progress.println(&format!(
                    "step {}: eval PSNR {:.2} dB, SSIM {:.4}{} over {} views",
                    eval.step,
                    eval.psnr,
                    eval.ssim,
                    compensated(&eval),
                    eval.views
                ));
                let seconds = tally.start.elapsed().as_secs_f64();
                tally.evals.push(EvalPoint { eval, splats, seconds, peak_gpu_bytes: tally.peak });
            }
            Event::Step(stats) => {
                tally.first_step.get_or_insert(stats.step);
                splats = stats.splats;
                tally.intersections.0 += u64::from(stats.intersections);
                tally.intersections.1 += 1;
                if args.checkpoint_every > 0 && stats.step % args.checkpoint_every == 0 {
                    task.send(Command::SaveCheckpoint {
                        path: checkpoint.clone(),
                        crop: splat_trainer::formats::filter::Filter::default(),
                    })?;
                }
                let loss = latest.map_or_else(String::new, |m: StepMetrics| {
                    format!("loss {:.4} | train PSNR {:.2} | ", m.loss, m.train_psnr)
                });
                progress.update(
                    stats.step,
                    &format!(
                        "{loss}{} splats | {}×{} px | GPU {}",
                        stats.splats,
                        stats.image_size[0],
                        stats.image_size[1],
                        human_bytes(gpu)
                    ),
                );
            }
            // A step's loss comes back a step or so after the step.
            Event::Metrics(m) => latest = Some(m),
            Event::Prediction { peak_bytes, budget_bytes, max_splats, .. } => {
                progress.println(&format!(
                    "predicted peak GPU memory {} for up to {max_splats} splats (budget {})",
                    human_bytes(peak_bytes),
                    human_bytes(budget_bytes)
                ));
            }
            Event::CheckpointSaved(path) => {
                progress.println(&format!("checkpoint: {}", path.display()));
            }
            Event::Appearance(views) => tally.appearance = views,
            Event::Finished { step } => return tally.finish(task, args, out, &progress, step),
            Event::DatasetLoaded { dataset, .. } if args.level_exports => {
                let cameras: Vec<Camera> = dataset.0.views().map(|v| v.camera).collect();
                tally.up = Some(scene_up(&cameras).to_array());
            }
            _ => {}
        }
    }
}

/// Waits for the export, and returns how many splats the written file holds.
fn wait_for_export(task: &TaskHandle) -> anyhow::Result<usize> {
    loop {
        match task.event_timeout(Duration::from_secs(1)) {
            Some(Event::Exported(path)) => {
                return match splat_trainer::formats::load_file(&path)? {
                    Loaded::Splats { splats, .. } => Ok(splats.len()),
                    Loaded::Points(_) => bail!("{}: export wrote points", path.display()),
                };
            }
            Some(Event::Error(message)) => bail!("{message}"),
            _ => {}
        }
    }
}

fn default_out_dir(dataset: &Path) -> PathBuf {
    let name =
        dataset.file_stem().map_or_else(|| "dataset".into(), |n| n.to_string_lossy().into_owned());
    dataset.with_file_name(format!("{name}_train"))
}

/// A progress bar on a terminal; plain lines (about 20 a run) otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    start: Instant,
}

impl Progress {
    fn new(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} {per_sec} ETA {eta} | {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        Self { bar, total, start: Instant::now() }
    }

    fn update(&self, step: u32, message: &str) {
        let step = u64::from(step);
        if let Some(bar) = &self.bar {
            bar.set_position(step);
            bar.set_message(message.to_string());
        } else if step % (self.total / 20).max(1) == 0 || step == self.total {
            let elapsed = self.start.elapsed().as_secs_f64();
            let rate = step as f64 / elapsed.max(1e-9);
            let eta = (self.total - step) as f64 / rate.max(1e-9);
            eprintln!(
                "step {step}/{} | {rate:.1} steps/s | ETA {eta:.0} s | {message}",
                self.total
            );
        }
    }

    fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn finish(&self, line: &str) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        eprintln!("{line}");
    }
}
