//! Adam on the GPU (adam.wgsl beside this file), one dispatch per parameter group, in place.
//!
//! The moments live in [`AdamState`], laid out exactly like the parameters they follow
//! ([`GpuSplats`]), so densification can reallocate parameters and moments together with the
//! same gather. They are registered in the ledger as optimizer state of the run.
//!
//! An SH band stored in 16 bits ([`ShPrecision::F16`]) keeps its moments in 16 bits too
//! (m scaled, v as its scaled square root: adam.wgsl says why), and Adam rounds the new
//! parameters and moments stochastically, with random bits hashed from the step and the
//! word, so a run is still the same bits every time.

use std::sync::{Mutex, PoisonError};

use bytemuck::{Pod, Zeroable};
use splat_render::gpu_splats::{
    FIRST_SH_BUFFER, ShPrecision, VALUES_PER_SPLAT, rows_binding, splat_window, splat_windows,
    words_per_splat,
};
use splat_render::kernels::DispatchLimits;
use splat_render::kernels::compute::{Binding, Compile, ComputeKernel, KernelDecl, shader_module};
use splat_render::{Category, GpuBuffer, GpuContext, GpuError, GpuSplats, Owner, SplatGradients};

/// The parameter groups, each with its own learning rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamGroup {
    Means,
    LogScales,
    Quats,
    Opacities,
    /// SH band 0 (the DC colour).
    ShDc,
    /// SH bands 1..=3.
    ShRest,
}

/// Keep in sync with `AdamUniform` in adam.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct AdamUniform {
    count: u32,
    beta1: f32,
    beta2: f32,
    step_size: f32,
    eps_hat: f32,
    /// 16-bit bands only: values in a splat's row.
    row_values: u32,
    /// 16-bit bands only: seed of this step's stochastic rounding.
    round_seed: u32,
    /// 16-bit bands only: the window's first word in the buffer (the rounding's random
    /// bits follow the word, not the window).
    first: u32,
}
const _: () = assert!(size_of::<AdamUniform>() == 32);

/// Uniform slots are 256 bytes apart (the dynamic-offset alignment every device accepts).
const SLOT: u64 = 256;
/// Parameter buffers of a scene: means, log-scales, quats, opacities, SH bands 0..=3.
const BUFFERS: usize = splat_render::gpu_splats::PARAM_BUFFERS;
/// The learning-rate group of each buffer of `GpuSplats::buffers`.
const GROUPS: [ParamGroup; BUFFERS] = [
    ParamGroup::Means,
    ParamGroup::LogScales,
    ParamGroup::Quats,
    ParamGroup::Opacities,
    ParamGroup::ShDc,
    ParamGroup::ShRest,
    ParamGroup::ShRest,
    ParamGroup::ShRest,
];

/// First and second moments of one parameter buffer.
#[derive(Debug)]
pub struct Moments {
    pub m: GpuBuffer,
    pub v: GpuBuffer,
}

/// Adam's state for a scene: moments per parameter buffer, in the order of
/// [`AdamState::moments`], plus the uniform slots of one step.
#[derive(Debug)]
pub struct AdamState {
    pub means: Moments,
    pub log_scales: Moments,
    pub quats: Moments,
    pub opacities: Moments,
    pub sh: [Moments; 4],
    /// A step's uniform slots: one a parameter buffer and window of splats
    /// (`splat_render::gpu_splats::splat_window`), window-major.
    uniforms: GpuBuffer,
    /// The bind group of each parameter buffer and window, made at the first step and kept
    /// while the same parameter and gradient buffers come back (a new state, after a
    /// refinement, makes its own). Holds handles of those buffers, which belong to the same
    /// run state and are dropped with it.
    bindings: Mutex<Option<Bindings>>,
}

#[derive(Debug)]
struct Bindings {
    /// (parameter, gradient) buffers the groups bind.
    buffers: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    /// Window-major, as the uniform slots.
    groups: Vec<wgpu::BindGroup>,
}

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC);

use splat_render::wgpu;

impl AdamState {
    /// Zeroed moments shaped like `splats`.
    pub fn new(ctx: &GpuContext, splats: &GpuSplats, owner: Owner) -> Result<Self, GpuError> {
        let moments =
            |label: &str, like: &GpuBuffer| Self::zero_moments(ctx, label, like.size(), owner);
        Self::from_moments(
            ctx,
            splats.count,
            [
                moments("means", &splats.means)?,
                moments("log_scales", &splats.log_scales)?,
                moments("quats", &splats.quats)?,
                moments("opacities", &splats.opacities)?,
                moments("sh band 0", &splats.sh[0])?,
                moments("sh band 1", &splats.sh[1])?,
                moments("sh band 2", &splats.sh[2])?,
                moments("sh band 3", &splats.sh[3])?,
            ],
            owner,
        )
    }

