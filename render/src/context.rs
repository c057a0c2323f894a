//! The GPU context: one wgpu device and queue, and the only door through which the project
//! allocates GPU memory (so every byte is in the [`Ledger`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::buffer::{GpuBuffer, GpuTexture};
use crate::error::{GpuError, Limit};
use crate::ledger::{Allocation, Category, Ledger, Owner};
use crate::profiler::{PassTimer, Profile, Profiler};
use crate::readback::Poller;

/// Optional features we use where the adapter has them; kernels keep a fallback for each.
const WANTED_FEATURES: wgpu::Features =
    wgpu::Features::SUBGROUP.union(wgpu::Features::TIMESTAMP_QUERY);

/// What the project's kernels need of a device beyond what every WebGPU device offers
/// (`trainer/tests/it/kernel_needs.rs` reads each of these off every kernel with naga).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelNeeds {
    /// Storage buffers one entry point binds, at most (the projection's backward pass).
    pub storage_buffers_per_stage: u32,
    /// Workgroup memory one entry point uses, at most (the backward rasterizer).
    pub workgroup_storage_bytes: u32,
    /// Invocations in a workgroup (every kernel's `@workgroup_size(256)`, along x).
    pub invocations_per_workgroup: u32,
}

/// See [`KernelNeeds`].
pub const KERNEL_NEEDS: KernelNeeds = KernelNeeds {
    storage_buffers_per_stage: 22,
    workgroup_storage_bytes: 15_876,
    invocations_per_workgroup: 256,
};

impl KernelNeeds {
    /// What a device with `limits` lacks of these needs, in words; `None` when it has them.
    #[must_use]
    pub fn unmet(&self, limits: &wgpu::Limits) -> Option<String> {
        let mut lacks = Vec::new();
        if limits.max_storage_buffers_per_shader_stage < self.storage_buffers_per_stage {
            lacks.push(format!(
                "it offers {} storage buffers per shader stage, the kernels bind up to {}",
                limits.max_storage_buffers_per_shader_stage, self.storage_buffers_per_stage
            ));
        }
        if limits.max_compute_workgroup_storage_size < self.workgroup_storage_bytes {
            lacks.push(format!(
                "it offers {} bytes of workgroup memory, the kernels use up to {}",
                limits.max_compute_workgroup_storage_size, self.workgroup_storage_bytes
            ));
        }
        if limits.max_compute_invocations_per_workgroup < self.invocations_per_workgroup
            || limits.max_compute_workgroup_size_x < self.invocations_per_workgroup
        {
            lacks.push(format!(
                "it runs at most {} invocations in a workgroup, the kernels use {}",
                limits
                    .max_compute_invocations_per_workgroup
                    .min(limits.max_compute_workgroup_size_x),
                self.invocations_per_workgroup
            ));
        }
        (!lacks.is_empty()).then(|| lacks.join("; "))
    }
}

/// How [`GpuContext::new_headless_with`] opens its device: features left out, limits lowered.
#[derive(Clone, Debug, Default)]
pub struct HeadlessOptions {
    /// Optional features not to ask for: without `SUBGROUP` the kernels take their portable
    /// paths (tests and the self-test compare the two).
    pub without: wgpu::Features,
    /// A lower `max_buffer_size` than the adapter's.
    pub max_buffer_size: Option<u64>,
    /// A lower `max_storage_buffer_binding_size` than the adapter's.
    pub max_storage_buffer_binding_size: Option<u64>,
    /// Device memory to act as if the GPU had no more of: an allocation that would take the
    /// ledger past it is out of memory, as on a GPU of that size (read-back buffers, host
    /// memory on a real GPU, do not count). For tests of what a run does when memory runs
    /// out.
    pub memory_bytes: Option<u64>,
    /// A GPU error to provoke in place of one piece of checked work (tests of what a run does
    /// when wgpu or the driver refuses its work mid-step).
    pub fault: Option<Fault>,
}

/// The `at`-th call (from 1) of [`GpuContext::checked`] labelled `label` does not run its work:
/// it makes wgpu refuse something of the kind `kind` instead, inside the same error scopes, so
/// the caller gets the error a real refusal at that point gives, and none of its work is done
/// (as when a submit is refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub label: &'static str,
    pub at: u32,
    pub kind: FaultKind,
}

/// Where the injected refusal happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Creating a bind group that does not match its layout.
    BindGroup,
    /// Submitting work on a buffer destroyed after it was recorded.
    Submit,
}

