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
use splat_render::gpu_splats::read_f32_async;
use splat_render::{
    Camera, Category, FrameCounts, FrameScratch, GpuBuffer, GpuContext, GpuError, GpuSplats, Owner,
    RenderSettings, Renderer, wgpu,
};

use crate::appearance::{AppearanceKernels, AppearanceState, AppearanceStep};
use crate::config::{TrainConfig, Transparency};
use crate::dataset::{Dataset, View};
use crate::densify::{Densifier, RefineInputs, RefineStats, Strategy, TrainState};
use crate::loss::{
    ImageLoss, LossImages, LossScratch, MetricsRing, TargetTransparency, target_words,
};
use crate::optim::{Adam, ParamGroup};

/// `camera` for its image shrunk `divisor` times (each pixel the mean of divisor × divisor;
/// at most the image's width and height): the size rounded down (the last columns and rows
/// that do not fill a block are left out), the intrinsics divided (pixel centres at +0.5 stay
/// centred on their blocks).
#[must_use]
pub fn shrunk_camera(camera: Camera, divisor: u32) -> Camera {
    if divisor <= 1 {
        return camera;
    }
    let d = divisor as f32;
    Camera {
        width: camera.width / divisor,
        height: camera.height / divisor,
        fx: camera.fx / d,
        fy: camera.fy / d,
        cx: camera.cx / d,
        cy: camera.cy / d,
        ..camera
    }
}

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
    /// [`Progressive`]).
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
    /// The shrunk images of a coarse stage ([`Progressive`]): two streamed slots (this step's
    /// and the next one's), sized for the largest image shrunk twice; dropped when the run
    /// reaches full size.
    coarse: Option<CoarseTargets>,
    /// The per-view transforms, with [`TrainConfig::appearance`] (downloaded when the run
    /// pauses: they are run state).
    appearance: Option<AppearanceState>,
}

/// [`StepScratch::coarse`]: the two slots, and the host buffers the images are shrunk and
/// packed in (reused: no allocation per step).
struct CoarseTargets {
    slots: [GpuBuffer; 2],
    pack: Vec<u32>,
    sums: Vec<u32>,
}

impl CoarseTargets {
    fn new(ctx: &GpuContext, dataset: &Dataset, owner: Owner) -> Result<Self, GpuError> {
        let (width, height) = dataset.largest_image();
        let pixels = u64::from(width / 2) * u64::from(height / 2);
        let words = target_words(pixels, dataset.has_transparency());
        Ok(Self {
            slots: image_slots(ctx, "coarse target image", words, owner)?,
            pack: Vec::with_capacity(words as usize),
            sums: Vec::with_capacity(3 * pixels as usize),
        })
    }

    /// Uploads `view`'s image shrunk `divisor` times into `slot` (it lands with the next
    /// submit).
    fn prepare(&mut self, ctx: &GpuContext, view: &View, divisor: u32, slot: usize) {
        pack_shrunk_rgba8(view, divisor, &mut self.pack, &mut self.sums);
        ctx.queue.write_buffer(&self.slots[slot], 0, bytemuck::cast_slice(&self.pack));
    }
}

/// Two streamed image buffers of `words` packed words each, labelled `label 0` and `label 1`.
fn image_slots(
    ctx: &GpuContext,
    label: &str,
    words: u64,
    owner: Owner,
) -> Result<[GpuBuffer; 2], GpuError> {
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
    let slot = |i: usize| {
        ctx.create_buffer(&format!("{label} {i}"), words * 4, usage, Category::DatasetImages, owner)
    };
    Ok([slot(0)?, slot(1)?])
}

/// The ground-truth images on the GPU.
enum Targets {
    /// One buffer per view: train views, then eval views.
    Resident { train: Vec<GpuBuffer>, eval: Vec<GpuBuffer> },
    /// This step's image and the next one's; `pack` is the reused host buffer they are packed
    /// in (no allocation per step).
    Streamed { slots: [GpuBuffer; 2], pack: Vec<u32> },
}

/// Bytes of every train and eval image as packed RGBA8 (with its alpha plane when it has
/// transparency): what [`ImagePlacement::Resident`] puts on the GPU.
#[must_use]
pub fn resident_image_bytes(dataset: &Dataset) -> u64 {
    dataset.views().map(|v| 4 * target_words(pixels_of(v), v.alpha.is_some())).sum()
}

