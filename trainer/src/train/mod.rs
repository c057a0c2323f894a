//! One training run on the GPU: render a training view, the 3DGS loss and its gradient,
//! backward through the rasterizer, Adam, densification; evaluation on the eval views.
//!
//! The [`Trainer`] owns every GPU buffer of its run (all registered under the run's
//! [`Owner`]); dropping it frees them. Ground-truth images go to the GPU as packed RGBA8 once
//! per run ([`ImagePlacement::Resident`]), or, when they do not fit the memory budget, one
//! step ahead into one of two buffers ([`ImagePlacement::Streamed`]).
//!
//! A step waits for the GPU once: for the number of tile intersections, which sizes the rest
//! of the frame ([`Trainer::begin_step`], then [`Trainer::finish_step`]). Everything after
//! that (the rest of the forward pass, the loss, the backward pass, Adam) is one submit, and
//! the step's loss comes back through a ring of read-back buffers a step or so later
//! ([`Trainer::next_metrics`]).

use std::sync::Arc;

use splat_formats::Splats;
use splat_formats::random::SplitMix64;
use splat_render::{
    Camera, Category, FrameCounts, FrameScratch, GpuBuffer, GpuContext, GpuError, GpuSplats, Owner,
    RenderSettings, Renderer, wgpu,
};

use crate::appearance::{AppearanceKernels, AppearanceState, AppearanceStep};
use crate::config::{TrainConfig, Transparency};
use crate::dataset::Dataset;
use crate::densify::{Densifier, RefineInputs, RefineStats, Strategy, TrainState};
use crate::loss::{ImageLoss, LossImages, LossScratch, MetricsRing, TargetTransparency};
use crate::optim::{Adam, ParamGroup};
use images::{CoarseTargets, TargetRef, Targets};
pub use images::{resident_image_bytes, shrunk_camera};
use readback::{collect_metrics, download_optimizer};

mod images;
mod readback;

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepStats {
    /// 1-based number of the step just taken.
    pub step: u32,
    pub splats: u32,
    /// Splat-tile pairs the step rasterized: what its GPU work grows with.
    pub intersections: u32,
    pub refine: Option<RefineStats>,
    /// The size of the step's image (smaller than the view's in a coarse stage,
    /// [`crate::config::Progressive`]).
    pub image_size: [u32; 2],
}

/// The loss of one step, read back after the step (see [`Trainer::next_metrics`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepMetrics {
    /// 1-based number of the step it measures.
    pub step: u32,
    pub loss: f64,
    /// PSNR of the training view, from the same loss pass.
    pub train_psnr: f64,
}

/// Where a run keeps its ground-truth images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImagePlacement {
    /// Every view's image on the GPU (packed RGBA8), uploaded when the run starts or resumes.
    Resident,
    /// Two image buffers; the next step's view is uploaded while this step runs.
    Streamed,
}

/// Unread step metrics a trainer keeps at most; older ones are dropped.
const METRICS_KEPT: usize = 64;

/// Evaluation over the eval views.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalStats {
    pub step: u32,
    /// Mean over views of each view's PSNR, as 3DGS reports it.
    pub psnr: f64,
    pub ssim: f64,
    pub views: usize,
    /// With per-view appearance, the mean over views of
    /// [`crate::appearance::compensated_psnr`]: each view's right half through the colour
    /// transform fitted on its left half, the figure that does not reward an exposure baked
    /// into the splats; `None` without, or when no view has pixels on both halves.
    pub compensated_psnr: Option<f64>,
}

/// The optimizer side of a run, on the host: what a paused run moves off the GPU and what a
/// checkpoint stores besides the splats.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostOptimizerState {
    /// Adam's first and second moments per parameter buffer, in the GPU layout and order
    /// (means, log-scales, quats, opacities, SH bands 0..=3; see `AdamState::moments`): the
    /// buffers' 32-bit words, which for SH bands stored in 16 bits are pairs of binary16
    /// values, not f32 ([`ShPrecision`]).
    pub moments: Vec<(Vec<f32>, Vec<f32>)>,
    /// Densification statistics `[N, 3]` (NDC gradient norm sum, visible count, radius).
    pub densify: Vec<f32>,
    /// Per-view appearance: every train view's transform, then every view's optimizer row
    /// ([`AppearanceState::download`]); empty without compensation or before its first step.
    pub appearance: Vec<f32>,
}

