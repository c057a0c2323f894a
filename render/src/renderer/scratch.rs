//! A frame's scratch buffers ([`FrameScratch`]): grown, never shrunk within a run, released
//! at a refinement; the depth bands of a frame too large for one binding; cached bind groups.

use std::sync::{Mutex, PoisonError};

use splat_formats::filter::{SceneCells, Selection};

use super::uniforms::window_uniform_bytes;
use super::{COUNTS_BYTES, FrameCounts, PARAMS, Renderer, STORAGE};
use crate::gpu_splats::{GpuSplats, SplatGradients, read_f32};
use crate::kernels::compute::ComputeKernel;
use crate::kernels::scan::ScanScratch;
use crate::kernels::sort::SortScratch;
use crate::kernels::{
    BandUniform, IntersectUniform, PROJECTED_BYTES, PROJECTED_GRAD_FLOATS, RasterUniform,
    RenderUniform,
};
use crate::{Category, GpuBuffer, GpuContext, GpuError, Owner};

#[derive(Clone, Copy, Debug)]
pub(super) struct LastFrame {
    pub(super) splats: u32,
    pub(super) width: u32,
    pub(super) height: u32,
}

/// A forward pass between its two halves, with the parameters its bands start from.
#[derive(Clone, Copy, Debug)]
pub(super) struct BegunFrame {
    pub(super) splats: u32,
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) intersect: IntersectUniform,
    pub(super) render: RenderUniform,
    pub(super) raster: RasterUniform,
}

/// Per-frame buffers of the rasterizer, owned by whoever renders (a run, the viewer). They
/// only grow, by half again past what is needed, so a steady scene allocates nothing per
/// frame.
#[derive(Debug)]
pub struct FrameScratch {
    pub(super) owner: Owner,
    pub(super) splat_capacity: u32,
    /// Copies of the `RenderUniform` the uniforms hold: one a window of splats.
    pub(super) window_capacity: u32,
    pub(super) pixel_capacity: u32,
    pub(super) carry_capacity: u32,
    pub(super) bounds_capacity: u32,
    pub(super) last_frame: Option<LastFrame>,
    pub(super) begun: Option<BegunFrame>,
    /// The frame's depth bands (those of the last forward pass: the backward's).
    pub(super) plan: Vec<BandUniform>,
    /// The begun frame's depth order is made and its bands read back
    /// ([`Renderer::prepare_bands`]).
    pub(super) depth_ordered: bool,
    pub(super) uniform: GpuBuffer,
    /// The frame's selections and scene cells as the projection reads them (`filter_rules`),
    /// grown to the largest filter drawn.
    pub(super) rules: GpuBuffer,
    /// The selections and scene cells whose rules `rules` holds, and where the cells start
    /// there (a crop box dragged over them does not write them again).
    pub(super) rules_of: (Vec<Selection>, Option<SceneCells>, f32),
    pub(super) intersect_uniform: GpuBuffer,
    pub(super) total: GpuBuffer,
    /// [`FrameCounts`] as the projection adds them up (visible left 0: the scan's total).
    pub(super) totals: GpuBuffer,
    pub(super) counts_readback: GpuBuffer,
    // Per splat.
    /// Each visible splat's camera-space depth, as bits (the depth sort's key).
    pub(super) depths: GpuBuffer,
    /// Tiles each splat touches (the projection), then each visible one's depth rank + 1
    /// (`gather_counts`; 0 = not visible), by which the backward pass finds its intersections.
    pub(super) tiles_touched: GpuBuffer,
    pub(super) depth_keys: GpuBuffer,
    pub(super) splat_ids: GpuBuffer,
    pub(super) counts: GpuBuffer,
    pub(super) offsets: GpuBuffer,
    pub(super) scan_splats: ScanScratch,
    pub(super) scan_visible: ScanScratch,
    pub(super) sort_splats: SortScratch,
    // Per depth band.
    /// The bands' first ranks and intersections (`band_bounds`), and their read-back.
    pub(super) bounds: GpuBuffer,
    pub(super) bounds_readback: GpuBuffer,
    pub(super) bands: Vec<BandScratch>,
    // Per pixel.
    /// `[H, W]` of rgb + alpha, f32.
    pub image: GpuBuffer,
    pub(super) final_t: GpuBuffer,
    pub(super) last_entry: GpuBuffer,
    /// The band of each pixel's last composited splat, and whether it saturated.
    pub(super) last_band: GpuBuffer,
    /// The backward pass's walk of each pixel between bands (only with several bands).
    pub(super) carry: GpuBuffer,
    /// Bind groups of earlier frames; see [`FrameScratch::cached_bind_group`].
    pub(super) bindings: Mutex<Vec<CachedBindGroup>>,
}

