//! Per-view appearance compensation (appearance.wgsl beside this file).
//!
//! A phone on automatic exposure and white balance gives each photo its own brightness and
//! colour cast. One colour per splat cannot fit images that disagree, and the disagreement
//! becomes haze and floaters. So each train view has its own affine colour transform, and the
//! loss compares the view's image with its render seen through it:
//!
//! ```text
//! c' = (I + D)·c + b        D: 3×3, b: 3; 12 parameters a view
//! ```
//!
//! zero at the start, or each view's exposure relative to the others' where every photo's
//! EXIF gives one ([`exif_seed`]); [`Compensation::Auto`] turns it on where those differ.
//!
//! (an exposure gain is `D = (g − 1)·I`, a white balance a diagonal `D`, a colour cast `b`; the
//! per-image affine transform of INRIA 3DGS's `--train_test_exp`). Alpha passes through. The
//! transforms are optimised with the splats by Adam (β 0.9 / 0.999, ε 1e-15), each view
//! stepped when it is trained, with its own step count, at a learning rate falling
//! log-linearly from [`LR_INITIAL`] to [`LR_FINAL`] over the run (3DGS's exposure schedule),
//! and [`DECAY`] pulls every parameter towards the identity. The images cannot decide one
//! thing: a change every transform shares, undone by the splats' colours. Left free, it
//! wanders with the optimiser (desk-penguin, 160 px, step 1,000: raw eval PSNR 24.31 dB free,
//! 26.19 held), so after each step every view's parameters lose their mean over the views:
//! the mean transform is the identity, and the splats keep the train views' mean appearance,
//! which is what an evaluation view, with no transform, is compared with.
//!
//! Where it acts: the splats' colours are the scene's own. Exports, the viewer and evaluation
//! render without any transform; only the training loss sees one.
//!
//! Kernels: `apply` (one thread a pixel) writes the corrected image the loss reads; `backward`
//! (one thread a pixel) maps the loss's gradient back through the transform, dL/dc =
//! (I + D)ᵀ·dL/dc', for the rasterizer, and writes each workgroup's 12 sums of dL/dD = dL/dc'·cᵀ
//! and dL/db = dL/dc' (a fixed-order tree); `update` (one workgroup) adds those sums in a fixed
//! order and takes the view's Adam step. So a run is bit-reproducible. The CPU reference is
//! [`reference`].
//!
//! Evaluation stays honest: an eval view has no learned transform, so its raw figures compare
//! the splats' own colours with a photo of that view's exposure. Beside them evaluation reports
//! [`compensated_psnr`]: the affine transform fitted by least squares on the left half of each
//! eval image, and the PSNR of the right half through it (INRIA 3DGS's `--train_test_exp`
//! evaluation, fitted in closed form instead of trained). The raw figure rewards what compensation removes: on a
//! video whose exposure drifts along the path, a run without it bakes the drift into the
//! splats' view-dependent colour, which an eval frame between two train frames then matches.

pub mod drift;
pub mod reference;

pub use drift::PixelDrift;

use bytemuck::{Pod, Zeroable};
use splat_render::kernels::DispatchLimits;
use splat_render::kernels::compute::Binding::{Read, ReadWrite};
use splat_render::kernels::compute::{Compile, ComputeKernel, KernelDecl, shader_module};
use splat_render::wgpu;
use splat_render::{Category, GpuBuffer, GpuContext, GpuError, Owner};

/// Parameters of one view's transform: `D` row-major, then `b`.
pub const PARAMS: usize = 12;
/// Floats of one view's optimizer row: m (12), v (12), its step count, padding.
pub const MOMENTS: usize = 32;
/// The learning rate at the first step and at the last (log-linear in between).
pub const LR_INITIAL: f32 = 0.01;
pub const LR_FINAL: f32 = 0.001;
/// Weight of the L2 pull of every parameter towards the identity transform.
pub const DECAY: f32 = 1e-3;
const BETA1: f32 = 0.9;
const BETA2: f32 = 0.999;
const EPS: f32 = 1e-15;
/// Threads of a workgroup (appearance.wgsl's `WG`).
const WORKGROUP: u32 = 256;
const PIXEL_BYTES: u64 = 16;

