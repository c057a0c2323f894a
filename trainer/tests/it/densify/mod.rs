//! Densification on a real (software or hardware) device, against CPU models of the same
//! decisions written here from the papers' rules.
//!
//! Scenes are small and built in the tests; the densification statistics are written with
//! `queue.write_buffer`, so no rasterizer is involved. Adam's moments are filled with values
//! that name their buffer and position, so a test can tell where every moment came from.
#![allow(clippy::unwrap_used, reason = "test helpers; a failure is a test failure")]
#![allow(clippy::float_cmp, reason = "gathered values must be bit-identical copies")]

use std::time::Instant;

use splat_formats::random::SplitMix64;
use splat_trainer::densify::{
    CompactConfig, DefaultConfig, Densifier, LONG_AXIS_OFFSET, McmcConfig, NOISE_GATE_CENTER,
    NOISE_GATE_SHARPNESS, RefineInputs, RefineStats, SPLIT_SCALE_DIVISOR, SplitRule, Strategy,
    TrainState, relocation,
};
use splat_trainer::formats::Splats;
use splat_trainer::render::gpu_splats::{read_bytes, read_f32, words_per_splat};
use splat_trainer::render::kernels::DispatchLimits;
use splat_trainer::render::wgpu::{self, naga};
use splat_trainer::render::{GpuContext, GpuSplats, Growth, Owner, ShPrecision};

use splat_trainer::init::splats_from_points;
use splat_trainer::train::Trainer;

use crate::helpers::{context, desk_statue, test_config};

const OWNER: Owner = Owner::Run(7);
const SEED: u64 = 0x5EED;
/// A refinement step before the first opacity reset (no size pruning).
const EARLY_STEP: u32 = 600;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn logit(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

/// `n` splats of SH degree `degree`, every value distinct (a function of the splat index),
/// opacity 0.5, log-scales ln 0.001 (small), identity-ish rotation.
fn scene(n: usize, degree: u32) -> Splats {
    let rest = 3 * ((degree as usize + 1).pow(2) - 1);
    Splats {
        means: (0..n).map(|i| [i as f32, 0.5 * i as f32, -(i as f32)]).collect(),
        log_scales: vec![[0.001_f32.ln(); 3]; n],
        rotations: (0..n).map(|i| [1.0, 0.01 * i as f32, 0.0, -0.02 * i as f32]).collect(),
        opacity_logits: vec![0.0; n],
        sh_dc: (0..n).map(|i| [0.1 * i as f32, 0.2, -0.3]).collect(),
        sh_rest: (0..n * rest).map(|k| k as f32 * 0.01).collect(),
        sh_degree: degree,
    }
}

fn upload(ctx: &GpuContext, splats: &Splats) -> TrainState {
    let gpu = GpuSplats::upload(ctx, splats, OWNER).expect("upload");
    TrainState::new(ctx, gpu, OWNER).expect("state")
}

/// The buffers of a state: parameters, then their moments (m, v), in Adam's order.
fn params(state: &TrainState) -> [&wgpu::Buffer; 8] {
    let s = &state.splats;
    [&s.means, &s.log_scales, &s.quats, &s.opacities, &s.sh[0], &s.sh[1], &s.sh[2], &s.sh[3]]
}

/// Floats per splat of the 8 parameter buffers (SH bands as if present).
const FLOATS: [usize; 8] = [3, 3, 4, 1, 3, 9, 15, 21];

fn floats(b: usize, degree: u32) -> usize {
    if b >= 4 && (b - 4) as u32 > degree { 0 } else { FLOATS[b] }
}

/// The value written into moment `which` (0 = m, 1 = v) of buffer `b` at float `k`: exact
/// in f32 and different everywhere.
fn moment_value(which: usize, b: usize, k: usize) -> f32 {
    (1 + which * 8 + b) as f32 * 100_000.0 + k as f32
}

fn fill_moments(ctx: &GpuContext, state: &TrainState) {
    let n = state.splats.count as usize;
    for (b, moments) in state.adam.moments().iter().enumerate() {
        let len = n * floats(b, state.splats.sh_degree);
        if len == 0 {
            continue;
        }
        for (which, buffer) in [&moments.m, &moments.v].into_iter().enumerate() {
            let data: Vec<f32> = (0..len).map(|k| moment_value(which, b, k)).collect();
            ctx.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&data));
        }
    }
}

/// Per buffer: (m, v) as read back.
fn read_moments(ctx: &GpuContext, state: &TrainState) -> Vec<(Vec<f32>, Vec<f32>)> {
    let n = state.splats.count as usize;
    state
        .adam
        .moments()
        .iter()
        .enumerate()
        .map(|(b, m)| {
            let len = n * floats(b, state.splats.sh_degree);
            (read_f32(ctx, &m.m, len).unwrap(), read_f32(ctx, &m.v, len).unwrap())
        })
        .collect()
}

fn write_stats(ctx: &GpuContext, state: &TrainState, stats: &[[f32; 3]]) {
    assert_eq!(stats.len(), state.splats.count as usize);
    if !stats.is_empty() {
        ctx.queue.write_buffer(&state.grads.densify, 0, bytemuck::cast_slice(stats));
    }
}