/// Everything a run needs to continue as if it had never stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSnapshot {
    pub splats: Splats,
    pub optimizer: HostOptimizerState,
    /// Steps taken so far.
    pub step: u32,
    /// The view-order PRNG state and the current epoch's order.
    pub rng: u64,
    pub order: Vec<u32>,
    /// The most splats the run has had, its initial ones included (compact refinement paces
    /// its growth from it). Never below the count: a smaller value reads as the count.
    pub peak_splats: u32,
    pub config: TrainConfig,
}

/// Where a run stands besides its splats and optimizer state ([`RunSnapshot`]'s fields).
struct RunProgress {
    step: u32,
    rng: u64,
    order: Vec<usize>,
    peak_splats: u32,
}

/// GPU buffers a step needs besides the parameters, gradients and moments: all dropped while
/// a run is paused.
struct StepScratch {
    frame: FrameScratch,
    loss: LossScratch,
    metrics: MetricsRing,
    v_image: GpuBuffer,
    targets: Targets,
    /// The shrunk images of a coarse stage ([`crate::config::Progressive`]): two streamed slots (this step's
    /// and the next one's), sized for the largest image shrunk twice; dropped when the run
    /// reaches full size.
    coarse: Option<CoarseTargets>,
    /// The per-view transforms, with [`TrainConfig::appearance`] (downloaded when the run
    /// pauses: they are run state).
    appearance: Option<AppearanceState>,
}

impl StepScratch {
    /// `appearance`: the run's per-view transforms as the host keeps them, when it has
    /// compensation on.
    fn new(
        ctx: &GpuContext,
        kernels: &TrainKernels,
        dataset: &Dataset,
        (placement, appearance): (ImagePlacement, Option<&[f32]>),
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let (width, height) = dataset.largest_image();
        let pixels = u64::from(width) * u64::from(height);
        let appearance = match appearance {
            Some(host) => {
                let views = u32::try_from(dataset.train.len()).unwrap_or(u32::MAX);
                let capacity = u32::try_from(pixels).unwrap_or(u32::MAX);
                Some(AppearanceState::new(ctx, views, capacity, host, owner)?)
            }
            None => None,
        };
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let loss = kernels.loss.scratch(ctx, width, height, owner)?;
        Ok(Self {
            frame: FrameScratch::new(ctx, &kernels.renderer, owner)?,
            metrics: MetricsRing::new(ctx, &loss, owner)?,
            loss,
            v_image: ctx.create_buffer(
                "v_image",
                pixels * 16,
                storage,
                Category::RasterizerScratch,
                owner,
            )?,
            targets: Targets::new(ctx, dataset, placement, owner)?,
            coarse: None,
            appearance,
        })
    }

    /// Makes train view `view`'s image for 0-based step `step` available: shrunk into a
    /// coarse slot in a coarse stage (allocating the slots on the stage's first step, or a
    /// resumed run's), else as [`Targets::prepare`] does, dropping the coarse slots once the
    /// run is past them.
    fn prepare_train(
        &mut self,
        ctx: &GpuContext,
        dataset: &Dataset,
        (view, step): (usize, u32),
        divisor: u32,
        owner: Owner,
    ) -> Result<(), GpuError> {
        let slot = (step % 2) as usize;
        if divisor > 1 {
            let coarse = match &mut self.coarse {
                Some(coarse) => coarse,
                None => self.coarse.insert(CoarseTargets::new(ctx, dataset, owner)?),
            };
            coarse.prepare(ctx, &dataset.train[view], divisor, slot);
        } else {
            self.coarse = None;
            self.targets.prepare(ctx, &dataset.train[view], TargetRef::Train(view, slot));
        }
        Ok(())
    }

    /// The image of train view `view` at 0-based step `step`, prepared.
    fn train_target(&self, view: usize, step: u32) -> &GpuBuffer {
        let slot = (step % 2) as usize;
        match &self.coarse {
            Some(coarse) => &coarse.slots[slot],
            None => self.targets.get(TargetRef::Train(view, slot)),
        }
    }
}