/// When a run compensates per-view appearance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compensation {
    /// On where the train views' EXIF says their exposures differ by [`AUTO_SPREAD_STOPS`] or
    /// more, or where their pixels drift against the sparse points' colours by
    /// [`AUTO_DRIFT_STOPS`] in exposure or [`AUTO_COLOUR_STOPS`] in colour balance; off
    /// otherwise ([`Compensation::decide`]).
    #[default]
    Auto,
    On,
    Off,
}

/// The spread of the train views' EXIF exposure (largest less smallest, in stops) from which
/// [`Compensation::Auto`] turns compensation on: a third of a stop, the smallest step a camera
/// takes, a 26% change of the light.
pub const AUTO_SPREAD_STOPS: f64 = 1.0 / 3.0;

/// The spread of the train views' exposure read from their pixels
/// ([`PixelDrift::exposure_stops`], in stops of pixel value) from which
/// [`Compensation::Auto`] turns compensation on: a 1.7× range of brightness. The shared COLMAP
/// captures as taken spread 0.03–0.59 at 48–1,600 px (a phone video's own exposure step, a
/// camera's small changes: drift the eval views share, which raw eval PSNR rewards leaving
/// in); with gains of 0.5–2× and ±15% a channel, 1.5–2.0 over 20–25 views, 0.54–1.57 over
/// maupertuis's 3 (BENCHMARKS.md, "Exposure drift read from the pixels").
pub const AUTO_DRIFT_STOPS: f64 = 0.75;

/// The spread of one channel's balance read from the pixels ([`PixelDrift::colour_stops`])
/// from which [`Compensation::Auto`] turns compensation on: one channel 9% off the others'.
/// The shared captures as taken spread 0.01–0.10; with ±15% a channel, 0.13–0.48.
pub const AUTO_COLOUR_STOPS: f64 = 0.12;

/// What a run's per-view appearance is, and what decided it ([`Compensation::decide`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// `On` or `Off`.
    pub compensation: Compensation,
    pub from: Evidence,
}

/// What [`Compensation::decide`] read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Evidence {
    /// The setting was on or off.
    Setting,
    /// A resumed run keeps its checkpoint's.
    Checkpoint,
    /// The train photos' EXIF exposures, `spread_stops` apart.
    Exif { spread_stops: f64 },
    /// The train views' pixels against the sparse points' colours.
    Pixels(PixelDrift),
    /// No EXIF exposure that differs, and no drift read from the pixels: no coloured points
    /// to read them against (`points` false), or too few views that show enough of them.
    Nothing { points: bool },
}

impl Decision {
    /// `setting`, `exif`, `pixels` or `nothing`: for metrics files.
    #[must_use]
    pub fn source(&self) -> &'static str {
        match self.from {
            Evidence::Setting => "setting",
            Evidence::Checkpoint => "checkpoint",
            Evidence::Exif { .. } => "exif",
            Evidence::Pixels(_) => "pixels",
            Evidence::Nothing { .. } => "nothing",
        }
    }
}

impl Decision {
    /// What decided it, in words (no leading "on" or "off").
    #[must_use]
    pub fn reason(&self) -> String {
        match self.from {
            Evidence::Setting => "as set".to_owned(),
            Evidence::Checkpoint => "as the checkpoint trained".to_owned(),
            Evidence::Exif { spread_stops } => {
                format!("the train photos' EXIF exposures span {spread_stops:.1} stops")
            }
            Evidence::Pixels(drift) => format!(
                "against {} sparse points' colours, the {} train views' brightness spans {:.2} \
                 stops and their colour balance {:.2}; auto turns it on from {AUTO_DRIFT_STOPS:.2} \
                 or {AUTO_COLOUR_STOPS:.2}",
                drift.points, drift.views, drift.exposure_stops, drift.colour_stops,
            ),
            Evidence::Nothing { points: false } => "no EXIF exposure differs, and there are \
                                                    no coloured sparse points to read the \
                                                    pixels' drift against"
                .to_owned(),
            Evidence::Nothing { points: true } => "no EXIF exposure differs, and too few train \
                                                   views show enough sparse points on flat \
                                                   surfaces to read the pixels' drift (the \
                                                   images may be too small)"
                .to_owned(),
        }
    }
}

