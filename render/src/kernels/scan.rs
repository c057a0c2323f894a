//! Exclusive prefix sums of `u32` on the GPU (wrapping arithmetic), for any count the caller
//! knows when encoding: `output[i] = input[0] + … + input[i - 1]`, and the sum of everything
//! into a 4-byte `total` buffer.
//!
//! Scheme ("reduce, then scan"), with blocks of [`BLOCK_SIZE`] elements, one workgroup each:
//! 1. `reduce` writes every block's sum into the next level's array; repeated until a level
//!    fits in one block (1,024 → 1 level, 2^20 → 2, 2^30 → 3, 2^32 → 4);
//! 2. `scan_blocks` scans the single-block top level (and writes `total`), then every level
//!    below it, adding to each block the scanned sum of the blocks before it.
//!
//! So the input is read twice and the output written once. Arrays longer than one storage
//! binding allows (128 MiB on lavapipe) are bound in chunks, and more blocks than a dispatch
//! dimension allows (65,535) are dispatched in 2D; see [`DispatchLimits`].
//!
//! Parameters (counts, per dispatch) live in a read-only storage buffer of the
//! [`ScanScratch`], one 256-byte-aligned slot per dispatch, selected with dynamic offsets, and
//! are uploaded with `queue.write_buffer` when encoding. Such writes land before the next
//! submit, so **a scratch serves one encode per submit**: encoding twice with one scratch
//! before submitting makes both scans use the second call's parameters. Use one scratch per
//! scan of a submit.

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, PoisonError};

use crate::buffer::GpuBuffer;
use crate::context::GpuContext;
use crate::error::GpuError;
use crate::kernels::compute::{Binding, Compile, ComputeKernel, KernelDecl, shader_module};
use crate::ledger::{Category, Owner};

/// Invocations per workgroup. Keep in sync with scan.wgsl.
pub const WORKGROUP_SIZE: u32 = 256;
/// Elements each invocation scans. Keep in sync with scan.wgsl.
pub const ITEMS_PER_THREAD: u32 = 4;
/// Elements per workgroup (block). Keep in sync with scan.wgsl.
pub const BLOCK_SIZE: u32 = WORKGROUP_SIZE * ITEMS_PER_THREAD;

/// `ScanParams::flags`: add the scanned sums of the previous blocks. Keep in sync with scan.wgsl.
const FLAG_ADD_OFFSETS: u32 = 1;
/// `ScanParams::flags`: write the (single) block's sum into `total`. Keep in sync with scan.wgsl.
const FLAG_WRITE_TOTAL: u32 = 2;

/// The WGSL source of the kernels.
pub const SHADER: &str = include_str!("scan.wgsl");

/// Every WGSL source of this module, labelled, for naga validation in tests.
#[must_use]
pub fn shader_sources() -> Vec<(String, String)> {
    vec![("exclusive scan (scan.wgsl)".to_string(), SHADER.to_string())]
}

/// Parameters of one dispatch. Keep in sync with `ScanParams` in scan.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
struct ScanParams {
    /// Elements in this dispatch's input/output bindings.
    count: u32,
    /// Index of the dispatch's first block among the blocks of its level.
    block_base: u32,
    /// Workgroups with work (a 2D dispatch may round up).
    block_count: u32,
    flags: u32,
}
const _: () = assert!(size_of::<ScanParams>() == 16);

/// Bytes between parameter slots: a multiple of every device's
/// `min_storage_buffer_offset_alignment` (at most 256 by the WebGPU spec).
pub(crate) const PARAM_STRIDE: u64 = 256;

/// Why a scan or sort could not be encoded. Nothing was recorded when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error(
        "{count} elements is more than the scratch was made for ({capacity}); make a bigger scratch"
    )]
    OverCapacity { count: u32, capacity: u32 },
    #[error("buffer '{name}' is {size} bytes; {needed} bytes are needed")]
    BufferTooSmall { name: &'static str, size: u64, needed: u64 },
    #[error("buffer '{name}' lacks the usage {missing:?}")]
    MissingUsage { name: &'static str, missing: wgpu::BufferUsages },
    #[error("buffers '{0}' and '{1}' must be different buffers")]
    Aliased(&'static str, &'static str),
    #[error("key_bits must be in 1..=32, not {0}")]
    KeyBits(u32),
    #[error("the scratch was made by a kernel with other dispatch limits")]
    ScratchMismatch,
}

/// So a caller returning [`GpuError`] can use `?` on an encode.
impl From<EncodeError> for GpuError {
    fn from(error: EncodeError) -> Self {
        GpuError::Validation { label: "scan/sort encode".into(), message: error.to_string() }
    }
}

/// The dispatch limits a kernel plans for. [`DispatchLimits::of`] reads them from the device;
/// tests shrink them to exercise 2D dispatch and chunked bindings with small arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchLimits {
    /// Workgroups per dispatch dimension; more blocks than this are dispatched in 2D.
    pub max_workgroups_per_dimension: u32,
    /// Most `u32` elements one storage binding may hold; longer arrays are scanned in chunks
    /// (rounded down to whole blocks, at least one).
    pub max_binding_elements: u32,
}

