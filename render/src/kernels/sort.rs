//! Stable LSD radix sort of (u32 key, u32 value) pairs on the GPU, by the low `key_bits` bits
//! of the keys (higher bits are carried along, not compared), for a count the caller knows
//! when encoding.
//!
//! Each pass sorts stably by one digit of [`BITS_PER_PASS`] bits, lowest digit first
//! (`key_bits.div_ceil(4)` passes): per-block digit histograms into a digit-major table →
//! exclusive scan of the table ([`PrefixScan`]) → stable scatter, where a pair's place within
//! its block comes from a workgroup-shared scan of per-invocation digit counts (no subgroup
//! operations, so it is correct for any subgroup size). Passes ping-pong between the caller's
//! buffers and the scratch's; after an odd number of passes the result is copied back, so the
//! sorted pairs always end in the caller's `keys` and `values`.
//!
//! The passes' parameters (shift, mask, count) live in a read-only storage buffer of the
//! [`SortScratch`], one slot per pass selected with a dynamic offset, and are uploaded with
//! `queue.write_buffer` when encoding: as for the scan, **a scratch serves one encode per
//! submit**. Encoding allocates no GPU memory.

use crate::buffer::GpuBuffer;
use crate::context::GpuContext;
use crate::error::GpuError;
use crate::kernels::compute::{Binding, Compile, ComputeKernel, KernelDecl, shader_module};
use crate::kernels::scan::{
    DispatchLimits, EncodeError, PARAM_STRIDE, PrefixScan, PreparedScan, ScanScratch, check_buffer,
    param_slot, range,
};
use crate::ledger::{Category, Owner};
use crate::profiler::PassTimer;
use std::sync::{Arc, Mutex, PoisonError};

/// Invocations per workgroup. Keep in sync with sort.wgsl.
pub const WORKGROUP_SIZE: u32 = 256;
/// Pairs each invocation moves. Keep in sync with sort.wgsl.
pub const ITEMS_PER_THREAD: u32 = 4;
/// Pairs per workgroup (block). Keep in sync with sort.wgsl (at most 65,535: counts are
/// packed in 16 bits there).
pub const BLOCK_SIZE: u32 = WORKGROUP_SIZE * ITEMS_PER_THREAD;
/// Key bits sorted per pass. Keep in sync with sort.wgsl.
pub const BITS_PER_PASS: u32 = 4;
/// Digits per pass.
pub const RADIX: u32 = 1 << BITS_PER_PASS;
/// Passes for 32-bit keys.
const MAX_PASSES: u32 = 32 / BITS_PER_PASS;

/// The WGSL source of the kernels.
pub const SHADER: &str = include_str!("sort.wgsl");

/// Every WGSL source of this module, labelled, for naga validation in tests.
#[must_use]
pub fn shader_sources() -> Vec<(String, String)> {
    vec![("radix sort (sort.wgsl)".to_string(), SHADER.to_string())]
}

/// Parameters of one pass. Keep in sync with `SortParams` in sort.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
struct SortParams {
    /// Pairs to sort.
    count: u32,
    /// The pass's digit is `(key >> shift) & mask`.
    shift: u32,
    mask: u32,
    /// Blocks of the pass: the row length of the histogram table.
    block_count: u32,
}
const _: () = assert!(size_of::<SortParams>() == 16);

/// The parameters of every pass of a sort of `count` pairs by `key_bits` bits.
fn pass_params(count: u32, key_bits: u32) -> Vec<SortParams> {
    let block_count = count.div_ceil(BLOCK_SIZE);
    (0..key_bits.div_ceil(BITS_PER_PASS))
        .map(|pass| {
            let shift = pass * BITS_PER_PASS;
            let bits = (key_bits - shift).min(BITS_PER_PASS);
            SortParams { count, shift, mask: (1 << bits) - 1, block_count }
        })
        .collect()
}

