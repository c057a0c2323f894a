//! `splatforge bench-memory`: the predicted peak GPU memory of training runs
//! (`splat_trainer::memory`) next to the peak the ledger measures on the same runs.
//!
//! Each run starts at its splat cap from random points in the dataset's camera bounds (a
//! sixteenth of them dead) and refines (MCMC, or 3DGS with `--strategy 3dgs`) at step 2,
//! so that the refinement at the cap (old and new state side by side) is among the measured
//! steps. The
//! prediction is made before the run, with the tile intersections per splat measured by
//! rendering the initial splats from every view once; the prediction with the default
//! intersections per splat is shown beside it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use splat_trainer::dataset::{LoadOptions, load_dataset};
use splat_trainer::memory::{
    DEFAULT_INTERSECTIONS_PER_SPLAT, MeasuredRun, MeasuredStrategy, MemoryModel, RunShape,
    check_peak, default_budget,
};
use splat_trainer::render::{GpuContext, ShPrecision};

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct BenchMemoryArgs {
    /// A dataset folder or `.zip` (e.g. ../shared/data/datasets/desk-statue-colmap).
    pub dataset: PathBuf,
    /// Splat caps to run, one run each.
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
    pub splats: Vec<u32>,
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=3))]
    pub sh_degree: u32,
    /// How SH bands 1-3 and their optimizer state are stored on the GPU: f32, or f16
    /// (252 fewer bytes a splat at SH degree 3).
    #[arg(long, default_value = "f32", value_parser = splat_trainer::config::parse_sh_precision)]
    pub sh_precision: ShPrecision,
    /// The refinement at the cap: mcmc (relocation) or 3dgs (prune, clone, split; the
    /// compact strategy's too).
    #[arg(long, default_value = "mcmc", value_parser = parse_strategy)]
    pub strategy: MeasuredStrategy,
    /// Longest image side the dataset is loaded at.
    #[arg(long, default_value_t = 256)]
    pub max_resolution: u32,
    /// Training steps per run (at least 2: the refinement is at step 2).
    #[arg(long, default_value_t = 3)]
    pub steps: u32,
    /// Also print the most splats whose predicted peak fits this budget (e.g. 24GiB), at
    /// the intersections per splat measured on the last run.
    #[arg(long, value_parser = splatforge::parse_bytes)]
    pub budget: Option<u64>,
}

fn parse_strategy(text: &str) -> Result<MeasuredStrategy, String> {
    [MeasuredStrategy::Mcmc, MeasuredStrategy::Default]
        .into_iter()
        .find(|s| s.name() == text.trim())
        .ok_or_else(|| format!("{text:?}: mcmc or 3dgs"))
}

const MIB: f64 = (1 << 20) as f64;

pub fn run(args: &BenchMemoryArgs) -> anyhow::Result<()> {
    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let info = &ctx.adapter_info;
    println!("adapter: {} ({:?}, {:?})", info.name, info.backend, info.device_type);
    let options = LoadOptions { max_resolution: args.max_resolution, ..LoadOptions::default() };
    let data = Arc::new(
        load_dataset(&args.dataset, &options)
            .with_context(|| format!("loading {}", args.dataset.display()))?,
    );
    let model = MemoryModel::MEASURED;
    println!(
        "{:>9} {:>8} {:>7} {:>9} {:>6} {:>13} {:>13} {:>8} {:>7} {:>18} {:>8} {:>7}",
        "splats",
        "strategy",
        "SH",
        "image",
        "ips",
        "predicted MiB",
        "measured MiB",
        "error",
        "B/splat",
        "pred. (ips 4) MiB",
        "error",
        "time s"
    );
    let mut last_shape = None;
    for &splats in &args.splats {
        let started = Instant::now();
        let run = MeasuredRun {
            sh_precision: args.sh_precision,
            strategy: args.strategy,
            steps: args.steps.max(2),
            ..MeasuredRun::new(splats, args.sh_degree)
        };
        let check =
            check_peak(&ctx, &model, &data, &run).with_context(|| format!("{splats} splats"))?;
        let default_ips = model.predict(&RunShape {
            intersections_per_splat: DEFAULT_INTERSECTIONS_PER_SPLAT,
            ..check.shape
        });
        let measured = check.measured as f64;
        let shape = &check.shape;
        println!(
            "{:>9} {:>8} {:>7} {:>9} {:>6.2} {:>13.1} {:>13.1} {:>+7.2}% {:>7.0} {:>18.1} {:>+7.2}% {:>7.1}",
            splats,
            args.strategy.name(),
            format!("{} {}", args.sh_degree, args.sh_precision.name()),
            format!("{}x{}", shape.width, shape.height),
            shape.intersections_per_splat,
            check.predicted.peak_bytes as f64 / MIB,
            measured / MIB,
            check.relative_error() * 100.0,
            measured / f64::from(splats.max(1)),
            default_ips.peak_bytes as f64 / MIB,
            (default_ips.peak_bytes as f64 / measured - 1.0) * 100.0,
            started.elapsed().as_secs_f64(),
        );
        last_shape = Some(check.shape);
    }
    let errors = ctx.take_uncaptured_errors();
    anyhow::ensure!(errors.is_empty(), "GPU errors: {errors:?}");

    let budget = default_budget(&ctx);
    let shape = RunShape::for_dataset(&data, 0, args.sh_degree).with_precision(args.sh_precision);
    println!(
        "default budget {budget}: {} splats of SH degree {} ({}) at {}x{} (ips {}); the \
         device's bindings allow {}",
        model.max_splats_for_budget(budget.bytes, &shape),
        args.sh_degree,
        args.sh_precision.name(),
        shape.width,
        shape.height,
        shape.intersections_per_splat,
        model.max_splats_for_limits(&ctx.device.limits(), &shape),
    );
    if let (Some(budget), Some(shape)) = (args.budget, last_shape) {
        // The budget alone (a device's bindings may cap lower: above).
        let splats = model.max_splats_for_budget(budget, &shape);
        let peak = model.predict(&shape.with_splats(splats)).peak_bytes;
        println!(
            "budget {:.2} GiB: {splats} splats of SH degree {} ({}) at {}x{} (ips {:.2}), \
             predicted peak {:.0} B a splat",
            budget as f64 / (MIB * 1024.0),
            args.sh_degree,
            args.sh_precision.name(),
            shape.width,
            shape.height,
            shape.intersections_per_splat,
            peak as f64 / splats.max(1) as f64,
        );
    }
    Ok(())
}
