//! `splatforge bench-render`: times the rasterizer forward and forward + backward on random
//! scenes of given sizes, and reports the peak GPU bytes per splat from the ledger.
//!
//! Scenes are splats scattered in a box in front of the camera with small, trained-looking
//! scales, so that most are visible and each touches a few tiles. Every timing waits for the
//! GPU to finish (`wait_idle`), median of the timed runs after one warm-up.

use std::time::{Duration, Instant};

use glam::Mat4;
use splat_trainer::formats::{Splats, sh_coeffs_for_degree};
use splat_trainer::render::{
    Camera, Category, FrameScratch, GpuContext, GpuSplats, Owner, RenderSettings, Renderer,
    ShPrecision, SplatGradients, wgpu,
};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Splat counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub splats: Vec<u32>,
    /// Image sizes, comma-separated: a square's side (256) or width x height (1920x1080).
    #[arg(long, value_delimiter = ',', default_value = "256,1024", value_parser = parse_size)]
    pub sizes: Vec<(u32, u32)>,
    /// SH degree of the scenes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=3))]
    pub sh_degree: u32,
    /// Timed runs per case (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Also print each stage's GPU time (timestamp queries).
    #[arg(long)]
    pub profile: bool,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// An image size from `1920x1080` or `256` (square).
pub fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{text:?} is not an image size (256, or 1920x1080)");
    let parse = |s: &str| s.trim().parse::<u32>().ok().filter(|v| *v > 0);
    match text.split_once(['x', 'X', '×']) {
        Some((w, h)) => Ok((parse(w).ok_or_else(bad)?, parse(h).ok_or_else(bad)?)),
        None => parse(text).map(|s| (s, s)).ok_or_else(bad),
    }
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let renderer = Renderer::new(&ctx)?;
    let info = &ctx.adapter_info;
    println!(
        "adapter: {} ({:?}, {:?}), backward reduction: {:?}",
        info.name,
        info.backend,
        info.device_type,
        renderer.reduction()
    );
    println!(
        "{:>9} {:>10} {:>12} {:>12} {:>14} {:>15}",
        "splats", "image", "forward ms", "fwd+bwd ms", "intersections", "peak B/splat"
    );
    let mut cases = Vec::new();
    for &n in &args.splats {
        let scene = random_scene(n as usize, args.sh_degree);
        for (k, &(width, height)) in args.sizes.iter().enumerate() {
            let owner = Owner::Run(u64::from(n) * 100 + k as u64);
            if args.profile {
                ctx.start_profiling()?;
            }
            let result =
                bench_one(&ctx, &renderer, &scene, (width, height), args.runs as usize, owner);
            ctx.wait_idle()?;
            let size = format!("{width}×{height}");
            let mut case = serde_json::json!({"splats": n, "width": width, "height": height});
            match result {
                Ok(r) => {
                    println!(
                        "{n:>9} {size:>10} {:>12.2} {:>12.2} {:>14} {:>15.0}",
                        r.forward.as_secs_f64() * 1e3,
                        r.forward_backward.as_secs_f64() * 1e3,
                        r.intersections,
                        r.peak_bytes as f64 / f64::from(n.max(1)),
                    );
                    case["forward_ms"] = (r.forward.as_secs_f64() * 1e3).into();
                    case["forward_backward_ms"] = (r.forward_backward.as_secs_f64() * 1e3).into();
                    case["intersections"] = r.intersections.into();
                    case["peak_bytes"] = r.peak_bytes.into();
                }
                Err(e) => {
                    println!("{n:>9} {size:>10} skipped: {e:#}");
                    case["skipped"] = format!("{e:#}").into();
                }
            }
            if args.profile {
                let frames = ctx.finish_profiling()?.frames;
                let mut passes = Vec::new();
                let line: Vec<String> = STAGES
                    .iter()
                    .filter(|stage| {
                        frames.iter().any(|f| f.passes.iter().any(|p| p.stage == **stage))
                    })
                    .map(|stage| {
                        let mut ms: Vec<f64> = frames.iter().map(|f| f.stage_ms(stage)).collect();
                        let median = percentile(&mut ms, 0.5);
                        passes.push(serde_json::json!({"pass": stage, "median_ms": median}));
                        format!("{stage} {median:.1}")
                    })
                    .collect();
                println!("{:>20} GPU ms (median): {}", "", line.join(", "));
                case["passes"] = passes.into();
            }
            cases.push(case);
        }
    }
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "adapter": info.name,
            "backend": format!("{:?}", info.backend),
            "device_type": format!("{:?}", info.device_type),
            "reduction": format!("{:?}", renderer.reduction()),
            "sh_degree": args.sh_degree,
            "runs": args.runs,
            "cases": cases,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

