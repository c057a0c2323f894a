//! Densification: the standard 3DGS adaptive density control ([`DefaultConfig`]) and the
//! MCMC strategy ([`McmcConfig`]), on the splats, gradients and Adam moments of a run.
//!
//! "Plan on the CPU, move data on the GPU": a refinement reads back only what its decisions
//! need (opacity logits, log-scales and, for the default strategy, the densification
//! statistics: 28 bytes a splat), decides on the CPU with a seeded `SplitMix64`
//! (plan.rs), uploads the plan (for each output splat: its source, flags and new values,
//! 32 bytes) and runs one gather dispatch per parameter buffer (gather.wgsl), which builds the
//! new parameter buffer and its two Adam moment buffers from the old ones: moments are copied
//! for kept splats and zero for new ones. Split children get their random offset from a
//! hash of their seed on the GPU (split.wgsl), so a run is deterministic for a seed.
//!
//! The new [`GpuSplats`], [`SplatGradients`] (zero, densification statistics included) and
//! [`AdamState`] are allocated with the new count, and the old ones dropped, which removes
//! them from the memory ledger. A refinement that changes nothing keeps the buffers and
//! only clears the statistics.
//!
//! Call order in a training step (1-based `step`):
//! 1. forward, loss, backward (the rasterizer writes gradients and adds statistics);
//! 2. MCMC and compact: [`Densifier::regularize`] adds the regularisers' gradients;
//! 3. Adam;
//! 4. [`Densifier::after_step`] refines / resets opacities when the strategy schedules it;
//! 5. MCMC only: [`Densifier::mcmc_noise`] perturbs positions (gsplat's
//!    `step_post_backward`: refine first, then noise, both after the optimizer step).

mod kernels;
mod plan;

use std::ops::Range;
use std::time::Instant;

use splat_render::gpu_splats::{
    PARAM_BUFFERS, ShPrecision, param_buffer_bytes, param_label, read_f32_async, splat_window,
    splat_windows, words_per_splat,
};
use splat_render::kernels::DispatchLimits;
use splat_render::wgpu;
use splat_render::{Category, GpuBuffer, GpuContext, GpuError, GpuSplats, Owner, SplatGradients};

use crate::optim::{AdamState, Moments};
use kernels::{GatherJob, GatherUniform, Kernel, Kernels, Role, UNIFORM_SLOT, too_many};
pub use plan::{
    LONG_AXIS_OFFSET, RELOCATION_MAX_COPIES, SPLIT_CHILDREN, SPLIT_SCALE_DIVISOR, relocation,
};
use plan::{Plan, Readback, logit};
use splat_formats::random::SplitMix64;

/// What densification reallocates together: the parameters, their gradients (and
/// densification statistics) and Adam's moments, all with the same splat count.
#[derive(Debug)]
pub struct TrainState {
    pub splats: GpuSplats,
    pub grads: SplatGradients,
    pub adam: AdamState,
}

impl TrainState {
    /// Zero gradients and moments for `splats`.
    pub fn new(ctx: &GpuContext, splats: GpuSplats, owner: Owner) -> Result<Self, GpuError> {
        let grads = SplatGradients::new(ctx, &splats, owner)?;
        let adam = AdamState::new(ctx, &splats, owner)?;
        Ok(Self { splats, grads, adam })
    }
}

/// The 3DGS adaptive density control (Kerbl et al. 2023, section 5 and the reference code's
/// `OptimizationParams` / `densify_and_prune`; gsplat's `DefaultStrategy`). Defaults are the
/// paper's.
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultConfig {
    /// Refine every this many steps (`densification_interval`).
    pub refine_every: u32,
    /// Refine only after this step (`densify_from_iter`).
    pub start: u32,
    /// Refine and reset opacities only before this step (`densify_until_iter`).
    pub stop: u32,
    /// Grow splats whose mean NDC gradient norm (statistics sum / visible count) is at least
    /// this (`densify_grad_threshold`).
    pub grad_threshold: f32,
    /// Clone when the largest scale is ≤ this × scene extent, split when larger
    /// (`percent_dense`).
    pub percent_dense: f32,
    /// Prune below this opacity (after the sigmoid).
    pub min_opacity: f32,
    /// After the first opacity reset (without resets: from the start), prune splats whose
    /// largest screen radius since the last refinement exceeded this many pixels of the
    /// training images (3DGS's `size_threshold`).
    /// Off (infinite) by default: in pixels it is 8 times as strict at 1,280 px as at 160 px,
    /// and at full resolution it deleted most of a run's splats at the refinement after each
    /// reset (BENCHMARKS.md, "The default schedule"). 3DGS's own code never applied it (its
    /// statistic was cleared before the prune), and gsplat leaves it off.
    pub max_screen_radius: f32,
    /// After the first opacity reset (without resets: from the start), prune splats whose
    /// largest scale exceeds this × scene extent (3DGS's `big_points_ws`).
    pub max_world_scale: f32,
    /// Reset opacities every this many steps (`opacity_reset_interval`; 0: never).
    pub opacity_reset_every: u32,
    /// The opacity (after the sigmoid) a reset clamps to.
    pub opacity_reset_value: f32,
    /// Where a split puts its two children and what it gives them.
    pub split: SplitRule,
}