impl DispatchLimits {
    /// The limits of `device`.
    #[must_use]
    pub fn of(device: &wgpu::Device) -> Self {
        let limits = device.limits();
        Self {
            max_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
            max_binding_elements: u32::try_from(limits.max_storage_buffer_binding_size / 4)
                .unwrap_or(u32::MAX),
        }
    }

    /// Elements per chunk of a level's binding: whole blocks.
    fn chunk_elements(self) -> u32 {
        (self.max_binding_elements / BLOCK_SIZE).max(1) * BLOCK_SIZE
    }

    /// Workgroup grid (x, y) for `blocks` workgroups: x as wide as allowed, the rest in y.
    #[must_use]
    pub fn grid(self, blocks: u32) -> (u32, u32) {
        let x = blocks.clamp(1, self.max_workgroups_per_dimension.max(1));
        (x, blocks.div_ceil(x).max(1))
    }
}

/// Lengths of the levels for `count` elements: the input, then block sums until one block.
fn level_lengths(count: u32) -> Vec<u32> {
    let mut levels = vec![count];
    let mut len = count;
    while len > BLOCK_SIZE {
        len = len.div_ceil(BLOCK_SIZE);
        levels.push(len);
    }
    levels
}

/// One dispatch's share of a level: elements `first..first + len`.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    level: usize,
    first: u32,
    len: u32,
    /// Parameter slot.
    slot: u32,
}

impl Chunk {
    fn blocks(self) -> u32 {
        self.len.div_ceil(BLOCK_SIZE).max(1)
    }
}

/// The chunks of every level (outer index: level), with their parameter slots.
fn plan(count: u32, limits: DispatchLimits) -> Vec<Vec<Chunk>> {
    let chunk = limits.chunk_elements();
    let mut slot = 0;
    level_lengths(count)
        .into_iter()
        .enumerate()
        .map(|(level, len)| {
            let chunks = len.div_ceil(chunk).max(1);
            (0..chunks)
                .map(|c| {
                    let first = c * chunk;
                    let this = Chunk { level, first, len: (len - first).min(chunk), slot };
                    slot += 1;
                    this
                })
                .collect()
        })
        .collect()
}

/// Uploads the parameters of a plan: one slot per chunk, shared by its reduce and scan
/// dispatches.
fn write_params(ctx: &GpuContext, levels: &[Vec<Chunk>], params_buffer: &wgpu::Buffer) {
    let top = levels.len() - 1;
    let slots = levels.iter().map(Vec::len).sum::<usize>();
    let mut bytes = vec![0_u8; slots * PARAM_STRIDE as usize];
    for chunk in levels.iter().flatten() {
        let flags = if chunk.level < top { FLAG_ADD_OFFSETS } else { FLAG_WRITE_TOTAL };
        let params = ScanParams {
            count: chunk.len,
            block_base: chunk.first / BLOCK_SIZE,
            block_count: chunk.blocks(),
            flags,
        };
        let at = chunk.slot as usize * PARAM_STRIDE as usize;
        bytes[at..at + size_of::<ScanParams>()].copy_from_slice(bytemuck::bytes_of(&params));
    }
    ctx.queue.write_buffer(params_buffer, 0, &bytes);
}

/// Exclusive prefix sum pipelines. Make once per device; cheap to keep.
#[derive(Debug)]
pub struct PrefixScan {
    reduce: ComputeKernel,
    scan: ComputeKernel,
    limits: DispatchLimits,
}

/// The block sums of one level (scan.wgsl `reduce`).
const REDUCE: KernelDecl = KernelDecl {
    label: "scan reduce",
    entry: "reduce",
    bindings: &[
        (0, Binding::Slot(size_of::<ScanParams>() as u64)),
        (1, Binding::Read),
        (3, Binding::ReadWrite),
    ],
};

