//! `splatforge train DATASET`: a headless training run through the trainer task, with a
//! progress bar, writing `splats.ply` and `metrics.json` (and checkpoints) into the output
//! folder.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::CommandFactory as _;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use splat_trainer::appearance::{Compensation, Decision, Evidence, ViewAppearance};
use splat_trainer::checkpoint;
use splat_trainer::config::{Progressive, SplatBudget, TrainConfig};
use splat_trainer::dataset::LoadOptions;
use splat_trainer::formats::Loaded;
use splat_trainer::formats::filter::Filter;
use splat_trainer::render::Camera;
use splat_trainer::render::GpuContext;
use splat_trainer::render::view_controller::scene_up;
use splat_trainer::task::{Command, EXPORT_EXTENSIONS, Event, TaskHandle, write_atomically};
use splat_trainer::train::{EvalStats, StepMetrics};
use splatforge::human_bytes;

/// `splatforge train`: what to train on and what to do with the run, and the run's settings
/// (how the capture is loaded, how it trains), each option written once, on its setting.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// A dataset folder or .zip (COLMAP or transforms.json); optional with --resume.
    pub dataset: Option<PathBuf>,
    /// A point cloud (.ply) to start from instead of the dataset's.
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Continue a checkpoint (to --steps steps in all) with its settings and its dataset's: an
    /// option that says otherwise is refused.
    #[arg(long, conflicts_with = "init")]
    pub resume: Option<PathBuf>,
    /// Cap the splat count so the predicted peak GPU memory fits this budget, e.g. 6GiB or
    /// bytes (default: from the adapter).
    #[arg(long, value_parser = splatforge::parse_bytes)]
    pub memory_budget: Option<u64>,
    /// Save a checkpoint (OUT/checkpoint.ckpt) every N steps (0: never).
    #[arg(long, default_value_t = 0)]
    pub checkpoint_every: u32,
    /// Formats of the trained splats, comma-separated: ply, spz, splat, sog (OUT/splats.EXT).
    #[arg(long, value_delimiter = ',', default_value = "ply")]
    pub export: Vec<String>,
    /// Level the exported splats: turned so that the cameras' up becomes −y, as web viewers
    /// expect (the checkpoint keeps the dataset's frame, so --init from a levelled export
    /// would not match the dataset's cameras).
    #[arg(long)]
    pub level_exports: bool,
    /// Output folder (default: the dataset's name + "_train", beside it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub load: LoadOptions,
    #[command(flatten)]
    pub config: TrainConfig,
    /// The options given on the command line (their ids and the text given), for --resume's
    /// check.
    #[arg(skip)]
    pub given: Vec<(String, String)>,
}

/// Drives the trainer task: load, start (or continue a checkpoint), follow its events.
pub fn run(args: &TrainArgs) -> anyhow::Result<()> {
    if let Some(other) = args.export.iter().find(|e| !EXPORT_EXTENSIONS.contains(&e.as_str())) {
        bail!("--export {other}: ply, spz, splat or sog");
    }
    let (dataset, options) = match (&args.dataset, &args.resume) {
        (dataset, Some(checkpoint)) => {
            let (identity, config) =
                checkpoint::load_settings(checkpoint).context("cannot resume")?;
            refuse_other_settings(args, identity.options.as_ref(), &config)?;
            let dataset = dataset.clone().unwrap_or_else(|| PathBuf::from(&identity.path));
            // A checkpoint written before it kept how its dataset was loaded: as given.
            (dataset, identity.options.unwrap_or_else(|| args.load.clone()))
        }
        (Some(dataset), None) => {
            splatforge::refuse_without_poses(dataset)?;
            (dataset.clone(), args.load.clone())
        }
        (None, None) => bail!("give a DATASET to train on, or --resume CHECKPOINT"),
    };
    let out = args.out.clone().unwrap_or_else(|| default_out_dir(&dataset));
    std::fs::create_dir_all(&out)
        .with_context(|| format!("{}: cannot create output folder", out.display()))?;

    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let task = TaskHandle::spawn(ctx.clone())?;
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
        task.send(Command::SetSteps { steps: args.config.steps })?;
        task.send(Command::Resume)?;
    } else {
        task.send(Command::Start { config: args.config.clone() })?;
    }
    follow(&task, args, &out)
}