impl std::fmt::Display for Decision {
    /// One line: on or off, and from what.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = self.compensation;
        match self.from {
            Evidence::Setting | Evidence::Checkpoint => {
                write!(f, "per-view appearance {on} ({})", self.reason())
            }
            Evidence::Exif { .. } if on.is_on() => write!(
                f,
                "per-view appearance on: {}; each view's colour transform starts from its exposure",
                self.reason()
            ),
            _ => write!(f, "per-view appearance {on}: {}", self.reason()),
        }
    }
}

/// The exponent between a change of the light and the change of an 8-bit sRGB value it makes
/// in the mid-tones (sRGB's curve is about a power of 1/2.2; a camera's tone curve differs, so
/// EXIF gives a start, not the answer).
pub const ENCODING_GAMMA: f64 = 2.2;

impl Compensation {
    /// `On` or `Off` and why: `Auto` by the train photos' EXIF exposure where it differs, else
    /// by the pixels' drift the dataset read when it loaded ([`Dataset::pixel_drift`]). Before
    /// the run's first step, so that its run is `on`'s or `off`'s, bit for bit.
    ///
    /// [`Dataset::pixel_drift`]: crate::dataset::Dataset::pixel_drift
    #[must_use]
    pub fn decide(self, dataset: &crate::dataset::Dataset) -> Decision {
        let decided =
            |on: bool, from| Decision { compensation: if on { Self::On } else { Self::Off }, from };
        match self {
            Self::On | Self::Off => Decision { compensation: self, from: Evidence::Setting },
            Self::Auto => match (exif_spread_stops(&dataset.train), dataset.pixel_drift) {
                (Some(spread_stops), _) if spread_stops >= AUTO_SPREAD_STOPS => {
                    decided(true, Evidence::Exif { spread_stops })
                }
                (_, Some(drift)) => decided(drift.drifts(), Evidence::Pixels(drift)),
                (Some(spread_stops), None) => decided(false, Evidence::Exif { spread_stops }),
                (None, None) => {
                    let points = dataset.init_points.as_ref().is_some_and(|p| p.has_color);
                    decided(false, Evidence::Nothing { points })
                }
            },
        }
    }

    /// `On` or `Off`: [`Compensation::decide`]'s answer.
    #[must_use]
    pub fn resolve(self, dataset: &crate::dataset::Dataset) -> Self {
        self.decide(dataset).compensation
    }

    /// True for `On` (`Auto` counts as off until it is resolved).
    #[must_use]
    pub fn is_on(self) -> bool {
        self == Self::On
    }

    /// True for `Off` (a checkpoint leaves the setting out then).
    #[must_use]
    pub fn is_off(&self) -> bool {
        *self == Self::Off
    }

    /// `auto`, `on` or `off`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Self::Auto),
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            _ => Err(format!("'{text}': auto, on or off")),
        }
    }

    /// What checkpoints written before the setting was kept trained with.
    pub(crate) fn before_it_was_kept() -> Self {
        Self::Off
    }
}

impl std::fmt::Display for Compensation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        })
    }
}

/// How far apart the train views' EXIF exposures are: the largest less the smallest, in
/// stops; `None` where EXIF does not give it for every view.
#[must_use]
pub fn exif_spread_stops(train: &[crate::dataset::View]) -> Option<f64> {
    let stops = exif_stops(train)?;
    let (low, high) = stops.iter().fold((f64::MAX, f64::MIN), |(l, h), &s| (l.min(s), h.max(s)));
    Some(high - low)
}

fn exif_stops(train: &[crate::dataset::View]) -> Option<Vec<f64>> {
    let exposures: Vec<_> = train.iter().map(|v| v.exposure).collect();
    crate::dataset::exposure::relative_stops(&exposures)
}