/// The scan of one level's blocks (scan.wgsl `scan_blocks`).
const SCAN_BLOCKS: KernelDecl = KernelDecl {
    label: "scan blocks",
    entry: "scan_blocks",
    bindings: &[
        (0, Binding::Slot(size_of::<ScanParams>() as u64)),
        (1, Binding::Read),
        (2, Binding::ReadWrite),
        (4, Binding::Read),
        (5, Binding::ReadWrite),
    ],
};

/// Buffers a scan needs besides its input and output: grow-only, keep it across frames.
#[derive(Debug)]
pub struct ScanScratch {
    capacity: u32,
    limits: DispatchLimits,
    /// For levels 1.. (index 0 is level 1): the block sums of the level below.
    sums: Vec<GpuBuffer>,
    /// For levels 1..: the exclusive scan of `sums`.
    scanned: Vec<GpuBuffer>,
    /// Parameter slots, `PARAM_STRIDE` bytes apart.
    params: GpuBuffer,
    param_slots: u32,
    /// Bound where a binding is not used (empty input, offsets of the top level, …).
    unused_read: GpuBuffer,
    unused_write: GpuBuffer,
    /// The last scan prepared with this scratch: the same buffers and count again (the
    /// renderer's per-splat scan, the depth sort's table between refinements) reuse its
    /// parameters and bind groups. Its handles are of buffers that live as long as the
    /// scratch's owner's.
    prepared: Mutex<Option<CachedScan>>,
}

#[derive(Debug)]
struct CachedScan {
    input: wgpu::Buffer,
    output: wgpu::Buffer,
    total: wgpu::Buffer,
    count: u32,
    prepared: Arc<PreparedScan>,
}

impl ScanScratch {
    /// Elements this scratch can scan.
    #[must_use]
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// Binds `len` u32 starting at element `first` of `buffer`.
pub(crate) fn range(buffer: &wgpu::Buffer, first: u32, len: u32) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset: u64::from(first) * 4,
        size: NonZeroU64::new(u64::from(len) * 4),
    })
}

/// Binds a whole buffer.
pub(crate) fn whole(buffer: &wgpu::Buffer) -> wgpu::BindingResource<'_> {
    buffer.as_entire_binding()
}

/// Binds one parameter slot (its offset is given when binding the group).
pub(crate) fn param_slot(buffer: &wgpu::Buffer, size: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset: 0,
        size: NonZeroU64::new(size),
    })
}

/// Checks a caller's buffer: its usages and that it holds `elements` u32.
pub(crate) fn check_buffer(
    name: &'static str,
    buffer: &wgpu::Buffer,
    elements: u32,
    usage: wgpu::BufferUsages,
) -> Result<(), EncodeError> {
    let missing = usage - buffer.usage();
    if !missing.is_empty() {
        return Err(EncodeError::MissingUsage { name, missing });
    }
    let needed = u64::from(elements) * 4;
    if buffer.size() < needed {
        return Err(EncodeError::BufferTooSmall { name, size: buffer.size(), needed });
    }
    Ok(())
}

/// Which pipeline a recorded dispatch runs.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Reduce,
    Scan,
}

/// One dispatch, ready to record.
#[derive(Debug)]
struct Dispatch {
    kernel: Kernel,
    bind_group: wgpu::BindGroup,
    param_offset: u32,
    grid: (u32, u32),
}

/// A scan whose parameters are uploaded and bind groups made: record it once or many times
/// (the radix sort scans the same table every pass).
#[derive(Debug)]
pub(crate) struct PreparedScan {
    dispatches: Vec<Dispatch>,
}

impl PrefixScan {
    /// Creates the pipelines, planning for the device's own limits.
    #[must_use]
    pub fn new(ctx: &GpuContext) -> Self {
        Self::with_limits(ctx, DispatchLimits::of(&ctx.device))
    }

    /// Creates the pipelines, planning for `limits` (which must not exceed the device's).
    #[must_use]
    pub fn with_limits(ctx: &GpuContext, limits: DispatchLimits) -> Self {
        let module = shader_module(&ctx.device, "scan.wgsl", SHADER);
        // The kernels write all workgroup memory before reading it.
        let compile = Compile { zero_workgroup_memory: false, ..Compile::default() };
        Self {
            reduce: ComputeKernel::new(&ctx.device, &module, &REDUCE, &compile),
            scan: ComputeKernel::new(&ctx.device, &module, &SCAN_BLOCKS, &compile),
            limits,
        }
    }

