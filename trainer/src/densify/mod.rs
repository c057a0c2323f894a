//! Densification: the standard 3DGS adaptive density control ([`DefaultConfig`],
//! `three_dgs.rs`), compact refinement ([`CompactConfig`], `compact.rs`) and the MCMC strategy
//! ([`McmcConfig`], `mcmc.rs`), chosen by [`Strategy`] (`strategy.rs`), on the splats,
//! gradients and Adam moments of a run; their moves share this file's GPU work.
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

mod compact;
mod kernels;
mod mcmc;
mod plan;
mod strategy;
mod three_dgs;

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
pub use compact::CompactConfig;
use compact::paced_growth;
use kernels::{GatherJob, GatherUniform, Kernel, Kernels, Role, UNIFORM_SLOT, too_many};
pub use mcmc::{McmcConfig, NOISE_GATE_CENTER, NOISE_GATE_SHARPNESS};
pub use plan::{
    LONG_AXIS_OFFSET, RELOCATION_MAX_COPIES, SPLIT_CHILDREN, SPLIT_SCALE_DIVISOR, relocation,
};
use plan::{Plan, Readback, logit};
use splat_formats::random::SplitMix64;
pub use strategy::Strategy;
pub use three_dgs::{DefaultConfig, SplitRule};

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
        let RefineInputs { step, scene_extent, max_splats, peak_splats, seed } = inputs;
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
            Strategy::Default(config) => (config, None),
            Strategy::Compact(compact) => (&compact.refine, Some(compact.grow_fraction)),
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
                    plan::plan_default(config, step, scene_extent, cap, old, &mut rng)
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
                let floats = n * splat_render::gpu_splats::DENSIFY_FLOATS as usize;
                read_f32_async(ctx, &grads.densify, floats).await?
            }
            None => Vec::new(),
        },
    })
}