/// How a refinement splits a large splat into [`SPLIT_CHILDREN`] children (the parent goes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitRule {
    /// 3DGS's `densify_and_split`: each child's mean drawn from N(parent mean, parent
    /// covariance), every scale divided by [`SPLIT_SCALE_DIVISOR`], the parent's opacity.
    /// Two children of the parent's opacity at random places, each thinner on every axis,
    /// are not the parent: a refinement that splits the large splats of a view takes
    /// several dB from it at once (desk-penguin at 96 px, step 600: 30.9 → 20.1 dB), and
    /// the run spends the next hundred steps winning it back.
    Sampled,
    /// Along the parent's longest axis (as in Deng et al. 2024, "Efficient Density Control
    /// for 3D Gaussian Splatting"): the children at ± [`LONG_AXIS_OFFSET`] times that
    /// scale from the parent's mean, that scale divided by [`SPLIT_SCALE_DIVISOR`] and the
    /// others kept, each of opacity 1 − √(1 − o), so that the two, where they overlap, are
    /// as opaque as the parent was. Deterministic: no sample to draw.
    LongAxis,
}

impl Default for DefaultConfig {
    fn default() -> Self {
        Self {
            refine_every: 100,
            start: 500,
            stop: 15_000,
            grad_threshold: 0.0002,
            percent_dense: 0.01,
            min_opacity: 0.005,
            max_screen_radius: f32::INFINITY,
            max_world_scale: 0.1,
            opacity_reset_every: 3_000,
            opacity_reset_value: 0.01,
            split: SplitRule::Sampled,
        }
    }
}

impl DefaultConfig {
    /// Whether `step` (1-based) refines: 3DGS's `iteration > densify_from_iter and iteration %
    /// densification_interval == 0`, inside `iteration < densify_until_iter`.
    #[must_use]
    pub fn refines_at(&self, step: u32) -> bool {
        step > self.start
            && step < self.stop
            && self.refine_every > 0
            && step.is_multiple_of(self.refine_every)
    }

    /// Whether `step` resets opacities (after the refinement of that step, as in 3DGS; applied
    /// before the next step's forward, [`Densifier::reset_scheduled_by`]).
    #[must_use]
    pub fn resets_opacity_at(&self, step: u32) -> bool {
        step > 0
            && step < self.stop
            && self.opacity_reset_every > 0
            && step.is_multiple_of(self.opacity_reset_every)
    }
}

/// The MCMC strategy (Kheradmand et al. 2024, "3D Gaussian Splatting as Markov Chain Monte
/// Carlo"; gsplat's `MCMCStrategy` and `simple_trainer`'s MCMC settings). Defaults are gsplat's.
#[derive(Clone, Debug, PartialEq)]
pub struct McmcConfig {
    /// Most splats (gsplat's `cap_max`); `after_step`'s `max_splats` caps it further.
    pub cap: u32,
    pub refine_every: u32,
    /// Refine only after this step.
    pub start: u32,
    /// Refine only before this step.
    pub stop: u32,
    /// Splats at or below this opacity (after the sigmoid) are dead and relocated.
    pub min_opacity: f32,
    /// Each refinement grows the count to `floor(N · (1 + grow_fraction))` (at most the cap).
    pub grow_fraction: f64,
    /// Position noise scale, multiplied by the means' learning rate.
    pub noise_lr: f32,
    /// Weight of the mean opacity (after the sigmoid) in the loss.
    pub opacity_reg: f32,
    /// Weight of the mean scale (after the exponential) in the loss.
    pub scale_reg: f32,
}

impl Default for McmcConfig {
    fn default() -> Self {
        Self {
            cap: 1_000_000,
            refine_every: 100,
            start: 500,
            stop: 25_000,
            min_opacity: 0.005,
            grow_fraction: 0.05,
            noise_lr: 5e5,
            opacity_reg: 0.01,
            scale_reg: 0.01,
        }
    }
}

impl McmcConfig {
    /// Whether `step` refines (gsplat: `refine_start_iter < step < refine_stop_iter` and
    /// `step % refine_every == 0`).
    #[must_use]
    pub fn refines_at(&self, step: u32) -> bool {
        step > self.start
            && step < self.stop
            && self.refine_every > 0
            && step.is_multiple_of(self.refine_every)
    }
}

/// The noise gate's steepness `k` (gsplat's `op_sigmoid(x, k=100, x0=0.995)`).
pub const NOISE_GATE_SHARPNESS: f32 = 100.0;
/// The noise gate's centre `x0`, on `1 − opacity` (gsplat, 3DGS-MCMC: fixed, not tied to
/// `min_opacity`).
pub const NOISE_GATE_CENTER: f32 = 0.995;