fn read_stats(ctx: &GpuContext, state: &TrainState) -> Vec<f32> {
    read_f32(ctx, &state.grads.densify, 3 * state.splats.count as usize).unwrap()
}

fn read_grads(ctx: &GpuContext, state: &TrainState) -> Vec<Vec<f32>> {
    let n = state.splats.count as usize;
    let g = &state.grads;
    [
        &g.v_means,
        &g.v_log_scales,
        &g.v_quats,
        &g.v_opacities,
        &g.v_sh[0],
        &g.v_sh[1],
        &g.v_sh[2],
        &g.v_sh[3],
    ]
    .iter()
    .enumerate()
    .map(|(b, buffer)| read_f32(ctx, buffer, n * floats(b, state.splats.sh_degree)).unwrap())
    .collect()
}

fn assert_clean(ctx: &GpuContext) {
    ctx.wait_idle().unwrap();
    let errors = ctx.take_uncaptured_errors();
    assert!(errors.is_empty(), "uncaptured GPU errors: {errors:?}");
}

/// Bytes of every buffer of a state that tests can see (the ledger adds Adam's uniforms).
fn visible_bytes(state: &TrainState) -> u64 {
    let g = &state.grads;
    let grads = [&g.v_means, &g.v_log_scales, &g.v_quats, &g.v_opacities, &g.densify]
        .iter()
        .map(|b| b.size())
        .chain(g.v_sh.iter().map(|b| b.size()))
        .sum::<u64>();
    let moments = state.adam.moments().iter().map(|m| m.m.size() + m.v.size()).sum::<u64>();
    params(state).iter().map(|b| b.size()).sum::<u64>() + grads + moments
}

/// MCMC growing to `cap` splats, its other settings the defaults.
fn mcmc(cap: u32) -> Strategy {
    Strategy::Mcmc(McmcConfig { cap, ..McmcConfig::default() })
}

fn default_strategy() -> Strategy {
    Strategy::Default(DefaultConfig::default())
}

#[allow(clippy::too_many_arguments, reason = "mirrors after_step")]
/// A refinement's inputs.
fn inputs(
    step: u32,
    scene_extent: f32,
    max_splats: u32,
    peak_splats: u32,
    seed: u64,
) -> RefineInputs {
    RefineInputs { step, scene_extent, max_splats, peak_splats, seed }
}

#[expect(clippy::too_many_arguments, reason = "each test's refinement in one line")]
fn refine(
    densifier: &Densifier,
    ctx: &GpuContext,
    strategy: &Strategy,
    step: u32,
    extent: f32,
    max_splats: u32,
    seed: u64,
    state: TrainState,
) -> (TrainState, Option<RefineStats>) {
    let peak = state.splats.count;
    pollster::block_on(densifier.after_step(
        ctx,
        strategy,
        inputs(step, extent, max_splats, peak, seed),
        state,
        OWNER,
    ))
    .expect("after_step")
}

// ---------------------------------------------------------------------------------------
// The CPU model of the default strategy (3DGS densify_and_prune), written from the rules.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Out {
    Keep(usize),
    Clone(usize),
    Child(usize),
}

fn model_default(
    config: &DefaultConfig,
    step: u32,
    extent: f32,
    max_splats: usize,
    splats: &Splats,
    stats: &[[f32; 3]],
) -> Vec<Out> {
    let n = splats.len();
    let late = step > config.opacity_reset_every;
    let max_scale = |ls: [f32; 3]| ls.iter().copied().fold(f32::MIN, f32::max).exp();
    let prune = |o: f32, scale: f32, radius: Option<f32>| {
        sigmoid(o) < config.min_opacity
            || (late
                && (scale > config.max_world_scale * extent
                    || radius.is_some_and(|r| r > config.max_screen_radius)))
    };
    let alive: Vec<bool> = (0..n)
        .map(|i| {
            !prune(splats.opacity_logits[i], max_scale(splats.log_scales[i]), Some(stats[i][2]))
        })
        .collect();
    // (gradient, index, is split, growth in count)
    let mut grow: Vec<(f32, usize, bool, usize)> = Vec::new();
    for i in 0..n {
        let grad = if stats[i][1] > 0.0 { stats[i][0] / stats[i][1] } else { 0.0 };
        if grad < config.grad_threshold {
            continue;
        }
        let scale = max_scale(splats.log_scales[i]);
        if scale <= config.percent_dense * extent {
            if alive[i] {
                grow.push((grad, i, false, 1));
            }
        } else if !prune(splats.opacity_logits[i], scale / SPLIT_SCALE_DIVISOR, None) {
            grow.push((grad, i, true, 2 - usize::from(alive[i])));
        }
    }
    grow.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut total = alive.iter().filter(|&&a| a).count();
    let mut cloned = vec![false; n];
    let mut split = vec![false; n];
    for (_, i, is_split, delta) in grow {
        if total + delta <= max_splats {
            total += delta;
            if is_split { split[i] = true } else { cloned[i] = true }
        }
    }
    let mut out: Vec<Out> = (0..n).filter(|&i| alive[i] && !split[i]).map(Out::Keep).collect();
    out.extend((0..n).filter(|&i| cloned[i]).map(Out::Clone));
    out.extend((0..n).filter(|&i| split[i]).flat_map(|i| [Out::Child(i), Out::Child(i)]));
    assert_eq!(out.len(), total);
    out
}

