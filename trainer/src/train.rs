//! One training run on the GPU: render a training view, the 3DGS loss and its gradient,
//! backward through the rasterizer, Adam, densification; evaluation on the eval views.
//!
//! The [`Trainer`] owns every GPU buffer of its run (all registered under the run's
//! [`Owner`]); dropping it frees them. Ground-truth images stay on the CPU as 8-bit RGB and
//! are uploaded one step ahead into one of two buffers, so at most two images are on the GPU.
//! Metrics come back as plain numbers at the step they are computed.

use std::sync::Arc;

use splat_formats::Splats;
use splat_render::{
    Camera, Category, FrameScratch, GpuBuffer, GpuContext, GpuError, GpuSplats, Owner,
    RenderSettings, Renderer, SplatGradients, wgpu,
};

use crate::dataset::{Dataset, View};
use crate::densify::{Densifier, RefineStats, Strategy, TrainState};
use crate::loss::{ImageLoss, ImageMetrics, LossScratch, LossWeights};
use crate::optim::{Adam, AdamState, ParamGroup};

/// The 3DGS learning rates (gaussian-splatting's `OptimizationParams`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LearningRates {
    /// Position learning rate at step 0 and at `means_decay_steps`, times the scene extent;
    /// exponential in between, constant after.
    pub means_initial: f32,
    pub means_final: f32,
    pub means_decay_steps: u32,
    pub sh_dc: f32,
    pub sh_rest: f32,
    pub opacities: f32,
    pub log_scales: f32,
    pub quats: f32,
}

impl Default for LearningRates {
    fn default() -> Self {
        Self {
            means_initial: 1.6e-4,
            means_final: 1.6e-6,
            means_decay_steps: 30_000,
            sh_dc: 2.5e-3,
            sh_rest: 2.5e-3 / 20.0,
            opacities: 2.5e-2,
            log_scales: 5e-3,
            quats: 1e-3,
        }
    }
}

impl LearningRates {
    /// The learning rate of `group` at `step` (0-based) for a scene of `extent`.
    #[must_use]
    pub fn at(&self, group: ParamGroup, step: u32, extent: f32) -> f32 {
        match group {
            ParamGroup::Means => {
                let t = (step as f32 / self.means_decay_steps.max(1) as f32).min(1.0);
                let log_lr = (1.0 - t) * self.means_initial.ln() + t * self.means_final.ln();
                log_lr.exp() * extent
            }
            ParamGroup::ShDc => self.sh_dc,
            ParamGroup::ShRest => self.sh_rest,
            ParamGroup::Opacities => self.opacities,
            ParamGroup::LogScales => self.log_scales,
            ParamGroup::Quats => self.quats,
        }
    }
}

/// Everything that decides a run.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub steps: u32,
    /// Largest SH degree; the active degree rises by one every `sh_degree_interval` steps.
    pub sh_degree: u32,
    pub sh_degree_interval: u32,
    pub strategy: Strategy,
    /// Cap on the splat count, for every strategy.
    pub max_splats: u32,
    /// Evaluate every this many steps (and at the end); 0 = only at the end.
    pub eval_every: u32,
    pub seed: u64,
    /// Linear RGB behind the splats; the colour the dataset's transparent pixels were
    /// composited over.
    pub background: [f32; 3],
    pub learning_rates: LearningRates,
    pub loss_weights: LossWeights,
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepStats {
    /// 1-based number of the step just taken.
    pub step: u32,
    pub loss: f64,
    /// PSNR of the training view, from the same loss pass.
    pub train_psnr: f64,
    pub splats: u32,
    pub refine: Option<RefineStats>,
}

/// Evaluation over the eval views.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalStats {
    pub step: u32,
    /// Mean over views of each view's PSNR, as 3DGS reports it.
    pub psnr: f64,
    pub ssim: f64,
    pub views: usize,
}