/// The device, its queue and the ledger. Cheap to clone (everything inside is shared).
#[derive(Clone, Debug)]
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter_info: wgpu::AdapterInfo,
    ledger: Arc<Ledger>,
    uncaptured: Arc<Mutex<Vec<String>>>,
    lost: Arc<Mutex<Option<String>>>,
    /// `HeadlessOptions::memory_bytes`.
    memory_bytes: Option<u64>,
    /// `HeadlessOptions::fault`, and how many calls with its label have run.
    fault: Option<Arc<(Fault, AtomicU32)>>,
    poller: Arc<Poller>,
    profiler: Arc<Mutex<Option<Profiler>>>,
}

/// Where the driver says how much memory this process may use (Vulkan with
/// `VK_EXT_memory_budget`, DX12), creating a buffer or texture past 95% of it fails as out of
/// memory, which ends one run in words, rather than letting the driver lose the device later
/// at a bind group or a submit. The app's window asks the same of eframe's instance.
pub const MEMORY_BUDGET_THRESHOLDS: wgpu::MemoryBudgetThresholds =
    wgpu::MemoryBudgetThresholds { for_resource_creation: Some(95), for_device_loss: None };

impl GpuContext {
    /// Opens the best adapter without a window (tests, the command line), asking for the
    /// adapter's own limits (not the conservative defaults) and the optional features we
    /// use where it has them.
    pub async fn new_headless() -> Result<Self, GpuError> {
        Self::new_headless_with(&HeadlessOptions::default()).await
    }

