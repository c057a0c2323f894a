//! The self-test: is the rasterizer right, and is training reproducible, on *this* adapter?
//! What a user runs first on a new GPU and attaches to a bug report
//! (`splatforge self-test`, Help → Self-test in the window).
//!
//! On the built-in sample scene (its ground-truth splats, `sample_scene::ground_truth`, seen
//! from its own cameras at 128 px, and its dataset for training):
//! - **forward**: each view against the f64 CPU reference (`render::reference`), plain and
//!   antialiased: the share of channel values off by more than 2e-3 (a correct GPU decides a
//!   few pixels at a splat's cut the other way), the mean error, the largest, and the PSNR;
//! - **backward**: the gradient of every parameter group for a seeded cotangent against the
//!   reference's, as relative L2 errors;
//! - **reductions**: the same gradients with the adapter's subgroups (compiled for its one
//!   width where it has one, and with the width read at run time) and with the portable path
//!   in groups of 4 to 64 lanes (standing in for other adapters' subgroups) are the same bits
//!   (reported but not judged on Metal, whose fast math may reassociate the sums);
//! - **training**: two short runs with the same seed, refinements included, end with the same
//!   bits (per-pass GPU times are taken during the first);
//! - the adapter's limits and features and what they imply (the largest run in the memory
//!   budget, the subgroup width, timestamps).
//!
//! The tolerances are those of the rasterizer's tests (`render/tests/it/rasterize_gpu.rs`, where
//! they are explained): 2e-3 per channel (at most one value in 10⁴ beyond it), 1e-5 mean;
//! 1e-4 relative per gradient group.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use splat_formats::Splats;
use splat_render::kernels::Reduction;
use splat_render::{
    Camera, FrameScratch, GpuContext, GpuError, GpuSplats, Owner, RenderSettings, Renderer,
    ShPrecision, device_memory, human_bytes, reference, wgpu,
};

use crate::config::TrainConfig;
use crate::dataset::Dataset;
use crate::densify::{DefaultConfig, Strategy};
use crate::init::splats_from_points;
use crate::memory::{MemoryBudget, MemoryModel, RunShape};
use crate::sample_scene;
use crate::train::{ImagePlacement, RunSnapshot, TrainKernels, Trainer};

/// Error of one image channel against the reference beyond which it counts as an outlier.
const PIXEL_TOLERANCE: f64 = 2e-3;
/// Most outliers, as a fraction of the channel values: a correct GPU may decide a pixel at a
/// splat's cut (α = 1/255) the other way from the f64 reference, where it contracts a
/// multiply and an add into one rounding (FMA), and that pixel is off by up to α: about one
/// in 10⁴ values on the views checked; a wrong kernel is wrong on far more (and in the mean).
const OUTLIER_FRACTION: f64 = 1e-4;
/// Largest mean absolute error of an image against the reference.
const MEAN_TOLERANCE: f64 = 1e-5;
/// Largest relative L2 error of a gradient group against the reference.
const GRADIENT_TOLERANCE: f64 = 1e-4;
/// Views of the sample scene checked against the reference: both rings, four directions.
const VIEWS: [usize; 4] = [0, 5, 16, 27];
/// Steps of each training run: a refinement and an SH degree more every third of the run
/// (two refinements, the SH degree rising to 3). 300 until 2026-11-28, where the two runs took
/// 182 of the self-test's 230 s on lavapipe (2 cores) and checked nothing the first half did not.
const TRAIN_STEPS: u32 = 150;
/// The same in under half the steps, for [`Options::quick`].
const QUICK_TRAIN_STEPS: u32 = 60;

/// The whole report: what `--json` writes.
#[derive(Clone, Debug, Serialize)]
pub struct SelfTestReport {
    pub splatforge: &'static str,
    pub adapter: AdapterReport,
    pub checks: Vec<Check>,
    /// GPU time of each pass of a training step (median over the first run's steps, in
    /// order of the step); empty without timestamp queries.
    pub passes: Vec<PassTime>,
    pub seconds: f64,
    pub passed: bool,
}