/// A training run.
pub struct Trainer {
    ctx: GpuContext,
    owner: Owner,
    config: TrainConfig,
    dataset: Arc<Dataset>,
    extent: f32,
    renderer: Renderer,
    loss: ImageLoss,
    adam: Adam,
    densifier: Densifier,
    state: Option<TrainState>,
    frame: FrameScratch,
    loss_scratch: LossScratch,
    v_image: GpuBuffer,
    /// Two ground-truth buffers: one for this step, one being filled for the next.
    targets: [GpuBuffer; 2],
    step: u32,
    order: Vec<usize>,
    rng: u64,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("owner", &self.owner)
            .field("step", &self.step)
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

fn pack_rgba8(view: &View) -> Vec<u32> {
    view.image.pixels().map(|p| u32::from_le_bytes([p.0[0], p.0[1], p.0[2], 255])).collect()
}

fn largest_image(dataset: &Dataset) -> (u32, u32) {
    dataset.views().fold((1, 1), |(w, h), v| (w.max(v.camera.width), h.max(v.camera.height)))
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
        if dataset.train.is_empty() {
            return Err(GpuError::Validation {
                label: "train".into(),
                message: "the dataset has no training views".into(),
            });
        }
        let splats = GpuSplats::upload(ctx, init, owner)?;
        let grads = SplatGradients::new(ctx, &splats, owner)?;
        let adam = AdamState::new(ctx, &splats, owner)?;
        let renderer = Renderer::new(ctx);
        let loss = ImageLoss::new(ctx);
        let (width, height) = largest_image(&dataset);
        let pixels = u64::from(width) * u64::from(height);
        let frame = FrameScratch::new(ctx, &renderer, owner)?;
        let loss_scratch = loss.scratch(ctx, width, height, owner)?;
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let v_image =
            ctx.create_buffer("v_image", pixels * 16, storage, Category::RasterizerScratch, owner)?;
        let target = |i: usize| {
            ctx.create_buffer(
                &format!("target image {i}"),
                pixels * 4,
                storage,
                Category::DatasetImages,
                owner,
            )
        };
        let targets = [target(0)?, target(1)?];
        let mut trainer = Self {
            ctx: ctx.clone(),
            owner,
            extent: scene_extent(&dataset),
            rng: config.seed,
            config,
            dataset,
            renderer,
            loss,
            adam: Adam::new(ctx),
            densifier: Densifier::new(ctx),
            state: Some(TrainState { splats, grads, adam }),
            frame,
            loss_scratch,
            v_image,
            targets,
            step: 0,
            order: Vec::new(),
        };
        let first = trainer.view_for_step(0);
        trainer.upload_target(0, first);
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

    #[must_use]
    pub fn scene_extent(&self) -> f32 {
        self.extent
    }

    #[must_use]
    pub fn splat_count(&self) -> u32 {
        self.state.as_ref().map_or(0, |s| s.splats.count)
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
        }
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The training view of 0-based step `step`: epochs over a seeded shuffle of the views.
    fn view_for_step(&mut self, step: u32) -> usize {
        let n = self.dataset.train.len();
        let position = step as usize % n;
        if position == 0 || self.order.len() != n {
            self.order = (0..n).collect();
            for i in (1..n).rev() {
                let j = (self.next_random() % (i as u64 + 1)) as usize;
                self.order.swap(i, j);
            }
        }
        self.order[position]
    }

    fn upload_target(&self, slot: usize, view: usize) {
        let pixels = pack_rgba8(&self.dataset.train[view]);
        self.ctx.queue.write_buffer(&self.targets[slot], 0, bytemuck::cast_slice(&pixels));
    }

    /// Takes one optimisation step.
    pub fn step(&mut self) -> Result<StepStats, GpuError> {
        let ctx = self.ctx.clone();
        ctx.checked("training step", || self.encode_step())
    }

    fn encode_step(&mut self) -> Result<StepStats, GpuError> {
        let ctx = self.ctx.clone();
        let slot = (self.step % 2) as usize;
        let view_index =
            self.order.get(self.step as usize % self.dataset.train.len()).copied().unwrap_or(0);
        let dataset = Arc::clone(&self.dataset);
        let camera: Camera = dataset.train[view_index].camera;
        let settings = self.settings();
        let state = self.state.as_ref().ok_or_else(torn_down)?;

        self.renderer.forward(&ctx, &state.splats, &camera, &settings, &mut self.frame)?;
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("loss") });
        self.loss.encode(
            &ctx,
            &mut encoder,
            &self.frame.image,
            &self.targets[slot],
            camera.width,
            camera.height,
            self.config.loss_weights,
            Some(&self.v_image),
            &self.loss_scratch,
        )?;
        ctx.queue.submit([encoder.finish()]);
        // The next step's image goes up while this one computes.
        let next = self.view_for_step(self.step + 1);
        self.upload_target(1 - slot, next);