/// Compact refinement: the 3DGS rules ([`DefaultConfig`]) with growth paced and useless
/// splats pushed out. A refinement leaves at most `grow_fraction` more splats than the most
/// the run has had (its peak, the initial splats included), the candidates with the highest
/// mean gradient first: what it prunes makes room, and a run pruned far below its peak (random
/// points in empty space, faded by the alpha supervision) grows back to it without waiting.
/// An opacity regulariser (the mean opacity in the loss, as in 3DGS-MCMC) lets splats that
/// nothing needs fade below `min_opacity`, where the prune takes them, while the run is at its
/// peak: there growth is held to the pace and fading makes room; below it (lego's random
/// points pruned) there is room already, and the regulariser would only dim the picture.
///
/// The regulariser does the opacity reset's work, so compact has none, nor 3DGS's prune of
/// splats large in the world: a reset clears Adam's opacity moments, after which the
/// regulariser's tiny gradient alone moves an unseen splat a full step a step, below the
/// visibility cut within ten steps and then to the prune; the world-size prune (a tenth of
/// the cameras' extent) deletes the background of a capture whose scene lies far beyond its
/// cameras. Either took several dB from every run that crossed step 3,000 (BENCHMARKS.md,
/// "The default schedule").
///
/// It splits along the longest axis ([`SplitRule::LongAxis`]): 3DGS's sampled split took
/// 10 dB from the picture at every early refinement (BENCHMARKS.md, "Splits that keep the
/// picture").
#[derive(Clone, Debug, PartialEq)]
pub struct CompactConfig {
    /// Schedule, growth and prune thresholds (opacity resets and size prunes: off).
    pub refine: DefaultConfig,
    /// Most splats one refinement may leave above the run's peak, as a fraction of the peak.
    pub grow_fraction: f64,
    /// Weight of the mean opacity (after the sigmoid) in the loss, while the run is at its
    /// peak.
    pub opacity_reg: f32,
}

impl Default for CompactConfig {
    /// Measured on the shared captures (BENCHMARKS.md, "Compact refinement"): 4× the 3DGS
    /// gradient threshold keeps the splats that only chase noise from growing at 96–160 px
    /// (it falls with larger images, [`CompactConfig::grad_threshold_at`]), and 10% a
    /// refinement lets a run grow to about 4× its peak in its first 2,000 steps.
    fn default() -> Self {
        Self {
            refine: DefaultConfig {
                grad_threshold: 0.0008,
                opacity_reset_every: 0,
                max_world_scale: f32::INFINITY,
                split: SplitRule::LongAxis,
                ..DefaultConfig::default()
            },
            grow_fraction: 0.1,
            opacity_reg: 0.01,
        }
    }
}

/// The longest image side (pixels) up to which compact grows at its own gradient threshold
/// (`CompactConfig::refine.grad_threshold`, measured at 96–160 px); above it the threshold
/// falls as 1 / size to 3DGS's (0.0002, tuned for about 1,000 px) at 4× this size
/// ([`CompactConfig::grad_threshold_at`]).
pub const COMPACT_THRESHOLD_SIZE: u32 = 160;

impl CompactConfig {
    /// The gradient threshold for growth on images whose longest side is `image_size` pixels:
    /// `refine.grad_threshold` up to [`COMPACT_THRESHOLD_SIZE`], then scaled by
    /// `COMPACT_THRESHOLD_SIZE / image_size`, never below 3DGS's threshold.
    ///
    /// Why: the mean NDC gradient of a splat whose pixels disagree in sign (fine texture it is
    /// too large for, noise) falls as 1 / resolution, while a coherent error's does not. At
    /// 160 px the 4× threshold keeps splats that chase noise from growing; at full resolution
    /// it kept lego at its 20,000 initial splats (H200, 800 px: 29.63 dB at step 9,000, where
    /// 0.0004 reached 32.06 with 60k splats and 0.0002 33.75 with 187k, as 3dgs's 33.92 at
    /// 8,000; BENCHMARKS.md, "Compact's gradient threshold at full resolution").
    #[must_use]
    pub fn grad_threshold_at(&self, image_size: u32) -> f32 {
        let floor = DefaultConfig::default().grad_threshold.min(self.refine.grad_threshold);
        let scale = COMPACT_THRESHOLD_SIZE as f32 / image_size.max(1) as f32;
        (self.refine.grad_threshold * scale.min(1.0)).max(floor)
    }
}

/// What a refinement needs of the run besides its state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RefineInputs {
    /// The step just taken (1-based).
    pub step: u32,
    /// 3DGS's scene extent (the cameras' spread), for the clone-or-split size rule.
    pub scene_extent: f32,
    /// The run's cap on splats.
    pub max_splats: u32,
    /// The most splats the run has had (compact's pace).
    pub peak_splats: u32,
    /// The run's seed (sampled splits, MCMC).
    pub seed: u64,
    /// The longest side of the step's training images in pixels (compact's threshold).
    pub image_size: u32,
}