/// The adapter, its limits and features, and what they imply.
#[derive(Clone, Debug, Serialize)]
pub struct AdapterReport {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub vendor_id: u32,
    pub device_id: u32,
    /// Subgroup operations in use (the backward reduction takes them where present).
    pub subgroups: bool,
    pub subgroup_min_size: u32,
    pub subgroup_max_size: u32,
    /// Per-pass GPU timing is possible.
    pub timestamps: bool,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_workgroups_per_dimension: u32,
    /// The device-local memory and what of it is free, as the driver says (Vulkan; absent
    /// where the backend cannot say).
    pub device_memory_bytes: Option<u64>,
    pub device_memory_free_bytes: Option<u64>,
    /// The memory budget runs are planned in (the default, or what the caller gave), and
    /// where it came from, in words.
    pub memory_budget_bytes: u64,
    pub memory_budget: String,
    /// The largest run of SH degree 3 at 1920×1080 (4 intersections a splat) the budget
    /// holds, and the largest the device's buffer and binding limits allow.
    pub largest_run_by_budget: u64,
    pub largest_run_by_limits: u64,
}

/// One check.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub passed: bool,
    /// One line for a person.
    pub summary: String,
    pub figures: BTreeMap<String, f64>,
}

/// GPU milliseconds of one pass of a training step.
#[derive(Clone, Debug, Serialize)]
pub struct PassTime {
    pub pass: String,
    pub median_ms: f64,
}

/// How to run the self-test.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The memory budget to report the largest run for.
    pub memory_budget: MemoryBudget,
    /// Time a training step's passes (the profiler is the device's: not while another run
    /// trains on it).
    pub profile: bool,
    /// Training runs of 60 steps instead of 150 (the rasterizer's checks unchanged): for a
    /// script that checks its own wiring (`scripts/gpu-figures.sh --tiny`).
    pub quick: bool,
}

/// Runs every check on `ctx`'s adapter; `sample` is the built-in sample scene's dataset,
/// loaded (the caller has it: it is embedded in the app). An error is a check that could not
/// run at all (a GPU error, a device lost); a check that runs and fails is in the report.
pub fn run(
    ctx: &GpuContext,
    sample: &Arc<Dataset>,
    options: &Options,
) -> Result<SelfTestReport, GpuError> {
    let started = Instant::now();
    let adapter = adapter_report(ctx, options.memory_budget);
    let splats = sample_scene::ground_truth();
    let cameras = sample_scene::cameras();
    let views: Vec<Camera> = VIEWS.iter().map(|&i| cameras[i]).collect();
    let renderer = Renderer::new(ctx)?;
    let mut checks = vec![
        check_forward(ctx, &renderer, &splats, &views)?,
        check_backward(ctx, &renderer, &splats, &views)?,
        check_reductions(ctx, &splats, &views)?,
    ];
    let steps = if options.quick { QUICK_TRAIN_STEPS } else { TRAIN_STEPS };
    let (training, passes) = check_training(ctx, sample, steps, options.profile)?;
    checks.push(training);
    let passed = checks.iter().all(|c| c.passed);
    Ok(SelfTestReport {
        splatforge: env!("CARGO_PKG_VERSION"),
        adapter,
        checks,
        passes,
        seconds: started.elapsed().as_secs_f64(),
        passed,
    })
}

impl SelfTestReport {
    /// A short summary for a person: the adapter, one line a check, the verdict.
    #[must_use]
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let a = &self.adapter;
        let subgroups = match (a.subgroups, a.subgroup_min_size == a.subgroup_max_size) {
            (false, _) => "no subgroups (the portable reduction)".to_string(),
            (true, true) => format!("subgroups of {} lanes", a.subgroup_min_size),
            (true, false) => {
                format!("subgroups of {} to {} lanes", a.subgroup_min_size, a.subgroup_max_size)
            }
        };
        let timestamps = if a.timestamps { "timestamps" } else { "no timestamps" };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} ({}, {}; driver {} {})",
            a.name, a.backend, a.device_type, a.driver, a.driver_info
        );
        let _ = writeln!(
            out,
            "  {subgroups}, {timestamps}; storage binding {}, buffer {}, {} storage buffers a \
             stage",
            human_bytes(a.max_storage_buffer_binding_size),
            human_bytes(a.max_buffer_size),
            a.max_storage_buffers_per_shader_stage
        );
        let _ = writeln!(
            out,
            "  memory budget {}: up to {} splats (SH 3, 1080p); the device's limits allow {}",
            a.memory_budget, a.largest_run_by_budget, a.largest_run_by_limits
        );
        for check in &self.checks {
            let mark = if check.passed { "ok  " } else { "FAIL" };
            let _ = writeln!(out, "{mark} {:<11} {}", check.name, check.summary);
        }
        if !self.passes.is_empty() {
            let total: f64 = self.passes.iter().map(|p| p.median_ms).sum();
            let parts: Vec<String> =
                self.passes.iter().map(|p| format!("{} {:.2}", p.pass, p.median_ms)).collect();
            let _ = writeln!(
                out,
                "  a training step's passes (GPU ms, median; {total:.2} in all): {}",
                parts.join(", ")
            );
        }
        let verdict = if self.passed { "all checks passed" } else { "SOME CHECKS FAILED" };
        let _ = write!(out, "{verdict} ({:.1} s)", self.seconds);
        out
    }
}