/// One depth band's buffers: its splats projected in depth order, its intersections, tile
/// lists and partials, and its parameter blocks. Kept from frame to frame, grown like the
/// rest.
#[derive(Debug)]
pub(super) struct BandScratch {
    pub(super) splat_capacity: u32,
    /// Copies of the `RenderUniform` `render_uniform` holds: one a window of splats.
    pub(super) window_capacity: u32,
    pub(super) intersection_capacity: u32,
    pub(super) partial_capacity: u32,
    pub(super) tile_capacity: u32,
    pub(super) band_uniform: GpuBuffer,
    pub(super) raster_uniform: GpuBuffer,
    /// The frame's `RenderUniform` with this band's ranks (the projection's passes).
    pub(super) render_uniform: GpuBuffer,
    pub(super) projected: GpuBuffer,
    pub(super) tile_ids: GpuBuffer,
    pub(super) isect_ids: GpuBuffer,
    /// Each intersection's splat, as its place in the band's `projected`.
    pub(super) splat_of: GpuBuffer,
    /// dL/d(projected) of each intersection, summed over its tile, and its share of the
    /// absolute growth statistic: `[M, 10]`, made by the first backward pass.
    pub(super) partials: GpuBuffer,
    pub(super) ranges: GpuBuffer,
    pub(super) sort: SortScratch,
}

/// A bind group and the buffers it binds (handles: they keep those buffers alive, which is
/// why a holder of splats it rendered calls [`FrameScratch::forget_bindings`] when it drops
/// them).
#[derive(Debug)]
pub(super) struct CachedBindGroup {
    pub(super) key: BindKey,
    pub(super) buffers: Vec<(wgpu::Buffer, u64, Option<wgpu::BufferSize>)>,
    pub(super) group: wgpu::BindGroup,
}

pub(super) fn scratch_buffer(
    ctx: &GpuContext,
    label: &str,
    bytes: u64,
    usage: wgpu::BufferUsages,
    owner: Owner,
) -> Result<GpuBuffer, GpuError> {
    // At least one `Projected` (48 bytes) and 16-byte aligned: an empty binding of a struct
    // array is invalid. Kernels bind these buffers whole: one past the binding limit is an
    // error here, naming the limit, not a validation error at the next bind group.
    let bytes = bytes.max(64);
    if usage.contains(wgpu::BufferUsages::STORAGE) {
        ctx.check_whole_binding(label, bytes)?;
    }
    ctx.create_buffer(label, bytes, usage, Category::RasterizerScratch, owner)
}

/// Capacity to allocate for `needed` items when growing: half again, at least 256.
pub(super) fn grown(needed: u32) -> u32 {
    needed.saturating_add(needed / 2).max(256)
}

impl BandScratch {
    pub(super) fn new(
        ctx: &GpuContext,
        renderer: &Renderer,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        Ok(Self {
            splat_capacity: 0,
            window_capacity: 1,
            intersection_capacity: 0,
            partial_capacity: 0,
            tile_capacity: 0,
            band_uniform: scratch_buffer(
                ctx,
                "band uniform",
                size_of::<BandUniform>() as u64,
                PARAMS,
                owner,
            )?,
            raster_uniform: scratch_buffer(
                ctx,
                "raster uniform",
                size_of::<RasterUniform>() as u64,
                PARAMS,
                owner,
            )?,
            render_uniform: scratch_buffer(
                ctx,
                "band render uniform",
                size_of::<RenderUniform>() as u64,
                PARAMS,
                owner,
            )?,
            projected: scratch_buffer(ctx, "projected", 0, STORAGE, owner)?,
            tile_ids: scratch_buffer(ctx, "tile ids", 0, STORAGE, owner)?,
            isect_ids: scratch_buffer(ctx, "intersection ids", 0, STORAGE, owner)?,
            splat_of: scratch_buffer(ctx, "intersection splats", 0, STORAGE, owner)?,
            partials: scratch_buffer(ctx, "intersection gradients", 0, STORAGE, owner)?,
            ranges: scratch_buffer(ctx, "tile ranges", 0, STORAGE, owner)?,
            sort: renderer.sort.scratch(ctx, 1, owner)?,
        })
    }