/// Where a run's state lives. (Both variants are a handful of GPU handles; the size
/// difference is the Active run's scratch, which is boxed.)
#[expect(clippy::large_enum_variant, reason = "one value per run, moved rarely")]
enum Run {
    /// Everything on the GPU, ready to step.
    Active(TrainState, Box<StepScratch>),
    /// Only the splat parameters on the GPU (for the viewer); optimizer state on the host.
    Paused(GpuSplats, HostOptimizerState),
}

/// The compute pipelines a run uses. They hold no per-run memory, so one set serves every run
/// on a device: the trainer task builds them once (building them per run costs a shader
/// compile each time and, on lavapipe, memory that is never fully returned).
#[derive(Debug)]
pub struct TrainKernels {
    renderer: Renderer,
    loss: ImageLoss,
    adam: Adam,
    densifier: Densifier,
    appearance: AppearanceKernels,
}

impl TrainKernels {
    /// Builds every pipeline of a run inside error scopes: one the device cannot build is an
    /// error here, in words.
    pub fn new(ctx: &GpuContext) -> Result<Self, GpuError> {
        let renderer = Renderer::new(ctx)?;
        ctx.checked("the training pipelines", || {
            Ok(Self {
                renderer,
                loss: ImageLoss::new(ctx),
                adam: Adam::new(ctx),
                densifier: Densifier::new(ctx),
                appearance: AppearanceKernels::new(ctx),
            })
        })
    }
}

/// A training run.
pub struct Trainer {
    ctx: GpuContext,
    owner: Owner,
    config: TrainConfig,
    dataset: Arc<Dataset>,
    extent: f32,
    /// [`TrainConfig::transparency`] where the dataset has transparency, `Composite` where it
    /// has none (nothing to supervise).
    transparency: Transparency,
    kernels: Arc<TrainKernels>,
    /// `None` only while a method moves the state between variants.
    run: Option<Run>,
    step: u32,
    order: Vec<usize>,
    rng: u64,
    /// [`RunSnapshot::peak_splats`].
    peak_splats: u32,
    placement: ImagePlacement,
    /// The train view whose forward pass [`Trainer::begin_step`] submitted.
    begun: Option<usize>,
    /// Step metrics read back and not yet taken.
    metrics: std::collections::VecDeque<StepMetrics>,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("owner", &self.owner)
            .field("step", &self.step)
            .field("paused", &self.is_paused())
            .finish_non_exhaustive()
    }
}

/// The 3DGS scene extent: 1.1 × the largest distance of a camera from the cameras' mean.
#[must_use]
pub fn scene_extent(dataset: &Dataset) -> f32 {
    let centres: Vec<glam::Vec3> = dataset.views().map(|v| v.camera.position()).collect();
    if centres.is_empty() {
        return 1.0;
    }
    let mean = centres.iter().copied().sum::<glam::Vec3>() / centres.len() as f32;
    let radius = centres.iter().map(|c| c.distance(mean)).fold(0.0, f32::max);
    (radius * 1.1).max(1e-3)
}

/// A random colour, uniform in the RGB cube, for 0-based step `step` of a run seeded `seed`.
#[must_use]
pub fn random_background(seed: u64, step: u32) -> [f32; 3] {
    let mut rng =
        SplitMix64::new(seed ^ u64::from(step).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xba5e_c010);
    std::array::from_fn(|_| rng.next_f32())
}

impl Trainer {
    /// Uploads `init` and allocates everything the run needs. `init` must have the
    /// configured SH degree.
    pub fn new(
        ctx: &GpuContext,
        dataset: Arc<Dataset>,
        init: &Splats,
        config: TrainConfig,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let snapshot = RunSnapshot {
            splats: init.clone(),
            optimizer: HostOptimizerState::default(),
            step: 0,
            rng: config.seed,
            order: Vec::new(),
            peak_splats: init.len() as u32,
            config,
        };
        Self::from_snapshot(ctx, dataset, snapshot, owner)
    }

    /// Continues a run from a snapshot (a checkpoint, or a fresh start with empty optimizer
    /// state): the state after this equals the state saved, bit for bit.
    pub fn from_snapshot(
        ctx: &GpuContext,
        dataset: Arc<Dataset>,
        snapshot: RunSnapshot,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let kernels = Arc::new(TrainKernels::new(ctx)?);
        Self::from_snapshot_with(kernels, ctx, dataset, snapshot, ImagePlacement::Resident, owner)
    }