/// Radix sort pipelines (and the prefix scan they use). Make once per device.
#[derive(Debug)]
pub struct RadixSort {
    scan: PrefixScan,
    count_digits: ComputeKernel,
    scatter: ComputeKernel,
    limits: DispatchLimits,
}

/// One pass's digit histogram of each block (sort.wgsl `count_digits`).
const COUNT_DIGITS: KernelDecl = KernelDecl {
    label: "radix sort count digits",
    entry: "count_digits",
    bindings: &[
        (0, Binding::Slot(size_of::<SortParams>() as u64)),
        (1, Binding::Read),
        (3, Binding::ReadWrite),
    ],
};

/// One pass's stable scatter by digit (sort.wgsl `scatter`).
const SCATTER: KernelDecl = KernelDecl {
    label: "radix sort scatter",
    entry: "scatter",
    bindings: &[
        (0, Binding::Slot(size_of::<SortParams>() as u64)),
        (1, Binding::Read),
        (2, Binding::Read),
        (4, Binding::Read),
        (5, Binding::ReadWrite),
        (6, Binding::ReadWrite),
    ],
};

/// Buffers a sort needs besides the caller's: grow-only, keep it across frames.
#[derive(Debug)]
pub struct SortScratch {
    capacity: u32,
    limits: DispatchLimits,
    /// The other side of the ping-pong.
    keys: GpuBuffer,
    values: GpuBuffer,
    /// Digit counts, `histogram[digit * block_count + block]`, and their exclusive scan.
    histogram: GpuBuffer,
    offsets: GpuBuffer,
    /// The scan's total (the count; not read).
    scan_total: GpuBuffer,
    scan: ScanScratch,
    /// One parameter slot per pass, `PARAM_STRIDE` bytes apart.
    params: GpuBuffer,
    /// The last sort encoded with this scratch; the same buffers, count and key bits again
    /// (the depth sort between refinements) reuse its parameters and bind groups. Its handles
    /// are of buffers that live as long as the scratch's owner's.
    prepared: Mutex<Option<PreparedSort>>,
}

#[derive(Debug)]
struct PreparedSort {
    keys: wgpu::Buffer,
    values: wgpu::Buffer,
    count: u32,
    key_bits: u32,
    passes: usize,
    block_count: u32,
    scan: Arc<PreparedScan>,
    /// (count digits, scatter) for even passes (caller → scratch) and odd ones (back).
    bind_groups: [(wgpu::BindGroup, wgpu::BindGroup); 2],
}

impl SortScratch {
    /// Pairs this scratch can sort.
    #[must_use]
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

impl RadixSort {
    /// Creates the pipelines, planning for the device's own limits.
    #[must_use]
    pub fn new(ctx: &GpuContext) -> Self {
        Self::with_limits(ctx, DispatchLimits::of(&ctx.device))
    }

    /// Creates the pipelines, planning for `limits` (which must not exceed the device's).
    #[must_use]
    pub fn with_limits(ctx: &GpuContext, limits: DispatchLimits) -> Self {
        let module = shader_module(&ctx.device, "sort.wgsl", SHADER);
        // The kernels write all workgroup memory before reading it.
        let compile = Compile { zero_workgroup_memory: false, ..Compile::default() };
        Self {
            scan: PrefixScan::with_limits(ctx, limits),
            count_digits: ComputeKernel::new(&ctx.device, &module, &COUNT_DIGITS, &compile),
            scatter: ComputeKernel::new(&ctx.device, &module, &SCATTER, &compile),
            limits,
        }
    }