    /// The limits this scan plans for.
    #[must_use]
    pub fn limits(&self) -> DispatchLimits {
        self.limits
    }

    /// Scratch for scanning up to `capacity` elements (grow-only: callers keep it across
    /// frames and make a bigger one when the count outgrows it). Registered under
    /// [`Category::RasterizerScratch`] (the parameters under [`Category::Other`]).
    pub fn scratch(
        &self,
        ctx: &GpuContext,
        capacity: u32,
        owner: Owner,
    ) -> Result<ScanScratch, GpuError> {
        let storage = wgpu::BufferUsages::STORAGE;
        let mut sums = Vec::new();
        let mut scanned = Vec::new();
        for (level, len) in level_lengths(capacity).into_iter().enumerate().skip(1) {
            let bytes = u64::from(len) * 4;
            let category = Category::RasterizerScratch;
            sums.push(ctx.create_buffer(
                &format!("scan block sums (level {level})"),
                bytes,
                storage,
                category,
                owner,
            )?);
            scanned.push(ctx.create_buffer(
                &format!("scan scanned block sums (level {level})"),
                bytes,
                storage,
                category,
                owner,
            )?);
        }
        let param_slots = plan(capacity, self.limits).iter().map(Vec::len).sum::<usize>() as u32;
        let params = ctx.create_buffer(
            "scan parameters",
            u64::from(param_slots) * PARAM_STRIDE,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            Category::Other,
            owner,
        )?;
        let unused = |label| ctx.create_buffer(label, 16, storage, Category::Other, owner);
        Ok(ScanScratch {
            capacity,
            limits: self.limits,
            sums,
            scanned,
            params,
            param_slots,
            unused_read: unused("scan unused binding (read)")?,
            unused_write: unused("scan unused binding (write)")?,
            prepared: Mutex::new(None),
        })
    }