    /// Adam's state around the moments of `count` splats made elsewhere (a refinement
    /// gathers them group by group), in the order of [`AdamState::moments`].
    pub fn from_moments(
        ctx: &GpuContext,
        count: u32,
        moments: [Moments; BUFFERS],
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let [means, log_scales, quats, opacities, sh0, sh1, sh2, sh3] = moments;
        let windows = count.div_ceil(splat_window(&ctx.device.limits())).max(1);
        Ok(Self {
            means,
            log_scales,
            quats,
            opacities,
            sh: [sh0, sh1, sh2, sh3],
            uniforms: ctx.create_buffer(
                "adam uniforms",
                SLOT * BUFFERS as u64 * u64::from(windows),
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                Category::Other,
                owner,
            )?,
            bindings: Mutex::new(None),
        })
    }

    /// The moments, in the order of [`AdamState::moments`]; the kept bind groups (which hold
    /// the parameter and gradient buffers) go.
    #[must_use]
    pub fn into_moments(self) -> [Moments; BUFFERS] {
        let [sh0, sh1, sh2, sh3] = self.sh;
        [self.means, self.log_scales, self.quats, self.opacities, sh0, sh1, sh2, sh3]
    }

    /// Zeroed moments for a parameter buffer of `bytes`, labelled after it.
    pub fn zero_moments(
        ctx: &GpuContext,
        label: &str,
        bytes: u64,
        owner: Owner,
    ) -> Result<Moments, GpuError> {
        let buffer = |suffix: &str| {
            ctx.create_buffer(
                &format!("{label} {suffix}"),
                bytes,
                USAGE,
                Category::OptimizerState,
                owner,
            )
        };
        Ok(Moments { m: buffer("m")?, v: buffer("v")? })
    }

    /// The moments in parameter-buffer order: means, log-scales, quats, opacities, SH 0..=3.
    #[must_use]
    pub fn moments(&self) -> [&Moments; BUFFERS] {
        [
            &self.means,
            &self.log_scales,
            &self.quats,
            &self.opacities,
            &self.sh[0],
            &self.sh[1],
            &self.sh[2],
            &self.sh[3],
        ]
    }
}

/// adam.wgsl: the step's slot of parameters (a dynamic offset), then one parameter buffer's
/// rows, their gradients, and both moments.
const ADAM: KernelDecl = KernelDecl {
    label: "adam",
    entry: "main",
    bindings: &[
        (0, Binding::Slot(size_of::<AdamUniform>() as u64)),
        (1, Binding::ReadWrite),
        (2, Binding::Read),
        (3, Binding::ReadWrite),
        (4, Binding::ReadWrite),
    ],
};

/// The same for SH bands stored as binary16 pairs.
const ADAM_HALF: KernelDecl = KernelDecl { label: "adam (binary16)", entry: "main_half", ..ADAM };

/// The Adam kernel.
#[derive(Debug)]
pub struct Adam {
    kernel: ComputeKernel,
    /// `main_half`: SH bands stored in 16 bits.
    kernel_half: ComputeKernel,
    limits: DispatchLimits,
    /// Splats a dispatch binds the rows of (`splat_render::gpu_splats::splat_window`).
    window: u32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

impl Adam {
    #[must_use]
    pub fn new(ctx: &GpuContext) -> Self {
        let module = shader_module(&ctx.device, "adam", &Self::source());
        let kernel = |decl| ComputeKernel::new(&ctx.device, &module, decl, &Compile::default());
        Self {
            kernel: kernel(&ADAM),
            kernel_half: kernel(&ADAM_HALF),
            limits: DispatchLimits::of(&ctx.device),
            window: splat_window(&ctx.device.limits()),
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-15,
        }
    }

    /// WGSL source: the render crate's binary16 conversions and adam.wgsl.
    #[must_use]
    pub fn source() -> String {
        [
            splat_render::kernels::FLOAT_BITS,
            splat_render::kernels::BINARY16,
            include_str!("adam.wgsl"),
        ]
        .join("\n")
    }