/// The adapter part of the report alone, at once (no check runs): what a script asks before
/// it commits to a GPU (`splatforge self-test --adapter-only`).
#[must_use]
pub fn adapter_report(ctx: &GpuContext, budget: MemoryBudget) -> AdapterReport {
    let info = &ctx.adapter_info;
    let limits = ctx.device.limits();
    let features = ctx.device.features();
    let model = MemoryModel::default();
    let shape = RunShape::new(1, 3, 1920, 1080);
    let memory = device_memory(&ctx.device);
    AdapterReport {
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: info.driver.clone(),
        driver_info: info.driver_info.clone(),
        vendor_id: info.vendor,
        device_id: info.device,
        subgroups: features.contains(wgpu::Features::SUBGROUP),
        subgroup_min_size: info.subgroup_min_size,
        subgroup_max_size: info.subgroup_max_size,
        timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
        max_buffer_size: limits.max_buffer_size,
        max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
        max_storage_buffers_per_shader_stage: limits.max_storage_buffers_per_shader_stage,
        max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
        max_compute_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
        device_memory_bytes: memory.map(|m| m.total),
        device_memory_free_bytes: memory.and_then(|m| m.free),
        memory_budget_bytes: budget.bytes,
        memory_budget: budget.to_string(),
        largest_run_by_budget: model.max_splats_for_budget(budget.bytes, &shape),
        largest_run_by_limits: model.max_splats_for_limits(&limits, &shape),
    }
}

fn settings(view: usize) -> RenderSettings {
    // Every other view antialiased; a grey background so that it shows in the image.
    RenderSettings {
        background: [0.25, 0.5, 0.75],
        antialiased: view % 2 == 1,
        sh_degree: None,
        ..RenderSettings::default()
    }
}

fn reference_settings(settings: &RenderSettings, splats: &Splats) -> reference::Settings {
    reference::Settings {
        background: settings.background.map(f64::from),
        antialiased: settings.antialiased,
        sh_degree: splats.sh_degree,
    }
}

fn check_forward(
    ctx: &GpuContext,
    renderer: &Renderer,
    splats: &Splats,
    views: &[Camera],
) -> Result<Check, GpuError> {
    let owner = Owner::Shared;
    let gpu = GpuSplats::upload(ctx, splats, owner)?;
    let mut scratch = FrameScratch::new(ctx, renderer, owner)?;
    let (mut worst, mut worst_mean, mut least_psnr) = (0.0_f64, 0.0_f64, f64::INFINITY);
    let (mut outliers, mut values) = (0_u64, 0_u64);
    for (i, camera) in views.iter().enumerate() {
        let settings = settings(i);
        renderer.forward(ctx, &gpu, camera, &settings, &mut scratch)?;
        let image = scratch.read_image(ctx)?;
        let (_, want) = reference::render(splats, camera, &reference_settings(&settings, splats));
        let mut sum = 0.0;
        let mut squares = 0.0;
        for (got, (rgb, alpha)) in image.iter().zip(want.rgb.iter().zip(&want.alpha)) {
            for (c, w) in rgb.iter().chain(std::iter::once(alpha)).enumerate() {
                let err = (f64::from(got[c]) - w).abs();
                let err = if err.is_nan() { f64::INFINITY } else { err };
                worst = worst.max(err);
                outliers += u64::from(err > PIXEL_TOLERANCE);
                sum += err;
                squares += err * err;
            }
        }
        values += image.len() as u64 * 4;
        let channels = (image.len() * 4).max(1) as f64;
        worst_mean = worst_mean.max(sum / channels);
        let mse = squares / channels;
        least_psnr = least_psnr.min(if mse > 0.0 { -10.0 * mse.log10() } else { 200.0 });
    }
    let fraction = outliers as f64 / values.max(1) as f64;
    let passed = fraction <= OUTLIER_FRACTION && worst_mean <= MEAN_TOLERANCE && worst.is_finite();
    Ok(Check {
        name: "forward",
        passed,
        summary: format!(
            "{} views of the sample scene against the CPU reference: PSNR ≥ {least_psnr:.1} dB, \
             {outliers} of {values} values off by more than {PIXEL_TOLERANCE:.0e} ({fraction:.1e}, \
             ≤ {OUTLIER_FRACTION:.0e}), mean error ≤ {worst_mean:.1e} (≤ {MEAN_TOLERANCE:.0e}), \
             largest {worst:.1e}",
            views.len()
        ),
        figures: BTreeMap::from([
            ("least_psnr_db".into(), least_psnr),
            ("largest_error".into(), worst),
            ("largest_mean_error".into(), worst_mean),
            ("outlier_fraction".into(), fraction),
        ]),
    })
}

