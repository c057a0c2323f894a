//! The GPU half of densification: pipelines and encoders of the WGSL kernels beside this
//! file. WGSL has no `#include`; each kernel's source is a concatenation of files, listed in
//! [`Kernel::parts`].

use std::ops::Range;

use bytemuck::{Pod, Zeroable};
use splat_render::gpu_splats::{rows_binding, splat_window, splat_windows};
use splat_render::kernels::DispatchLimits;
use splat_render::kernels::compute::Binding::{self, Read, ReadWrite};
use splat_render::kernels::compute::{Compile, ComputeKernel, KernelDecl, shader_module};
use splat_render::wgpu;
use splat_render::{Category, GpuBuffer, GpuContext, GpuError, Owner};

const PLAN: &str = include_str!("plan.wgsl");
const RANDOM: &str = include_str!("random.wgsl");
/// random.wgsl tests a quaternion's length on its bits.
const FLOAT_BITS: &str = splat_render::kernels::FLOAT_BITS;

/// Invocations per workgroup of every kernel here. Keep in sync with the WGSL.
const WORKGROUP_SIZE: u32 = 256;

/// Bytes of a plan entry (`PlanEntry` in plan.rs).
const PLAN_ENTRY_BYTES: u64 = size_of::<super::plan::PlanEntry>() as u64;

/// Uniform slots are this many bytes apart (every device's uniform offset alignment is at
/// most 256, by the WebGPU spec).
pub(crate) const UNIFORM_SLOT: u64 = 256;

/// Which parameter a gather dispatch moves. Keep in sync with `ROLE_*` in plan.wgsl.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Role {
    Plain = 0,
    Opacity = 1,
    LogScale = 2,
}

/// Parameters of one gather (or split) dispatch. Keep in sync with `GatherUniform` in
/// plan.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub(crate) struct GatherUniform {
    /// Output 32-bit words of the buffer: `out_count · words_per_splat`.
    pub elements: u32,
    pub words_per_splat: u32,
    /// A [`Role`].
    pub role: u32,
    /// Output splats (of the output window).
    pub out_count: u32,
    /// The old splats bound: a window of them (`splat_window`), from `old_first` on.
    pub old_first: u32,
    pub old_count: u32,
    pub _pad: [u32; 2],
}
const _: () = assert!(size_of::<GatherUniform>() == 32);

/// Keep in sync with `ResetUniform` in `opacity_reset.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct ResetUniform {
    count: u32,
    max_logit: f32,
    _pad: [u32; 2],
}

/// What a per-step kernel's uniform says of its window of splats.
trait Windowed: Pod {
    /// The uniform for `count` splats from splat `first` on.
    fn window(self, first: u32, count: u32) -> Self;
}

impl Windowed for ResetUniform {
    fn window(self, _first: u32, count: u32) -> Self {
        Self { count, ..self }
    }
}
const _: () = assert!(size_of::<ResetUniform>() == 16);

/// Keep in sync with `RegularizeUniform` in `mcmc_regularize.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct RegularizeUniform {
    count: u32,
    opacity_coefficient: f32,
    scale_coefficient: f32,
    _pad: u32,
}
const _: () = assert!(size_of::<RegularizeUniform>() == 16);

impl Windowed for RegularizeUniform {
    fn window(self, _first: u32, count: u32) -> Self {
        Self { count, ..self }
    }
}

/// Keep in sync with `NoiseUniform` in `mcmc_noise.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct NoiseUniform {
    count: u32,
    seed: u32,
    scaler: f32,
    gate_sharpness: f32,
    gate_center: f32,
    /// The window's first splat (the noise follows the splat, not the window).
    first: u32,
    _pad: [u32; 2],
}
const _: () = assert!(size_of::<NoiseUniform>() == 32);

impl Windowed for NoiseUniform {
    fn window(self, first: u32, count: u32) -> Self {
        Self { count, first, ..self }
    }
}

/// The kernels of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    Gather,
    Split,
    OpacityReset,
    McmcRegularize,
    McmcNoise,
}

impl Kernel {
    pub const ALL: [Self; 5] =
        [Self::Gather, Self::Split, Self::OpacityReset, Self::McmcRegularize, Self::McmcNoise];