struct BenchResult {
    forward: Duration,
    forward_backward: Duration,
    intersections: u32,
    peak_bytes: u64,
}

fn bench_one(
    ctx: &GpuContext,
    renderer: &Renderer,
    scene: &Splats,
    (width, height): (u32, u32),
    runs: usize,
    owner: Owner,
) -> anyhow::Result<BenchResult> {
    ctx.ledger().reset_peak();
    let base = ctx.ledger().total_bytes();
    // The focal length of the width, so a wide image sees a wider field than a square one.
    let camera = Camera {
        width,
        height,
        fx: width as f32,
        fy: width as f32,
        cx: width as f32 / 2.0,
        cy: height as f32 / 2.0,
        world_from_camera: Mat4::IDENTITY,
    };
    let settings = RenderSettings::default();
    let params = GpuSplats::upload(ctx, scene, owner)?;
    let grads = SplatGradients::new(ctx, &params, owner)?;
    let mut scratch = FrameScratch::new(ctx, renderer, owner)?;
    let pixels = (width * height) as usize;
    let v_image = ctx.create_buffer_init(
        "v_image",
        bytemuck::cast_slice(&vec![[1e-3_f32; 4]; pixels]),
        wgpu::BufferUsages::STORAGE,
        Category::RasterizerScratch,
        owner,
    )?;

    let mut intersections = 0;
    let mut forward = Vec::with_capacity(runs);
    let mut forward_backward = Vec::with_capacity(runs);
    for run in 0..=runs {
        let start = Instant::now();
        intersections =
            renderer.forward(ctx, &params, &camera, &settings, &mut scratch)?.intersections;
        ctx.wait_idle()?;
        let forward_time = start.elapsed();
        renderer.backward(ctx, &params, &mut scratch, &v_image, &grads)?;
        ctx.wait_idle()?;
        if ctx.is_profiling() {
            // This run's passes form one frame of timings.
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("profiler"),
            });
            ctx.profile_frame(&mut encoder);
            ctx.queue.submit([encoder.finish()]);
        }
        if run > 0 {
            forward.push(forward_time);
            forward_backward.push(start.elapsed());
        }
    }
    let peak_bytes = ctx.ledger().snapshot().peak_bytes - base;
    forward.sort();
    forward_backward.sort();
    Ok(BenchResult {
        forward: forward[runs / 2],
        forward_backward: forward_backward[runs / 2],
        intersections,
        peak_bytes,
    })
}

/// Splats in a box 2..8 units in front of the camera, filling its view.
fn random_scene(n: usize, sh_degree: u32) -> Splats {
    let mut state: u64 = 0x1234_5678;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let rest = 3 * (sh_coeffs_for_degree(sh_degree) - 1);
    // Scale so that splats cover the image a few layers deep whatever n is.
    let log_scale = (1.2 / (n as f32).sqrt()).ln();
    let mut s = Splats::with_capacity(n, sh_degree);
    for _ in 0..n {
        let z = 2.0 + 6.0 * next();
        s.means.push([(next() - 0.5) * z, (next() - 0.5) * z, z]);
        s.log_scales.push([
            log_scale + next() - 0.5,
            log_scale + next() - 0.5,
            log_scale + next() - 0.5,
        ]);
        s.rotations.push([next() - 0.5, next() - 0.5, next() - 0.5, next() - 0.5]);
        s.opacity_logits.push(next() * 4.0 - 2.0);
        s.sh_dc.push([next() - 0.5, next() - 0.5, next() - 0.5]);
        s.sh_rest.extend((0..rest).map(|_| (next() - 0.5) * 0.2));
    }
    s
}