/// The transforms a fresh run starts from, as [`AppearanceState::download`] lays them out:
/// each train view's exposure gain from its EXIF (`D = (g − 1)·I`, `g` the light's relative
/// change through [`ENCODING_GAMMA`], scaled so the gains' mean is 1, as the step's recentring
/// keeps it), zero moments. Empty (identities) where EXIF does not give every view's exposure.
#[must_use]
pub fn exif_seed(train: &[crate::dataset::View]) -> Vec<f32> {
    let Some(stops) = exif_stops(train) else {
        return Vec::new();
    };
    let gains: Vec<f64> = stops.iter().map(|s| (s / ENCODING_GAMMA).exp2()).collect();
    let mean = gains.iter().sum::<f64>() / gains.len() as f64;
    let mut values = vec![0.0_f32; train.len() * (PARAMS + MOMENTS)];
    for (params, gain) in values.chunks_exact_mut(PARAMS).zip(&gains) {
        for channel in 0..3 {
            params[4 * channel] = (gain / mean - 1.0) as f32;
        }
    }
    values
}

/// The learning rate at 0-based `step` of a run of `steps`.
#[must_use]
pub fn learning_rate(step: u32, steps: u32) -> f32 {
    let t = (step as f32 / steps.max(1) as f32).min(1.0);
    ((1.0 - t) * LR_INITIAL.ln() + t * LR_FINAL.ln()).exp()
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
struct AppearanceUniform {
    pixels: u32,
    view: u32,
    groups: u32,
    views: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    decay: f32,
    _pad1: [u32; 3],
}

/// appearance.wgsl `apply`: the view's transform applied to the render.
const APPLY: KernelDecl = KernelDecl {
    label: "appearance apply",
    entry: "apply",
    bindings: &[(0, Read), (1, Read), (2, Read), (3, ReadWrite)],
};

/// appearance.wgsl `backward`: the render's gradient through the transform, and each
/// workgroup's sums of the transform's.
const BACKWARD: KernelDecl = KernelDecl {
    label: "appearance backward",
    entry: "backward",
    bindings: &[(0, Read), (1, Read), (2, Read), (4, Read), (5, ReadWrite), (6, ReadWrite)],
};

/// appearance.wgsl `update`: the sums added and the view's Adam step.
const UPDATE: KernelDecl = KernelDecl {
    label: "appearance update",
    entry: "update",
    bindings: &[(0, Read), (7, Read), (8, ReadWrite), (9, ReadWrite)],
};

/// The three pipelines. They hold no per-run memory: one set serves every run on a device.
#[derive(Debug)]
pub struct AppearanceKernels {
    apply: ComputeKernel,
    backward: ComputeKernel,
    update: ComputeKernel,
    limits: DispatchLimits,
}

impl AppearanceKernels {
    #[must_use]
    pub fn new(ctx: &GpuContext) -> Self {
        let module = shader_module(&ctx.device, "appearance", &Self::source());
        let kernel = |decl| ComputeKernel::new(&ctx.device, &module, decl, &Compile::default());
        Self {
            apply: kernel(&APPLY),
            backward: kernel(&BACKWARD),
            update: kernel(&UPDATE),
            limits: DispatchLimits::of(&ctx.device),
        }
    }

    /// WGSL source: the render crate's float checks and appearance.wgsl.
    #[must_use]
    pub fn source() -> String {
        [splat_render::kernels::FLOAT_BITS, include_str!("appearance.wgsl")].join("\n")
    }
}

/// One run's transforms and their optimizer state, and the two images a step needs besides
/// the rasterizer's: the corrected render and the loss's gradient of it. Everything here goes
/// with the step scratch when the run pauses (after [`AppearanceState::download`]).
#[derive(Debug)]
pub struct AppearanceState {
    views: u32,
    pixel_capacity: u32,
    params: GpuBuffer,
    moments: GpuBuffer,
    uniform: GpuBuffer,
    partials: GpuBuffer,
    corrected: GpuBuffer,
    v_corrected: GpuBuffer,
    /// Where evaluation reads a render back for [`compensated_psnr`]: made with the state, so
    /// that an evaluation allocates nothing.
    readback: GpuBuffer,
}

/// The inputs of one step's transform: the raw render, the gradient the rasterizer reads, the
/// train view and its pixels.
#[derive(Clone, Copy, Debug)]
pub struct AppearanceStep<'a> {
    pub rendered: &'a wgpu::Buffer,
    pub v_rendered: &'a wgpu::Buffer,
    pub view: u32,
    pub pixels: u32,
    pub lr: f32,
}