        let state = self.state.as_ref().ok_or_else(torn_down)?;
        self.renderer.backward(&ctx, &state.splats, &self.frame, &self.v_image, &state.grads)?;
        let step_number = self.step + 1;
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("adam") });
        if let Strategy::Mcmc(mcmc) = &self.config.strategy {
            // MCMC's opacity and scale regularisers act on the gradients before Adam.
            self.densifier.mcmc_regularize(&ctx, &mut encoder, mcmc, state, self.owner)?;
        }
        let (rates, extent, step0) = (self.config.learning_rates, self.extent, self.step);
        self.adam.encode(
            &ctx,
            &mut encoder,
            &state.splats,
            &state.grads,
            &state.adam,
            step_number,
            |group| rates.at(group, step0, extent),
        );
        ctx.queue.submit([encoder.finish()]);
        let metrics: ImageMetrics = self.loss.read_metrics(&ctx, &self.loss_scratch)?;

        let state = self.state.take().ok_or_else(torn_down)?;
        let seed = self.config.seed ^ u64::from(step_number).wrapping_mul(0x2545_f491_4f6c_dd1d);
        let (state, refine) = self.densifier.after_step(
            &ctx,
            &self.config.strategy,
            step_number,
            self.extent,
            self.config.max_splats,
            seed,
            state,
            self.owner,
        )?;
        if let Strategy::Mcmc(mcmc) = &self.config.strategy {
            // Position noise after the update and any relocation (gsplat's order).
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("mcmc noise"),
            });
            let lr_means = rates.at(ParamGroup::Means, step0, extent);
            self.densifier.mcmc_noise(
                &ctx,
                &mut encoder,
                mcmc,
                &state,
                lr_means,
                step_number,
                seed,
                self.owner,
            )?;
            ctx.queue.submit([encoder.finish()]);
        }
        let splats = state.splats.count;
        self.state = Some(state);
        self.step = step_number;
        Ok(StepStats {
            step: step_number,
            loss: metrics.loss,
            train_psnr: metrics.psnr(),
            splats,
            refine,
        })
    }

    /// PSNR and SSIM over the eval views (or, for a dataset without any, the training views).
    pub fn evaluate(&mut self) -> Result<EvalStats, GpuError> {
        let ctx = self.ctx.clone();
        ctx.checked("evaluation", || self.encode_evaluation())
    }

    fn encode_evaluation(&mut self) -> Result<EvalStats, GpuError> {
        let ctx = self.ctx.clone();
        let dataset = Arc::clone(&self.dataset);
        let views: &[View] = if dataset.eval.is_empty() { &dataset.train } else { &dataset.eval };
        // The slot of the last step's target is free (the other holds the next step's).
        let slot = 1 - (self.step % 2) as usize;
        let settings = self.settings();
        let (mut psnr, mut ssim) = (0.0, 0.0);
        for view in views {
            let state = self.state.as_ref().ok_or_else(torn_down)?;
            ctx.queue.write_buffer(&self.targets[slot], 0, bytemuck::cast_slice(&pack_rgba8(view)));
            self.renderer.forward(&ctx, &state.splats, &view.camera, &settings, &mut self.frame)?;
            let mut encoder = ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("eval") });
            self.loss.encode(
                &ctx,
                &mut encoder,
                &self.frame.image,
                &self.targets[slot],
                view.camera.width,
                view.camera.height,
                self.config.loss_weights,
                None,
                &self.loss_scratch,
            )?;
            ctx.queue.submit([encoder.finish()]);
            let metrics = self.loss.read_metrics(&ctx, &self.loss_scratch)?;
            psnr += metrics.psnr();
            ssim += metrics.ssim;
        }
        let n = views.len().max(1) as f64;
        Ok(EvalStats { step: self.step, psnr: psnr / n, ssim: ssim / n, views: views.len() })
    }

    /// The current splats, read back from the GPU.
    pub fn splats(&self) -> Result<Splats, GpuError> {
        self.state.as_ref().ok_or_else(torn_down)?.splats.download(&self.ctx)
    }
}

fn torn_down() -> GpuError {
    GpuError::Validation { label: "train".into(), message: "the run has been torn down".into() }
}