/// `splatforge bench-sog`: SOG's encode time for `n` random splats of SH degree `sh_degree`
/// (random SH: no clusters to find, the k-means' worst case), the palette on this machine's
/// GPU (on its CPU cores where the adapter is software: `trainer::task::sh_palette`).
pub fn run_sog(n: usize, sh_degree: u32) -> anyhow::Result<()> {
    use splat_trainer::formats::sog;
    use splat_trainer::task::{is_software, sh_palette};
    let splats = random_scene(n, sh_degree);
    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let adapter = splat_trainer::render::adapter_name(&ctx.adapter_info);
    let on =
        if is_software(&ctx) { format!("the CPU cores ({adapter} is software)") } else { adapter };
    let started = Instant::now();
    let palette = sh_palette(&splats, Some(&ctx)).map_err(anyhow::Error::msg)?;
    let clustered = started.elapsed().as_secs_f64();
    let files = sog::encode(&splats, palette).map_err(anyhow::Error::from)?;
    let bundle = sog::bundle(&files)?;
    let total = started.elapsed().as_secs_f64();
    let palette = if sh_degree > 0 {
        format!("SH palette of {} entries in {clustered:.2} s on {on}", sog::palette_size(n))
    } else {
        "no SH palette (SH 0)".to_owned()
    };
    println!(
        "{n} splats, SH {sh_degree}: {palette}; the rest of the encode {:.2} s; {total:.2} s in \
         all; {} bytes ({:.1} a splat)",
        total - clustered,
        bundle.len(),
        bundle.len() as f64 / n.max(1) as f64,
    );
    Ok(())
}

#[derive(clap::Args)]
pub struct TrainBenchArgs {
    pub dataset: std::path::PathBuf,
    #[arg(long, default_value_t = 2000)]
    pub steps: u32,
    #[arg(long, default_value_t = 200)]
    pub window: u32,
    #[arg(long, default_value_t = 64)]
    pub max_resolution: u32,
    /// Start from this many random splats in the cameras' bounds (default: the dataset's
    /// points, else 20,000 random ones).
    #[arg(long)]
    pub splats: Option<usize>,
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=3))]
    pub sh_degree: u32,
    /// How SH bands 1-3 and their optimizer state are stored on the GPU: f32, or f16
    /// (252 fewer bytes a splat at SH degree 3).
    #[arg(long, default_value = "f32", value_parser = splat_trainer::config::parse_sh_precision)]
    pub sh_precision: ShPrecision,
    /// Time every GPU pass with timestamp queries.
    #[arg(long)]
    pub profile: bool,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// The stages of a step, in GPU order, as the kernels file their passes
/// (`GpuContext::profile_stage`).
const STAGES: [&str; 15] = [
    "projection",
    "depth sort",
    "scan",
    "emit",
    "tile sort",
    "tile ranges",
    "rasterize forward",
    "loss",
    "rasterize backward",
    "projection backward",
    "mcmc",
    "adam",
    "densification",
    "present",
    "other",
];