impl AppearanceState {
    /// The transforms of `views` train views as [`AppearanceState::download`] gave them in
    /// `host` (empty: identities, a fresh run), for images of up to `pixel_capacity` pixels.
    pub fn new(
        ctx: &GpuContext,
        views: u32,
        pixel_capacity: u32,
        host: &[f32],
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let rows = views.max(1) as usize;
        let state_floats = rows * (PARAMS + MOMENTS);
        if !host.is_empty() && host.len() != views as usize * (PARAMS + MOMENTS) {
            return Err(GpuError::Validation {
                label: "appearance".into(),
                message: format!(
                    "{} values of per-view appearance for {views} train views (needs {})",
                    host.len(),
                    views as usize * (PARAMS + MOMENTS)
                ),
            });
        }
        let zeros = vec![0.0_f32; state_floats];
        let values = if host.is_empty() { &zeros } else { host };
        let (params, moments) = values.split_at(rows * PARAMS);
        let storage = wgpu::BufferUsages::STORAGE;
        let state = storage | wgpu::BufferUsages::COPY_SRC;
        let groups = u64::from(pixel_capacity.div_ceil(WORKGROUP).max(1));
        let image = u64::from(pixel_capacity.max(1)) * PIXEL_BYTES;
        // Copies in and out for tests and inspection; they cost nothing.
        let image_usage = state | wgpu::BufferUsages::COPY_DST;
        Ok(Self {
            views,
            pixel_capacity,
            params: ctx.create_buffer_init(
                "appearance parameters",
                bytemuck::cast_slice(params),
                state,
                Category::OptimizerState,
                owner,
            )?,
            moments: ctx.create_buffer_init(
                "appearance moments",
                bytemuck::cast_slice(moments),
                state,
                Category::OptimizerState,
                owner,
            )?,
            uniform: ctx.create_buffer(
                "appearance uniform",
                size_of::<AppearanceUniform>() as u64,
                storage | wgpu::BufferUsages::COPY_DST,
                Category::Other,
                owner,
            )?,
            partials: ctx.create_buffer(
                "appearance partial sums",
                groups * PARAMS as u64 * 4,
                storage,
                Category::RasterizerScratch,
                owner,
            )?,
            corrected: ctx.create_buffer(
                "appearance corrected image",
                image,
                image_usage,
                Category::RasterizerScratch,
                owner,
            )?,
            v_corrected: ctx.create_buffer(
                "appearance image gradient",
                image,
                image_usage,
                Category::RasterizerScratch,
                owner,
            )?,
            readback: ctx.create_buffer(
                "appearance eval read-back",
                image,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                Category::Other,
                owner,
            )?,
        })
    }

    /// GPU bytes of a state for `views` views and images of `pixels` pixels by ledger
    /// category (the memory model's figures; what [`AppearanceState::new`] allocates): the
    /// transforms and their moments, the images and sums, the uniform and the read-back.
    #[must_use]
    pub fn bytes_by_category(views: u32, pixels: u64) -> [(Category, u64); 3] {
        let rows = u64::from(views.max(1));
        let pixels = pixels.max(1);
        let groups = pixels.div_ceil(u64::from(WORKGROUP));
        [
            (Category::OptimizerState, rows * (PARAMS + MOMENTS) as u64 * 4),
            (Category::RasterizerScratch, groups * PARAMS as u64 * 4 + 2 * pixels * PIXEL_BYTES),
            (Category::Other, size_of::<AppearanceUniform>() as u64 + pixels * PIXEL_BYTES),
        ]
    }