/// Checks a refined state against the model's outputs: parameters gathered (split children
/// per the 3DGS rule), moments kept or zero, gradients and statistics new and zero.
fn check_against_model(
    ctx: &GpuContext,
    before: &Splats,
    before_moments: &[(Vec<f32>, Vec<f32>)],
    after: &TrainState,
    model: &[Out],
) {
    assert_eq!(after.splats.count as usize, model.len());
    assert_eq!(after.grads.count as usize, model.len());
    let got = after.splats.download(ctx).unwrap();
    let moments = read_moments(ctx, after);
    let degree = before.sh_degree;
    let rest = before.rest_per_splat();
    for (o, out) in model.iter().enumerate() {
        let (Out::Keep(i) | Out::Clone(i) | Out::Child(i)) = *out;
        assert_eq!(got.rotations[o], before.rotations[i], "output {o} ({out:?})");
        assert_eq!(got.opacity_logits[o], before.opacity_logits[i], "output {o}");
        assert_eq!(got.sh_dc[o], before.sh_dc[i], "output {o}");
        assert_eq!(got.sh_rest[o * rest..(o + 1) * rest], before.sh_rest[i * rest..(i + 1) * rest]);
        if let Out::Child(_) = out {
            for c in 0..3 {
                let expected = before.log_scales[i][c] - SPLIT_SCALE_DIVISOR.ln();
                assert!((got.log_scales[o][c] - expected).abs() < 1e-6, "output {o}");
                let sigma = before.log_scales[i].iter().copied().fold(f32::MIN, f32::max).exp();
                let d = got.means[o][c] - before.means[i][c];
                assert!(d.is_finite() && d.abs() <= 7.0 * sigma, "output {o}: offset {d}");
            }
        } else {
            assert_eq!(got.means[o], before.means[i], "output {o}");
            assert_eq!(got.log_scales[o], before.log_scales[i], "output {o}");
        }
        let keep = matches!(out, Out::Keep(_));
        for b in 0..8 {
            let f = floats(b, degree);
            for c in 0..f {
                for which in 0..2 {
                    let got =
                        if which == 0 { moments[b].0[o * f + c] } else { moments[b].1[o * f + c] };
                    let old = if which == 0 {
                        before_moments[b].0[i * f + c]
                    } else {
                        before_moments[b].1[i * f + c]
                    };
                    let expected = if keep { old } else { 0.0 };
                    assert_eq!(got, expected, "output {o} ({out:?}) buffer {b} moment {which}");
                }
            }
        }
    }
    for grad in read_grads(ctx, after) {
        assert!(grad.iter().all(|&g| g == 0.0));
    }
    assert!(read_stats(ctx, after).iter().all(|&s| s == 0.0));
}

// ---------------------------------------------------------------------------------------

#[test]
fn wgsl_parses_and_validates_with_naga() {
    let sources = Densifier::shader_sources();
    assert!(sources.len() >= 5, "gather, split, opacity reset, MCMC regularize and noise");
    for (label, source) in sources {
        let module = naga::front::wgsl::parse_str(&source)
            .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&source)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&source)));
    }
}

/// A hand-made scene: each splat in one situation, checked against the model and by name.
#[test]
fn default_clones_splits_and_prunes() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let extent = 2.0; // percent_dense · extent = 0.02
    let mut splats = scene(6, 1);
    let high = [0.0009, 3.0, 5.0]; // mean gradient 0.0003 ≥ 0.0002
    let low = [0.0003, 3.0, 5.0]; // 0.0001
    // 0: high gradient, small → cloned.   1: high gradient, large → split.
    // 2: low gradient, large → kept.      3: low opacity → pruned.
    // 4: high gradient, small, faint → pruned (and so not cloned).
    // 5: never seen → kept.
    splats.log_scales[1] = [0.05_f32.ln(), 0.01_f32.ln(), 0.03_f32.ln()];
    splats.log_scales[2] = [0.05_f32.ln(); 3];
    splats.opacity_logits[3] = logit(0.004);
    splats.opacity_logits[4] = logit(0.001);
    let stats = [high, high, low, low, high, [0.0, 0.0, 0.0]];
    let state = upload(&ctx, &splats);
    fill_moments(&ctx, &state);
    write_stats(&ctx, &state, &stats);
    let before_moments = read_moments(&ctx, &state);

    let (state, result) =
        refine(&densifier, &ctx, &default_strategy(), EARLY_STEP, extent, 1000, SEED, state);
    let model = model_default(&DefaultConfig::default(), EARLY_STEP, extent, 1000, &splats, &stats);
    assert_eq!(
        model,
        [Out::Keep(0), Out::Keep(2), Out::Keep(5), Out::Clone(0), Out::Child(1), Out::Child(1)]
    );
    assert_eq!(
        result,
        Some(RefineStats { added: 3, removed: 3, relocated: 0, count: 6, opacity_reset: false })
    );
    check_against_model(&ctx, &splats, &before_moments, &state, &model);
    // The two children of one parent are different samples.
    let got = state.splats.download(&ctx).unwrap();
    assert_ne!(got.means[4], got.means[5]);
    assert_clean(&ctx);
}