    /// Scratch for sorting up to `capacity` pairs (grow-only: callers keep it across frames):
    /// about `8 × capacity` bytes, registered under [`Category::RasterizerScratch`] (the
    /// parameters under [`Category::Other`]). A capacity whose keys do not fit in one storage
    /// binding is [`GpuError::TooLarge`].
    pub fn scratch(
        &self,
        ctx: &GpuContext,
        capacity: u32,
        owner: Owner,
    ) -> Result<SortScratch, GpuError> {
        if capacity > self.limits.max_binding_elements {
            return Err(GpuError::TooLarge {
                label: "radix sort keys".into(),
                bytes: u64::from(capacity) * 4,
                limit: u64::from(self.limits.max_binding_elements) * 4,
                which: crate::Limit::StorageBinding,
            });
        }
        let storage = wgpu::BufferUsages::STORAGE;
        let copy_from = storage | wgpu::BufferUsages::COPY_SRC;
        let scratch = Category::RasterizerScratch;
        let pairs_bytes = u64::from(capacity.max(1)) * 4;
        let table_len = RADIX * capacity.div_ceil(BLOCK_SIZE).max(1);
        let table_bytes = u64::from(table_len) * 4;
        Ok(SortScratch {
            capacity,
            limits: self.limits,
            keys: ctx.create_buffer("radix sort keys", pairs_bytes, copy_from, scratch, owner)?,
            values: ctx.create_buffer(
                "radix sort values",
                pairs_bytes,
                copy_from,
                scratch,
                owner,
            )?,
            histogram: ctx.create_buffer(
                "radix sort digit histogram",
                table_bytes,
                storage,
                scratch,
                owner,
            )?,
            offsets: ctx.create_buffer(
                "radix sort digit offsets",
                table_bytes,
                storage,
                scratch,
                owner,
            )?,
            scan_total: ctx.create_buffer(
                "radix sort scan total",
                4,
                storage,
                Category::Other,
                owner,
            )?,
            scan: self.scan.scratch(ctx, table_len, owner)?,
            params: ctx.create_buffer(
                "radix sort parameters",
                u64::from(MAX_PASSES) * PARAM_STRIDE,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                Category::Other,
                owner,
            )?,
            prepared: Mutex::new(None),
        })
    }