    /// Room for `splats` projected splats and `intersections`, in a frame of `tiles` tiles
    /// and `windows` windows of splats.
    pub(super) fn ensure(
        &mut self,
        ctx: &GpuContext,
        renderer: &Renderer,
        splats: u32,
        intersections: u32,
        (tiles, windows): (u32, u32),
        owner: Owner,
    ) -> Result<(), GpuError> {
        if windows > self.window_capacity {
            let bytes = window_uniform_bytes(windows);
            self.render_uniform = scratch_buffer(ctx, "band render uniform", bytes, PARAMS, owner)?;
            self.window_capacity = windows;
        }
        if splats > self.splat_capacity {
            let cap = grown(splats);
            let bytes = u64::from(cap) * PROJECTED_BYTES;
            self.projected = scratch_buffer(ctx, "projected", bytes, STORAGE, owner)?;
            self.splat_capacity = cap;
        }
        if intersections > self.intersection_capacity {
            let cap = grown(intersections);
            let m = u64::from(cap);
            self.tile_ids = scratch_buffer(ctx, "tile ids", m * 4, STORAGE, owner)?;
            self.isect_ids = scratch_buffer(ctx, "intersection ids", m * 4, STORAGE, owner)?;
            self.splat_of = scratch_buffer(ctx, "intersection splats", m * 4, STORAGE, owner)?;
            self.sort = renderer.sort.scratch(ctx, cap, owner)?;
            self.intersection_capacity = cap;
        }
        if tiles > self.tile_capacity {
            // One range more: the sentinel tile's (intersect.wgsl).
            let bytes = u64::from(tiles + 1) * 8;
            self.ranges = scratch_buffer(ctx, "tile ranges", bytes, STORAGE, owner)?;
            self.tile_capacity = tiles;
        }
        Ok(())
    }

    /// The backward pass's partials, as many as the intersection buffers hold (made on the
    /// first backward pass: a scratch that only renders has none).
    pub(super) fn ensure_partials(
        &mut self,
        ctx: &GpuContext,
        owner: Owner,
    ) -> Result<(), GpuError> {
        if self.partial_capacity < self.intersection_capacity {
            let m = u64::from(self.intersection_capacity);
            self.partials = scratch_buffer(
                ctx,
                "intersection gradients",
                m * PROJECTED_GRAD_FLOATS * 4,
                STORAGE,
                owner,
            )?;
            self.partial_capacity = self.intersection_capacity;
        }
        Ok(())
    }
}