/// How many of the steps `1..=steps` refine on a schedule of every `every` steps after
/// `start` and before `stop` (the `refines_at` of both configs).
fn refinements_up_to(steps: u32, start: u32, stop: u32, every: u32) -> u32 {
    let last = steps.min(stop.saturating_sub(1));
    if every == 0 || last <= start { 0 } else { last / every - start / every }
}

/// The most splats a compact refinement may leave in a run whose peak is `count`: `count`
/// plus `ceil(count · fraction)`, so that even a handful of splats can grow.
fn paced_growth(count: u64, fraction: f64) -> u64 {
    count.saturating_add((count as f64 * fraction).ceil() as u64)
}

/// How a run densifies.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    Default(DefaultConfig),
    Mcmc(McmcConfig),
    Compact(CompactConfig),
}

impl Strategy {
    /// Whether `step` refines (the state is then rebuilt: whoever keeps bind groups of its
    /// buffers lets them go first, so that the old buffers really go group by group).
    #[must_use]
    pub fn refines_at(&self, step: u32) -> bool {
        match self {
            Self::Default(config) => config.refines_at(step),
            Self::Mcmc(config) => config.refines_at(step),
            Self::Compact(config) => config.refine.refines_at(step),
        }
    }

    /// The 3DGS rules the strategy refines by (its schedule, thresholds and resets): the
    /// default's own, compact's `refine`; none for MCMC.
    #[must_use]
    pub fn rules_3dgs(&self) -> Option<&DefaultConfig> {
        match self {
            Self::Default(config) => Some(config),
            Self::Compact(config) => Some(&config.refine),
            Self::Mcmc(_) => None,
        }
    }

    /// Its name on the command line and in checkpoints' logs: `compact`, `3dgs` or `mcmc`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Default(_) => "3dgs",
            Self::Mcmc(_) => "mcmc",
            Self::Compact(_) => "compact",
        }
    }

    /// The most splats a run of `steps` steps from `initial` splats can reach, where the
    /// strategy bounds it (compact: its paced growth, from a peak that grows no faster; MCMC:
    /// its cap), never more than `max_splats`. `None` for 3DGS, which grows as far as its
    /// gradients ask (up to `max_splats`).
    #[must_use]
    pub fn most_splats(&self, initial: u32, steps: u32, max_splats: u32) -> Option<u32> {
        let (grow, refinements, cap): (&dyn Fn(u64) -> u64, u32, u32) = match self {
            Self::Default(_) => return None,
            Self::Mcmc(config) => (
                &|n| (n as f64 * (1.0 + config.grow_fraction)).floor() as u64,
                refinements_up_to(steps, config.start, config.stop, config.refine_every),
                config.cap.min(max_splats),
            ),
            Self::Compact(config) => {
                let refine = &config.refine;
                (
                    &|n| paced_growth(n, config.grow_fraction),
                    refinements_up_to(steps, refine.start, refine.stop, refine.refine_every),
                    max_splats,
                )
            }
        };
        let cap = u64::from(cap);
        let mut count = u64::from(initial).min(cap);
        for _refinement in 0..refinements {
            if count >= cap {
                break;
            }
            count = grow(count).min(cap);
        }
        Some(count as u32)
    }

    /// Weights of the regularisers `opacity_reg · mean(sigmoid(o)) + scale_reg · mean(exp(s))`
    /// the strategy adds to the loss at `step` of a run of `splats` splats whose peak is
    /// `peak_splats` (capped at the run's `max_splats`), if any. MCMC's act all run long (as
    /// gsplat's). Compact's acts while refinements prune what it fades (after them it would
    /// only dim) and the run is at its peak ([`CompactConfig`] says why).
    #[must_use]
    pub fn regularisers(&self, step: u32, splats: u32, peak_splats: u32) -> Option<[f32; 2]> {
        let weights = match self {
            Self::Mcmc(config) => [config.opacity_reg, config.scale_reg],
            Self::Compact(config) if step < config.refine.stop && splats >= peak_splats => {
                [config.opacity_reg, 0.0]
            }
            Self::Default(_) | Self::Compact(_) => return None,
        };
        let [opacity, scale] = weights;
        (opacity != 0.0 || scale != 0.0).then_some(weights)
    }
}

/// What one [`Densifier::after_step`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefineStats {
    /// New splats: clones and split children (default), sampled copies (MCMC).
    pub added: u32,
    /// Old splats gone: pruned and split parents (default); 0 for MCMC.
    pub removed: u32,
    /// Dead splats moved onto live ones (MCMC; the count does not change).
    pub relocated: u32,
    /// Splats now.
    pub count: u32,
    /// Whether the schedule resets opacities after this step (default strategy; applied
    /// before the next step's forward, [`Densifier::reset_scheduled_by`]).
    pub opacity_reset: bool,
}

