//! `splatforge train DATASET`: a headless training run with a progress bar, writing
//! `splats.ply` and `metrics.json` into the output folder.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use splat_trainer::dataset::{self, LoadOptions};
use splat_trainer::densify::{DefaultConfig, McmcConfig, Strategy};
use splat_trainer::formats::{PointCloud, Splats, ply};
use splat_trainer::init::splats_from_points;
use splat_trainer::render::{GpuContext, Owner};
use splat_trainer::train::{EvalStats, LearningRates, TrainConfig, Trainer};

/// Random points for a dataset without a point cloud (3DGS uses 100k for NeRF-synthetic).
const RANDOM_INIT_POINTS: usize = 100_000;

pub struct TrainArgs {
    pub dataset: PathBuf,
    pub init: Option<PathBuf>,
    pub steps: u32,
    pub max_resolution: u32,
    pub strategy: String,
    pub max_splats: u32,
    pub sh_degree: u32,
    pub eval_every: u32,
    pub out: Option<PathBuf>,
    pub seed: u64,
    pub background: [f32; 3],
}

pub fn run(args: &TrainArgs) -> anyhow::Result<()> {
    if args.steps == 0 {
        bail!("--steps must be at least 1");
    }
    if args.max_splats == 0 {
        bail!("--max-splats must be at least 1");
    }
    let strategy = match args.strategy.as_str() {
        "default" => Strategy::Default(DefaultConfig::default()),
        "mcmc" => Strategy::Mcmc(McmcConfig { cap: args.max_splats, ..McmcConfig::default() }),
        other => bail!("unknown strategy '{other}' (default or mcmc)"),
    };
    let options = LoadOptions {
        max_resolution: args.max_resolution,
        background: args.background,
        ..LoadOptions::default()
    };
    let data = dataset::load_dataset(&args.dataset, &options).context("cannot load dataset")?;
    for warning in &data.warnings {
        eprintln!("warning: {warning}");
    }
    let out = args.out.clone().unwrap_or_else(|| default_out_dir(&args.dataset));
    std::fs::create_dir_all(&out)
        .with_context(|| format!("{}: cannot create output folder", out.display()))?;

    let points = initial_points(args, &data)?;
    let mut init = splats_from_points(&points, args.sh_degree);
    cap_splats(&mut init, args.max_splats as usize);

    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let config = TrainConfig {
        steps: args.steps,
        sh_degree: args.sh_degree,
        sh_degree_interval: 1000,
        strategy,
        max_splats: args.max_splats,
        eval_every: args.eval_every,
        seed: args.seed,
        background: args.background,
        learning_rates: LearningRates::default(),
        loss_weights: splat_trainer::loss::LossWeights::default(),
    };
    let views = (data.train.len(), data.eval.len());
    let mut trainer = Trainer::new(&ctx, Arc::new(data), &init, config, Owner::Run(1))?;
    eprintln!(
        "training {} splats on {} train / {} eval views for {} steps on {} ({:?})",
        trainer.splat_count(),
        views.0,
        views.1,
        args.steps,
        ctx.adapter_info.name,
        ctx.adapter_info.backend
    );

    let progress = Progress::new(u64::from(args.steps));
    let start = Instant::now();
    let mut evals: Vec<EvalStats> = Vec::new();
    for _ in 0..args.steps {
        let stats = trainer.step()?;
        if args.eval_every > 0 && stats.step % args.eval_every == 0 && stats.step < args.steps {
            let eval = trainer.evaluate()?;
            progress.println(&format!(
                "step {}: eval PSNR {:.2} dB, SSIM {:.4} over {} views",
                eval.step, eval.psnr, eval.ssim, eval.views
            ));
            evals.push(eval);
        }
        let gpu = ctx.ledger().total_bytes();
        progress.update(
            stats.step,
            &format!(
                "loss {:.4} | train PSNR {:.2} | {} splats | GPU {}",
                stats.loss,
                stats.train_psnr,
                stats.splats,
                human_bytes(gpu)
            ),
        );
    }
    let seconds = start.elapsed().as_secs_f64();
    let last = trainer.evaluate()?;
    evals.push(last);
    progress.finish(&format!("done: eval PSNR {:.2} dB, SSIM {:.4}", last.psnr, last.ssim));

    let splats = trainer.splats()?;
    let peak = ctx.ledger().snapshot().peak_bytes;
    drop(trainer);
    write_atomically(&out.join("splats.ply"), |file| Ok(ply::write_splats(&splats, file)?))?;
    let metrics = json!({
        "steps": args.steps,
        "seconds": seconds,
        "steps_per_second": f64::from(args.steps) / seconds,
        "final_psnr": last.psnr,
        "final_ssim": last.ssim,
        "splats": splats.len(),
        "peak_gpu_bytes": peak,
        "eval": evals.iter().map(|e| json!({"step": e.step, "psnr": e.psnr, "ssim": e.ssim})).collect::<Vec<_>>(),
    });
    write_atomically(&out.join("metrics.json"), |file| {
        serde_json::to_writer_pretty(&mut *file, &metrics)?;
        Ok(())
    })?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn default_out_dir(dataset: &Path) -> PathBuf {
    let name =
        dataset.file_stem().map_or_else(|| "dataset".into(), |n| n.to_string_lossy().into_owned());
    dataset.with_file_name(format!("{name}_train"))
}

/// `--init`, else the dataset's points, else random points in the camera bounds.
fn initial_points(args: &TrainArgs, data: &dataset::Dataset) -> anyhow::Result<PointCloud> {
    if let Some(path) = &args.init {
        let bytes =
            std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
        return ply::read_points(&bytes)
            .with_context(|| format!("{}: not a point cloud", path.display()));
    }
    Ok(match &data.init_points {
        Some(points) if !points.is_empty() => points.clone(),
        _ => data.random_points(RANDOM_INIT_POINTS, args.seed),
    })
}

/// Keeps at most `max` splats, evenly spread over the input order.
fn cap_splats(splats: &mut Splats, max: usize) {
    let n = splats.len();
    if n <= max {
        return;
    }
    let keep: Vec<usize> = (0..max).map(|i| i * n / max).collect();
    let rest = splats.rest_per_splat();
    let pick = |v: &[[f32; 3]]| keep.iter().map(|&i| v[i]).collect::<Vec<_>>();
    splats.means = pick(&splats.means);
    splats.log_scales = pick(&splats.log_scales);
    splats.sh_dc = pick(&splats.sh_dc);
    splats.rotations = keep.iter().map(|&i| splats.rotations[i]).collect();
    splats.opacity_logits = keep.iter().map(|&i| splats.opacity_logits[i]).collect();
    splats.sh_rest =
        keep.iter().flat_map(|&i| splats.sh_rest[i * rest..(i + 1) * rest].to_vec()).collect();
}

/// Writes through a temporary file in the same folder, then renames: a crash mid-write never
/// leaves a truncated file under the final name.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!(
        "{}.partial",
        path.extension().and_then(|e| e.to_str()).unwrap_or("tmp")
    ));
    let result = (|| {
        let file = std::fs::File::create(&tmp)?;
        let mut writer = std::io::BufWriter::new(file);
        write(&mut writer)?;
        let file = writer.into_inner().map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        anyhow::Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("{}: cannot write", path.display()))
}

fn human_bytes(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 { format!("{:.2} GiB", mib / 1024.0) } else { format!("{mib:.1} MiB") }
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