    /// The first `pixels` rgba pixels of `image` (an evaluation's render), as f32s: through
    /// the state's own read-back buffer.
    pub async fn read_image(
        &self,
        ctx: &GpuContext,
        image: &wgpu::Buffer,
        pixels: u32,
    ) -> Result<Vec<f32>, GpuError> {
        let pixels = pixels.min(self.pixel_capacity);
        let bytes = u64::from(pixels) * PIXEL_BYTES;
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("eval image") });
        encoder.copy_buffer_to_buffer(image, 0, &self.readback, 0, bytes);
        ctx.queue.submit([encoder.finish()]);
        ctx.read_mapped(&self.readback, bytes, bytemuck::pod_collect_to_vec).await
    }

    /// The corrected image the loss reads ([`AppearanceState::encode_apply`] writes it).
    #[must_use]
    pub fn corrected(&self) -> &wgpu::Buffer {
        &self.corrected
    }

    /// The gradient the loss writes, for [`AppearanceState::encode_backward`].
    #[must_use]
    pub fn v_corrected(&self) -> &wgpu::Buffer {
        &self.v_corrected
    }

    fn check(&self, step: &AppearanceStep<'_>) -> Result<(), GpuError> {
        let invalid =
            |message: String| GpuError::Validation { label: "appearance".into(), message };
        if step.view >= self.views {
            return Err(invalid(format!("view {} of {}", step.view, self.views)));
        }
        if step.pixels > self.pixel_capacity {
            return Err(invalid(format!(
                "an image of {} pixels; the state holds {}",
                step.pixels, self.pixel_capacity
            )));
        }
        let bytes = u64::from(step.pixels) * PIXEL_BYTES;
        if step.rendered.size() < bytes || step.v_rendered.size() < bytes {
            return Err(invalid(format!("image buffers smaller than {bytes} bytes")));
        }
        Ok(())
    }

    /// Records `corrected = (I + D)·rendered + b` for the step's view, and writes the step's
    /// uniform (one step per submit).
    pub fn encode_apply(
        &self,
        ctx: &GpuContext,
        kernels: &AppearanceKernels,
        encoder: &mut wgpu::CommandEncoder,
        step: &AppearanceStep<'_>,
    ) -> Result<(), GpuError> {
        self.check(step)?;
        let groups = step.pixels.div_ceil(WORKGROUP);
        let uniform = AppearanceUniform {
            pixels: step.pixels,
            view: step.view,
            groups,
            views: self.views.max(1),
            lr: step.lr,
            beta1: BETA1,
            beta2: BETA2,
            eps: EPS,
            decay: DECAY,
            ..AppearanceUniform::default()
        };
        ctx.queue.write_buffer(&self.uniform, 0, bytemuck::bytes_of(&uniform));
        let bind = bind_group(
            ctx,
            &kernels.apply,
            &[&self.uniform, &self.params, step.rendered, &self.corrected],
        );
        ctx.profile_stage("appearance");
        let mut pass = begin_pass(ctx, encoder, "appearance apply");
        pass.set_pipeline(kernels.apply.pipeline());
        pass.set_bind_group(0, &bind, &[]);
        let (x, y) = kernels.limits.grid(groups);
        pass.dispatch_workgroups(x, y, 1);
        Ok(())
    }

    /// Records the backward of the transform (`v_rendered` from [`AppearanceState::v_corrected`])
    /// and the view's Adam step; after [`AppearanceState::encode_apply`] of the same step.
    pub fn encode_backward(
        &self,
        ctx: &GpuContext,
        kernels: &AppearanceKernels,
        encoder: &mut wgpu::CommandEncoder,
        step: &AppearanceStep<'_>,
    ) -> Result<(), GpuError> {
        self.check(step)?;
        let groups = step.pixels.div_ceil(WORKGROUP);
        let backward = bind_group(
            ctx,
            &kernels.backward,
            &[
                &self.uniform,
                &self.params,
                step.rendered,
                &self.v_corrected,
                step.v_rendered,
                &self.partials,
            ],
        );
        let update = bind_group(
            ctx,
            &kernels.update,
            &[&self.uniform, &self.partials, &self.params, &self.moments],
        );
        ctx.profile_stage("appearance");
        let mut pass = begin_pass(ctx, encoder, "appearance backward");
        pass.set_pipeline(kernels.backward.pipeline());
        pass.set_bind_group(0, &backward, &[]);
        let (x, y) = kernels.limits.grid(groups);
        pass.dispatch_workgroups(x, y, 1);
        // Its own dispatch: every workgroup's sums are written before they are added.
        pass.set_pipeline(kernels.update.pipeline());
        pass.set_bind_group(0, &update, &[]);
        pass.dispatch_workgroups(1, 1, 1);
        Ok(())
    }

    /// Every view's parameters, then every view's optimizer row (what
    /// [`AppearanceState::new`] takes back): for pausing and checkpoints.
    pub async fn download(&self, ctx: &GpuContext) -> Result<Vec<f32>, GpuError> {
        let rows = self.views as usize;
        let mut values =
            splat_render::gpu_splats::read_f32_async(ctx, &self.params, rows * PARAMS).await?;
        values.extend(
            splat_render::gpu_splats::read_f32_async(ctx, &self.moments, rows * MOMENTS).await?,
        );
        Ok(values)
    }
}