/// A seeded cotangent in [-1, 1) for every pixel's rgb and alpha.
fn cotangent(camera: &Camera, seed: u64) -> Vec<[f32; 4]> {
    let mut state = seed;
    let mut next = || {
        state =
            state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 40) as f32 / (1_u64 << 23) as f32 - 1.0
    };
    (0..camera.width * camera.height).map(|_| [next(), next(), next(), next()]).collect()
}

/// The gradient groups one backward pass writes, as f32: means, log-scales, quaternions,
/// opacities, SH bands 0..=degree, and the densification statistics.
fn gradients(
    ctx: &GpuContext,
    renderer: &Renderer,
    splats: &Splats,
    camera: &Camera,
    settings: &RenderSettings,
    seed: u64,
) -> Result<Vec<Vec<f32>>, GpuError> {
    let v_image = cotangent(camera, seed);
    let pass = renderer.forward_backward(
        ctx,
        splats,
        (camera, settings),
        v_image.as_flattened(),
        Owner::Shared,
    )?;
    Ok(pass.gradients)
}

fn check_backward(
    ctx: &GpuContext,
    renderer: &Renderer,
    splats: &Splats,
    views: &[Camera],
) -> Result<Check, GpuError> {
    let mut worst: BTreeMap<String, f64> = BTreeMap::new();
    for (i, camera) in views.iter().enumerate() {
        let settings = settings(i);
        let got = gradients(ctx, renderer, splats, camera, &settings, 7 + i as u64)?;
        let v = cotangent(camera, 7 + i as u64);
        let v_rgb: Vec<[f64; 3]> = v.iter().map(|p| [p[0], p[1], p[2]].map(f64::from)).collect();
        let v_alpha: Vec<f64> = v.iter().map(|p| f64::from(p[3])).collect();
        let want = reference::render_backward(
            splats,
            camera,
            &reference_settings(&settings, splats),
            &v_rgb,
            &v_alpha,
        );
        // The SH bands as the reference lays them out (Splats' sh_rest, channel-major).
        let bands: Vec<Vec<f32>> = got[4..got.len() - 1].to_vec();
        let merged = splat_render::gpu_splats::merge_sh_bands(
            Splats { sh_dc: vec![], sh_rest: vec![], ..splats.clone() },
            &std::array::from_fn(|b| bands.get(b).cloned().unwrap_or_default()),
        );
        let grad2d: Vec<f32> = got[got.len() - 1].chunks_exact(3).map(|c| c[0]).collect();
        let groups: [(&str, &[f32], &[f64]); 7] = [
            ("means", &got[0], want.v_means.as_flattened()),
            ("log_scales", &got[1], want.v_log_scales.as_flattened()),
            ("rotations", &got[2], want.v_rotations.as_flattened()),
            ("opacities", &got[3], &want.v_opacity_logits),
            ("sh_dc", merged.sh_dc.as_flattened(), want.v_sh_dc.as_flattened()),
            ("sh_rest", &merged.sh_rest, &want.v_sh_rest),
            ("grad2d", &grad2d, &want.grad2d),
        ];
        for (name, got, want) in groups {
            let error = relative_error(got, want);
            let entry = worst.entry(format!("{name}_relative_error")).or_insert(0.0);
            *entry = entry.max(error);
        }
    }
    let (name, largest) =
        worst.iter().max_by(|a, b| a.1.total_cmp(b.1)).map_or(("", 0.0), |(n, e)| (n.as_str(), *e));
    Ok(Check {
        name: "backward",
        passed: worst.values().all(|e| *e <= GRADIENT_TOLERANCE),
        summary: format!(
            "every gradient group within {GRADIENT_TOLERANCE:.0e} of the reference (relative L2); \
             largest {largest:.1e} ({})",
            name.trim_end_matches("_relative_error")
        ),
        figures: worst,
    })
}