    /// [`Trainer::from_snapshot`] with pipelines that are already built.
    pub fn from_snapshot_with(
        kernels: Arc<TrainKernels>,
        ctx: &GpuContext,
        dataset: Arc<Dataset>,
        snapshot: RunSnapshot,
        placement: ImagePlacement,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        if dataset.train.is_empty() {
            return Err(no_views());
        }
        let splats =
            GpuSplats::upload_as(ctx, &snapshot.splats, snapshot.config.sh_precision, owner)?;
        let order = snapshot.order.iter().map(|&i| i as usize).collect();
        Self::assemble(
            kernels,
            ctx,
            dataset,
            splats,
            snapshot.optimizer,
            RunProgress {
                step: snapshot.step,
                rng: snapshot.rng,
                order,
                peak_splats: snapshot.peak_splats,
            },
            snapshot.config,
            placement,
            owner,
        )
    }

    /// A fresh run from splats already on the GPU (see `init::upload_from_points`).
    pub fn start_with(
        kernels: Arc<TrainKernels>,
        ctx: &GpuContext,
        dataset: Arc<Dataset>,
        splats: GpuSplats,
        config: TrainConfig,
        placement: ImagePlacement,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        if dataset.train.is_empty() {
            return Err(no_views());
        }
        let progress = RunProgress { step: 0, rng: config.seed, order: Vec::new(), peak_splats: 0 };
        Self::assemble(
            kernels,
            ctx,
            dataset,
            splats,
            HostOptimizerState::default(),
            progress,
            config,
            placement,
            owner,
        )
    }

    #[expect(clippy::too_many_arguments, reason = "the parts of a run, assembled in one place")]
    fn assemble(
        kernels: Arc<TrainKernels>,
        ctx: &GpuContext,
        dataset: Arc<Dataset>,
        splats: GpuSplats,
        optimizer: HostOptimizerState,
        RunProgress { step, rng, order, peak_splats }: RunProgress,
        config: TrainConfig,
        placement: ImagePlacement,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        if splats.sh_precision != config.sh_precision {
            return Err(GpuError::Validation {
                label: "train".into(),
                message: format!(
                    "the splats store SH in {}, the run is configured for {}",
                    splats.sh_precision.name(),
                    config.sh_precision.name()
                ),
            });
        }
        // What a run decides when it starts (a resumed run's config has them decided): auto
        // compensation from the dataset, the auto splat budget from its images and splats,
        // and at step 0 progressive stages from the planned
        // steps and the background from how the dataset was loaded.
        let mut config = config;
        config.appearance = config.appearance.resolve(&dataset);
        config.max_splats = config.max_splats.fixed(&config.strategy, &dataset, splats.count);
        if step == 0 {
            config.progressive = config.progressive.fixed(config.steps);
            config.background = dataset.options.background;
        }
        let mut optimizer = optimizer;
        if config.appearance.is_on() && optimizer.appearance.is_empty() {
            // A fresh run: the transforms start from the views' EXIF exposure where it has one.
            optimizer.appearance = crate::appearance::exif_seed(&dataset.train);
        }
        let mut trainer = Self {
            placement,
            begun: None,
            metrics: std::collections::VecDeque::with_capacity(METRICS_KEPT),
            ctx: ctx.clone(),
            owner,
            extent: scene_extent(&dataset),
            transparency: if dataset.has_transparency() {
                config.transparency
            } else {
                Transparency::Composite
            },
            rng,
            config,
            dataset,
            kernels,
            peak_splats: peak_splats.max(splats.count),
            run: Some(Run::Paused(splats, optimizer)),
            step,
            order,
        };
        if trainer.order.len() != trainer.dataset.train.len() {
            // A fresh run: draw the first epoch's order (this is what step 0 would do).
            trainer.order.clear();
            trainer.view_for_step(trainer.step);
        }
        trainer.resume()?;
        Ok(trainer)
    }

    #[must_use]
    pub fn step_count(&self) -> u32 {
        self.step
    }

    #[must_use]
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// Lets a run go on past its planned step count (or stop earlier).
    pub fn set_planned_steps(&mut self, steps: u32) {
        self.config.steps = steps;
    }