/// `n` splats of SH degree 3 in every situation a refinement meets (faint or opaque, small or
/// large, seen often or never, with gradients below and above the thresholds), and their
/// statistics, drawn from `rng`.
fn random_situations(rng: &mut SplitMix64, n: usize) -> (Splats, Vec<[f32; 3]>) {
    let mut splats = scene(n, 3);
    let mut stats = Vec::new();
    for i in 0..n {
        splats.opacity_logits[i] = rng.range(-7.0, 3.0);
        splats.log_scales[i] =
            [rng.range(-7.0, -1.0), rng.range(-7.0, -1.5), rng.range(-7.0, -2.0)];
        let visible = (rng.range(0.0, 5.0)).floor();
        stats.push([rng.range(0.0, 0.0012) * visible, visible, rng.range(0.0, 40.0)]);
    }
    (splats, stats)
}

/// Many random splats in every situation, against the model, with SH degree 3.
#[test]
fn default_matches_the_cpu_model_on_a_random_scene() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let n = 600;
    let extent = 1.5;
    let mut rng = SplitMix64::new(42);
    let (splats, stats) = random_situations(&mut rng, n);
    for (step, max_splats) in
        [(EARLY_STEP, 10_000), (EARLY_STEP, 700), (3_100, 10_000), (3_100, 300)]
    {
        let state = upload(&ctx, &splats);
        fill_moments(&ctx, &state);
        write_stats(&ctx, &state, &stats);
        let before_moments = read_moments(&ctx, &state);
        // The screen-radius rule on (off by default), so that every rule is exercised.
        let config = DefaultConfig { max_screen_radius: 20.0, ..DefaultConfig::default() };
        let strategy = Strategy::Default(config.clone());
        let (state, result) =
            refine(&densifier, &ctx, &strategy, step, extent, max_splats, SEED, state);
        let model = model_default(&config, step, extent, max_splats as usize, &splats, &stats);
        let kinds = |f: fn(&Out) -> bool| model.iter().filter(|o| f(o)).count();
        let (kept, clones, children) = (
            kinds(|o| matches!(o, Out::Keep(_))),
            kinds(|o| matches!(o, Out::Clone(_))),
            kinds(|o| matches!(o, Out::Child(_))),
        );
        assert!(clones > 0 && children > 0 && kept < n, "the scene exercises every rule");
        assert!(model.len() <= max_splats as usize);
        let result = result.expect("a refinement");
        assert_eq!(result.count as usize, model.len());
        assert_eq!(result.added as usize, clones + children);
        assert_eq!(result.removed as usize, n - kept);
        check_against_model(&ctx, &splats, &before_moments, &state, &model);
    }
    assert_clean(&ctx);
}