/// Relative L2 error of `got` against `want` (∞ when a value is not finite or the lengths
/// differ; the absolute error where `want` is all but zero).
fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let diff: f64 =
        got.iter().zip(want).map(|(g, w)| (f64::from(*g) - w).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    let error = if norm > 1e-12 { diff / norm } else { diff };
    if error.is_finite() { error } else { f64::INFINITY }
}

fn check_reductions(
    ctx: &GpuContext,
    splats: &Splats,
    views: &[Camera],
) -> Result<Check, GpuError> {
    let mut reductions: Vec<Reduction> =
        [4, 8, 16, 32, 64].map(|lanes| Reduction::Portable { lanes }).to_vec();
    if ctx.device.features().contains(wgpu::Features::SUBGROUP) {
        reductions.insert(0, Reduction::Subgroup);
        // Where Subgroup is compiled for the adapter's one width, the run-time width too.
        if ctx.adapter_info.subgroup_min_size == ctx.adapter_info.subgroup_max_size {
            reductions.insert(1, Reduction::SubgroupAnyWidth);
        }
    }
    let renderers: Vec<Renderer> =
        reductions.iter().map(|&r| Renderer::with_reduction(ctx, r)).collect::<Result<_, _>>()?;
    let mut differing = Vec::new();
    let mut compared = 0_u64;
    for (i, camera) in views.iter().enumerate().take(2) {
        let settings = settings(i);
        let mut first: Option<Vec<Vec<f32>>> = None;
        for (renderer, &reduction) in renderers.iter().zip(&reductions) {
            let got = gradients(ctx, renderer, splats, camera, &settings, 11)?;
            match &first {
                None => first = Some(got),
                Some(want) => {
                    let differ = want
                        .iter()
                        .flatten()
                        .zip(got.iter().flatten())
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    compared += want.iter().map(|g| g.len() as u64).sum::<u64>();
                    if differ > 0 {
                        differing.push(format!("{differ} values differ with {reduction:?}"));
                    }
                }
            }
        }
    }
    let names: Vec<String> = reductions
        .iter()
        .map(|r| match r {
            Reduction::Subgroup => "subgroups".to_string(),
            Reduction::SubgroupAnyWidth => "subgroups (any width)".to_string(),
            Reduction::Portable { lanes } => format!("{lanes}"),
        })
        .collect();
    // Metal compiles with fast math, which may reassociate the portable tree's additions:
    // there the comparison is reported, not judged.
    let judged = ctx.adapter_info.backend != wgpu::Backend::Metal;
    Ok(Check {
        name: "reductions",
        passed: differing.is_empty() || !judged,
        summary: if differing.is_empty() {
            format!(
                "the same gradient bits with {} lanes: training does not depend on the \
                 subgroup width",
                names.join(", ")
            )
        } else if judged {
            format!("gradients differ between reductions: {}", differing.join("; "))
        } else {
            format!(
                "gradients differ between reductions ({}): not judged on Metal, whose fast math \
                 may reassociate the sums",
                differing.join("; ")
            )
        },
        figures: BTreeMap::from([
            ("reductions".into(), reductions.len() as f64),
            ("values_compared".into(), compared as f64),
            ("values_differing_reductions".into(), differing.len() as f64),
        ]),
    })
}