    #[must_use]
    pub fn scene_extent(&self) -> f32 {
        self.extent
    }

    #[must_use]
    pub fn owner(&self) -> Owner {
        self.owner
    }

    #[must_use]
    pub fn is_paused(&self) -> bool {
        matches!(self.run, Some(Run::Paused(..)))
    }

    /// The splat parameters on the GPU (active or paused), for a viewer on the same device.
    #[must_use]
    pub fn gpu_splats(&self) -> Option<&GpuSplats> {
        match self.run.as_ref()? {
            Run::Active(state, _) => Some(&state.splats),
            Run::Paused(splats, _) => Some(splats),
        }
    }

    #[must_use]
    pub fn splat_count(&self) -> u32 {
        self.gpu_splats().map_or(0, |s| s.count)
    }

    /// Active SH degree at the current step.
    #[must_use]
    pub fn active_sh_degree(&self) -> u32 {
        (self.step / self.config.sh_degree_interval.max(1)).min(self.config.sh_degree)
    }

    fn settings(&self) -> RenderSettings {
        RenderSettings {
            background: self.config.background,
            antialiased: false,
            sh_degree: Some(self.active_sh_degree()),
            growth: self.config.strategy.growth(),
            ..RenderSettings::default()
        }
    }

    /// The background the training render of 0-based step `step` is drawn over: a random
    /// colour under [`Transparency::RandomBackground`] on a dataset with transparency (every
    /// view then: an opaque view says the splats in front of it are opaque), otherwise the
    /// one the images were composited over.
    fn training_background(&self, step: u32) -> [f32; 3] {
        match self.transparency {
            Transparency::RandomBackground => random_background(self.config.seed, step),
            _ => self.config.background,
        }
    }

    /// How the loss of 0-based step `step` on train view `view` uses its transparency.
    fn training_transparency(&self, view: usize, step: u32) -> TargetTransparency {
        let alpha_plane = self.dataset.train[view].alpha.is_some();
        let background = self.training_background(step);
        let shift = std::array::from_fn(|c| background[c] - self.config.background[c]);
        let alpha_weight = match self.transparency {
            Transparency::AlphaLoss(weight) => weight,
            _ => 0.0,
        };
        TargetTransparency { alpha_plane, background_shift: shift, alpha_weight }
    }