/// 3DGS's split samples each child from N(parent mean, parent covariance).
#[test]
fn split_children_are_distributed_with_the_parent_covariance() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let n = 5000;
    let mean = [1.0_f32, -2.0, 3.0];
    let scales = [0.05_f32, 0.02, 0.1];
    let q = [2.0_f32, 0.4, -0.6, 0.2]; // not normalised
    let mut splats = scene(n, 0);
    splats.means = vec![mean; n];
    splats.log_scales = vec![scales.map(f32::ln); n];
    splats.rotations = vec![q; n];
    let state = upload(&ctx, &splats);
    write_stats(&ctx, &state, &vec![[1.0, 1.0, 1.0]; n]);
    let (state, result) =
        refine(&densifier, &ctx, &default_strategy(), EARLY_STEP, 1.0, 100_000, SEED, state);
    assert_eq!(result.unwrap().count as usize, 2 * n);
    let got = state.splats.download(&ctx).unwrap();

    // Σ = R diag(s²) Rᵀ, R from the normalised quaternion (render/MATH.md).
    let len = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    let [w, x, y, z] = q.map(|v| f64::from(v / len));
    let r = [
        [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
        [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
        [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
    ];
    let sigma = |a: usize, b: usize| {
        (0..3).map(|k| r[a][k] * r[b][k] * f64::from(scales[k]).powi(2)).sum::<f64>()
    };

    let m = got.means.len() as f64;
    let avg: [f64; 3] =
        std::array::from_fn(|c| got.means.iter().map(|p| f64::from(p[c])).sum::<f64>() / m);
    for c in 0..3 {
        let standard_error = (sigma(c, c) / m).sqrt();
        assert!((avg[c] - f64::from(mean[c])).abs() < 4.0 * standard_error, "mean {c}: {avg:?}");
    }
    for a in 0..3 {
        for b in 0..3 {
            let cov = got
                .means
                .iter()
                .map(|p| (f64::from(p[a]) - avg[a]) * (f64::from(p[b]) - avg[b]))
                .sum::<f64>()
                / (m - 1.0);
            // The standard error of a sample covariance is about sqrt((Σaa Σbb + Σab²) / m).
            let tolerance = 4.0 * ((sigma(a, a) * sigma(b, b) + sigma(a, b).powi(2)) / m).sqrt();
            assert!(
                (cov - sigma(a, b)).abs() < tolerance,
                "Σ[{a}][{b}] = {cov}, want {}",
                sigma(a, b)
            );
        }
    }
    // Children of one parent differ; scale, rotation are the rule's.
    assert_ne!(got.means[0], got.means[1]);
    for ls in &got.log_scales {
        for c in 0..3 {
            assert!((ls[c] - (scales[c].ln() - SPLIT_SCALE_DIVISOR.ln())).abs() < 1e-6);
        }
    }
    assert_clean(&ctx);
}

/// Compact's split (the long-axis rule): the two children sit at ± `LONG_AXIS_OFFSET` times
/// the parent's largest scale along that axis of its rotation, only that scale is divided,
/// and each child's opacity is 1 − √(1 − o); rotation and colour are the parent's, moments
/// zero. Checked against the same formulas in f64, for parents whose longest axis is each of
/// the three.
#[test]
fn long_axis_children_sit_on_the_parents_longest_axis() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let compact = Strategy::Compact(CompactConfig::default());
    let Strategy::Compact(config) = &compact else { unreachable!() };
    assert_eq!(config.refine.split, SplitRule::LongAxis, "compact's default");
    let q = [2.0_f32, 0.4, -0.6, 0.2]; // not normalised
    let opacities = [0.3_f32, 0.9, 0.999];
    let parent_scales = [[0.5_f32, 0.2, 0.1], [0.2, 0.5, 0.1], [0.1, 0.2, 0.5]];
    let n = parent_scales.len();
    let mut splats = scene(n, 1);
    splats.log_scales = parent_scales.iter().map(|s| s.map(f32::ln)).collect();
    splats.rotations = vec![q; n];
    splats.opacity_logits = opacities.iter().map(|&o| logit(o)).collect();
    let state = upload(&ctx, &splats);
    fill_moments(&ctx, &state);
    write_stats(&ctx, &state, &vec![[1.0, 1.0, 1.0]; n]);
    // Extent 1: every parent is larger than percent_dense (0.01), so all three split (a
    // peak of 100 leaves compact's pace room for them).
    let (state, result) = pollster::block_on(densifier.after_step(
        &ctx,
        &compact,
        inputs(EARLY_STEP, 1.0, 1000, 100, SEED),
        state,
        OWNER,
    ))
    .expect("after_step");
    let result = result.unwrap();
    assert_eq!((result.count, result.added, result.removed), (6, 6, 3));
    let got = state.splats.download(&ctx).unwrap();

    let len = q.iter().map(|v| f64::from(v * v)).sum::<f64>().sqrt();
    let [w, x, y, z] = q.map(|v| f64::from(v) / len);
    let r = [
        [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
        [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
        [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
    ];
    for (parent, scales) in parent_scales.iter().enumerate() {
        let axis = parent; // the longest axis of parent i is axis i
        let offset = f64::from(LONG_AXIS_OFFSET) * f64::from(scales[axis]);
        let o = f64::from(opacities[parent]);
        let child_opacity = 1.0 - (1.0 - o).sqrt();
        for (side, sign) in [1.0, -1.0].into_iter().enumerate() {
            let c = 2 * parent + side;
            for k in 0..3 {
                let want = f64::from(splats.means[parent][k]) + sign * offset * r[k][axis];
                let got_k = f64::from(got.means[c][k]);
                assert!((got_k - want).abs() < 1e-5, "child {c} mean[{k}]: {got_k}, want {want}");
                let want_scale = if k == axis {
                    f64::from(scales[k]) / f64::from(SPLIT_SCALE_DIVISOR)
                } else {
                    f64::from(scales[k])
                };
                let got_scale = f64::from(got.log_scales[c][k]).exp();
                assert!((got_scale / want_scale - 1.0).abs() < 1e-5, "child {c} scale[{k}]");
            }
            let got_opacity = f64::from(sigmoid(got.opacity_logits[c]));
            assert!((got_opacity - child_opacity).abs() < 1e-5, "child {c}: {got_opacity}");
            assert_eq!(got.rotations[c], q);
            assert_eq!(got.sh_dc[c], splats.sh_dc[parent]);
        }
    }
    for (b, (m, v)) in read_moments(&ctx, &state).iter().enumerate() {
        assert!(m.iter().chain(v).all(|&x| x == 0.0), "buffer {b}: new splats' moments are zero");
    }
    assert_clean(&ctx);
}

#[test]
fn default_growth_stops_at_max_splats_highest_gradients_first() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let n = 100;
    let splats = scene(n, 0);
    // All small and above the threshold; splat i has gradient 0.001 + i · 1e-5.
    let stats: Vec<[f32; 3]> = (0..n).map(|i| [0.001 + i as f32 * 1e-5, 1.0, 1.0]).collect();
    for max_splats in [150_u32, 100, 60, 1000] {
        let state = upload(&ctx, &splats);
        write_stats(&ctx, &state, &stats);
        let (state, result) =
            refine(&densifier, &ctx, &default_strategy(), EARLY_STEP, 1.0, max_splats, SEED, state);
        let expected = (max_splats as usize).clamp(n, 2 * n);
        assert_eq!(state.splats.count as usize, expected, "max_splats {max_splats}");
        assert_eq!(result.unwrap().added as usize, expected - n);
        // The clones are those of the highest gradients.
        let got = state.splats.download(&ctx).unwrap();
        let cloned: Vec<[f32; 3]> = got.means[n..].to_vec();
        let want: Vec<[f32; 3]> = (2 * n - expected..n).map(|i| splats.means[i]).collect();
        assert_eq!(cloned, want);
    }
    assert_clean(&ctx);
}

/// Statistics of `n` splats all above the compact threshold (0.0028): splat i has statistic
/// 0.003 + i · 1e-5, so the highest are the last.
fn rising_gradients(n: usize) -> Vec<[f32; 3]> {
    (0..n).map(|i| [0.003 + i as f32 * 1e-5, 1.0, 1.0]).collect()
}

/// Compact refinement: the 3DGS decisions, but a refinement leaves at most 10% more splats
/// than the run's peak (here the count it found; rounded up), the highest gradients first,
/// and what it prunes makes room.
#[test]
fn compact_growth_is_paced_highest_gradients_first() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let compact = Strategy::Compact(CompactConfig::default());
    let n = 100;
    let mut splats = scene(n, 0);
    let stats = rising_gradients(n);
    let state = upload(&ctx, &splats);
    write_stats(&ctx, &state, &stats);
    let (state, result) = refine(&densifier, &ctx, &compact, EARLY_STEP, 1.0, 1000, SEED, state);
    assert_eq!(state.splats.count, 110);
    assert_eq!(result.unwrap().added, 10);
    let got = state.splats.download(&ctx).unwrap();
    assert_eq!(got.means[n..].to_vec(), splats.means[n - 10..].to_vec(), "the 10 highest");

    // Twenty transparent splats are pruned: the output may hold 110, so 30 clones fit.
    for opacity in &mut splats.opacity_logits[..20] {
        *opacity = logit(0.001);
    }
    let state = upload(&ctx, &splats);
    write_stats(&ctx, &state, &stats);
    let (state, result) = refine(&densifier, &ctx, &compact, EARLY_STEP, 1.0, 1000, SEED, state);
    let result = result.unwrap();
    assert_eq!((state.splats.count, result.added, result.removed), (110, 30, 20));

    // A statistic the 3DGS threshold (0.0002) grows but the compact one does not.
    let state = upload(&ctx, &scene(n, 0));
    write_stats(&ctx, &state, &vec![[0.0005, 1.0, 1.0]; n]);
    let (state, result) = refine(&densifier, &ctx, &compact, EARLY_STEP, 1.0, 1000, SEED, state);
    assert_eq!((state.splats.count, result.unwrap().added), (100, 0));
    drop(state);

    // max_splats caps as well, and a handful of splats still grows by one.
    let state = upload(&ctx, &scene(n, 0));
    write_stats(&ctx, &state, &stats);
    let (state, _) = refine(&densifier, &ctx, &compact, EARLY_STEP, 1.0, 104, SEED, state);
    assert_eq!(state.splats.count, 104);
    let state = upload(&ctx, &scene(3, 0));
    write_stats(&ctx, &state, &stats[..3]);
    let (state, _) = refine(&densifier, &ctx, &compact, EARLY_STEP, 1.0, 1000, SEED, state);
    assert_eq!(state.splats.count, 4);
    assert_clean(&ctx);
}

/// A run pruned below its peak (lego's random points in empty space) grows back to 10%
/// above the peak at its next refinement, not 10% above what the prune left.
#[test]
fn compact_refills_up_to_its_peak() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let compact = Strategy::Compact(CompactConfig::default());
    let n = 100;
    let splats = scene(n, 0);
    let stats = rising_gradients(n);
    let grow = |peak: u32, max_splats: u32| {
        let state = upload(&ctx, &splats);
        write_stats(&ctx, &state, &stats);
        let (state, result) = pollster::block_on(densifier.after_step(
            &ctx,
            &compact,
            inputs(EARLY_STEP, 1.0, max_splats, peak, SEED),
            state,
            OWNER,
        ))
        .expect("after_step");
        (state.splats.count, result.unwrap().added)
    };
    // Peak 150: up to 165, the highest 65 gradients cloned (100 could be).
    assert_eq!(grow(150, 1000), (165, 65));
    // A peak below the count is the count's.
    assert_eq!(grow(0, 1000), (110, 10));
    // max_splats still caps.
    assert_eq!(grow(150, 130), (130, 30));
    assert_clean(&ctx);
}

/// Compact grows by the absolute statistic over its own threshold, one for every image size;
/// 3dgs by 3DGS's signed statistic over 3DGS's.
#[test]
fn compact_scores_growth_by_the_absolute_statistic() {
    let compact = Strategy::Compact(CompactConfig::default());
    assert_eq!(compact.growth(), Growth::Absolute);
    assert_eq!(compact.rules_3dgs().unwrap().grad_threshold.to_bits(), 0.0028_f32.to_bits());
    assert_eq!(default_strategy().growth(), Growth::Signed);
    assert_eq!(
        default_strategy().rules_3dgs().unwrap().grad_threshold.to_bits(),
        2e-4_f32.to_bits()
    );
    assert_eq!(mcmc(10).growth(), Growth::Signed);
}

/// What the window shows as the expected count: the paced growth over the run's refinements.
#[test]
fn most_splats_follows_each_strategys_growth() {
    let compact = Strategy::Compact(CompactConfig::default());
    // 3DGS refines every 100 steps after step 500: 15 refinements up to step 2000.
    let mut count = 1000_u32;
    for _ in 0..15 {
        count += count.div_ceil(10);
    }
    assert_eq!(compact.most_splats(1000, 2000, 3_000_000), Some(count));
    assert_eq!(compact.most_splats(1000, 499, 3_000_000), Some(1000));
    assert_eq!(compact.most_splats(1000, 2000, 3000), Some(3000));
    assert_eq!(compact.most_splats(5000, 0, 3000), Some(3000));
    assert_eq!(mcmc(2000).most_splats(1000, 30_000, 3_000_000), Some(2000));
    assert_eq!(mcmc(2000).most_splats(1000, 30_000, 1500), Some(1500));
    assert_eq!(default_strategy().most_splats(1000, 2000, 3_000_000), None);
}

/// Compact's opacity regulariser acts while the run is at its peak and refinements go on;
/// MCMC's regularisers act all run long; 3DGS has none.
#[test]
fn regularisers_act_where_each_strategy_needs_them() {
    let compact = Strategy::Compact(CompactConfig::default());
    assert_eq!(compact.regularisers(1, 1000, 1000), Some([0.01, 0.0]), "a fresh run");
    assert_eq!(compact.regularisers(14_999, 1000, 1000), Some([0.01, 0.0]));
    assert_eq!(compact.regularisers(15_000, 1000, 1000), None, "after the last refinement");
    assert_eq!(compact.regularisers(600, 999, 1000), None, "below its peak: room to grow");
    assert_eq!(mcmc(2000).regularisers(600, 999, 1000), Some([0.01, 0.01]));
    assert_eq!(mcmc(2000).regularisers(40_000, 999, 1000), Some([0.01, 0.01]));
    assert_eq!(default_strategy().regularisers(1, 1000, 1000), None);
}

/// Size pruning (screen radius where one is set, world scale) starts after the first opacity
/// reset.
#[test]
fn default_prunes_big_splats_only_after_the_first_reset() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let extent = 1.0;
    let mut splats = scene(3, 0);
    splats.log_scales[1] = [0.2_f32.ln(); 3]; // > 0.1 · extent
    let stats = [[0.0, 1.0, 25.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]; // 0 spans 25 px > 20
    let screen = Strategy::Default(DefaultConfig { max_screen_radius: 20.0, ..Default::default() });
    for (step, survivors) in [(EARLY_STEP, 3), (3_000, 3), (3_100, 1)] {
        let state = upload(&ctx, &splats);
        write_stats(&ctx, &state, &stats);
        let (state, _) = refine(&densifier, &ctx, &screen, step, extent, 1000, SEED, state);
        assert_eq!(state.splats.count, survivors, "step {step}");
        if survivors == 1 {
            assert_eq!(state.splats.download(&ctx).unwrap().means[0], splats.means[2]);
        }
    }
    // By default the screen radius prunes nothing: only splat 1 (too large in the world) goes.
    let state = upload(&ctx, &splats);
    write_stats(&ctx, &state, &stats);
    let (state, _) =
        refine(&densifier, &ctx, &default_strategy(), 3_100, extent, 1000, SEED, state);
    assert_eq!(state.splats.count, 2);
    drop(state);
    assert_clean(&ctx);
}

/// What the trainer's guard tells: a refinement that left fewer than half the splats it found
/// (the full-resolution collapse of issue 35: 9,776 splats to 157 at step 3,100).
#[test]
fn a_refinement_that_halves_the_count_is_told() {
    let stats = |added, removed, count| RefineStats { added, removed, count, ..Default::default() };
    let collapse = stats(12, 9_631, 157);
    assert_eq!(collapse.before(), 9_776);
    assert!(collapse.halved());
    assert!(!stats(0, 50, 50).halved(), "exactly half left");
    assert!(stats(0, 51, 49).halved());
    assert!(!stats(10_000, 5_000, 15_000).halved(), "split parents replaced by their children");
    assert!(!stats(0, 0, 0).halved(), "nothing to lose");
}

#[test]
fn opacity_reset_at_step_3000() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let mut splats = scene(4, 1);
    splats.opacity_logits = vec![logit(0.9), logit(0.008), logit(0.02), logit(0.5)];
    let state = upload(&ctx, &splats);
    fill_moments(&ctx, &state);
    let before_moments = read_moments(&ctx, &state);
    let strategy = default_strategy();
    let (state, result) = refine(&densifier, &ctx, &strategy, 3_000, 1.0, 1000, SEED, state);
    assert_eq!(
        result,
        Some(RefineStats { added: 0, removed: 0, relocated: 0, count: 4, opacity_reset: true })
    );
    // Scheduled by step 3,000, applied before step 3,001's forward: until then an evaluation
    // sees the splats step 3,000 trained.
    let untouched = state.splats.download(&ctx).unwrap();
    assert_eq!(untouched.opacity_logits, splats.opacity_logits);
    assert_eq!(read_moments(&ctx, &state), before_moments);
    densifier.reset_scheduled_by(&ctx, &strategy, 2_999, &state).unwrap();
    densifier.reset_scheduled_by(&ctx, &strategy, 0, &state).unwrap();
    assert_eq!(state.splats.download(&ctx).unwrap().opacity_logits, splats.opacity_logits);
    // Twice: a step begun again applies it again, harmlessly.
    densifier.reset_scheduled_by(&ctx, &strategy, 3_000, &state).unwrap();
    densifier.reset_scheduled_by(&ctx, &strategy, 3_000, &state).unwrap();
    let got = state.splats.download(&ctx).unwrap();
    let cap = logit(0.01);
    for (i, &o) in got.opacity_logits.iter().enumerate() {
        assert_eq!(o, splats.opacity_logits[i].min(cap), "splat {i}");
    }
    let moments = read_moments(&ctx, &state);
    for (b, (m, v)) in moments.iter().enumerate() {
        if b == 3 {
            assert!(m.iter().chain(v).all(|&x| x == 0.0), "opacity moments are zeroed");
        } else {
            assert_eq!((m, v), (&before_moments[b].0, &before_moments[b].1), "buffer {b} kept");
        }
    }
    assert_eq!(got.means, splats.means);
    assert_clean(&ctx);
}