    pub fn label(self) -> &'static str {
        match self {
            Self::Gather => "densify gather",
            Self::Split => "densify split",
            Self::OpacityReset => "densify opacity reset",
            Self::McmcRegularize => "mcmc regularize",
            Self::McmcNoise => "mcmc noise",
        }
    }

    fn parts(self) -> &'static [&'static str] {
        match self {
            Self::Gather => &[PLAN, include_str!("gather.wgsl")],
            Self::Split => &[PLAN, FLOAT_BITS, RANDOM, include_str!("split.wgsl")],
            Self::OpacityReset => &[include_str!("opacity_reset.wgsl")],
            Self::McmcRegularize => &[include_str!("mcmc_regularize.wgsl")],
            Self::McmcNoise => &[FLOAT_BITS, RANDOM, include_str!("mcmc_noise.wgsl")],
        }
    }

    /// The full WGSL source.
    pub fn source(self) -> String {
        self.parts().join("\n")
    }

    /// Its entry point and the bindings of its group 0 (plan.wgsl's 0 and 1 for the gather and
    /// the split), in the order the wrappers below bind them.
    fn decl(self) -> KernelDecl {
        let bindings: &'static [(u32, Binding)] = match self {
            Self::Gather => &[
                (0, Read),
                (1, Read),
                (2, Read),
                (3, Read),
                (4, Read),
                (5, ReadWrite),
                (6, ReadWrite),
                (7, ReadWrite),
            ],
            Self::Split => &[(0, Read), (1, Read), (2, Read), (3, Read), (4, ReadWrite)],
            Self::OpacityReset => &[(0, Read), (1, ReadWrite)],
            Self::McmcRegularize => {
                &[(0, Read), (1, Read), (2, Read), (3, ReadWrite), (4, ReadWrite)]
            }
            Self::McmcNoise => &[(0, Read), (1, ReadWrite), (2, Read), (3, Read), (4, Read)],
        };
        KernelDecl { label: self.label(), entry: "main", bindings }
    }
}

/// One gather dispatch: a parameter buffer and its moments, old and new.
pub(crate) struct GatherJob<'a> {
    pub old: [&'a wgpu::Buffer; 3],
    pub new: [&'a wgpu::Buffer; 3],
    /// 32-bit words a splat has in them.
    pub words: u32,
}

/// The compiled pipelines.
#[derive(Debug)]
pub(crate) struct Kernels {
    gather: ComputeKernel,
    split: ComputeKernel,
    opacity_reset: ComputeKernel,
    regularize: ComputeKernel,
    noise: ComputeKernel,
    limits: DispatchLimits,
    /// Splats a dispatch binds the rows of (`splat_render::gpu_splats::splat_window`).
    window: u32,
    /// Parameter slots of the per-step kernels (opacity reset, regulariser, noise), three a
    /// window of splats, made on first use and kept (grown when the windows grow): nothing
    /// is allocated per step. One write per slot per submit.
    params: std::sync::Mutex<Option<GpuBuffer>>,
}

/// Slots of [`Kernels::params`] (of the first window; window `w`'s are `3w` on).
const RESET_SLOT: u64 = 0;
const REGULARIZE_SLOT: u64 = 1;
const NOISE_SLOT: u64 = 2;
const STEP_KERNELS: u64 = 3;

fn build(ctx: &GpuContext, kernel: Kernel) -> ComputeKernel {
    let module = shader_module(&ctx.device, kernel.label(), &kernel.source());
    ComputeKernel::new(&ctx.device, &module, &kernel.decl(), &Compile::default())
}

/// Rows `splats` of a buffer of `row_bytes` a splat, as a binding.
fn rows<'a>(
    buffer: &'a wgpu::Buffer,
    row_bytes: u64,
    splats: &Range<u32>,
) -> wgpu::BindingResource<'a> {
    wgpu::BindingResource::Buffer(rows_binding(buffer, row_bytes, splats))
}

/// One slot of a parameter buffer, as a binding.
fn uniform_slot(buffer: &wgpu::Buffer, slot: u64, bytes: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset: slot * UNIFORM_SLOT,
        size: wgpu::BufferSize::new(bytes),
    })
}