impl RefineStats {
    /// Splats before the refinement.
    #[must_use]
    pub fn before(&self) -> u32 {
        (self.count + self.removed).saturating_sub(self.added)
    }

    /// Whether the refinement left fewer than half the splats it found: no schedule means
    /// to, so the trainer says so when it happens (a collapse of the run).
    #[must_use]
    pub fn halved(&self) -> bool {
        u64::from(self.count) * 2 < u64::from(self.before())
    }
}

/// The densification kernels. Make once per device.
#[derive(Debug)]
pub struct Densifier {
    kernels: Kernels,
    /// Splats a gather binds the rows of (`splat_window`).
    window: u32,
}

const PARAM_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC);

/// The split kernel's uniform slot, after the gathers'.
const SPLIT_SLOT: usize = PARAM_BUFFERS;

/// Parameter buffer `b` for `count` splats, zero, sized as [`GpuSplats::upload_as`] sizes it
/// (a 16-byte placeholder when empty: a binding may not be empty).
fn allocate_param(
    ctx: &GpuContext,
    b: usize,
    count: u32,
    sh_degree: u32,
    precision: ShPrecision,
    owner: Owner,
) -> Result<GpuBuffer, GpuError> {
    ctx.create_buffer(
        param_label(b),
        param_buffer_bytes(b, count, sh_degree, precision),
        PARAM_USAGE,
        Category::SplatParameters,
        owner,
    )
}

impl Densifier {
    #[must_use]
    pub fn new(ctx: &GpuContext) -> Self {
        Self::with_limits(ctx, DispatchLimits::of(&ctx.device))
    }

    /// Builds the pipelines planning dispatches for `limits` (tests shrink them to exercise
    /// the 2D dispatch that large scenes need).
    #[must_use]
    pub fn with_limits(ctx: &GpuContext, limits: DispatchLimits) -> Self {
        Self { kernels: Kernels::new(ctx, limits), window: splat_window(&ctx.device.limits()) }
    }

    /// Every WGSL composition of this module, labelled, for naga validation in tests.
    #[must_use]
    pub fn shader_sources() -> Vec<(String, String)> {
        Kernel::ALL.iter().map(|k| (k.label().to_string(), k.source())).collect()
    }

    /// Called after each optimizer step (`inputs.step`, 1-based): does what the strategy
    /// schedules for this step (refine; for the default strategy also schedule the opacity
    /// reset, [`Densifier::reset_scheduled_by`]) and returns the (possibly new) state, and
    /// what was done if anything was. `inputs.max_splats` caps the count for every strategy
    /// (growth stops there; it never prunes to reach it). `inputs.peak_splats` is the most
    /// splats the run has had ([`RunSnapshot::peak_splats`](crate::train::RunSnapshot::peak_splats)),
    /// which compact paces its growth from. `inputs.scene_extent` is the 3DGS camera extent
    /// (radius of the camera centres' bounding sphere × 1.1). The same seed, step and state
    /// give the same result. New buffers belong to `owner`.
    ///
    /// On an error the state is dropped (a GPU error here ends the run).
    pub async fn after_step(
        &self,
        ctx: &GpuContext,
        strategy: &Strategy,
        inputs: RefineInputs,
        state: TrainState,
        owner: Owner,
    ) -> Result<(TrainState, Option<RefineStats>), GpuError> {
        let RefineInputs { step, scene_extent, max_splats, peak_splats, seed, image_size } = inputs;
        let (config, grow_fraction) = match strategy {
            Strategy::Mcmc(config) => {
                if !config.refines_at(step) {
                    return Ok((state, None));
                }
                let (state, stats) = self
                    .refine(ctx, state, step, false, owner, |old| {
                        let mut rng = SplitMix64::for_step(seed, step);
                        plan::plan_mcmc(config, config.cap.min(max_splats), old, &mut rng)
                    })
                    .await?;
                return Ok((state, Some(stats)));
            }
            Strategy::Default(config) => (config.clone(), None),
            Strategy::Compact(compact) => (
                DefaultConfig {
                    grad_threshold: compact.grad_threshold_at(image_size),
                    ..compact.refine.clone()
                },
                Some(compact.grow_fraction),
            ),
        };
        let mut state = state;
        let mut stats = None;
        if config.refines_at(step) {
            let peak = u64::from(peak_splats.max(state.splats.count));
            let cap = grow_fraction.map_or(u64::from(max_splats), |fraction| {
                paced_growth(peak, fraction).min(u64::from(max_splats))
            }) as usize;
            let (refined, refine_stats) = self
                .refine(ctx, state, step, true, owner, |old| {
                    let mut rng = SplitMix64::for_step(seed, step);
                    plan::plan_default(&config, step, scene_extent, cap, old, &mut rng)
                })
                .await?;
            state = refined;
            stats = Some(refine_stats);
        }
        if config.resets_opacity_at(step) {
            // Applied by `reset_scheduled_by` before the next step's forward.
            let stats = stats
                .get_or_insert(RefineStats { count: state.splats.count, ..Default::default() });
            stats.opacity_reset = true;
        }
        Ok((state, stats))
    }