/// One train view's learned transform, for people: the window plots them.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewAppearance {
    /// The view's file name.
    pub name: String,
    /// `I + D`, row-major: the gain of each output channel from each input channel.
    pub matrix: [[f32; 3]; 3],
    pub offset: [f32; 3],
}

impl ViewAppearance {
    /// Each view's transform from [`AppearanceState::download`]'s values, named by `names`.
    #[must_use]
    pub fn from_values(values: &[f32], names: &[String]) -> Vec<Self> {
        values
            .chunks_exact(PARAMS)
            .zip(names)
            .map(|(p, name)| Self {
                name: name.clone(),
                matrix: std::array::from_fn(|r| {
                    std::array::from_fn(|c| p[3 * r + c] + if r == c { 1.0 } else { 0.0 })
                }),
                offset: [p[9], p[10], p[11]],
            })
            .collect()
    }

    /// The exposure the transform applies, in stops: log2 of the mean of its channel gains
    /// (the diagonal), 0 for the identity.
    #[must_use]
    pub fn stops(&self) -> f32 {
        let gain = (self.matrix[0][0] + self.matrix[1][1] + self.matrix[2][2]) / 3.0;
        gain.max(1e-6).log2()
    }
}

/// A compute pass, timed when profiling.
fn begin_pass<'e>(
    ctx: &GpuContext,
    encoder: &'e mut wgpu::CommandEncoder,
    label: &str,
) -> wgpu::ComputePass<'e> {
    let timer = ctx.pass_timer();
    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(label),
        timestamp_writes: timer.as_ref().map(splat_render::PassTimer::writes),
    })
}

/// A bind group of whole buffers, in `kernel`'s declared order. Made each step (three a step,
/// holding no memory): kept ones would keep the rasterizer's image alive after a refinement
/// lets it go.
fn bind_group(
    ctx: &GpuContext,
    kernel: &ComputeKernel,
    buffers: &[&wgpu::Buffer],
) -> wgpu::BindGroup {
    let resources: Vec<wgpu::BindingResource<'_>> =
        buffers.iter().map(|buffer| buffer.as_entire_binding()).collect();
    kernel.bind(&ctx.device, &resources)
}