fn pixels_of(view: &View) -> u64 {
    u64::from(view.camera.width) * u64::from(view.camera.height)
}

/// Upload in batches of at most this many bytes, waiting for each, so that wgpu's staging
/// copies of a large dataset do not pile up in host memory.
const UPLOAD_BATCH_BYTES: u64 = 64 << 20;

impl Targets {
    fn new(
        ctx: &GpuContext,
        dataset: &Dataset,
        placement: ImagePlacement,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let mut pack = Vec::new();
        match placement {
            ImagePlacement::Resident => {
                let mut batch = 0;
                let mut upload = |view: &View, label: &str| -> Result<GpuBuffer, GpuError> {
                    pack_rgba8(view, &mut pack);
                    let bytes = pack.len() as u64 * 4;
                    let buffer =
                        ctx.create_buffer(label, bytes, storage, Category::DatasetImages, owner)?;
                    ctx.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&pack));
                    batch += bytes;
                    if batch >= UPLOAD_BATCH_BYTES {
                        ctx.queue.submit([]);
                        ctx.wait_idle()?;
                        batch = 0;
                    }
                    Ok(buffer)
                };
                let train = dataset
                    .train
                    .iter()
                    .map(|v| upload(v, "train image"))
                    .collect::<Result<Vec<_>, _>>()?;
                let eval = dataset
                    .eval
                    .iter()
                    .map(|v| upload(v, "eval image"))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Self::Resident { train, eval })
            }
            ImagePlacement::Streamed => {
                let (width, height) = dataset.largest_image();
                let pixels = u64::from(width) * u64::from(height);
                let words = target_words(pixels, dataset.has_transparency());
                pack.reserve(words as usize);
                Ok(Self::Streamed { slots: image_slots(ctx, "target image", words, owner)?, pack })
            }
        }
    }

    /// Makes `view`'s image available in `slot` (streamed: uploads it; it lands with the next
    /// submit) and returns its buffer.
    fn prepare(&mut self, ctx: &GpuContext, view: &View, which: TargetRef) -> &GpuBuffer {
        match self {
            Self::Resident { train, eval } => match which {
                TargetRef::Train(i, _) => &train[i],
                TargetRef::Eval(i, _) => &eval[i],
            },
            Self::Streamed { slots, pack } => {
                let (TargetRef::Train(_, slot) | TargetRef::Eval(_, slot)) = which;
                pack_rgba8(view, pack);
                ctx.queue.write_buffer(&slots[slot], 0, bytemuck::cast_slice(pack));
                &slots[slot]
            }
        }
    }

    /// The buffer holding `which` (already prepared).
    fn get(&self, which: TargetRef) -> &GpuBuffer {
        match (self, which) {
            (Self::Resident { train, .. }, TargetRef::Train(i, _)) => &train[i],
            (Self::Resident { eval, .. }, TargetRef::Eval(i, _)) => &eval[i],
            (Self::Streamed { slots, .. }, TargetRef::Train(_, s) | TargetRef::Eval(_, s)) => {
                &slots[s]
            }
        }
    }
}