/// The trainer applies a scheduled reset before the next step's forward: an evaluation or a
/// download right after the step that scheduled it sees the splats that step trained, and the
/// next step starts from the reset ones.
#[test]
fn a_run_resets_opacity_before_the_step_after_the_scheduled_one() {
    let data = desk_statue(32);
    let init = splats_from_points(data.init_points.as_ref().unwrap(), 0);
    let ctx = context();
    // No refinement, a reset after every 5th step.
    let refine = DefaultConfig { start: u32::MAX, opacity_reset_every: 5, ..Default::default() };
    let config = test_config(6, Strategy::Default(refine.clone()));
    let mut trainer = Trainer::new(&ctx, data, &init, config, OWNER).unwrap();
    for _ in 0..5 {
        trainer.step().unwrap();
    }
    let opacities = |trainer: &Trainer| -> Vec<f32> {
        trainer.splats().unwrap().opacity_logits.iter().map(|&l| sigmoid(l)).collect()
    };
    let trained = opacities(&trainer);
    assert!(
        trained.iter().any(|&o| o > 2.0 * refine.opacity_reset_value),
        "step 5's splats as trained (initial opacity 0.1)"
    );
    trainer.step().unwrap();
    // Reset to 0.01, then one Adam step on the logits (learning rate 0.05 at most).
    let bound = sigmoid(logit(refine.opacity_reset_value) + 0.06);
    let after = opacities(&trainer);
    assert!(
        after.iter().all(|&o| o <= bound),
        "largest {:?}",
        after.iter().copied().reduce(f32::max)
    );
    drop(trainer);
    assert_clean(&ctx);
}