    /// Records one Adam step (step number `t` ≥ 1) on every parameter buffer up to SH band
    /// `sh_degree` (the active degree: higher bands have had no gradient, so their moments
    /// are zero and a step would leave them as they are), each group with its learning rate
    /// from `lr`. Writes the uniform slots of `state` (one step per submit).
    #[expect(
        clippy::too_many_arguments,
        reason = "the buffers of one step; a struct would only rename them"
    )]
    pub fn encode(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        splats: &GpuSplats,
        grads: &SplatGradients,
        state: &AdamState,
        t: u32,
        sh_degree: u32,
        lr: impl Fn(ParamGroup) -> f32,
    ) {
        let params = splats.buffers();
        let grad_buffers = grads.buffers();
        let t = t.max(1) as i32;
        let correction1 = 1.0 - self.beta1.powi(t);
        let correction2 = (1.0 - self.beta2.powi(t)).sqrt();
        let windows = || splat_windows(splats.count, self.window);
        for (w, window) in windows().enumerate() {
            let mut slots = [0_u8; SLOT as usize * BUFFERS];
            for (slot, group) in GROUPS.into_iter().enumerate() {
                let words = words_per_splat(slot, splats.sh_degree, splats.sh_precision);
                let uniform = AdamUniform {
                    count: (window.end - window.start) * words,
                    beta1: self.beta1,
                    beta2: self.beta2,
                    step_size: lr(group) * correction2 / correction1,
                    eps_hat: self.eps * correction2,
                    row_values: VALUES_PER_SPLAT[slot],
                    round_seed: (t as u32).wrapping_mul(BUFFERS as u32).wrapping_add(slot as u32),
                    first: window.start * words,
                };
                let at = slot * SLOT as usize;
                slots[at..at + size_of::<AdamUniform>()]
                    .copy_from_slice(bytemuck::bytes_of(&uniform));
            }
            ctx.queue.write_buffer(&state.uniforms, w as u64 * SLOT * BUFFERS as u64, &slots);
        }

        let mut bindings = state.bindings.lock().unwrap_or_else(PoisonError::into_inner);
        let current = bindings.as_ref().is_some_and(|b| {
            b.buffers
                .iter()
                .zip(params.iter().zip(grad_buffers))
                .all(|((p, g), (param, grad))| p == *param && g == grad)
        });
        if !current {
            *bindings = Some(self.bindings(ctx, state, splats, grads));
        }
        let Some(bindings) = bindings.as_ref() else { return };
        ctx.profile_stage("adam");
        let timer = ctx.pass_timer();
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("adam"),
            timestamp_writes: timer.as_ref().map(splat_render::PassTimer::writes),
        });
        // Means, log-scales, quats, opacities, then SH bands 0..=sh_degree.
        let used = 5 + sh_degree.min(3) as usize;
        for (w, window) in windows().enumerate() {
            for slot in 0..used {
                let words = words_per_splat(slot, splats.sh_degree, splats.sh_precision);
                let count = (window.end - window.start) * words;
                pass.set_pipeline(self.kernel(slot, splats.sh_precision).pipeline());
                let at = w * BUFFERS + slot;
                pass.set_bind_group(0, &bindings.groups[at], &[(at as u64 * SLOT) as u32]);
                let (x, y) = self.limits.grid(count.div_ceil(256));
                pass.dispatch_workgroups(x, y, 1);
            }
        }
    }

    /// The kernel of parameter buffer `slot`: SH bands 1 to 3 stored in 16 bits take
    /// `main_half`.
    fn kernel(&self, slot: usize, precision: ShPrecision) -> &ComputeKernel {
        let half = precision == ShPrecision::F16 && slot > FIRST_SH_BUFFER;
        if half { &self.kernel_half } else { &self.kernel }
    }

    /// One bind group per window of splats and parameter buffer (window-major): its
    /// uniform slot (a dynamic offset), and the window's rows of the parameters, their
    /// gradients and both moments.
    fn bindings(
        &self,
        ctx: &GpuContext,
        state: &AdamState,
        splats: &GpuSplats,
        grads: &SplatGradients,
    ) -> Bindings {
        let mut groups = Vec::new();
        for window in splat_windows(splats.count, self.window) {
            let params = splats.window(&window);
            let gradients = grads.window(splats.sh_degree, &window);
            for (slot, moments) in state.moments().into_iter().enumerate() {
                let row = u64::from(words_per_splat(slot, splats.sh_degree, splats.sh_precision));
                let uniform = wgpu::BufferBinding {
                    buffer: &state.uniforms,
                    offset: 0,
                    size: wgpu::BufferSize::new(size_of::<AdamUniform>() as u64),
                };
                let resources = [
                    uniform,
                    params[slot].clone(),
                    gradients[slot].clone(),
                    rows_binding(&moments.m, row * 4, &window),
                    rows_binding(&moments.v, row * 4, &window),
                ]
                .map(wgpu::BindingResource::Buffer);
                let kernel = self.kernel(slot, splats.sh_precision);
                groups.push(kernel.bind(&ctx.device, &resources));
            }
        }
        let buffers = splats
            .buffers()
            .iter()
            .zip(grads.buffers())
            .map(|(p, g)| ((*p).clone(), g.clone()))
            .collect();
        Bindings { buffers, groups }
    }
}