impl FrameScratch {
    /// Empty scratch (small buffers); it grows on first use.
    pub fn new(ctx: &GpuContext, renderer: &Renderer, owner: Owner) -> Result<Self, GpuError> {
        let readback = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        Ok(Self {
            owner,
            splat_capacity: 0,
            window_capacity: 1,
            pixel_capacity: 0,
            carry_capacity: 0,
            bounds_capacity: 0,
            last_frame: None,
            begun: None,
            plan: Vec::new(),
            depth_ordered: false,
            uniform: scratch_buffer(
                ctx,
                "render uniform",
                size_of::<RenderUniform>() as u64,
                PARAMS,
                owner,
            )?,
            rules: scratch_buffer(ctx, "filter rules", 0, PARAMS, owner)?,
            rules_of: (Vec::new(), None, 0.0),
            intersect_uniform: scratch_buffer(
                ctx,
                "intersect uniform",
                size_of::<IntersectUniform>() as u64,
                PARAMS,
                owner,
            )?,
            total: scratch_buffer(ctx, "scan total", 4, STORAGE, owner)?,
            totals: scratch_buffer(ctx, "frame totals", COUNTS_BYTES, STORAGE, owner)?,
            counts_readback: scratch_buffer(
                ctx,
                "frame counts readback",
                COUNTS_BYTES,
                readback,
                owner,
            )?,
            depths: scratch_buffer(ctx, "depths", 0, STORAGE, owner)?,
            tiles_touched: scratch_buffer(ctx, "tiles touched", 0, STORAGE, owner)?,
            depth_keys: scratch_buffer(ctx, "depth keys", 0, STORAGE, owner)?,
            splat_ids: scratch_buffer(ctx, "splat ids", 0, STORAGE, owner)?,
            counts: scratch_buffer(ctx, "counts", 0, STORAGE, owner)?,
            offsets: scratch_buffer(ctx, "offsets", 0, STORAGE, owner)?,
            scan_splats: renderer.scan.scratch(ctx, 1, owner)?,
            scan_visible: renderer.scan.scratch(ctx, 1, owner)?,
            sort_splats: renderer.sort.scratch(ctx, 1, owner)?,
            bounds: scratch_buffer(ctx, "band bounds", 0, STORAGE, owner)?,
            bounds_readback: scratch_buffer(ctx, "band bounds readback", 0, readback, owner)?,
            bands: vec![BandScratch::new(ctx, renderer, owner)?],
            image: scratch_buffer(ctx, "image", 0, STORAGE, owner)?,
            final_t: scratch_buffer(ctx, "final transmittance", 0, STORAGE, owner)?,
            last_entry: scratch_buffer(ctx, "last entry", 0, STORAGE, owner)?,
            last_band: scratch_buffer(ctx, "last band", 0, STORAGE, owner)?,
            carry: scratch_buffer(ctx, "backward carry", 0, STORAGE, owner)?,
            bindings: Mutex::new(Vec::new()),
        })
    }