/// A view's image: its index among the train (or eval) views, and the streaming slot it goes
/// to when images are streamed.
#[derive(Clone, Copy, Debug)]
enum TargetRef {
    Train(usize, usize),
    Eval(usize, usize),
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
    /// The longest side of the largest train image, in pixels (at full size; compact's
    /// growth threshold follows the size trained at, [`crate::densify::CompactConfig::grad_threshold_at`]).
    image_size: u32,
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

/// Packs `view`'s image as RGBA8 words into `out` (reused: no allocation once it is large
/// enough), its mask in the alpha byte (the loss's pixel weight; 255 without a mask), and,
/// when it has transparency, its alpha plane after the pixels (`loss::target_words`).
fn pack_rgba8(view: &View, out: &mut Vec<u32>) {
    out.clear();
    let rgb = view.image.pixels().map(|p| p.0);
    match &view.mask {
        Some(mask) => out.extend(
            rgb.zip(mask.pixels()).map(|([r, g, b], w)| u32::from_le_bytes([r, g, b, w.0[0]])),
        ),
        None => out.extend(rgb.map(|[r, g, b]| u32::from_le_bytes([r, g, b, 255]))),
    }
    if let Some(alpha) = &view.alpha {
        out.extend(alpha.as_raw().chunks(4).map(|bytes| {
            let mut word = [0; 4];
            word[..bytes.len()].copy_from_slice(bytes);
            u32::from_le_bytes(word)
        }));
    }
}

/// [`pack_rgba8`] of `view`'s image shrunk `divisor` times: each colour, mask weight and alpha
/// the rounded mean of its divisor × divisor block; the last columns and rows that do not fill
/// a block are left out, as in [`shrunk_camera`]. `sums` is scratch.
fn pack_shrunk_rgba8(view: &View, divisor: u32, out: &mut Vec<u32>, sums: &mut Vec<u32>) {
    let size = (view.image.width() / divisor, view.image.height() / divisor);
    let width = view.image.width();
    let n = divisor * divisor;
    let mean = |sum: u32| ((sum + n / 2) / n) as u8;
    out.clear();
    block_sums(view.image.as_raw(), width, 3, divisor, size, sums);
    out.extend(
        sums.chunks_exact(3).map(|c| u32::from_le_bytes([mean(c[0]), mean(c[1]), mean(c[2]), 255])),
    );
    if let Some(mask) = &view.mask {
        block_sums(mask.as_raw(), width, 1, divisor, size, sums);
        for (word, &sum) in out.iter_mut().zip(sums.iter()) {
            *word = (*word & 0x00ff_ffff) | (u32::from(mean(sum)) << 24);
        }
    }
    if let Some(alpha) = &view.alpha {
        block_sums(alpha.as_raw(), width, 1, divisor, size, sums);
        out.extend(sums.chunks(4).map(|c| {
            let mut word = [0; 4];
            for (byte, &sum) in word.iter_mut().zip(c) {
                *byte = mean(sum);
            }
            u32::from_le_bytes(word)
        }));
    }
}

/// The sum of each `divisor` × `divisor` block of an image `width` pixels wide of `channels`
/// bytes a pixel, for an image of `size` blocks, into `sums` (row-major, `channels` a block).
fn block_sums(
    raw: &[u8],
    width: u32,
    channels: usize,
    divisor: u32,
    size: (u32, u32),
    sums: &mut Vec<u32>,
) {
    let (d, width, out_width) = (divisor as usize, width as usize, size.0 as usize);
    sums.clear();
    sums.resize(out_width * size.1 as usize * channels, 0);
    for y in 0..size.1 as usize * d {
        let row = &raw[y * width * channels..][..out_width * d * channels];
        let out = &mut sums[(y / d) * out_width * channels..][..out_width * channels];
        for (x, pixel) in row.chunks_exact(channels).enumerate() {
            for (sum, &byte) in out[(x / d) * channels..].iter_mut().zip(pixel) {
                *sum += u32::from(byte);
            }
        }
    }
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
        // compensation from the dataset, progressive stages from the planned steps, the
        // background from how the dataset was loaded.
        let mut config = config;
        config.appearance = config.appearance.resolve(&dataset.train);
        config.progressive = config.progressive.fixed(config.steps);
        config.background = dataset.options.background;
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
            image_size: dataset
                .train
                .iter()
                .map(|v| v.camera.width.max(v.camera.height))
                .max()
                .unwrap_or(0),
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
        let peak_splats = self.peak_splats.min(self.config.max_splats);
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
                    max_splats: self.config.max_splats,
                    peak_splats: self.peak_splats,
                    seed,
                    image_size: self.image_size / self.config.progressive.divisor(step0),
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
fn collect_metrics(ring: &mut MetricsRing, out: &mut std::collections::VecDeque<StepMetrics>) {
    while let Some((step, metrics)) = ring.take_ready() {
        if out.len() == METRICS_KEPT {
            out.pop_front();
        }
        out.push_back(StepMetrics { step, loss: metrics.loss, train_psnr: metrics.psnr() });
    }
}

/// Adam's moments and the densification statistics, read back.
async fn download_optimizer(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of `width` × `height` with every byte of its image, mask and alpha drawn from
    /// `seed`.
    fn random_view(width: u32, height: u32, seed: u64) -> View {
        let mut rng = SplitMix64::new(seed);
        let mut byte = || (rng.next_u64() >> 56) as u8;
        let image =
            image::RgbImage::from_fn(width, height, |_, _| image::Rgb([byte(), byte(), byte()]));
        let mask = image::GrayImage::from_fn(width, height, |_, _| image::Luma([byte()]));
        let alpha = image::GrayImage::from_fn(width, height, |_, _| image::Luma([byte()]));
        let camera = Camera {
            width,
            height,
            fx: 50.0,
            fy: 50.0,
            cx: width as f32 / 2.0,
            cy: height as f32 / 2.0,
            world_from_camera: glam::Mat4::IDENTITY,
        };
        View {
            index: 0,
            name: "random".into(),
            camera,
            image,
            mask: Some(mask),
            alpha: Some(alpha),
            exposure: crate::dataset::Exposure::default(),
        }
    }

    /// The reference: each shrunk pixel's channels, one at a time, the rounded mean of its
    /// block, read pixel by pixel.
    fn shrunk_reference(view: &View, d: u32) -> Vec<u32> {
        let (w, h) = (view.image.width() / d, view.image.height() / d);
        let mean = |get: &dyn Fn(u32, u32) -> u8, x: u32, y: u32| {
            let sum: u32 = (0..d * d).map(|k| u32::from(get(x * d + k % d, y * d + k / d))).sum();
            ((sum + d * d / 2) / (d * d)) as u8
        };
        let mask = view.mask.as_ref().unwrap();
        let alpha = view.alpha.as_ref().unwrap();
        let mut words = Vec::new();
        let mut alphas = Vec::new();
        for y in 0..h {
            for x in 0..w {
                let c = |i: usize| mean(&|px, py| view.image.get_pixel(px, py).0[i], x, y);
                let weight = mean(&|px, py| mask.get_pixel(px, py).0[0], x, y);
                words.push(u32::from_le_bytes([c(0), c(1), c(2), weight]));
                alphas.push(mean(&|px, py| alpha.get_pixel(px, py).0[0], x, y));
            }
        }
        words.extend(alphas.chunks(4).map(|c| {
            let mut word = [0; 4];
            word[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(word)
        }));
        words
    }

    #[test]
    fn shrunk_images_are_the_means_of_their_blocks() {
        // Sizes that divide and that leave columns and rows out; a pixel count that leaves
        // the last alpha word part-filled.
        for (width, height, d) in [(16, 8, 2), (17, 9, 2), (23, 13, 4), (9, 7, 4)] {
            let view = random_view(width, height, u64::from(width * 31 + d));
            let (mut out, mut sums) = (Vec::new(), Vec::new());
            pack_shrunk_rgba8(&view, d, &mut out, &mut sums);
            assert_eq!(out, shrunk_reference(&view, d), "{width}×{height} / {d}");
            let pixels = u64::from(width / d) * u64::from(height / d);
            assert_eq!(out.len() as u64, target_words(pixels, true));
        }
    }

    #[test]
    fn a_shrunk_camera_sees_the_same_point_at_the_centre_of_its_block() {
        let camera = random_view(1601, 899, 1).camera;
        let camera = Camera { fx: 1200.0, fy: 1100.0, cx: 801.3, cy: 447.9, ..camera };
        let shrunk = shrunk_camera(camera, 4);
        assert_eq!((shrunk.width, shrunk.height), (400, 224));
        // A point on the ray through full-size pixel centre (u, v): at shrunk pixel
        // ((u + 0.5) / 4 − 0.5) … i.e. continuous coordinates divide by 4.
        let (x, y) = (0.3_f32, -0.2_f32);
        let u = camera.fx * x + camera.cx;
        let v = camera.fy * y + camera.cy;
        assert!((shrunk.fx * x + shrunk.cx - u / 4.0).abs() < 1e-4);
        assert!((shrunk.fy * y + shrunk.cy - v / 4.0).abs() < 1e-4);
        assert_eq!(shrunk_camera(camera, 1), camera);
    }
}