    /// Records a stable sort of the first `count` pairs `(keys[i], values[i])` by
    /// `keys[i] & ((1 << key_bits) - 1)`, leaving them sorted in `keys` and `values`.
    ///
    /// `keys` and `values` need `STORAGE | COPY_DST` usage (the copy back after an odd number
    /// of passes), must be different buffers and hold at least `count` u32 each; elements past
    /// `count` are untouched. `key_bits` is in `1..=32`. Allocates no GPU memory; uploads the
    /// pass parameters with `queue.write_buffer` (one encode per scratch per submit).
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        keys: &wgpu::Buffer,
        values: &wgpu::Buffer,
        count: u32,
        key_bits: u32,
        scratch: &SortScratch,
    ) -> Result<(), EncodeError> {
        if scratch.limits != self.limits {
            return Err(EncodeError::ScratchMismatch);
        }
        if !(1..=32).contains(&key_bits) {
            return Err(EncodeError::KeyBits(key_bits));
        }
        if count > scratch.capacity {
            return Err(EncodeError::OverCapacity { count, capacity: scratch.capacity });
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        check_buffer("keys", keys, count, usage)?;
        check_buffer("values", values, count, usage)?;
        if keys == values {
            return Err(EncodeError::Aliased("keys", "values"));
        }
        if count <= 1 {
            return Ok(());
        }

        let mut prepared = scratch.prepared.lock().unwrap_or_else(PoisonError::into_inner);
        let current = prepared.as_ref().is_some_and(|p| {
            p.count == count && p.key_bits == key_bits && p.keys == *keys && p.values == *values
        });
        if !current {
            *prepared = Some(self.prepare(ctx, scratch, keys, values, count, key_bits)?);
        }
        let Some(prepared) = prepared.as_ref() else { return Ok(()) };
        let other = (&*scratch.keys, &*scratch.values);

        {
            let timer = ctx.pass_timer();
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("radix sort"),
                timestamp_writes: timer.as_ref().map(PassTimer::writes),
            });
            let grid = self.limits.grid(prepared.block_count);
            for index in 0..prepared.passes {
                let (count_group, scatter_group) = &prepared.bind_groups[index % 2];
                let offset = index as u32 * PARAM_STRIDE as u32;
                pass.set_pipeline(self.count_digits.pipeline());
                pass.set_bind_group(0, count_group, &[offset]);
                pass.dispatch_workgroups(grid.0, grid.1, 1);
                self.scan.record(&mut pass, &prepared.scan);
                pass.set_pipeline(self.scatter.pipeline());
                pass.set_bind_group(0, scatter_group, &[offset]);
                pass.dispatch_workgroups(grid.0, grid.1, 1);
            }
        }
        if prepared.passes % 2 == 1 {
            let bytes = u64::from(count) * 4;
            encoder.copy_buffer_to_buffer(other.0, 0, keys, 0, bytes);
            encoder.copy_buffer_to_buffer(other.1, 0, values, 0, bytes);
        }
        Ok(())
    }

    /// Uploads the parameters of every pass and makes the bind groups and the histogram
    /// scan of a sort of `count` pairs on `key_bits` bits.
    fn prepare(
        &self,
        ctx: &GpuContext,
        scratch: &SortScratch,
        keys: &wgpu::Buffer,
        values: &wgpu::Buffer,
        count: u32,
        key_bits: u32,
    ) -> Result<PreparedSort, EncodeError> {
        let passes = pass_params(count, key_bits);
        let block_count = passes[0].block_count;
        // The scan of the histogram table is the same every pass: prepared once.
        let scan = self.scan.prepare(
            ctx,
            &scratch.histogram,
            &scratch.offsets,
            &scratch.scan_total,
            RADIX * block_count,
            &scratch.scan,
        )?;
        let mut bytes = vec![0_u8; passes.len() * PARAM_STRIDE as usize];
        for (pass, params) in passes.iter().enumerate() {
            let at = pass * PARAM_STRIDE as usize;
            bytes[at..at + size_of::<SortParams>()].copy_from_slice(bytemuck::bytes_of(params));
        }
        ctx.queue.write_buffer(&scratch.params, 0, &bytes);
        // Even passes read the caller's buffers and write the scratch's; odd ones the reverse.
        let caller = (keys, values);
        let other = (&*scratch.keys, &*scratch.values);
        Ok(PreparedSort {
            keys: keys.clone(),
            values: values.clone(),
            count,
            key_bits,
            passes: passes.len(),
            block_count,
            scan,
            bind_groups: [
                self.pass_bind_groups(ctx, scratch, caller, other, count),
                self.pass_bind_groups(ctx, scratch, other, caller, count),
            ],
        })
    }

    /// Bind groups of a pass reading `from` and writing `to`: (count digits, scatter).
    fn pass_bind_groups(
        &self,
        ctx: &GpuContext,
        scratch: &SortScratch,
        from: (&wgpu::Buffer, &wgpu::Buffer),
        to: (&wgpu::Buffer, &wgpu::Buffer),
        count: u32,
    ) -> (wgpu::BindGroup, wgpu::BindGroup) {
        let params = || param_slot(&scratch.params, size_of::<SortParams>() as u64);
        let count_group = self.count_digits.bind(
            &ctx.device,
            &[params(), range(from.0, 0, count), scratch.histogram.as_entire_binding()],
        );
        let scatter_group = self.scatter.bind(
            &ctx.device,
            &[
                params(),
                range(from.0, 0, count),
                range(from.1, 0, count),
                scratch.offsets.as_entire_binding(),
                range(to.0, 0, count),
                range(to.1, 0, count),
            ],
        );
        (count_group, scatter_group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_cover_the_key_bits() {
        let masks =
            |bits| pass_params(5000, bits).iter().map(|p| (p.shift, p.mask)).collect::<Vec<_>>();
        assert_eq!(masks(4), [(0, 15)]);
        assert_eq!(masks(13), [(0, 15), (4, 15), (8, 15), (12, 1)]);
        assert_eq!(masks(32).len(), 8);
        assert_eq!(masks(32)[7], (28, 15));
        assert_eq!(pass_params(5000, 1)[0].block_count, 5);
    }
}