/// The PSNR of the right half of `render` (rgba f32s, row-major, `width` × `height`) through the
/// affine colour transform fitted by least squares on its left half to `target` (RGB, 8 bits),
/// pixels weighted by `mask` (0–255) where there is one; `None` when either half has no
/// counted pixel. The fit is pulled towards the identity with a weight of 1e-4 a pixel, so a
/// half of one flat colour gives a transform, not a singular system.
#[must_use]
pub fn compensated_psnr(
    render: &[f32],
    target: &image::RgbImage,
    mask: Option<&image::GrayImage>,
) -> Option<f64> {
    let (width, height) = target.dimensions();
    if render.len() != 4 * width as usize * height as usize {
        return None;
    }
    let half = width / 2;
    let weight = |x: u32, y: u32| mask.map_or(1.0, |m| f64::from(m.get_pixel(x, y).0[0]) / 255.0);
    let pixel = |x: u32, y: u32| {
        let at = 4 * (y * width + x) as usize;
        let c = &render[at..at + 3];
        let t = target.get_pixel(x, y).0;
        ([f64::from(c[0]), f64::from(c[1]), f64::from(c[2]), 1.0], t.map(|v| f64::from(v) / 255.0))
    };
    // Normal equations of each output channel k: (Σ w f fᵀ + λI) β_k = Σ w f t_k + λ e_k.
    let mut a = [[0.0_f64; 4]; 4];
    let mut b = [[0.0_f64; 3]; 4];
    let mut fitted = 0.0;
    for y in 0..height {
        for x in 0..half {
            let w = weight(x, y);
            let (f, t) = pixel(x, y);
            for i in 0..4 {
                for j in 0..4 {
                    a[i][j] += w * f[i] * f[j];
                }
                for k in 0..3 {
                    b[i][k] += w * f[i] * t[k];
                }
            }
            fitted += w;
        }
    }
    if fitted <= 0.0 {
        return None;
    }
    let lambda = 1e-4 * fitted;
    for i in 0..4 {
        a[i][i] += lambda;
        if i < 3 {
            b[i][i] += lambda;
        }
    }
    let beta = solve4(a, b)?;
    let (mut squared, mut scored) = (0.0, 0.0);
    for y in 0..height {
        for x in half..width {
            let w = weight(x, y);
            let (f, t) = pixel(x, y);
            for k in 0..3 {
                let predicted: f64 = (0..4).map(|i| f[i] * beta[i][k]).sum();
                squared += w * (predicted - t[k]).powi(2);
            }
            scored += 3.0 * w;
        }
    }
    (scored > 0.0).then(|| -10.0 * (squared / scored).max(1e-20).log10())
}

/// `x` with `a x = b` for a symmetric positive definite 4 × 4 `a` and three right-hand sides
/// (Gaussian elimination with partial pivoting); `None` if `a` is singular.
#[expect(clippy::needless_range_loop, reason = "elimination reads clearest with row indices")]
fn solve4(mut a: [[f64; 4]; 4], mut b: [[f64; 3]; 4]) -> Option<[[f64; 3]; 4]> {
    for col in 0..4 {
        let pivot = (col..4).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..4 {
            let factor = a[row][col] / a[col][col];
            for j in col..4 {
                a[row][j] -= factor * a[col][j];
            }
            for k in 0..3 {
                b[row][k] -= factor * b[col][k];
            }
        }
    }
    let mut x = [[0.0; 3]; 4];
    for row in (0..4).rev() {
        for k in 0..3 {
            let known: f64 = (row + 1..4).map(|j| a[row][j] * x[j][k]).sum();
            x[row][k] = (b[row][k] - known) / a[row][row];
        }
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target that is an affine transform of the render (rounded to 8 bits) is matched up
    /// to that rounding once compensated; the raw render is far from it.
    #[test]
    fn compensation_fits_an_affine_change_on_one_half_and_scores_the_other() {
        let (width, height) = (40, 30);
        let render: Vec<[f32; 4]> = (0..width * height)
            .map(|i| {
                let v = |k: u32| 0.2 + 0.4 * (((i * 7 + k * 13) % 29) as f32 / 29.0);
                [v(0), v(1), v(2), 1.0]
            })
            .collect();
        let transform = |c: [f32; 4]| {
            [1.4 * c[0] + 0.1 * c[1] - 0.05, 0.9 * c[1] + 0.03, 0.7 * c[2] + 0.2 * c[0] + 0.1]
        };
        let target = image::RgbImage::from_fn(width, height, |x, y| {
            let t = transform(render[(y * width + x) as usize]);
            image::Rgb(t.map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8))
        });
        let render: Vec<f32> = render.into_iter().flatten().collect();
        let psnr = compensated_psnr(&render, &target, None).expect("both halves");
        // 8-bit rounding alone: an error of at most 1/510 a value, about 59 dB and up.
        assert!(psnr > 55.0, "{psnr}");
        let mask =
            image::GrayImage::from_fn(width, height, |x, _| image::Luma([u8::from(x >= 5) * 255]));
        assert!(compensated_psnr(&render, &target, Some(&mask)).expect("masked") > 55.0);
        let left_only =
            image::GrayImage::from_fn(width, height, |x, _| image::Luma([u8::from(x < 20) * 255]));
        assert_eq!(compensated_psnr(&render, &target, Some(&left_only)), None);
    }
}