    /// The training view of 0-based step `step`: epochs over a seeded shuffle of the views.
    fn view_for_step(&mut self, step: u32) -> usize {
        let n = self.dataset.train.len();
        let position = step as usize % n;
        if position == 0 || self.order.len() != n {
            self.order = (0..n).collect();
            let mut rng = SplitMix64::new(self.rng);
            for i in (1..n).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                self.order.swap(i, j);
            }
            self.rng = rng.state();
        }
        self.order[position]
    }

    /// Moves the optimizer state (Adam moments, densification statistics) to host memory and
    /// drops every GPU buffer but the splat parameters. Idempotent. Blocks; see
    /// [`Trainer::pause_async`].
    pub fn pause(&mut self) -> Result<(), GpuError> {
        pollster::block_on(self.pause_async())
    }

    /// [`Trainer::pause`], awaiting the GPU without blocking the thread.
    pub async fn pause_async(&mut self) -> Result<(), GpuError> {
        match self.run.take().ok_or_else(torn_down)? {
            Run::Active(state, mut scratch) => {
                match download_optimizer(&self.ctx, &state, &scratch).await {
                    Ok(host) => {
                        // The run's last losses, before their buffers go.
                        if let Err(e) = scratch.metrics.settle(&self.ctx).await {
                            self.run = Some(Run::Active(state, scratch));
                            return Err(e);
                        }
                        collect_metrics(&mut scratch.metrics, &mut self.metrics);
                        self.begun = None;
                        drop(scratch);
                        let TrainState { splats, grads, adam } = state;
                        drop((grads, adam));
                        self.run = Some(Run::Paused(splats, host));
                        // Frees what was dropped now, not at the next submit.
                        self.ctx.idle().await
                    }
                    Err(e) => {
                        self.run = Some(Run::Active(state, scratch));
                        Err(e)
                    }
                }
            }
            paused @ Run::Paused(..) => {
                self.run = Some(paused);
                Ok(())
            }
        }
    }

    /// Brings a paused run back onto the GPU exactly as it was. Idempotent.
    pub fn resume(&mut self) -> Result<(), GpuError> {
        match self.run.take().ok_or_else(torn_down)? {
            Run::Paused(splats, host) => {
                let restored =
                    restore_optimizer(&self.ctx, splats, &host, self.owner).and_then(|state| {
                        let appearance =
                            self.config.appearance.is_on().then_some(&host.appearance[..]);
                        let scratch = Box::new(StepScratch::new(
                            &self.ctx,
                            &self.kernels,
                            &self.dataset,
                            (self.placement, appearance),
                            self.owner,
                        )?);
                        Ok((state, scratch))
                    });
                let (state, mut scratch) = restored?;
                let view = self.current_view();
                let divisor = self.divisor(view, self.step);
                scratch.prepare_train(
                    &self.ctx,
                    &self.dataset,
                    (view, self.step),
                    divisor,
                    self.owner,
                )?;
                self.run = Some(Run::Active(state, scratch));
                Ok(())
            }
            active @ Run::Active(..) => {
                self.run = Some(active);
                Ok(())
            }
        }
    }

    /// By how much train view `view`'s image is shrunk at 0-based step `step`: the stage's
    /// divisor, halved while the shrunk image would be empty (images under 4 pixels a side).
    fn divisor(&self, view: usize, step: u32) -> u32 {
        let camera = &self.dataset.train[view].camera;
        let mut divisor = self.config.progressive.divisor(step);
        while divisor > 1 && (camera.width < divisor || camera.height < divisor) {
            divisor /= 2;
        }
        divisor
    }

    /// Train view `view`'s camera at 0-based step `step`: shrunk in a coarse stage.
    fn train_camera(&self, view: usize, step: u32) -> Camera {
        shrunk_camera(self.dataset.train[view].camera, self.divisor(view, step))
    }

    /// The train view of the current step.
    fn current_view(&self) -> usize {
        self.order.get(self.step as usize % self.dataset.train.len()).copied().unwrap_or(0)
    }

    /// Takes one optimisation step, waiting for the GPU where the step must (see
    /// [`Trainer::begin_step`]). Errors on a paused run.
    pub fn step(&mut self) -> Result<StepStats, GpuError> {
        self.begin_step()?;
        let counts = pollster::block_on(self.counts())?;
        pollster::block_on(self.finish_step(counts))
    }

    /// Submits the first part of a step: the current view's projection and its counts
    /// (visible splats, tile intersections), after the opacity reset the last step scheduled
    /// if any ([`Densifier::reset_scheduled_by`]). Nothing else of the run changes until
    /// [`Trainer::finish_step`]; calling this again starts the step over (a step abandoned for
    /// a command costs its projection; the reset is idempotent).
    pub fn begin_step(&mut self) -> Result<(), GpuError> {
        let ctx = self.ctx.clone();
        let view = self.current_view();
        let camera = self.train_camera(view, self.step);
        let settings =
            RenderSettings { background: self.training_background(self.step), ..self.settings() };
        let Some(Run::Active(state, scratch)) = self.run.as_mut() else {
            return Err(if self.run.is_some() { paused() } else { torn_down() });
        };
        self.kernels.densifier.reset_scheduled_by(&ctx, &self.config.strategy, self.step, state)?;
        if ctx.is_profiling() {
            // The previous step's passes form one frame of timings.
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("profiler"),
            });
            ctx.profile_frame(&mut encoder);
            ctx.queue.submit([encoder.finish()]);
        }
        self.kernels.renderer.forward_begin(
            &ctx,
            &state.splats,
            &camera,
            &settings,
            &mut scratch.frame,
        )?;
        self.begun = Some(view);
        Ok(())
    }

    /// The counts of the step begun: the step's one wait for the GPU. Awaiting does not
    /// block the thread; dropping the future abandons the wait harmlessly.
    pub async fn counts(&self) -> Result<FrameCounts, GpuError> {
        match self.run.as_ref() {
            Some(Run::Active(_, scratch)) if self.begun.is_some() => {
                scratch.frame.counts(&self.ctx).await
            }
            _ => Err(GpuError::Validation {
                label: "train".into(),
                message: "no step has begun".into(),
            }),
        }
    }

    /// Records and submits the rest of the step begun, for its `counts`: the rest of
    /// the forward pass, the loss, the backward pass and Adam in one submit; then, on its
    /// schedule, densification (which reads statistics back: awaited).
    #[expect(clippy::too_many_lines, reason = "one step reads best top to bottom, in GPU order")]
    pub async fn finish_step(&mut self, counts: FrameCounts) -> Result<StepStats, GpuError> {
        let ctx = self.ctx.clone();
        let Some(view) = self.begun.take() else {
            return Err(GpuError::Validation {
                label: "train".into(),
                message: "finish_step without begin_step".into(),
            });
        };
        let step_number = self.step + 1;
        let camera = self.train_camera(view, self.step);
        let (rates, extent, step0) = (self.config.learning_rates, self.extent, self.step);
        // A run capped below its peak by `max_splats` is at its budget too.
        let peak_splats = self.peak_splats.min(self.config.max_splats.count());
        let sh_degree = self.active_sh_degree();
        let transparency = self.training_transparency(view, step0);
        let Some(Run::Active(state, scratch)) = self.run.as_mut() else {
            return Err(if self.run.is_some() { paused() } else { torn_down() });
        };
        // Losses that came back while this step waited, before a ring slot is taken.
        collect_metrics(&mut scratch.metrics, &mut self.metrics);
        let kernels = &self.kernels;
        // A frame whose intersections outgrow one binding: its depth bands (a second wait).
        kernels.renderer.prepare_bands(&ctx, &mut scratch.frame, counts).await?;
        let config = &self.config;
        ctx.checked("training step", || {
            let mut encoder = ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("step") });
            kernels.renderer.forward_finish(
                &ctx,
                &mut encoder,
                &state.splats,
                &mut scratch.frame,
                counts,
            )?;
            let target = scratch.train_target(view, step0);
            // With per-view appearance the loss sees the render through the view's transform,
            // and its gradient goes back through it before the rasterizer's backward.
            let appearance = scratch.appearance.as_ref().map(|a| {
                let step = AppearanceStep {
                    rendered: &scratch.frame.image,
                    v_rendered: &scratch.v_image,
                    view: view as u32,
                    pixels: camera.width * camera.height,
                    lr: crate::appearance::learning_rate(step0, config.steps),
                };
                (a, step)
            });
            if let Some((a, step)) = &appearance {
                a.encode_apply(&ctx, &kernels.appearance, &mut encoder, step)?;
            }
            let (rendered, v_image) = match &appearance {
                Some((a, _)) => (a.corrected(), a.v_corrected()),
                None => (&*scratch.frame.image, &*scratch.v_image),
            };
            let images = LossImages {
                rendered,
                target,
                width: camera.width,
                height: camera.height,
                v_image: Some(v_image),
            };
            kernels.loss.encode_with(
                &ctx,
                &mut encoder,
                images,
                config.loss_weights,
                transparency,
                &scratch.loss,
            )?;
            scratch.metrics.record(&mut encoder, &scratch.loss, step_number)?;
            if let Some((a, step)) = &appearance {
                a.encode_backward(&ctx, &kernels.appearance, &mut encoder, step)?;
            }
            kernels.renderer.record_backward(
                &ctx,
                &mut encoder,
                &state.splats,
                &mut scratch.frame,
                &scratch.v_image,
                &state.grads,
            )?;
            if let Some(weights) =
                config.strategy.regularisers(step_number, state.splats.count, peak_splats)
            {
                // The opacity and scale regularisers act on the gradients before Adam.
                ctx.profile_stage("regularisers");
                kernels.densifier.regularize(&ctx, &mut encoder, weights, state)?;
            }
            kernels.adam.encode(
                &ctx,
                &mut encoder,
                &state.splats,
                &state.grads,
                &state.adam,
                step_number,
                sh_degree,
                |group| rates.at(group, step0, extent),
            );
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })?;
        scratch.metrics.map_recorded(&ctx);

        // The next step's image goes up (streamed: lands with the next submit; this step's
        // reads of the other slot are done).
        let next = self.view_for_step(step_number);
        let Some(Run::Active(state, mut scratch)) = self.run.take() else {
            return Err(torn_down());
        };
        collect_metrics(&mut scratch.metrics, &mut self.metrics);
        let divisor = self.divisor(next, step_number);
        scratch.prepare_train(&ctx, &self.dataset, (next, step_number), divisor, self.owner)?;

        let seed = self.config.seed ^ u64::from(step_number).wrapping_mul(0x2545_f491_4f6c_dd1d);
        if self.config.strategy.refines_at(step_number) {
            // The refinement's new buffers should not sit beside the frame scratch (the peak
            // of a run, memory.rs), and the scratch's kept bind groups hold the state's
            // buffers, which the refinement replaces group by group: let it all go. The next
            // step grows it again (once per refinement, not per step).
            scratch.frame.release(&ctx, &self.kernels.renderer)?;
        }
        ctx.profile_stage("densification");
        let refined = self
            .kernels
            .densifier
            .after_step(
                &ctx,
                &self.config.strategy,
                RefineInputs {
                    step: step_number,
                    scene_extent: self.extent,
                    max_splats: self.config.max_splats.count(),
                    peak_splats: self.peak_splats,
                    seed,
                },
                state,
                self.owner,
            )
            .await;
        let (state, refine) = match refined {
            Ok(result) => result,
            Err(e) => {
                // The densifier consumed the state: the run cannot go on.
                drop(scratch);
                return Err(e);
            }
        };
        if let Strategy::Mcmc(mcmc) = &self.config.strategy {
            // Position noise after the update and any relocation (gsplat's order).
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("mcmc noise"),
            });
            let lr_means = rates.at(ParamGroup::Means, step0, extent);
            ctx.profile_stage("mcmc");
            let noised = ctx.checked("mcmc noise", || {
                self.kernels.densifier.mcmc_noise(
                    &ctx,
                    &mut encoder,
                    mcmc,
                    &state,
                    lr_means,
                    step_number,
                    seed,
                )
            });
            if let Err(e) = noised {
                drop((state, scratch));
                return Err(e);
            }
            ctx.queue.submit([encoder.finish()]);
        }
        let splats = state.splats.count;
        self.peak_splats = self.peak_splats.max(splats);
        self.run = Some(Run::Active(state, scratch));
        self.step = step_number;
        Ok(StepStats {
            step: step_number,
            splats,
            intersections: counts.intersections,
            refine,
            image_size: [camera.width, camera.height],
        })
    }
}