    /// The opacity reset the schedule puts after step `step` (3DGS's, in `densify_and_prune`'s
    /// iteration), applied to `state` at the start of the next step, before its forward: the
    /// optimisation is the same, and whatever looks at the run between the two steps (an
    /// evaluation, a snapshot, a checkpoint, an export) sees the splats step `step` trained,
    /// not their opacities wiped (3dgs at 800 px: an eval at step 3,000 read 13.6 dB between
    /// 28.1 and 31.8). The reset is idempotent, so a step begun again (or resumed from a
    /// checkpoint of an older version, written after its reset) applies it harmlessly twice.
    pub fn reset_scheduled_by(
        &self,
        ctx: &GpuContext,
        strategy: &Strategy,
        step: u32,
        state: &TrainState,
    ) -> Result<(), GpuError> {
        match strategy.rules_3dgs() {
            Some(config) if config.resets_opacity_at(step) => {
                self.reset_opacity(ctx, state, config.opacity_reset_value)
            }
            _ => Ok(()),
        }
    }

    /// One refinement: read back (with the statistics if `statistics`), plan, apply.
    async fn refine(
        &self,
        ctx: &GpuContext,
        state: TrainState,
        step: u32,
        statistics: bool,
        owner: Owner,
        decide: impl FnOnce(&Readback) -> Plan,
    ) -> Result<(TrainState, RefineStats), GpuError> {
        let started = Instant::now();
        let old = read_back(ctx, &state.splats, statistics.then_some(&state.grads)).await?;
        let read = Instant::now();
        let plan = decide(&old);
        let planned = Instant::now();
        let state = self.apply(ctx, state, &plan, owner).await?;
        log::debug!(
            "step {step}: {:?}; read back {:?}, planned {:?}, gather submitted {:?}",
            plan.stats,
            read.duration_since(started),
            planned.duration_since(read),
            planned.elapsed(),
        );
        Ok((state, plan.stats))
    }

    /// Adds the gradients of `opacity_reg · mean(sigmoid(o)) + scale_reg · mean(exp(s))`
    /// (`weights`; 3DGS-MCMC equation 8, as gsplat's `simple_trainer` adds them to the loss)
    /// to `state.grads`. Record it after the rasterizer's backward and before Adam, in the same
    /// or a later submit.
    pub fn regularize(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        [opacity_reg, scale_reg]: [f32; 2],
        state: &TrainState,
    ) -> Result<(), GpuError> {
        let n = state.splats.count;
        if n == 0 || (opacity_reg == 0.0 && scale_reg == 0.0) {
            return Ok(());
        }
        self.kernels.encode_regularize(
            ctx,
            encoder,
            n,
            [opacity_reg / n as f32, scale_reg / (3.0 * n as f32)],
            [&state.splats.opacities, &state.splats.log_scales],
            [&state.grads.v_opacities, &state.grads.v_log_scales],
        )
    }

    /// MCMC: the position noise of 3DGS-MCMC equation 11 (gsplat's
    /// `inject_noise_to_position`): `μ += Σ · z · gate(opacity) · lr_means · noise_lr` with
    /// `z ~ N(0, I)` and `gate(o) = sigmoid(`[`NOISE_GATE_SHARPNESS`]` · ((1 − o) −
    /// `[`NOISE_GATE_CENTER`]`))`. Record it after Adam's step and after
    /// [`Densifier::after_step`] of the same step (gsplat's order), with `lr_means` the
    /// means' learning rate of this step. The noise is a function of `(seed, step, splat
    /// index)`.
    #[expect(clippy::too_many_arguments, reason = "one call per step with its inputs")]
    pub fn mcmc_noise(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        config: &McmcConfig,
        state: &TrainState,
        lr_means: f32,
        step: u32,
        seed: u64,
    ) -> Result<(), GpuError> {
        let n = state.splats.count;
        let scaler = lr_means * config.noise_lr;
        if n == 0 || scaler == 0.0 {
            return Ok(());
        }
        let step_seed = SplitMix64::for_step(seed ^ NOISE_STREAM, step).next_u32();
        let s = &state.splats;
        self.kernels.encode_noise(
            ctx,
            encoder,
            n,
            step_seed,
            scaler,
            [NOISE_GATE_SHARPNESS, NOISE_GATE_CENTER],
            [&s.means, &s.quats, &s.log_scales, &s.opacities],
        )
    }