    /// [`GpuContext::new_headless`] with features left out or limits lowered (tests: the
    /// portable paths, a smaller GPU).
    pub async fn new_headless_with(options: &HeadlessOptions) -> Result<Self, GpuError> {
        let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        descriptor.memory_budget_thresholds = MEMORY_BUDGET_THRESHOLDS;
        let instance = wgpu::Instance::new(descriptor);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            })
            .await
            .map_err(|e| GpuError::NoAdapter(e.to_string()))?;
        let info = adapter.get_info();
        if let Some(lacks) = KERNEL_NEEDS.unmet(&adapter.limits()) {
            return Err(GpuError::Unsupported { adapter: adapter_name(&info), lacks });
        }
        let mut descriptor = device_descriptor(&adapter);
        descriptor.required_features = descriptor.required_features.difference(options.without);
        let limits = &mut descriptor.required_limits;
        if let Some(bytes) = options.max_buffer_size {
            limits.max_buffer_size = limits.max_buffer_size.min(bytes);
        }
        if let Some(bytes) = options.max_storage_buffer_binding_size {
            limits.max_storage_buffer_binding_size =
                limits.max_storage_buffer_binding_size.min(bytes);
        }
        let (device, queue) = adapter
            .request_device(&descriptor)
            .await
            .map_err(|e| GpuError::RequestDevice(e.to_string()))?;
        let mut ctx = Self::from_device(device, queue, info)?;
        ctx.memory_bytes = options.memory_bytes;
        ctx.fault = options.fault.map(|fault| Arc::new((fault, AtomicU32::new(0))));
        Ok(ctx)
    }

    /// Wraps a device made elsewhere (eframe's), so the app and the trainer share it. Refuses
    /// a device that lacks what the kernels need ([`KERNEL_NEEDS`]), in words, rather than
    /// failing later at the first pipeline or bind group.
    pub fn from_device(
        device: wgpu::Device,
        queue: wgpu::Queue,
        adapter_info: wgpu::AdapterInfo,
    ) -> Result<Self, GpuError> {
        if let Some(lacks) = KERNEL_NEEDS.unmet(&device.limits()) {
            return Err(GpuError::Unsupported { adapter: adapter_name(&adapter_info), lacks });
        }
        let uncaptured: Arc<Mutex<Vec<String>>> = Arc::default();
        // wgpu's default handler panics; errors outside our error scopes are recorded instead
        // and surface through `take_uncaptured_errors`.
        let sink = Arc::clone(&uncaptured);
        device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
            log::error!("uncaptured GPU error: {error}");
            sink.lock().unwrap_or_else(PoisonError::into_inner).push(error.to_string());
        }));
        // A lost device (a driver reset, the GPU removed or hung) makes every later call fail
        // with an error about something else: remember why, so errors can say it.
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let sink = Arc::clone(&lost);
        device.set_device_lost_callback(move |reason, message| {
            log::error!("the GPU device was lost ({reason:?}): {message}");
            let why = if message.is_empty() { format!("{reason:?}") } else { message };
            sink.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(why);
        });
        Ok(Self {
            device,
            queue,
            adapter_info,
            ledger: Ledger::new(),
            uncaptured,
            lost,
            memory_bytes: None,
            fault: None,
            poller: Arc::default(),
            profiler: Arc::default(),
        })
    }

    /// Why the device was lost, once it has been (every GPU call fails after that: the app
    /// must be restarted to get a new device). A loss often shows first as a failed read-back,
    /// before wgpu has called back, which it does once the work in flight is done, from
    /// whichever thread polls the device (ours or the poller's): this waits for that work (at
    /// most 2 s: a hung GPU may never finish it), then up to 200 ms for the call. For the
    /// paths that handle a failure, not for every step.
    #[must_use]
    pub fn lost(&self) -> Option<String> {
        let _ = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: Some(std::time::Duration::from_secs(2)),
        });
        for _ in 0..10 {
            if let Some(why) = self.lost.lock().unwrap_or_else(PoisonError::into_inner).clone() {
                return Some(why);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }

    /// [`Limit::whole_binding`] of this device.
    #[must_use]
    pub fn whole_binding_limit(&self) -> (u64, Limit) {
        Limit::whole_binding(&self.device.limits())
    }

    /// An error unless `bytes` fit one buffer that a kernel binds whole
    /// ([`GpuContext::whole_binding_limit`]): checked before such a buffer grows, so a run
    /// that outgrows the device stops with this, naming the limit, never with a validation
    /// error at the next bind group.
    pub fn check_whole_binding(&self, label: &str, bytes: u64) -> Result<(), GpuError> {
        let (limit, which) = self.whole_binding_limit();
        if bytes > limit {
            return Err(GpuError::TooLarge { label: label.into(), bytes, limit, which });
        }
        Ok(())
    }

    pub(crate) fn poller(&self) -> &Poller {
        &self.poller
    }

    pub(crate) fn profiler_lock(&self) -> std::sync::MutexGuard<'_, Option<Profiler>> {
        self.profiler.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[must_use]
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// GPU errors that happened outside any error scope since the last call.
    #[must_use]
    pub fn take_uncaptured_errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.uncaptured.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Creates a zero-initialised buffer and registers it.
    pub fn create_buffer(
        &self,
        label: &str,
        bytes: u64,
        usage: wgpu::BufferUsages,
        category: Category,
        owner: Owner,
    ) -> Result<GpuBuffer, GpuError> {
        let limit = self.device.limits().max_buffer_size;
        if bytes > limit {
            return Err(GpuError::TooLarge {
                label: label.into(),
                bytes,
                limit,
                which: Limit::Buffer,
            });
        }
        if !usage.contains(wgpu::BufferUsages::MAP_READ) {
            self.check_memory(label, bytes)?;
        }
        let buffer = self.with_error_scope(label, bytes, || {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        })?;
        let entry =
            self.ledger.register(Allocation { label: label.into(), category, owner, bytes });
        Ok(GpuBuffer { buffer, _entry: entry })
    }

    /// Creates a buffer holding `contents` (padded to 4 bytes) and registers it.
    pub fn create_buffer_init(
        &self,
        label: &str,
        contents: &[u8],
        usage: wgpu::BufferUsages,
        category: Category,
        owner: Owner,
    ) -> Result<GpuBuffer, GpuError> {
        let bytes = (contents.len() as u64)
            .next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
            .max(wgpu::COPY_BUFFER_ALIGNMENT);
        let buffer = self.create_buffer(
            label,
            bytes,
            usage | wgpu::BufferUsages::COPY_DST,
            category,
            owner,
        )?;
        // write_buffer needs a multiple of 4 bytes: write the whole words, then the tail
        // padded with zeros.
        let whole = contents.len() / 4 * 4;
        if whole > 0 {
            self.queue.write_buffer(&buffer, 0, &contents[..whole]);
        }
        if whole < contents.len() {
            let mut tail = [0_u8; 4];
            tail[..contents.len() - whole].copy_from_slice(&contents[whole..]);
            self.queue.write_buffer(&buffer, whole as u64, &tail);
        }
        Ok(buffer)
    }

    /// Creates a texture and registers its bytes (all mip levels and layers).
    pub fn create_texture(
        &self,
        desc: &wgpu::TextureDescriptor<'_>,
        category: Category,
        owner: Owner,
    ) -> Result<GpuTexture, GpuError> {
        let label = desc.label.unwrap_or("texture");
        let bytes = texture_bytes(desc);
        self.check_memory(label, bytes)?;
        let texture = self.with_error_scope(label, bytes, || self.device.create_texture(desc))?;
        let entry =
            self.ledger.register(Allocation { label: label.into(), category, owner, bytes });
        Ok(GpuTexture { texture, _entry: entry })
    }

    /// Out of memory where `HeadlessOptions::memory_bytes` says the device is full.
    fn check_memory(&self, label: &str, bytes: u64) -> Result<(), GpuError> {
        match self.memory_bytes {
            Some(cap) if self.ledger.total_bytes().saturating_add(bytes) > cap => {
                Err(GpuError::OutOfMemory { label: label.into(), bytes: Some(bytes) })
            }
            _ => Ok(()),
        }
    }

    /// Blocks until the GPU has finished all submitted work and freed what was dropped.
    /// Never call this on an async executor thread.
    pub fn wait_idle(&self) -> Result<(), GpuError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| GpuError::Poll(e.to_string()))
    }

    /// Bytes wgpu's allocator holds for live allocations, where the backend reports it
    /// (Vulkan, DX12, Metal: yes; GL: no).
    #[must_use]
    pub fn allocator_bytes(&self) -> Option<u64> {
        self.device.generate_allocator_report().map(|r| r.total_allocated_bytes)
    }

    /// Runs GPU work (encoding, submitting) inside error scopes, so a mistake in a bind group
    /// or a dispatch, an out-of-memory or a driver's failure (a shader it cannot compile, a
    /// limit of its own) comes back as an error of this call instead of a message in the log.
    /// Error scopes are per thread: call from the thread that works.
    pub fn checked<T>(
        &self,
        label: &str,
        work: impl FnOnce() -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        self.scoped(label, None, work)?
    }

    /// Runs `create` inside the error scopes of [`GpuContext::checked`], turning a failure
    /// into a typed error instead of a panic in wgpu's default handler.
    fn with_error_scope<T>(
        &self,
        label: &str,
        bytes: u64,
        create: impl FnOnce() -> T,
    ) -> Result<T, GpuError> {
        self.scoped(label, Some(bytes), create)
    }

    /// `work` inside out-of-memory, validation and internal error scopes; the first error
    /// in that order (an out-of-memory often brings validation errors about what it left
    /// unmade).
    fn scoped<T>(
        &self,
        label: &str,
        bytes: Option<u64>,
        work: impl FnOnce() -> T,
    ) -> Result<T, GpuError> {
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let value = match self.fault_due(label) {
            Some(kind) => {
                self.provoke(kind);
                None
            }
            None => Some(work()),
        };
        let oom = pollster::block_on(oom.pop());
        let validation = pollster::block_on(validation.pop());
        let internal = pollster::block_on(internal.pop());
        if oom.is_some() {
            return Err(GpuError::OutOfMemory { label: label.into(), bytes });
        }
        if let Some(error) = validation {
            return Err(GpuError::Validation { label: label.into(), message: describe(&error) });
        }
        if let Some(error) = internal {
            return Err(GpuError::Internal {
                label: label.into(),
                adapter: adapter_name(&self.adapter_info),
                message: describe(&error),
            });
        }
        value.ok_or_else(|| GpuError::Validation {
            label: label.into(),
            message: "an injected fault raised no error".into(),
        })
    }

    /// The kind of [`HeadlessOptions::fault`] when this call labelled `label` is its `at`-th.
    fn fault_due(&self, label: &str) -> Option<FaultKind> {
        let (fault, calls) = self.fault.as_deref()?;
        (fault.label == label && calls.fetch_add(1, Ordering::Relaxed) + 1 == fault.at)
            .then_some(fault.kind)
    }

    /// Makes wgpu refuse something of `kind` (inside the caller's error scopes).
    fn provoke(&self, kind: FaultKind) {
        let label = Some("injected fault");
        match kind {
            FaultKind::BindGroup => {
                // One entry for a layout of none.
                let layout =
                    self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                        label,
                        entries: &[],
                    });
                let sampler = self.device.create_sampler(&wgpu::SamplerDescriptor::default());
                let _ = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label,
                    layout: &layout,
                    entries: &[wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Sampler(&sampler),
                    }],
                });
            }
            FaultKind::Submit => {
                let Ok(buffer) = self.create_buffer(
                    "injected fault",
                    4,
                    wgpu::BufferUsages::COPY_DST,
                    Category::Other,
                    Owner::Shared,
                ) else {
                    return;
                };
                let mut encoder =
                    self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label });
                encoder.clear_buffer(&buffer, 0, None);
                buffer.destroy();
                self.queue.submit([encoder.finish()]);
            }
        }
    }
}