/// Gradients (zero) and moments for `splats`, the moments and statistics from `host` where
/// it has them (empty for a fresh run: zeros).
fn restore_optimizer(
    ctx: &GpuContext,
    splats: GpuSplats,
    host: &HostOptimizerState,
    owner: Owner,
) -> Result<TrainState, GpuError> {
    let state = TrainState::new(ctx, splats, owner)?;
    let buffers = state.adam.moments();
    if !host.moments.is_empty() {
        if host.moments.len() != buffers.len() {
            return Err(GpuError::Validation {
                label: "resume".into(),
                message: "optimizer state has the wrong shape".into(),
            });
        }
        for (buffer, (m, v)) in buffers.iter().zip(&host.moments) {
            if (m.len() * 4) as u64 != buffer.m.size() || (v.len() * 4) as u64 != buffer.v.size() {
                return Err(GpuError::Validation {
                    label: "resume".into(),
                    message: "optimizer state does not match the splats".into(),
                });
            }
            ctx.queue.write_buffer(&buffer.m, 0, bytemuck::cast_slice(m));
            ctx.queue.write_buffer(&buffer.v, 0, bytemuck::cast_slice(v));
        }
    }
    if !host.densify.is_empty() {
        if (host.densify.len() * 4) as u64 != state.grads.densify.size() {
            return Err(GpuError::Validation {
                label: "resume".into(),
                message: "densification statistics do not match the splats".into(),
            });
        }
        ctx.queue.write_buffer(&state.grads.densify, 0, bytemuck::cast_slice(&host.densify));
    }
    Ok(state)
}

fn no_views() -> GpuError {
    GpuError::Validation {
        label: "train".into(),
        message: "the dataset has no training views".into(),
    }
}

fn paused() -> GpuError {
    GpuError::Validation { label: "train".into(), message: "the run is paused".into() }
}

fn torn_down() -> GpuError {
    GpuError::Validation { label: "train".into(), message: "the run has been torn down".into() }
}
