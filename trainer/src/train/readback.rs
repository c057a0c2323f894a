//! What comes back from a run: step losses, evaluations, per-view appearance, the splats and
//! snapshots for checkpoints.

use std::sync::Arc;

use splat_formats::Splats;
use splat_render::gpu_splats::read_f32_async;
use splat_render::{GpuContext, GpuError, wgpu};

use super::{
    EvalStats, HostOptimizerState, METRICS_KEPT, Run, RunSnapshot, StepMetrics, StepScratch,
    TargetRef, Trainer, paused, torn_down,
};
use crate::densify::TrainState;
use crate::loss::MetricsRing;

impl Trainer {
    /// The oldest step loss read back and not yet taken. A step's loss arrives a step or so
    /// after it (the GPU is not waited for); a paused run has all of its own.
    pub fn next_metrics(&mut self) -> Option<StepMetrics> {
        self.metrics.pop_front()
    }

    /// Waits for the losses still in flight and returns every one not yet taken. Blocks.
    pub fn flush_metrics(&mut self) -> Result<Vec<StepMetrics>, GpuError> {
        if let Some(Run::Active(_, scratch)) = self.run.as_mut() {
            pollster::block_on(scratch.metrics.settle(&self.ctx))?;
            collect_metrics(&mut scratch.metrics, &mut self.metrics);
        }
        Ok(self.metrics.drain(..).collect())
    }

    /// PSNR and SSIM over the eval views (or, for a dataset without any, the training views).
    /// Errors on a paused run. Blocks; see [`Trainer::evaluate_async`].
    pub fn evaluate(&mut self) -> Result<EvalStats, GpuError> {
        pollster::block_on(self.evaluate_async())
    }

    /// Each train view's learned colour transform, with per-view appearance on (`None` off, or
    /// while paused, when the host keeps them). Reads them back: for the window, at
    /// evaluations, not every step.
    pub async fn appearance_async(
        &self,
    ) -> Result<Option<Vec<crate::appearance::ViewAppearance>>, GpuError> {
        let values = match self.run.as_ref() {
            Some(Run::Active(_, scratch)) => match &scratch.appearance {
                Some(appearance) => appearance.download(&self.ctx).await?,
                None => return Ok(None),
            },
            Some(Run::Paused(_, host)) if self.config.appearance.is_on() => host.appearance.clone(),
            _ => return Ok(None),
        };
        let names: Vec<String> = self.dataset.train.iter().map(|v| v.name.clone()).collect();
        Ok(Some(crate::appearance::ViewAppearance::from_values(&values, &names)))
    }