impl Kernels {
    /// Writes `value` for each window of `count` splats into parameter slot `slot` of the
    /// window and returns the buffer to bind them from.
    fn param_slots<T: Windowed>(
        &self,
        ctx: &GpuContext,
        slot: u64,
        count: u32,
        value: T,
    ) -> Result<wgpu::Buffer, GpuError> {
        let mut params = self.params.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let bytes = STEP_KERNELS * UNIFORM_SLOT * u64::from(count.div_ceil(self.window).max(1));
        if params.as_ref().is_none_or(|b| b.size() < bytes) {
            *params = None;
            *params = Some(ctx.create_buffer(
                "densify kernel parameters",
                bytes,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                Category::Other,
                Owner::Shared,
            )?);
        }
        let buffer: &wgpu::Buffer =
            params.as_ref().map(|b| &**b).ok_or_else(|| GpuError::Validation {
                label: "densify".into(),
                message: "parameter buffer missing".into(),
            })?;
        for (w, window) in splat_windows(count, self.window).enumerate() {
            let value = value.window(window.start, window.end - window.start);
            let at = (STEP_KERNELS * w as u64 + slot) * UNIFORM_SLOT;
            ctx.queue.write_buffer(buffer, at, bytemuck::bytes_of(&value));
        }
        Ok(buffer.clone())
    }
}

impl Kernels {
    pub fn new(ctx: &GpuContext, limits: DispatchLimits) -> Self {
        Self {
            gather: build(ctx, Kernel::Gather),
            split: build(ctx, Kernel::Split),
            opacity_reset: build(ctx, Kernel::OpacityReset),
            regularize: build(ctx, Kernel::McmcRegularize),
            noise: build(ctx, Kernel::McmcNoise),
            limits,
            window: splat_window(&ctx.device.limits()),
            params: std::sync::Mutex::new(None),
        }
    }