    /// The bind group under `key` over `buffers`: the one made last time when the same
    /// buffers come back (so a steady scene makes none per frame), else a new one from
    /// `make`, which replaces the old (one per key: a buffer that grew or splats that changed
    /// leave nothing behind after the next frame).
    pub(super) fn cached_bind_group(
        &self,
        key: BindKey,
        buffers: &[wgpu::BufferBinding<'_>],
        make: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        let mut cache = self.bindings.lock().unwrap_or_else(PoisonError::into_inner);
        let same = |c: &CachedBindGroup| {
            c.key == key
                && c.buffers.len() == buffers.len()
                && c.buffers.iter().zip(buffers).all(|((buffer, offset, size), b)| {
                    buffer == b.buffer && *offset == b.offset && *size == b.size
                })
        };
        if let Some(cached) = cache.iter().find(|c| same(c)) {
            return cached.group.clone();
        }
        cache.retain(|c| c.key != key);
        let group = make();
        let buffers = buffers.iter().map(|b| (b.buffer.clone(), b.offset, b.size)).collect();
        cache.push(CachedBindGroup { key, buffers, group: group.clone() });
        group
    }

    /// Drops the kept bind groups and with them every handle to buffers outside this scratch
    /// (splats, gradients, the caller's `v_image`). Call it when those buffers are dropped
    /// (after a refinement, after a viewer's frame), so that the memory goes when the ledger
    /// says it does.
    pub fn forget_bindings(&self) {
        self.bindings.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// Lets every buffer go that the frames grew (those sized by splats, intersections,
    /// pixels and tiles) and the kept bind groups, leaving the scratch as
    /// [`FrameScratch::new`] made it: the next frame grows it again. A run calls it before a
    /// refinement, whose new buffers then never sit beside a full scratch.
    pub fn release(&mut self, ctx: &GpuContext, renderer: &Renderer) -> Result<(), GpuError> {
        *self = Self::new(ctx, renderer, self.owner)?;
        Ok(())
    }

    /// The counts that [`Renderer::forward_begin`] found, once the GPU has them: the one
    /// wait of a forward pass. Awaiting does not block the thread (see
    /// [`GpuContext::read_mapped`]); dropping the future cancels the read.
    /// A frame of more than 2^32 − 1 splat-tile pairs, which u32 counts and offsets cannot
    /// index, is refused here, before anything is sized from the wrapped count.
    pub async fn counts(&self, ctx: &GpuContext) -> Result<FrameCounts, GpuError> {
        let counts: FrameCounts = ctx
            .read_mapped(&self.counts_readback, COUNTS_BYTES, bytemuck::pod_read_unaligned)
            .await?;
        if counts.wraps > 0 {
            return Err(GpuError::TooMany {
                label: "the frame's splat-tile intersections".into(),
                count: (u64::from(counts.wraps) << 32) + u64::from(counts.intersections),
            });
        }
        Ok(counts)
    }

    /// The last forward pass's image size, if any.
    #[must_use]
    pub fn image_size(&self) -> Option<(u32, u32)> {
        self.last_frame.map(|f| (f.width, f.height))
    }

    /// How many depth bands the last forward pass had (1 unless its intersections outgrew
    /// one storage binding).
    #[must_use]
    pub fn bands(&self) -> usize {
        self.plan.len()
    }

    /// Reads the last rendered image back: `[H, W]` of rgb + alpha. Blocks.
    pub fn read_image(&self, ctx: &GpuContext) -> Result<Vec<[f32; 4]>, GpuError> {
        let (w, h) = self.image_size().unwrap_or((0, 0));
        let flat = read_f32(ctx, &self.image, (w * h * 4) as usize)?;
        Ok(flat.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect())
    }

    pub(super) fn ensure(
        &mut self,
        ctx: &GpuContext,
        renderer: &Renderer,
        splats: u32,
        pixels: u32,
    ) -> Result<(), GpuError> {
        let owner = self.owner;
        if splats > self.splat_capacity {
            let cap = grown(splats);
            let n = u64::from(cap);
            self.depths = scratch_buffer(ctx, "depths", n * 4, STORAGE, owner)?;
            self.tiles_touched = scratch_buffer(ctx, "tiles touched", n * 4, STORAGE, owner)?;
            self.depth_keys = scratch_buffer(ctx, "depth keys", n * 4, STORAGE, owner)?;
            self.splat_ids = scratch_buffer(ctx, "splat ids", n * 4, STORAGE, owner)?;
            self.counts = scratch_buffer(ctx, "counts", n * 4, STORAGE, owner)?;
            self.offsets = scratch_buffer(ctx, "offsets", n * 4, STORAGE, owner)?;
            self.scan_splats = renderer.scan.scratch(ctx, cap, owner)?;
            self.scan_visible = renderer.scan.scratch(ctx, cap, owner)?;
            self.sort_splats = renderer.sort.scratch(ctx, cap, owner)?;
            self.splat_capacity = cap;
        }
        let windows = splats.div_ceil(renderer.window);
        if windows > self.window_capacity {
            let bytes = window_uniform_bytes(windows);
            self.uniform = scratch_buffer(ctx, "render uniform", bytes, PARAMS, owner)?;
            self.window_capacity = windows;
        }
        if pixels > self.pixel_capacity {
            let cap = u64::from(pixels);
            self.image = scratch_buffer(ctx, "image", cap * 16, STORAGE, owner)?;
            self.final_t = scratch_buffer(ctx, "final transmittance", cap * 4, STORAGE, owner)?;
            self.last_entry = scratch_buffer(ctx, "last entry", cap * 4, STORAGE, owner)?;
            self.last_band = scratch_buffer(ctx, "last band", cap * 4, STORAGE, owner)?;
            self.pixel_capacity = pixels;
        }
        Ok(())
    }

    /// Room for `bands` + 1 bounds.
    pub(super) fn ensure_bounds(&mut self, ctx: &GpuContext, bands: u32) -> Result<(), GpuError> {
        if bands + 1 > self.bounds_capacity {
            let cap = grown(bands + 1);
            let bytes = u64::from(cap) * 8;
            let readback = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
            self.bounds = scratch_buffer(ctx, "band bounds", bytes, STORAGE, self.owner)?;
            self.bounds_readback =
                scratch_buffer(ctx, "band bounds readback", bytes, readback, self.owner)?;
            self.bounds_capacity = cap;
        }
        Ok(())
    }

    /// Room for every band of `plan`, in a frame of `splats` splats and `tiles` tiles. One
    /// band holds projections for all the splats, visible or not, as the splat-ordered
    /// array it replaces did: its size then does not follow the view, and the memory
    /// prediction, which must plan for a view that sees every splat, stays tight; unless
    /// every splat's projection would pass one binding (1.86M splats on lavapipe), when it
    /// holds its own, as several bands do.
    pub(super) fn ensure_bands(
        &mut self,
        ctx: &GpuContext,
        renderer: &Renderer,
        plan: &[BandUniform],
        splats: u32,
        tiles: u32,
    ) -> Result<(), GpuError> {
        while self.bands.len() < plan.len() {
            self.bands.push(BandScratch::new(ctx, renderer, self.owner)?);
        }
        let windows = splats.div_ceil(renderer.window);
        // Room for every splat only while that fits one binding (the projected array is bound
        // whole): past it, a single band holds its own splats, like several do.
        let (binding, _) = ctx.whole_binding_limit();
        let all_fit = u64::from(grown(splats)) * PROJECTED_BYTES <= binding;
        for (band, scratch) in plan.iter().zip(&mut self.bands) {
            let room = if plan.len() == 1 && all_fit { splats.max(band.count) } else { band.count };
            let sizes = (tiles, windows);
            scratch.ensure(ctx, renderer, room, band.intersections, sizes, self.owner)?;
        }
        Ok(())
    }

    /// The backward pass's partials for the first `bands` bands.
    pub(super) fn ensure_partials(
        &mut self,
        ctx: &GpuContext,
        bands: usize,
    ) -> Result<(), GpuError> {
        let owner = self.owner;
        for band in self.bands.iter_mut().take(bands) {
            band.ensure_partials(ctx, owner)?;
        }
        Ok(())
    }

    /// The backward pass's carried walk, for frames of several bands.
    pub(super) fn ensure_carry(&mut self, ctx: &GpuContext, pixels: u32) -> Result<(), GpuError> {
        if pixels > self.carry_capacity {
            let bytes = u64::from(pixels) * 16;
            self.carry = scratch_buffer(ctx, "backward carry", bytes, STORAGE, self.owner)?;
            self.carry_capacity = pixels;
        }
        Ok(())
    }
}

/// A kept bind group's name: its kernel, depth band and window of splats.
pub(super) type BindKey = (&'static str, usize, usize);

/// The bind group of `buffers`, in `kernel`'s declared order, made once and kept in
/// `scratch` (under `key`) while the same buffers come back.
pub(super) fn bind_group(
    ctx: &GpuContext,
    scratch: &FrameScratch,
    kernel: &ComputeKernel,
    key: BindKey,
    buffers: &[wgpu::BufferBinding<'_>],
) -> wgpu::BindGroup {
    scratch.cached_bind_group(key, buffers, || {
        let resources: Vec<wgpu::BindingResource<'_>> =
            buffers.iter().map(|buffer| wgpu::BindingResource::Buffer(buffer.clone())).collect();
        kernel.bind(&ctx.device, &resources)
    })
}

/// The frame the backward pass differentiates: the last forward pass's, which must have
/// rendered these splats, with a gradient row for each.
pub(super) fn backward_frame(
    scratch: &FrameScratch,
    splats: &GpuSplats,
    grads: &SplatGradients,
) -> Result<LastFrame, GpuError> {
    let invalid =
        |message: String| GpuError::Validation { label: "render backward".into(), message };
    let Some(frame) = scratch.last_frame else {
        return Err(invalid("backward called before forward".into()));
    };
    if frame.splats != splats.count || grads.count != splats.count {
        return Err(invalid(format!(
            "forward rendered {} splats; backward got {} splats and {} gradients",
            frame.splats, splats.count, grads.count
        )));
    }
    Ok(frame)
}