    /// Records `output[i] = input[0] + … + input[i - 1]` for `i < count` (wrapping) and
    /// `total[0] = input[0] + … + input[count - 1]` (0 for an empty input) into `encoder`.
    ///
    /// `input`, `output` and `total` need `STORAGE` usage, must be three different buffers,
    /// and hold at least `count`, `count` and 1 u32. Elements of `output` past `count` are
    /// untouched. Uploads the parameters with `queue.write_buffer` (see the module doc: one
    /// encode per scratch per submit); allocates no GPU memory.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_exclusive(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        input: &wgpu::Buffer,
        output: &wgpu::Buffer,
        total: &wgpu::Buffer,
        count: u32,
        scratch: &ScanScratch,
    ) -> Result<(), EncodeError> {
        let prepared = self.prepare(ctx, input, output, total, count, scratch)?;
        let timer = ctx.pass_timer();
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("exclusive scan"),
            timestamp_writes: timer.as_ref().map(crate::PassTimer::writes),
        });
        self.record(&mut pass, &prepared);
        Ok(())
    }

    /// Checks the arguments, uploads the parameters and makes the bind groups.
    pub(crate) fn prepare(
        &self,
        ctx: &GpuContext,
        input: &wgpu::Buffer,
        output: &wgpu::Buffer,
        total: &wgpu::Buffer,
        count: u32,
        scratch: &ScanScratch,
    ) -> Result<Arc<PreparedScan>, EncodeError> {
        self.check_arguments(input, output, total, count, scratch)?;
        let mut cache = scratch.prepared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = cache.as_ref()
            && cached.count == count
            && cached.input == *input
            && cached.output == *output
            && cached.total == *total
        {
            // Its parameters are still in the scratch: only prepare writes them.
            return Ok(Arc::clone(&cached.prepared));
        }
        let levels = plan(count, self.limits);
        debug_assert!(
            levels.iter().map(Vec::len).sum::<usize>() <= scratch.param_slots as usize,
            "a scratch holds the parameter slots of its capacity"
        );
        let top = levels.len() - 1;

        write_params(ctx, &levels, &scratch.params);

        // The arrays of each level: (input, output).
        let level_input = |level: usize| if level == 0 { input } else { &*scratch.sums[level - 1] };
        let level_output =
            |level: usize| if level == 0 { output } else { &*scratch.scanned[level - 1] };
        let params_binding = param_slot(&scratch.params, size_of::<ScanParams>() as u64);
        let device = &ctx.device;

        let mut dispatches = Vec::new();
        // 1. Reduce every level below the top into the next one's sums.
        for chunk in levels[..top].iter().flatten() {
            let bind_group = self.reduce.bind(
                device,
                &[
                    params_binding.clone(),
                    range(level_input(chunk.level), chunk.first, chunk.len),
                    whole(&scratch.sums[chunk.level]),
                ],
            );
            dispatches.push(Dispatch {
                kernel: Kernel::Reduce,
                bind_group,
                param_offset: chunk.slot * PARAM_STRIDE as u32,
                grid: self.limits.grid(chunk.blocks()),
            });
        }
        // 2. Scan from the top level down, each adding the scanned sums of the level above.
        for chunk in levels.iter().rev().flatten() {
            let (data_in, data_out) = if chunk.len == 0 {
                (whole(&scratch.unused_read), whole(&scratch.unused_write))
            } else {
                (
                    range(level_input(chunk.level), chunk.first, chunk.len),
                    range(level_output(chunk.level), chunk.first, chunk.len),
                )
            };
            let (offsets, total_out) = if chunk.level == top {
                (whole(&scratch.unused_read), whole(total))
            } else {
                (whole(&scratch.scanned[chunk.level]), whole(&scratch.unused_write))
            };
            let bind_group = self
                .scan
                .bind(device, &[params_binding.clone(), data_in, data_out, offsets, total_out]);
            dispatches.push(Dispatch {
                kernel: Kernel::Scan,
                bind_group,
                param_offset: chunk.slot * PARAM_STRIDE as u32,
                grid: self.limits.grid(chunk.blocks()),
            });
        }
        let prepared = Arc::new(PreparedScan { dispatches });
        *cache = Some(CachedScan {
            input: input.clone(),
            output: output.clone(),
            total: total.clone(),
            count,
            prepared: Arc::clone(&prepared),
        });
        Ok(prepared)
    }

    /// The argument checks of [`PrefixScan::encode_exclusive`].
    fn check_arguments(
        &self,
        input: &wgpu::Buffer,
        output: &wgpu::Buffer,
        total: &wgpu::Buffer,
        count: u32,
        scratch: &ScanScratch,
    ) -> Result<(), EncodeError> {
        if scratch.limits != self.limits {
            return Err(EncodeError::ScratchMismatch);
        }
        if count > scratch.capacity {
            return Err(EncodeError::OverCapacity { count, capacity: scratch.capacity });
        }
        let storage = wgpu::BufferUsages::STORAGE;
        check_buffer("input", input, count, storage)?;
        check_buffer("output", output, count, storage)?;
        check_buffer("total", total, 1, storage)?;
        for (a, b, names) in [
            (input, output, ("input", "output")),
            (input, total, ("input", "total")),
            (output, total, ("output", "total")),
        ] {
            if a == b {
                return Err(EncodeError::Aliased(names.0, names.1));
            }
        }
        Ok(())
    }

    /// Records a prepared scan into a compute pass.
    pub(crate) fn record(&self, pass: &mut wgpu::ComputePass<'_>, prepared: &PreparedScan) {
        for dispatch in &prepared.dispatches {
            pass.set_pipeline(match dispatch.kernel {
                Kernel::Reduce => self.reduce.pipeline(),
                Kernel::Scan => self.scan.pipeline(),
            });
            pass.set_bind_group(0, &dispatch.bind_group, &[dispatch.param_offset]);
            pass.dispatch_workgroups(dispatch.grid.0, dispatch.grid.1, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVICE: DispatchLimits =
        DispatchLimits { max_workgroups_per_dimension: 65_535, max_binding_elements: 1 << 25 };

    #[test]
    fn levels_shrink_to_one_block() {
        assert_eq!(level_lengths(0), [0]);
        assert_eq!(level_lengths(1024), [1024]);
        assert_eq!(level_lengths(1025), [1025, 2]);
        assert_eq!(level_lengths(1 << 26), [1 << 26, 65_536, 64]);
        assert_eq!(level_lengths(u32::MAX), [u32::MAX, 4_194_304, 4096, 4]);
    }

    #[test]
    fn big_levels_are_chunked_and_gridded() {
        let levels = plan(1 << 26, DEVICE);
        assert_eq!(levels.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1, 1]);
        assert_eq!((levels[0][1].first, levels[0][1].len), (1 << 25, 1 << 25));
        assert_eq!(levels.iter().flatten().map(|c| c.slot).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(DEVICE.grid(65_536), (65_535, 2));
        assert_eq!(DEVICE.grid(0), (1, 1));
        assert_eq!(DEVICE.grid(7), (7, 1));
    }
}