/// A wgpu error on one line: its causes joined by ": " ("In `Device::create_bind_group`, label =
/// 'x': Number of bindings … does not match …"), without the "Validation Error / Caused by:"
/// frame and line breaks of its display.
fn describe(error: &wgpu::Error) -> String {
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    if causes.is_empty() {
        causes.push(error.to_string());
    }
    causes.join(": ").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An adapter as a user would name it: `NVIDIA GeForce RTX 4090, Vulkan`.
#[must_use]
pub fn adapter_name(info: &wgpu::AdapterInfo) -> String {
    format!("{}, {:?}", info.name, info.backend)
}

/// What we ask a device for: the adapter's full limits and the optional features it has.
#[must_use]
pub fn device_descriptor(adapter: &wgpu::Adapter) -> wgpu::DeviceDescriptor<'static> {
    wgpu::DeviceDescriptor {
        label: Some("splat device"),
        required_features: adapter.features() & WANTED_FEATURES,
        required_limits: adapter.limits(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::MemoryUsage,
        trace: wgpu::Trace::Off,
    }
}

/// Bytes a texture occupies: every mip level of every layer, by the format's block size.
#[must_use]
pub fn texture_bytes(desc: &wgpu::TextureDescriptor<'_>) -> u64 {
    let (block_w, block_h) = desc.format.block_dimensions();
    let block_bytes = u64::from(desc.format.block_copy_size(None).unwrap_or(4));
    let layers = u64::from(desc.size.depth_or_array_layers.max(1));
    (0..desc.mip_level_count.max(1))
        .map(|level| {
            let w = (desc.size.width >> level).max(1).div_ceil(block_w);
            let h = (desc.size.height >> level).max(1).div_ceil(block_h);
            u64::from(w) * u64::from(h) * block_bytes * layers * u64::from(desc.sample_count.max(1))
        })
        .sum()
}

impl GpuContext {
    /// Turns per-pass timing on (see the module docs). Errors where the adapter has no
    /// timestamp queries.
    pub fn start_profiling(&self) -> Result<(), GpuError> {
        let profiler = Profiler::new(&self.device, &self.queue, |label, usage, bytes| {
            self.create_buffer(label, bytes, usage, Category::Other, Owner::Shared)
        })?;
        *self.profiler_lock() = Some(profiler);
        Ok(())
    }

    /// Whether per-pass timing is on.
    #[must_use]
    pub fn is_profiling(&self) -> bool {
        self.profiler_lock().is_some()
    }

    /// Files the passes encoded from now on under `stage`. Costs a lock when profiling is off.
    pub fn profile_stage(&self, stage: &'static str) {
        if let Some(profiler) = self.profiler_lock().as_mut() {
            profiler.set_stage(stage);
        }
    }

    /// Timestamp writes for the next compute pass, when profiling.
    #[must_use]
    pub fn pass_timer(&self) -> Option<PassTimer> {
        self.profiler_lock().as_mut().and_then(Profiler::pass_timer)
    }

    /// Ends the current frame: its timings are resolved in `encoder` (submit it before the
    /// next frame ends) and read a frame or two later, without waiting.
    pub fn profile_frame(&self, encoder: &mut wgpu::CommandEncoder) {
        let woke = match self.profiler_lock().as_mut() {
            Some(profiler) => profiler.frame(encoder),
            None => false,
        };
        if woke {
            self.poller().wake(&self.device);
        }
    }

    /// Ends the current frame, waits for every frame in flight and turns profiling off.
    /// Returns everything measured since [`GpuContext::start_profiling`]. Blocks.
    pub fn finish_profiling(&self) -> Result<Profile, GpuError> {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("profiler") });
        self.profile_frame(&mut encoder);
        self.queue.submit([encoder.finish()]);
        // Map what the last frame resolved, then wait for all of it.
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("profiler") });
        self.profile_frame(&mut encoder);
        self.queue.submit([encoder.finish()]);
        let Some(profiler) = self.profiler_lock().take() else {
            return Ok(Profile::default());
        };
        // Another thread (the poller) may be the one running the mapping callbacks: wait
        // until every slot says it is readable.
        while profiler.pending() {
            self.wait_idle()?;
            std::thread::yield_now();
        }
        Ok(profiler.finish())
    }
}