    /// [`Trainer::evaluate`], awaiting the GPU (twice per view) without blocking the thread.
    pub async fn evaluate_async(&mut self) -> Result<EvalStats, GpuError> {
        let ctx = self.ctx.clone();
        let dataset = Arc::clone(&self.dataset);
        let (views, eval) =
            if dataset.eval.is_empty() { (&dataset.train, false) } else { (&dataset.eval, true) };
        // Streamed: the slot of the last step's target is free (the other holds the next
        // step's).
        let slot = 1 - (self.step % 2) as usize;
        let settings = self.settings();
        let step = self.step;
        // A step begun and not finished is abandoned: its projection is overwritten here.
        self.begun = None;
        let Some(Run::Active(state, scratch)) = self.run.as_mut() else {
            return Err(if self.run.is_some() { paused() } else { torn_down() });
        };
        let (mut psnr, mut ssim) = (0.0, 0.0);
        let (mut compensated, mut counted) = (0.0, 0_usize);
        for (i, view) in views.iter().enumerate() {
            let which = if eval { TargetRef::Eval(i, slot) } else { TargetRef::Train(i, slot) };
            scratch.targets.prepare(&ctx, view, which);
            self.kernels.renderer.forward_begin(
                &ctx,
                &state.splats,
                &view.camera,
                &settings,
                &mut scratch.frame,
            )?;
            let counts = scratch.frame.counts(&ctx).await?;
            self.kernels.renderer.prepare_bands(&ctx, &mut scratch.frame, counts).await?;
            let layout = ctx.checked("evaluation", || {
                let mut encoder =
                    ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("eval"),
                    });
                self.kernels.renderer.forward_finish(
                    &ctx,
                    &mut encoder,
                    &state.splats,
                    &mut scratch.frame,
                    counts,
                )?;
                self.kernels.loss.encode(
                    &ctx,
                    &mut encoder,
                    &scratch.frame.image,
                    scratch.targets.get(which),
                    view.camera.width,
                    view.camera.height,
                    self.config.loss_weights,
                    None,
                    &scratch.loss,
                )?;
                let layout = scratch.loss.record_readback(&mut encoder)?;
                ctx.queue.submit([encoder.finish()]);
                Ok(layout)
            })?;
            let metrics = scratch.loss.read_recorded(&ctx, layout).await?;
            psnr += metrics.psnr();
            ssim += metrics.ssim;
            if let Some(appearance) = &scratch.appearance {
                let pixels = view.camera.width * view.camera.height;
                let render = appearance.read_image(&ctx, &scratch.frame.image, pixels).await?;
                let mask = view.mask.as_ref();
                if let Some(p) = crate::appearance::compensated_psnr(&render, &view.image, mask) {
                    compensated += p;
                    counted += 1;
                }
            }
        }
        let n = views.len().max(1) as f64;
        let compensated_psnr = (counted > 0).then(|| compensated / counted as f64);
        Ok(EvalStats { step, psnr: psnr / n, ssim: ssim / n, views: views.len(), compensated_psnr })
    }

    /// The current splats, read back from the GPU (active or paused). Blocks: async code
    /// awaits [`Trainer::splats_async`].
    pub fn splats(&self) -> Result<Splats, GpuError> {
        pollster::block_on(self.splats_async())
    }

    /// [`Trainer::splats`] without blocking the thread.
    pub async fn splats_async(&self) -> Result<Splats, GpuError> {
        self.gpu_splats().ok_or_else(torn_down)?.download_async(&self.ctx).await
    }

    /// Everything needed to continue this run later, read back (active or paused). Blocks:
    /// async code awaits [`Trainer::snapshot_async`].
    pub fn snapshot(&self) -> Result<RunSnapshot, GpuError> {
        pollster::block_on(self.snapshot_async())
    }

    /// [`Trainer::snapshot`] without blocking the thread. A blocking read inside the trainer
    /// task waited forever now and then: tokio's cooperative budget defers the read's wake-up
    /// to the scheduler that the blocking call holds.
    pub async fn snapshot_async(&self) -> Result<RunSnapshot, GpuError> {
        let optimizer = match self.run.as_ref().ok_or_else(torn_down)? {
            Run::Active(state, scratch) => download_optimizer(&self.ctx, state, scratch).await?,
            Run::Paused(_, host) => host.clone(),
        };
        Ok(RunSnapshot {
            splats: self.splats_async().await?,
            optimizer,
            step: self.step,
            rng: self.rng,
            order: self.order.iter().map(|&i| i as u32).collect(),
            peak_splats: self.peak_splats,
            config: self.config.clone(),
        })
    }
}

/// Moves the losses the GPU has finished from `ring` into `out` (at most [`METRICS_KEPT`]).
pub(super) fn collect_metrics(
    ring: &mut MetricsRing,
    out: &mut std::collections::VecDeque<StepMetrics>,
) {
    while let Some((step, metrics)) = ring.take_ready() {
        if out.len() == METRICS_KEPT {
            out.pop_front();
        }
        out.push_back(StepMetrics { step, loss: metrics.loss, train_psnr: metrics.psnr() });
    }
}

/// Adam's moments and the densification statistics, read back.
pub(super) async fn download_optimizer(
    ctx: &GpuContext,
    state: &TrainState,
    scratch: &StepScratch,
) -> Result<HostOptimizerState, GpuError> {
    let mut moments = Vec::with_capacity(8);
    for m in state.adam.moments() {
        let floats = (m.m.size() / 4) as usize;
        moments.push((
            read_f32_async(ctx, &m.m, floats).await?,
            read_f32_async(ctx, &m.v, floats).await?,
        ));
    }
    let floats = (state.grads.densify.size() / 4) as usize;
    let densify = read_f32_async(ctx, &state.grads.densify, floats).await?;
    let appearance = match &scratch.appearance {
        Some(appearance) => appearance.download(ctx).await?,
        None => Vec::new(),
    };
    Ok(HostOptimizerState { moments, densify, appearance })
}