/// `splatforge bench-train`: step time over a long run with densification off, per window
/// of steps, to show that it does not drift upward (a leak of bookkeeping per step would);
/// with `--profile`, the GPU time of every pass from timestamp queries.
#[expect(clippy::too_many_lines, reason = "one benchmark, printed top to bottom")]
pub fn run_train(args: &TrainBenchArgs) -> anyhow::Result<()> {
    use splat_trainer::config::{SplatBudget, TrainConfig};
    use splat_trainer::dataset::{LoadOptions, load_dataset};
    use splat_trainer::densify::{DefaultConfig, Strategy};
    use splat_trainer::init::splats_from_points;
    use splat_trainer::train::Trainer;

    let data = load_dataset(
        &args.dataset,
        &LoadOptions { max_resolution: args.max_resolution, ..LoadOptions::default() },
    )?;
    let points = match args.splats {
        Some(n) => data.random_points(n, 0),
        None => data.init_points.clone().unwrap_or_else(|| data.random_points(20_000, 0)),
    };
    let init = splats_from_points(&points, args.sh_degree);
    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let (width, height) = data.largest_image();
    let config = TrainConfig {
        steps: args.steps,
        sh_degree: args.sh_degree,
        // The full degree from step 3 on: every window after the first times the same work.
        sh_degree_interval: 1,
        sh_precision: args.sh_precision,
        strategy: Strategy::Default(DefaultConfig { start: u32::MAX, ..DefaultConfig::default() }),
        max_splats: SplatBudget::Count(u32::MAX),
        eval_every: 0,
        appearance: splat_trainer::appearance::Compensation::Off,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&ctx, std::sync::Arc::new(data), &init, config, Owner::Run(1))?;
    println!(
        "adapter: {} ({:?}), {} splats, SH {} ({}), images up to {width}×{height}, densification \
         off",
        ctx.adapter_info.name,
        ctx.adapter_info.device_type,
        trainer.splat_count(),
        args.sh_degree,
        args.sh_precision.name(),
    );
    // A few steps before timing: pipelines, first allocations, the SH degree rising.
    let warm_up = 3.min(args.steps);
    for _ in 0..warm_up {
        trainer.step()?;
    }
    ctx.wait_idle()?;
    if args.profile {
        ctx.start_profiling()?;
    }
    println!("{:>12} {:>12} {:>12}", "steps", "ms / step", "GPU bytes");
    let window = args.window.max(1);
    let mut windows = Vec::new();
    let mut step = warm_up;
    // Where a step's wall time goes on the CPU: recording and submitting its two parts, and
    // the wait for the counts between them (what the GPU idles through: see the profile's
    // "idle: count read-back").
    let mut cpu = StepCpu::default();
    let started = Instant::now();
    while step < args.steps {
        let start = Instant::now();
        let n = window.min(args.steps - step);
        for _ in 0..n {
            cpu.step(&mut trainer)?;
            // Nobody reads the losses here: taking them keeps the host queue empty.
            while trainer.next_metrics().is_some() {}
        }
        let ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(n);
        step += n;
        println!(
            "{:>12} {ms:>12.2} {:>12}",
            format!("{}-{step}", step - n + 1),
            ctx.ledger().total_bytes()
        );
        windows.push(ms);
    }
    ctx.wait_idle()?;
    let timed_steps = args.steps - warm_up;
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    let ms_per_step = wall_ms / f64::from(timed_steps.max(1));
    println!("steps/s: {:.3} ({ms_per_step:.2} ms a step)", 1e3 / ms_per_step);
    // The first window includes pipeline warm-up; compare the second with the last.
    if let (Some(second), Some(last)) = (windows.get(1), windows.last()) {
        println!("last window / second window: {:.3}", last / second);
    }
    let steps = f64::from(timed_steps.max(1));
    let (begin_ms, wait_ms, finish_ms) = (cpu.begin / steps, cpu.wait / steps, cpu.finish / steps);
    // A driver may run earlier work inside a call (lavapipe runs the previous step's second
    // part inside the next step's first submit): the split is the CPU's view, not the GPU's.
    println!(
        "CPU per step, each part to its submit: first part {begin_ms:.3} ms, waiting for the \
         counts {wait_ms:.3} ms, the rest {finish_ms:.3} ms"
    );
    let mut report = serde_json::json!({
        "adapter": ctx.adapter_info.name,
        "device_type": format!("{:?}", ctx.adapter_info.device_type),
        "dataset": args.dataset.display().to_string(),
        "splats": trainer.splat_count(),
        "sh_degree": args.sh_degree,
        "sh_precision": args.sh_precision.name(),
        "width": width,
        "height": height,
        "steps": timed_steps,
        "steps_per_second": 1e3 / ms_per_step,
        "ms_per_step": ms_per_step,
        "windows_ms_per_step": windows,
        "cpu_ms_per_step": {"record_first": begin_ms, "wait_counts": wait_ms, "record_rest": finish_ms},
    });
    if args.profile {
        let profile = ctx.finish_profiling()?;
        let frames = &profile.frames;
        let busy_ms = frames.iter().map(splat_trainer::render::FrameTimings::total_ms).sum::<f64>()
            / frames.len().max(1) as f64;
        println!(
            "per pass over {} steps (GPU ms; {} steps untimed):",
            frames.len(),
            profile.untimed_frames
        );
        println!("{:>22} {:>10} {:>10}", "pass", "median", "p90");
        let mut passes = Vec::new();
        for stage in STAGES {
            if !frames.iter().any(|f| f.passes.iter().any(|p| p.stage == stage)) {
                continue;
            }
            let mut ms: Vec<f64> = frames.iter().map(|f| f.stage_ms(stage)).collect();
            let (median, p90) = (percentile(&mut ms, 0.5), percentile(&mut ms, 0.9));
            println!("{stage:>22} {median:>10.3} {p90:>10.3}");
            passes.push(serde_json::json!({"pass": stage, "median_ms": median, "p90_ms": p90}));
        }
        let busy = busy_ms / ms_per_step;
        println!("{:>22} {busy_ms:>10.3}", "all passes (mean)");
        let passes_per_step = frames.iter().map(|f| f.passes.len()).sum::<usize>() as f64
            / frames.len().max(1) as f64;
        println!("{:>22} {passes_per_step:>10.1}", "compute passes a step");
        // The step's one wait for the CPU: the counts read back before the depth sort.
        let mut stall: Vec<f64> =
            frames.iter().filter_map(|f| f.gap_before_ms("depth sort")).collect();
        let (stall_median, stall_p90) = (percentile(&mut stall, 0.5), percentile(&mut stall, 0.9));
        println!("{:>22} {stall_median:>10.3} {stall_p90:>10.3}", "idle: count read-back");
        println!("GPU-busy fraction: {busy:.3} (sum of pass times / wall time of a step)");
        report["passes"] = passes.into();
        report["gpu_ms_per_step"] = busy_ms.into();
        report["gpu_busy_fraction"] = busy.into();
        report["compute_passes_per_step"] = passes_per_step.into();
        report["untimed_steps"] = profile.untimed_frames.into();
        report["count_readback_idle_ms"] =
            serde_json::json!({"median": stall_median, "p90": stall_p90});
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// CPU milliseconds summed over the steps of a benchmark, by part of the step.
#[derive(Default)]
struct StepCpu {
    begin: f64,
    wait: f64,
    finish: f64,
}

impl StepCpu {
    /// One training step ([`Trainer::step`]'s three parts), timed.
    fn step(&mut self, trainer: &mut splat_trainer::train::Trainer) -> anyhow::Result<()> {
        let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
        let at = Instant::now();
        trainer.begin_step()?;
        self.begin += ms(at);
        let at = Instant::now();
        let counts = pollster::block_on(trainer.counts())?;
        self.wait += ms(at);
        let at = Instant::now();
        pollster::block_on(trainer.finish_step(counts))?;
        self.finish += ms(at);
        Ok(())
    }
}

/// The `q` quantile (0..1) of `values`, nearest rank; 0 for none.
fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}