    /// 3DGS's `reset_opacity`: opacity ← min(opacity, `value`), and the opacity moments
    /// zeroed (`replace_tensor_to_optimizer`). In place.
    fn reset_opacity(
        &self,
        ctx: &GpuContext,
        state: &TrainState,
        value: f32,
    ) -> Result<(), GpuError> {
        ctx.checked("opacity reset", || {
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("opacity reset"),
            });
            self.kernels.encode_opacity_reset(
                ctx,
                &mut encoder,
                &state.splats.opacities,
                state.splats.count,
                logit(value),
            )?;
            encoder.clear_buffer(&state.adam.opacities.m, 0, None);
            encoder.clear_buffer(&state.adam.opacities.v, 0, None);
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })
    }

    /// Carries out a plan: new buffers gathered from the old ones (or, for a plan that
    /// changes nothing, the old buffers with the statistics cleared).
    ///
    /// Never two copies of the state: the gradients go first (rewritten every step; the
    /// statistics were read back), then each parameter buffer and its two moments are
    /// gathered into new ones, the old ones dropped and the GPU awaited before the next, so
    /// the peak is the old state's parameters and moments plus one group's. Kept splats keep
    /// their moments bit for bit. Whoever keeps bind groups of the state's buffers has let
    /// them go ([`Strategy::refines_at`]).
    async fn apply(
        &self,
        ctx: &GpuContext,
        old: TrainState,
        plan: &Plan,
        owner: Owner,
    ) -> Result<TrainState, GpuError> {
        if plan.is_identity(old.splats.count as usize) {
            ctx.checked("clear densification statistics", || {
                let mut encoder =
                    ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("clear densification statistics"),
                    });
                encoder.clear_buffer(&old.grads.densify, 0, None);
                ctx.queue.submit([encoder.finish()]);
                Ok(())
            })?;
            return Ok(old);
        }
        let count = u32::try_from(plan.entries.len()).map_err(|_| too_many(u32::MAX))?;
        let (sh_degree, precision) = (old.splats.sh_degree, old.splats.sh_precision);
        let windows = GatherWindows::new(count, old.splats.count, self.window);
        let TrainState { splats, grads, adam } = old;
        drop(grads);
        let mut old_params = splats.into_buffers().map(Some);
        let mut old_moments = adam.into_moments().map(Some);

        let plan_bytes: &[u8] = if plan.entries.is_empty() {
            &[0; size_of::<plan::PlanEntry>()]
        } else {
            bytemuck::cast_slice(&plan.entries)
        };
        let plan_buffer = ctx.create_buffer_init(
            "densify plan",
            plan_bytes,
            wgpu::BufferUsages::STORAGE,
            Category::Other,
            owner,
        )?;
        let slots = gather_uniforms(&windows, sh_degree, precision)?;
        let uniform_buffer = ctx.create_buffer_init(
            "densify uniforms",
            &slots,
            wgpu::BufferUsages::STORAGE,
            Category::Other,
            owner,
        )?;

        let mut new_params = Vec::with_capacity(PARAM_BUFFERS);
        let mut new_moments = Vec::with_capacity(PARAM_BUFFERS);
        for b in 0..PARAM_BUFFERS {
            let param = allocate_param(ctx, b, count, sh_degree, precision, owner)?;
            let moments = AdamState::zero_moments(ctx, param_label(b), param.size(), owner)?;
            let words = words_per_splat(b, sh_degree, precision);
            if let (true, Some(old_param), Some(old_moment)) =
                (words > 0, &old_params[b], &old_moments[b])
            {
                let job = GatherJob {
                    old: [old_param, &old_moment.m, &old_moment.v],
                    new: [&param, &moments.m, &moments.v],
                    words,
                };
                // The means' split reads the old quats and log-scales, gathered later.
                let split = match (b, plan.has_splits(), &old_params[2], &old_params[1]) {
                    (0, true, Some(quats), Some(log_scales)) => Some((&**quats, &**log_scales)),
                    _ => None,
                };
                let buffers = (&*plan_buffer, &*uniform_buffer);
                self.gather_group(ctx, buffers, &windows, b, &job, split)?;
            }
            new_params.push(param);
            new_moments.push(moments);
            old_params[b] = None;
            old_moments[b] = None;
            // The old group's memory is back before the next group's is taken.
            ctx.idle().await?;
        }
        let params: [GpuBuffer; PARAM_BUFFERS] =
            new_params.try_into().unwrap_or_else(|_| unreachable!("one per parameter buffer"));
        let splats = GpuSplats::from_buffers(count, sh_degree, precision, params);
        let moments: [Moments; PARAM_BUFFERS] =
            new_moments.try_into().unwrap_or_else(|_| unreachable!("one per parameter buffer"));
        // The plan goes before the gradients come: not beside them.
        drop((plan_buffer, uniform_buffer));
        let adam = AdamState::from_moments(ctx, count, moments, owner)?;
        let grads = SplatGradients::new(ctx, &splats, owner)?;
        Ok(TrainState { splats, grads, adam })
    }

    /// Gathers parameter buffer `b` and its moments (`job`), and with `split` (the old quats
    /// and log-scales) offsets the split children's means; submitted. `buffers` are the
    /// plan and the uniforms ([`gather_uniforms`]).
    fn gather_group(
        &self,
        ctx: &GpuContext,
        (plan, uniforms): (&wgpu::Buffer, &wgpu::Buffer),
        windows: &GatherWindows,
        b: usize,
        job: &GatherJob<'_>,
        split: Option<(&wgpu::Buffer, &wgpu::Buffer)>,
    ) -> Result<(), GpuError> {
        ctx.checked("densify gather", || {
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("densify gather"),
            });
            for (pair, (new, old)) in windows.pairs().enumerate() {
                let uniform = (plan, uniforms, gather_slot(pair, b));
                let elements = (new.end - new.start) * job.words;
                self.kernels.encode_gather(ctx, &mut encoder, uniform, job, elements, [&new, &old]);
            }
            // After every gather of the means: the split adds to the parents' copies.
            if let Some((quats, log_scales)) = split {
                for (pair, (new, old)) in windows.pairs().enumerate() {
                    let uniform = (plan, uniforms, gather_slot(pair, SPLIT_SLOT));
                    let buffers = (new.end - new.start, [quats, log_scales], job.new[0]);
                    self.kernels.encode_split(ctx, &mut encoder, uniform, buffers, [&new, &old]);
                }
            }
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })
    }
}