/// Two runs with the same seed, refinements included: the same bits at the end. The first
/// is profiled where the adapter has timestamps.
fn check_training(
    ctx: &GpuContext,
    sample: &Arc<Dataset>,
    steps: u32,
    profile: bool,
) -> Result<(Check, Vec<PassTime>), GpuError> {
    let Some(points) = sample.init_points.as_ref() else {
        return Err(GpuError::Validation {
            label: "self-test".into(),
            message: "the sample scene has no init points".into(),
        });
    };
    let init = splats_from_points(points, 3);
    let every = steps / 3;
    let config = TrainConfig {
        steps,
        sh_degree: 3,
        sh_degree_interval: every,
        sh_precision: ShPrecision::F32,
        strategy: Strategy::Default(DefaultConfig {
            start: every,
            refine_every: every,
            ..DefaultConfig::default()
        }),
        max_splats: crate::config::SplatBudget::Count(50_000),
        eval_every: 0,
        seed: 7,
        appearance: crate::appearance::Compensation::Off,
        ..TrainConfig::default()
    };
    let profiled = profile && ctx.device.features().contains(wgpu::Features::TIMESTAMP_QUERY);
    let kernels = Arc::new(TrainKernels::new(ctx)?);
    let started = Instant::now();
    let (first, profile) = train(ctx, &kernels, sample, &init, &config, profiled)?;
    let seconds = started.elapsed().as_secs_f64();
    let (second, _) = train(ctx, &kernels, sample, &init, &config, false)?;
    let differing = snapshot_differences(&first, &second);
    let passes = profile.map(|p| pass_times(&p)).unwrap_or_default();
    let check = Check {
        name: "training",
        passed: differing == 0,
        summary: if differing == 0 {
            format!(
                "two {steps}-step runs with one seed end with the same bits ({} splats, \
                 {:.1} steps/s)",
                first.splats.len(),
                f64::from(steps) / seconds
            )
        } else {
            format!("two runs with one seed differ in {differing} values after {steps} steps")
        },
        figures: BTreeMap::from([
            ("steps".into(), f64::from(steps)),
            ("splats".into(), first.splats.len() as f64),
            ("steps_per_second".into(), f64::from(steps) / seconds),
            ("values_differing".into(), differing as f64),
        ]),
    };
    Ok((check, passes))
}

fn train(
    ctx: &GpuContext,
    kernels: &Arc<TrainKernels>,
    dataset: &Arc<Dataset>,
    init: &Splats,
    config: &TrainConfig,
    profile: bool,
) -> Result<(RunSnapshot, Option<splat_render::Profile>), GpuError> {
    let splats = GpuSplats::upload(ctx, init, Owner::Shared)?;
    let mut trainer = Trainer::start_with(
        Arc::clone(kernels),
        ctx,
        Arc::clone(dataset),
        splats,
        config.clone(),
        ImagePlacement::Resident,
        Owner::Shared,
    )?;
    // The first steps build pipelines and grow buffers: time the rest. The profiler is the
    // device's: it is finished on every way out, a failed step's too.
    let mut profiling = false;
    let mut steps = || -> Result<(), GpuError> {
        for step in 0..config.steps {
            if profile && step == 10 {
                ctx.start_profiling()?;
                profiling = true;
            }
            trainer.step()?;
            while trainer.next_metrics().is_some() {}
        }
        Ok(())
    };
    let trained = steps();
    let profile = if profiling { Some(ctx.finish_profiling()?) } else { None };
    trained?;
    Ok((trainer.snapshot()?, profile))
}

/// Values (parameters, moments, statistics) whose bits differ; every value when the counts do.
fn snapshot_differences(a: &RunSnapshot, b: &RunSnapshot) -> usize {
    fn differ(x: &[f32], y: &[f32]) -> usize {
        if x.len() == y.len() {
            x.iter().zip(y).filter(|(p, q)| p.to_bits() != q.to_bits()).count()
        } else {
            x.len().max(y.len())
        }
    }
    let (s, t) = (&a.splats, &b.splats);
    let mut count = differ(s.means.as_flattened(), t.means.as_flattened())
        + differ(s.log_scales.as_flattened(), t.log_scales.as_flattened())
        + differ(s.rotations.as_flattened(), t.rotations.as_flattened())
        + differ(&s.opacity_logits, &t.opacity_logits)
        + differ(s.sh_dc.as_flattened(), t.sh_dc.as_flattened())
        + differ(&s.sh_rest, &t.sh_rest)
        + differ(&a.optimizer.densify, &b.optimizer.densify);
    for ((m1, v1), (m2, v2)) in a.optimizer.moments.iter().zip(&b.optimizer.moments) {
        count += differ(m1, m2) + differ(v1, v2);
    }
    count
}

/// Median GPU time of each stage, in the order the stages first ran.
fn pass_times(profile: &splat_render::Profile) -> Vec<PassTime> {
    let mut stages: Vec<&str> = Vec::new();
    for frame in &profile.frames {
        for pass in &frame.passes {
            if !stages.contains(&pass.stage) {
                stages.push(pass.stage);
            }
        }
    }
    stages
        .into_iter()
        .map(|stage| {
            let mut ms: Vec<f64> = profile.frames.iter().map(|f| f.stage_ms(stage)).collect();
            ms.sort_by(f64::total_cmp);
            PassTime {
                pass: stage.to_string(),
                median_ms: ms.get(ms.len() / 2).copied().unwrap_or(0.0),
            }
        })
        .collect()
}