    /// Records one compute pass of `threads` invocations (nothing for zero).
    fn dispatch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        label: &str,
        kernel: &ComputeKernel,
        bind: &wgpu::BindGroup,
        threads: u32,
    ) {
        if threads == 0 {
            return;
        }
        let (x, y) = self.limits.grid(threads.div_ceil(WORKGROUP_SIZE));
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(label),
            timestamp_writes: None,
        });
        pass.set_pipeline(kernel.pipeline());
        pass.set_bind_group(0, bind, &[]);
        pass.dispatch_workgroups(x, y, 1);
    }

    /// Records one gather of a window of new splats from a window of old ones (`window`:
    /// the new splats and the old ones); it reads its uniform from slot `slot` of `uniforms`
    /// (the caller wrote it).
    pub fn encode_gather(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        (plan, uniforms, slot): (&wgpu::Buffer, &wgpu::Buffer, u64),
        job: &GatherJob<'_>,
        elements: u32,
        [new, old]: [&Range<u32>; 2],
    ) {
        let row = u64::from(job.words) * 4;
        let bind = self.gather.bind(
            &ctx.device,
            &[
                uniform_slot(uniforms, slot, size_of::<GatherUniform>() as u64),
                rows(plan, PLAN_ENTRY_BYTES, new),
                rows(job.old[0], row, old),
                rows(job.old[1], row, old),
                rows(job.old[2], row, old),
                rows(job.new[0], row, new),
                rows(job.new[1], row, new),
                rows(job.new[2], row, new),
            ],
        );
        self.dispatch(encoder, Kernel::Gather.label(), &self.gather, &bind, elements);
    }

    /// Records the offsets of split children's means (after the gather copied the parents'),
    /// for a window of new splats from a window of old ones (`window`, as
    /// [`Kernels::encode_gather`]): `uniforms` slot `slot` holds a [`GatherUniform`] with
    /// `out_count`. `old` are the old quats and log-scales.
    pub fn encode_split(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        (plan, uniforms, slot): (&wgpu::Buffer, &wgpu::Buffer, u64),
        (out_count, [old_quats, old_log_scales], new_means): (
            u32,
            [&wgpu::Buffer; 2],
            &wgpu::Buffer,
        ),
        [new, old]: [&Range<u32>; 2],
    ) {
        let bind = self.split.bind(
            &ctx.device,
            &[
                uniform_slot(uniforms, slot, size_of::<GatherUniform>() as u64),
                rows(plan, PLAN_ENTRY_BYTES, new),
                rows(old_quats, 16, old),
                rows(old_log_scales, 12, old),
                rows(new_means, 12, new),
            ],
        );
        self.dispatch(encoder, Kernel::Split.label(), &self.split, &bind, out_count);
    }

    /// Records `opacity ← min(opacity, max_logit)` on `count` logits.
    pub fn encode_opacity_reset(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        opacities: &wgpu::Buffer,
        count: u32,
        max_logit: f32,
    ) -> Result<(), GpuError> {
        let value = ResetUniform { count, max_logit, _pad: [0; 2] };
        let slots = self.param_slots(ctx, RESET_SLOT, count, value)?;
        for (w, window) in splat_windows(count, self.window).enumerate() {
            let slot = STEP_KERNELS * w as u64 + RESET_SLOT;
            let bind = self.opacity_reset.bind(
                &ctx.device,
                &[
                    uniform_slot(&slots, slot, size_of::<ResetUniform>() as u64),
                    rows(opacities, 4, &window),
                ],
            );
            let label = Kernel::OpacityReset.label();
            self.dispatch(encoder, label, &self.opacity_reset, &bind, window.end - window.start);
        }
        Ok(())
    }

    /// Records the MCMC regularisers' gradients (see `mcmc_regularize.wgsl`).
    pub fn encode_regularize(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        count: u32,
        [opacity_coefficient, scale_coefficient]: [f32; 2],
        [opacities, log_scales]: [&wgpu::Buffer; 2],
        [v_opacities, v_log_scales]: [&wgpu::Buffer; 2],
    ) -> Result<(), GpuError> {
        let value = RegularizeUniform { count, opacity_coefficient, scale_coefficient, _pad: 0 };
        let slots = self.param_slots(ctx, REGULARIZE_SLOT, count, value)?;
        for (w, window) in splat_windows(count, self.window).enumerate() {
            let slot = STEP_KERNELS * w as u64 + REGULARIZE_SLOT;
            let bind = self.regularize.bind(
                &ctx.device,
                &[
                    uniform_slot(&slots, slot, size_of::<RegularizeUniform>() as u64),
                    rows(opacities, 4, &window),
                    rows(log_scales, 12, &window),
                    rows(v_opacities, 4, &window),
                    rows(v_log_scales, 12, &window),
                ],
            );
            let n = window.end - window.start;
            let threads = n.checked_mul(3).ok_or_else(|| too_many(n))?;
            let label = Kernel::McmcRegularize.label();
            self.dispatch(encoder, label, &self.regularize, &bind, threads);
        }
        Ok(())
    }

    /// Records the MCMC position noise (see `mcmc_noise.wgsl`). `params` are means
    /// (written), quats, log-scales and opacities.
    #[expect(clippy::too_many_arguments, reason = "the bindings of one kernel")]
    pub fn encode_noise(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        count: u32,
        seed: u32,
        scaler: f32,
        [gate_sharpness, gate_center]: [f32; 2],
        params: [&wgpu::Buffer; 4],
    ) -> Result<(), GpuError> {
        let value = NoiseUniform {
            count,
            seed,
            scaler,
            gate_sharpness,
            gate_center,
            first: 0,
            _pad: [0; 2],
        };
        let slots = self.param_slots(ctx, NOISE_SLOT, count, value)?;
        for (w, window) in splat_windows(count, self.window).enumerate() {
            let slot = STEP_KERNELS * w as u64 + NOISE_SLOT;
            let bind = self.noise.bind(
                &ctx.device,
                &[
                    uniform_slot(&slots, slot, size_of::<NoiseUniform>() as u64),
                    rows(params[0], 12, &window),
                    rows(params[1], 16, &window),
                    rows(params[2], 12, &window),
                    rows(params[3], 4, &window),
                ],
            );
            let label = Kernel::McmcNoise.label();
            self.dispatch(encoder, label, &self.noise, &bind, window.end - window.start);
        }
        Ok(())
    }
}

/// The error for a splat count whose float count overflows a u32.
pub(crate) fn too_many(count: u32) -> GpuError {
    GpuError::TooMany { label: "densification's values".into(), count: u64::from(count) * 4 }
}