/// The windows of splats a refinement's gathers bind (`splat_window`): each window of the
/// new splats is gathered from each window of the old ones in turn.
struct GatherWindows {
    new: u32,
    old: u32,
    window: u32,
}

impl GatherWindows {
    fn new(new: u32, old: u32, window: u32) -> Self {
        Self { new, old, window }
    }

    /// (new window, old window), new-major.
    fn pairs(&self) -> impl Iterator<Item = (Range<u32>, Range<u32>)> + '_ {
        splat_windows(self.new, self.window)
            .flat_map(|new| splat_windows(self.old, self.window).map(move |old| (new.clone(), old)))
    }
}

/// The uniform slot of a pair of windows' gather of buffer `b` (or its split, `b` =
/// [`SPLIT_SLOT`]).
fn gather_slot(pair: usize, b: usize) -> u64 {
    (pair * (SPLIT_SLOT + 1) + b) as u64
}

/// The uniform slots of a refinement's gathers and splits (see [`gather_slot`]), as bytes.
fn gather_uniforms(
    windows: &GatherWindows,
    sh_degree: u32,
    precision: ShPrecision,
) -> Result<Vec<u8>, GpuError> {
    let pairs = windows.pairs().count().max(1);
    let mut slots = vec![0_u8; UNIFORM_SLOT as usize * (SPLIT_SLOT + 1) * pairs];
    for (pair, (new, old)) in windows.pairs().enumerate() {
        let out_count = new.end - new.start;
        let mut write = |b: usize, words: u32, role: Role| -> Result<(), GpuError> {
            let uniform = GatherUniform {
                elements: out_count.checked_mul(words).ok_or_else(|| too_many(out_count))?,
                words_per_splat: words,
                role: role as u32,
                out_count,
                old_first: old.start,
                old_count: old.end - old.start,
                _pad: [0; 2],
            };
            let at = gather_slot(pair, b) as usize * UNIFORM_SLOT as usize;
            slots[at..at + size_of::<GatherUniform>()]
                .copy_from_slice(bytemuck::bytes_of(&uniform));
            Ok(())
        };
        for b in 0..PARAM_BUFFERS {
            let role = match b {
                1 => Role::LogScale,
                3 => Role::Opacity,
                _ => Role::Plain,
            };
            write(b, words_per_splat(b, sh_degree, precision), role)?;
        }
        write(SPLIT_SLOT, 0, Role::Plain)?;
    }
    Ok(slots)
}

/// Mixed into the seed of the position noise, so it draws other numbers than refinements.
const NOISE_STREAM: u64 = 0x6E6F_6973_6521;

/// Reads back what the decisions need: opacity logits, log-scales and (with `grads`) the
/// densification statistics, awaiting the GPU.
async fn read_back(
    ctx: &GpuContext,
    splats: &GpuSplats,
    grads: Option<&SplatGradients>,
) -> Result<Readback, GpuError> {
    let n = splats.count as usize;
    Ok(Readback {
        opacity_logits: read_f32_async(ctx, &splats.opacities, n).await?,
        log_scales: read_f32_async(ctx, &splats.log_scales, 3 * n).await?,
        densify: match grads {
            Some(grads) => {
                let floats = n * splat_render::kernels::DENSIFY_FLOATS as usize;
                read_f32_async(ctx, &grads.densify, floats).await?
            }
            None => Vec::new(),
        },
    })
}