#[test]
fn unscheduled_steps_change_nothing() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let mut splats = scene(20, 1);
    splats.opacity_logits[3] = logit(0.001); // would be pruned / relocated
    let stats: Vec<[f32; 3]> = (0..20).map(|i| [0.01, 1.0, i as f32]).collect(); // all would grow
    let mcmc = Strategy::Mcmc(McmcConfig::default());
    let cases = [
        (
            default_strategy(),
            vec![1, 99, 100, 499, 500, 501, 550, 599, 3_001, 15_000, 15_100, 18_000],
        ),
        (mcmc, vec![1, 100, 500, 501, 650, 25_000, 25_100]),
    ];
    for (strategy, steps) in cases {
        let mut state = upload(&ctx, &splats);
        fill_moments(&ctx, &state);
        write_stats(&ctx, &state, &stats);
        let moments = read_moments(&ctx, &state);
        let bytes = ctx.ledger().owner_bytes(OWNER);
        for step in steps {
            let (next, result) = refine(&densifier, &ctx, &strategy, step, 1.0, 1000, SEED, state);
            assert_eq!(result, None, "step {step}");
            state = next;
            assert_eq!(ctx.ledger().owner_bytes(OWNER), bytes);
        }
        assert_eq!(state.splats.download(&ctx).unwrap(), splats);
        assert_eq!(read_moments(&ctx, &state), moments);
        assert_eq!(read_stats(&ctx, &state), stats.as_flattened());
    }
    assert_clean(&ctx);
}

/// A refinement that changes nothing still clears the statistics (3DGS zeroes its
/// accumulators after every densification).
#[test]
fn statistics_are_cleared_by_every_refinement() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let splats = scene(10, 0);
    let state = upload(&ctx, &splats);
    write_stats(&ctx, &state, &[[0.0001, 1.0, 3.0]; 10]); // below the threshold
    let (state, result) =
        refine(&densifier, &ctx, &default_strategy(), EARLY_STEP, 1.0, 1000, SEED, state);
    assert_eq!(result.unwrap().count, 10);
    assert!(read_stats(&ctx, &state).iter().all(|&s| s == 0.0));
    assert_eq!(state.splats.download(&ctx).unwrap(), splats);
    assert_clean(&ctx);
}

mod edge_cases;
mod mcmc;
mod memory;