/// A resumed run continues with the checkpoint's settings (but its steps) and loads its
/// dataset as the checkpoint's run did (`saved_load`; `None` in files written before they were
/// kept: then as given). An option given that says otherwise is refused, in one line naming
/// what the checkpoint has; one that says the same is no contradiction.
fn refuse_other_settings(
    args: &TrainArgs,
    saved_load: Option<&LoadOptions>,
    saved: &TrainConfig,
) -> anyhow::Result<()> {
    let groups = [
        (LoadOptions::command(), to_json(&args.load), saved_load.map(to_json)),
        (TrainConfig::command(), to_json(&args.config), Some(to_json(saved))),
    ];
    for (command, asked, kept) in &groups {
        let Some(kept) = kept else { continue };
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            let Some((_, text)) = args.given.iter().find(|(given, _)| given == id) else {
                continue;
            };
            if id == "steps"
                || agrees(id, &args.config, saved, setting(asked, id), setting(kept, id))
            {
                continue;
            }
            let flag = arg.get_long().unwrap_or(id);
            let given = if text.is_empty() { String::new() } else { format!(" {text}") };
            let had = match id {
                "strategy" => saved.strategy.to_string(),
                "progressive" => saved.progressive.to_string(),
                "appearance" => saved.appearance.to_string(),
                "transparency" => saved.transparency.to_string(),
                _ => setting(kept, id).map_or_else(|| "another value".to_owned(), show),
            };
            bail!(
                "--{flag}{given}: the checkpoint trained with {had} and continues so (leave the \
                 option out)"
            );
        }
    }
    Ok(())
}

/// Whether setting `id` as given (`asked`, from `config`) agrees with the checkpoint's (`kept`,
/// from `saved`). Four are what a run made of them, not what it was given: a strategy keeps its
/// name (its settings are the checkpoint's), `--progressive on` became stages, `--appearance
/// auto` became on or off, and `--max-splats` may have been lowered to fit the memory budget.
fn agrees(
    id: &str,
    config: &TrainConfig,
    saved: &TrainConfig,
    asked: Option<&Value>,
    kept: Option<&Value>,
) -> bool {
    match id {
        "strategy" => config.strategy.name() == saved.strategy.name(),
        "progressive" => {
            (config.progressive == Progressive::Off) == (saved.progressive == Progressive::Off)
        }
        "appearance" => {
            config.appearance == Compensation::Auto || config.appearance == saved.appearance
        }
        "max_splats" => {
            config.max_splats == SplatBudget::Auto
                || config.max_splats.count() >= saved.max_splats.count()
        }
        _ => asked == kept,
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The value of the setting `id` in settings as JSON: a field, or a field of a group of
/// settings flattened into them (the learning rates, the loss weights).
fn setting<'a>(settings: &'a Value, id: &str) -> Option<&'a Value> {
    let fields = settings.as_object()?;
    fields.get(id).or_else(|| fields.values().find_map(|group| group.as_object()?.get(id)))
}

/// A setting's value as a person reads it: a number, `r,g,b`, on or off.
fn show(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(values) => values.iter().map(show).collect::<Vec<_>>().join(","),
        Value::Bool(on) => if *on { "on" } else { "off" }.to_owned(),
        other => other.to_string(),
    }
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
    /// Whether the run compensates per-view appearance, and why.
    decision: Option<Decision>,
    /// With `--level-exports`, the dataset cameras' up.
    up: Option<[f32; 3]>,
}

impl Tally {
    fn new() -> Self {
        Self {
            evals: Vec::new(),
            peak: 0,
            start: Instant::now(),
            first_step: None,
            intersections: (0, 0),
            appearance: Vec::new(),
            decision: None,
            up: None,
        }
    }

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
        if let Some(decision) = &self.decision {
            metrics["appearance_decision"] = decision_json(decision);
        }
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

/// What decided a run's per-view appearance, for metrics.json: `compensation` (on, off), `from`
/// (setting, checkpoint, exif, pixels, nothing), what was measured, and the line the log said.
fn decision_json(decision: &Decision) -> serde_json::Value {
    let mut json = json!({
        "compensation": decision.compensation.to_string(),
        "from": decision.source(),
        "line": decision.to_string(),
    });
    match decision.from {
        Evidence::Exif { spread_stops } => json["exif_spread_stops"] = spread_stops.into(),
        Evidence::Pixels(drift) => {
            json["exposure_stops"] = drift.exposure_stops.into();
            json["colour_stops"] = drift.colour_stops.into();
            json["views"] = drift.views.into();
            json["points"] = drift.points.into();
        }
        Evidence::Setting | Evidence::Checkpoint | Evidence::Nothing { .. } => {}
    }
    json
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
    let progress = Progress::new(u64::from(args.config.steps));
    let mut tally = Tally::new();
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
            Event::RunStarted { splats, steps, appearance, .. } => {
                progress.println(&appearance.to_string());
                progress.println(&format!("training {splats} splats for {steps} steps"));
                tally.decision = Some(appearance);
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
                let auto = args.config.max_splats == SplatBudget::Auto && args.resume.is_none();
                progress.println(&format!(
                    "splat budget {max_splats}{}: predicted peak GPU memory {} (memory budget {})",
                    if auto { " (auto)" } else { "" },
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
