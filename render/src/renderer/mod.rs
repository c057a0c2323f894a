//! The differentiable splat rasterizer: forward (project → depth sort → tile intersections →
//! tile sort → rasterize) and backward (rasterize backward → project backward), on our own
//! WGSL kernels. The math is render/MATH.md.
//!
//! One sync point per frame: after projection the frame's counts (visible splats, tile
//! intersections, depth range) are read back, so the depth sort covers only the visible splats
//! with only the key bits their depths need, and the intersection buffers are sized from the
//! real count. Nothing is summed with float atomics: the same scene gives the same bits. All
//! per-frame buffers live in a [`FrameScratch`] that only grows (by half again when it must),
//! so rendering the same scene a thousand times leaves the ledger where the first frames left
//! it; a run lets it all go before a refinement ([`FrameScratch::release`]).
//!
//! **Depth bands.** No buffer that grows with the intersections is bound whole: a frame's
//! visible splats, in depth order, are cut into bands of consecutive ranks whose intersections
//! (and the splats' projections, 48 bytes each) fit one storage binding, and each band has its
//! own intersections, tile lists, projected splats and partials. The forward pass rasterizes
//! the bands front to back, each pixel's colour, transmittance and saturation carried from one
//! to the next; the backward pass walks them back to front, each pixel's walk carried the same
//! way, and the projection's backward pass takes each splat's partials from its own band, in
//! their order. Every addition happens in the same order whatever the cut, so a frame cut
//! into many bands gives the same bits as one (tested with a device whose binding limit is a
//! few hundred KiB). One band is the common case and costs nothing more; more need the
//! bands' bounds, found on the GPU after the depth sort, read back (a second wait).
//!
//! **Windows of splats.** No buffer that grows with the splats is bound whole either: the
//! projection, `project_rank` and the projection's backward pass bind the rows of the
//! parameters, gradients, statistics and per-splat arrays a window of splats at a time
//! ([`crate::gpu_splats::splat_window`]), one dispatch a window, each with its own copy of the
//! `RenderUniform` (`window_first`, `num_splats`). One window is the common case.

use splat_formats::filter::Filter;

use crate::gpu_splats::{GpuSplats, SplatGradients, rows_binding, splat_window, splat_windows};
use crate::kernels::compute::{Compile, ComputeKernel, KernelDecl, shader_module};
use crate::kernels::scan::PrefixScan;
use crate::kernels::sort::RadixSort;
use crate::kernels::{
    BandUniform, DispatchLimits, IntersectUniform, Kernel, PROJECTED_BYTES, RasterUniform,
    Reduction, RenderUniform,
};
use crate::{Camera, Category, GpuContext, GpuError, Owner};

mod kernels;
mod scratch;
mod uniforms;

pub use scratch::FrameScratch;
use scratch::{BegunFrame, LastFrame, backward_frame, bind_group, scratch_buffer};
use uniforms::{
    UNIFORM_STRIDE, dispatch, filter_rules, render_uniform, uniform_slot, whole, whole_chunks,
};

/// How to render.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderSettings {
    /// Linear RGB behind the splats.
    pub background: [f32; 3],
    /// Mip-Splatting's 2D filter: opacity scaled by the determinant ratio of the dilation.
    pub antialiased: bool,
    /// SH degree the colour uses (at most the scene's); `None` = the scene's.
    pub sh_degree: Option<u32>,
    /// Which splats to draw (a crop box, an opacity floor): the others are culled at the
    /// projection, as if absent. The viewer's preview of a crop; exports apply the same
    /// [`Filter`] on the CPU (the opacity floor is compared as a logit here, so a splat within
    /// a float's rounding of it may go either way). Training never sets it.
    pub keep: Filter,
    /// What a backward pass adds to each splat's densification statistic.
    pub growth: Growth,
}

impl Default for RenderSettings {
    fn default() -> Self {
        Self {
            background: [0.0; 3],
            antialiased: false,
            sh_degree: None,
            keep: Filter::default(),
            growth: Growth::Signed,
        }
    }
}

/// The growth statistic a backward pass adds up for each splat it saw (the first float of its
/// densification statistics; `SplatGradients::densify`), from ∂L/∂mean2d in NDC (pixels × W/2,
/// H/2). Densification divides it by the renders that saw the splat. In checkpoints:
/// `"signed"` or `"absolute"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Growth {
    /// The norm of the gradient summed over the splat's pixels (3DGS's): where the pixels
    /// pull the splat different ways (texture finer than the splat, noise), their gradients
    /// cancel, and more so the more pixels the splat covers, so the same splat scores less on
    /// a finer image.
    #[default]
    Signed = 0,
    /// The sum over its pixels of each pixel's gradient norm (`AbsGS`, gsplat's `absgrad`,
    /// Brush): what pulls different ways adds up instead of cancelling.
    Absolute = 1,
}

/// What one forward pass found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameStats {
    /// Splats that touch a tile (depth-sorted and rasterized).
    pub visible: u32,
    /// Splat-tile pairs rasterized.
    pub intersections: u32,
}

/// The counts the first half of a forward pass found ([`FrameScratch::counts`]), which the
/// second half is encoded for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct FrameCounts {
    /// Splats that touch a tile.
    pub visible: u32,
    /// Splat-tile pairs.
    pub intersections: u32,
    /// Bits of the least and greatest visible depth (positive f32).
    depth_min: u32,
    depth_max: u32,
    /// Times the intersections passed 2^32 (u32 counts and offsets cannot hold the frame).
    wraps: u32,
}

/// [`FrameCounts`]' bytes: the frame totals' buffer and its read-back.
const COUNTS_BYTES: u64 = size_of::<FrameCounts>() as u64;

impl FrameCounts {
    /// Key bits the depth sort needs: those of (greatest − least depth bits).
    fn depth_key_bits(self) -> u32 {
        32 - self.depth_max.saturating_sub(self.depth_min).leading_zeros()
    }
}

const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC);
/// The kernels' parameter blocks are read-only storage, not uniform buffers: lavapipe (Mesa
/// 22.3) specialises a shader on the values of a small uniform buffer at every dispatch and
/// keeps each variant, which costs a shader compile and ~0.4 MB per dispatch (measured:
/// 135 MB over 300 frames). Read-only storage is as fast on real GPUs for a block read once.
const PARAMS: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST);

/// Compute pipelines of the rasterizer. Build once per device.
#[derive(Debug)]
pub struct Renderer {
    project_forward: ComputeKernel,
    project_rank: ComputeKernel,
    project_backward: ComputeKernel,
    compact: ComputeKernel,
    gather_counts: ComputeKernel,
    band_bounds: ComputeKernel,
    emit: ComputeKernel,
    tile_ranges: ComputeKernel,
    chunk_sums: ComputeKernel,
    rasterize_forward: ComputeKernel,
    rasterize_backward: ComputeKernel,
    reduction: Reduction,
    limits: DispatchLimits,
    /// Splats a kernel binds the rows of at once (`gpu_splats::splat_window`).
    window: u32,
    scan: PrefixScan,
    sort: RadixSort,
}

/// `decl`, an entry point of `kernel`'s composed WGSL.
fn build(ctx: &GpuContext, kernel: Kernel, decl: &KernelDecl) -> ComputeKernel {
    let module = shader_module(&ctx.device, kernel.label(), &kernel.source());
    let constants = kernel.constants(&ctx.adapter_info);
    ComputeKernel::new(
        &ctx.device,
        &module,
        decl,
        &Compile { constants: &constants, ..Compile::default() },
    )
}

impl Renderer {
    /// Builds the pipelines; subgroup operations are used where the device has them. Inside
    /// error scopes: a pipeline the device cannot build is an error here, in words, not a
    /// failure at the first frame.
    pub fn new(ctx: &GpuContext) -> Result<Self, GpuError> {
        // The subgroup path makes its tree for widths 4 to 128 (what WGSL allows).
        let info = &ctx.adapter_info;
        let widths = info.subgroup_min_size >= 4 && info.subgroup_max_size <= 128;
        let reduction = if ctx.device.features().contains(wgpu::Features::SUBGROUP) && widths {
            Reduction::Subgroup
        } else {
            Reduction::PORTABLE
        };
        Self::with_reduction(ctx, reduction)
    }

    /// Builds the pipelines with the given backward reduction (tests and the self-test use
    /// this to compare the reductions on one device).
    pub fn with_reduction(ctx: &GpuContext, reduction: Reduction) -> Result<Self, GpuError> {
        Self::with_limits(ctx, reduction, DispatchLimits::of(&ctx.device))
    }

    /// Builds the pipelines planning dispatches for `limits` (tests shrink them to exercise
    /// the 2D dispatch that large scenes and images need).
    pub fn with_limits(
        ctx: &GpuContext,
        reduction: Reduction,
        limits: DispatchLimits,
    ) -> Result<Self, GpuError> {
        if let Reduction::Portable { lanes } = reduction
            && ![4, 8, 16, 32, 64].contains(&lanes)
        {
            return Err(GpuError::Validation {
                label: "the rasterizer's pipelines".into(),
                message: format!("{lanes} portable lanes: 4, 8, 16, 32 or 64"),
            });
        }
        ctx.checked("the rasterizer's pipelines", || {
            Ok(Self {
                project_forward: build(ctx, Kernel::ProjectForward, &kernels::PROJECT_FORWARD),
                project_rank: build(ctx, Kernel::ProjectRank, &kernels::PROJECT_RANK),
                project_backward: build(ctx, Kernel::ProjectBackward, &kernels::PROJECT_BACKWARD),
                compact: build(ctx, Kernel::Intersect, &kernels::COMPACT),
                gather_counts: build(ctx, Kernel::Intersect, &kernels::GATHER_COUNTS),
                band_bounds: build(ctx, Kernel::Intersect, &kernels::BAND_BOUNDS),
                emit: build(ctx, Kernel::Intersect, &kernels::EMIT),
                tile_ranges: build(ctx, Kernel::Intersect, &kernels::TILE_RANGES),
                chunk_sums: build(ctx, Kernel::Intersect, &kernels::CHUNK_SUMS),
                rasterize_forward: build(
                    ctx,
                    Kernel::RasterizeForward,
                    &kernels::RASTERIZE_FORWARD,
                ),
                rasterize_backward: build(
                    ctx,
                    Kernel::RasterizeBackward(reduction),
                    &kernels::RASTERIZE_BACKWARD,
                ),
                reduction,
                limits,
                window: splat_window(&ctx.device.limits()),
                scan: PrefixScan::with_limits(ctx, limits),
                sort: RadixSort::with_limits(ctx, limits),
            })
        })
    }

    /// How the backward pass sums over a tile.
    #[must_use]
    pub fn reduction(&self) -> Reduction {
        self.reduction
    }

    /// Writes `render` into `buffer` once for each window of its splats, each with the
    /// window's first splat and count (the buffer holds as many: `FrameScratch::ensure`).
    fn write_window_uniforms(
        &self,
        ctx: &GpuContext,
        buffer: &wgpu::Buffer,
        render: &RenderUniform,
    ) {
        for (w, window) in splat_windows(render.num_splats, self.window).enumerate() {
            let uniform = RenderUniform {
                num_splats: window.end - window.start,
                window_first: window.start,
                ..*render
            };
            ctx.queue.write_buffer(buffer, w as u64 * UNIFORM_STRIDE, bytemuck::bytes_of(&uniform));
        }
    }

    /// Workgroups of 256 for `n` items, folded into 2D past the per-dimension limit. The
    /// kernels recover the flat index as `x + y · groups.x` and skip what is past the end.
    fn groups(&self, n: u32) -> (u32, u32) {
        if n == 0 { (0, 0) } else { self.limits.grid(n.div_ceil(256)) }
    }

    /// Renders `splats` from `camera` into `scratch.image` (`[H, W]` of rgb + alpha).
    /// Blocks once to read the frame's counts (twice when it needs several depth bands).
    pub fn forward(
        &self,
        ctx: &GpuContext,
        splats: &GpuSplats,
        camera: &Camera,
        settings: &RenderSettings,
        scratch: &mut FrameScratch,
    ) -> Result<FrameStats, GpuError> {
        self.forward_begin(ctx, splats, camera, settings, scratch)?;
        let counts = pollster::block_on(scratch.counts(ctx))?;
        pollster::block_on(self.prepare_bands(ctx, scratch, counts))?;
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("render pass 2"),
        });
        let stats = self.forward_finish(ctx, &mut encoder, splats, scratch, counts)?;
        ctx.queue.submit([encoder.finish()]);
        Ok(stats)
    }

    /// The first half of [`Renderer::forward`]: projects and counts the visible splats and
    /// tile intersections (submitted). Await [`FrameScratch::counts`] and
    /// [`Renderer::prepare_bands`], then record the rest with [`Renderer::forward_finish`].
    /// Calling it again before finishing starts over.
    pub fn forward_begin(
        &self,
        ctx: &GpuContext,
        splats: &GpuSplats,
        camera: &Camera,
        settings: &RenderSettings,
        scratch: &mut FrameScratch,
    ) -> Result<(), GpuError> {
        ctx.checked("render forward", || {
            self.encode_forward_begin(ctx, splats, camera, settings, scratch)
        })
    }

    /// Between the halves of a forward pass, for the `counts` the first found: when the
    /// frame's intersections need several depth bands, makes the depth order now (submitted)
    /// and reads the bands' bounds back (awaited: the frame's second wait). With one band it
    /// does nothing, and [`Renderer::forward_finish`] records everything.
    pub async fn prepare_bands(
        &self,
        ctx: &GpuContext,
        scratch: &mut FrameScratch,
        counts: FrameCounts,
    ) -> Result<(), GpuError> {
        let Some(begun) = scratch.begun.as_ref() else {
            // forward_finish says what is wrong.
            return Ok(());
        };
        let [tiles_x, tiles_y] = begun.intersect.tiles;
        let target = band_target(ctx, tiles_x * tiles_y)?;
        let bands = counts.intersections.div_ceil(target);
        if bands <= 1 || counts.visible > begun.splats {
            return Ok(());
        }
        ctx.checked("render forward (depth bands)", || {
            let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("depth bands"),
            });
            scratch.ensure_bounds(ctx, bands)?;
            let begun = scratch.begun.ok_or_else(|| GpuError::Validation {
                label: "render".into(),
                message: "prepare_bands without forward_begin".into(),
            })?;
            let bands = Some((target, bands));
            self.encode_depth_order(ctx, &mut encoder, scratch, &begun, counts, bands)?;
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })?;
        let bytes = u64::from(bands + 1) * 8;
        let bounds: Vec<[u32; 2]> =
            ctx.read_mapped(&scratch.bounds_readback, bytes, bytemuck::pod_collect_to_vec).await?;
        scratch.plan = bounds
            .windows(2)
            .map(|w| BandUniform {
                first: w[0][0],
                count: w[1][0] - w[0][0],
                base: w[0][1],
                intersections: w[1][1] - w[0][1],
            })
            .collect();
        scratch.depth_ordered = true;
        Ok(())
    }

    /// The second half of a forward pass begun with [`Renderer::forward_begin`], for the
    /// `counts` it found (after [`Renderer::prepare_bands`]): compacts and depth-sorts the
    /// visible splats, and band by band projects them in depth order, emits and sorts their
    /// intersections and rasterizes. Recorded into `encoder` (the caller submits it, with more
    /// work after it if it likes).
    pub fn forward_finish(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        splats: &GpuSplats,
        scratch: &mut FrameScratch,
        counts: FrameCounts,
    ) -> Result<FrameStats, GpuError> {
        ctx.checked("render forward", || {
            self.encode_forward_finish(ctx, encoder, splats, scratch, counts)
        })
    }

    fn encode_forward_begin(
        &self,
        ctx: &GpuContext,
        splats: &GpuSplats,
        camera: &Camera,
        settings: &RenderSettings,
        scratch: &mut FrameScratch,
    ) -> Result<(), GpuError> {
        let n = splats.count;
        let (tiles_x, tiles_y) = camera.tiles();
        if camera.width == 0 || camera.height == 0 {
            return Err(GpuError::Validation {
                label: "render".into(),
                message: "the image has zero size".into(),
            });
        }
        scratch.ensure(ctx, self, n, camera.width * camera.height)?;
        // The filter's rules, written when its selections or cells change (a viewer's crop
        // stays the same over many frames; training's is empty).
        let keep = &settings.keep;
        if scratch.rules_of.0 != keep.selections || scratch.rules_of.1 != keep.scene_cells {
            let (rules, cells_at) = filter_rules(keep);
            if !rules.is_empty() {
                let bytes = size_of_val(rules.as_slice()) as u64;
                if scratch.rules.size() < bytes {
                    scratch.rules =
                        scratch_buffer(ctx, "filter rules", bytes, PARAMS, scratch.owner)?;
                }
                ctx.queue.write_buffer(&scratch.rules, 0, bytemuck::cast_slice(&rules));
            }
            scratch.rules_of = (keep.selections.clone(), keep.scene_cells.clone(), cells_at);
        }
        let tiles = (tiles_x, tiles_y);
        let render = render_uniform(splats, camera, settings, tiles, scratch.rules_of.2);
        self.write_window_uniforms(ctx, &scratch.uniform, &render);
        let intersect = IntersectUniform {
            num_splats: n,
            num_visible: 0,
            num_intersections: 0,
            depth_min: 0,
            tiles: [tiles_x, tiles_y],
            image_size: [camera.width, camera.height],
            band_target: 0,
            num_bands: 0,
            _pad: [0; 2],
        };
        let reset = FrameCounts {
            visible: 0,
            intersections: 0,
            depth_min: u32::MAX,
            depth_max: 0,
            wraps: 0,
        };
        ctx.queue.write_buffer(&scratch.totals, 0, bytemuck::bytes_of(&reset));
        let raster = RasterUniform {
            image_size: [camera.width, camera.height],
            tiles: [tiles_x, tiles_y],
            background: [
                settings.background[0],
                settings.background[1],
                settings.background[2],
                0.0,
            ],
            band: 0,
            bands: 1,
            _pad: [0; 2],
        };
        self.encode_projection(ctx, splats, scratch)?;
        scratch.last_frame = None;
        scratch.plan.clear();
        scratch.depth_ordered = false;
        scratch.begun = Some(BegunFrame {
            splats: n,
            width: camera.width,
            height: camera.height,
            intersect,
            render,
            raster,
        });
        Ok(())
    }

    fn encode_forward_finish(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        splats: &GpuSplats,
        scratch: &mut FrameScratch,
        counts: FrameCounts,
    ) -> Result<FrameStats, GpuError> {
        let Some(begun) = scratch.begun.take() else {
            return Err(GpuError::Validation {
                label: "render".into(),
                message: "forward_finish without forward_begin".into(),
            });
        };
        let n = begun.splats;
        if splats.count != n {
            return Err(GpuError::Validation {
                label: "render".into(),
                message: format!("forward_begin had {n} splats, forward_finish {}", splats.count),
            });
        }
        let [tiles_x, tiles_y] = begun.intersect.tiles;
        let num_tiles = tiles_x * tiles_y;
        let FrameCounts { visible, intersections, .. } = counts;
        if visible > n {
            return Err(GpuError::Validation {
                label: "render".into(),
                message: format!("{visible} visible of {n} splats"),
            });
        }
        if !scratch.depth_ordered {
            // One band: the whole frame (an empty one when nothing is visible, so that the
            // image is cleared to the background and the gradients to zero).
            if visible > 0 {
                self.encode_depth_order(ctx, encoder, scratch, &begun, counts, None)?;
            }
            scratch.plan = vec![BandUniform { first: 0, count: visible, base: 0, intersections }];
        }
        let plan = scratch.plan.clone();
        let bands = plan.len() as u32;
        scratch.ensure_bands(ctx, self, &plan, n, num_tiles)?;
        for (k, band) in plan.iter().enumerate() {
            let b = &scratch.bands[k];
            let raster = RasterUniform { band: k as u32, bands, ..begun.raster };
            let render = RenderUniform {
                band_first: band.first,
                band_end: band.first + band.count,
                band_base: band.base,
                ..begun.render
            };
            ctx.queue.write_buffer(&b.band_uniform, 0, bytemuck::bytes_of(band));
            ctx.queue.write_buffer(&b.raster_uniform, 0, bytemuck::bytes_of(&raster));
            self.write_window_uniforms(ctx, &b.render_uniform, &render);
            encoder.clear_buffer(&b.ranges, 0, None);
            self.encode_band(ctx, encoder, splats, scratch, k, band, num_tiles)?;
        }
        scratch.last_frame =
            Some(LastFrame { splats: n, width: begun.width, height: begun.height });
        Ok(FrameStats { visible, intersections })
    }

    /// One depth band's forward pass: its splats projected in depth order, their
    /// intersections emitted and sorted by tile, the tiles' ranges, the band rasterized over
    /// what the bands in front left.
    #[expect(clippy::too_many_arguments, reason = "one band of one frame: each is needed")]
    fn encode_band(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        splats: &GpuSplats,
        scratch: &FrameScratch,
        k: usize,
        band: &BandUniform,
        num_tiles: u32,
    ) -> Result<(), GpuError> {
        let b = &scratch.bands[k];
        if band.count > 0 {
            for (w, window) in splat_windows(splats.count, self.window).enumerate() {
                let [p0, p1, p2, p3, p4, p5, p6, p7] = splats.window(&window);
                let buffers = [
                    uniform_slot(&b.render_uniform, w),
                    p0,
                    p1,
                    p2,
                    p3,
                    p4,
                    p5,
                    p6,
                    p7,
                    b.band_uniform.as_entire_buffer_binding(),
                    scratch.splat_ids.as_entire_buffer_binding(),
                    b.projected.as_entire_buffer_binding(),
                ];
                let key = ("project_rank", k, w);
                let bind = bind_group(ctx, scratch, &self.project_rank, key, &buffers);
                let groups = self.groups(band.count);
                dispatch(ctx, encoder, "emit", &self.project_rank, &bind, groups);
            }
            let bind = self.intersect_bind_group(ctx, IntersectStage::Emit, scratch, k);
            dispatch(ctx, encoder, "emit", &self.emit, &bind, self.groups(band.count));
        }
        if band.intersections > 0 {
            // Tile ids 0..tiles and the sentinel `tiles` (intersect.wgsl, emit).
            let tile_bits = 32 - num_tiles.leading_zeros();
            ctx.profile_stage("tile sort");
            self.sort.encode(
                ctx,
                encoder,
                &b.tile_ids,
                &b.isect_ids,
                band.intersections,
                tile_bits,
                &b.sort,
            )?;
            let bind = self.intersect_bind_group(ctx, IntersectStage::TileRanges, scratch, k);
            dispatch(
                ctx,
                encoder,
                "tile ranges",
                &self.tile_ranges,
                &bind,
                self.groups(band.intersections),
            );
        }
        let bind = bind_group(
            ctx,
            scratch,
            &self.rasterize_forward,
            ("rasterize_forward", k, 0),
            &whole([
                &b.raster_uniform,
                &b.projected,
                &b.isect_ids,
                &b.ranges,
                &scratch.image,
                &scratch.final_t,
                &scratch.last_entry,
                &b.splat_of,
                &scratch.last_band,
            ]),
        );
        dispatch(
            ctx,
            encoder,
            "rasterize forward",
            &self.rasterize_forward,
            &bind,
            self.limits.grid(num_tiles),
        );
        Ok(())
    }

    /// The visible splats in depth order and each one's place among the intersections:
    /// compact, depth sort (only the key bits `counts` needs), gather the tile counts, scan
    /// them; with `bands` (the intersections a band starts at, and how many bands), the
    /// bands' bounds too, copied for reading back.
    fn encode_depth_order(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        scratch: &FrameScratch,
        begun: &BegunFrame,
        counts: FrameCounts,
        bands: Option<(u32, u32)>,
    ) -> Result<(), GpuError> {
        let (band_target, num_bands) = bands.unwrap_or((0, 1));
        let intersect = IntersectUniform {
            num_visible: counts.visible,
            num_intersections: counts.intersections,
            depth_min: counts.depth_min,
            band_target,
            num_bands,
            ..begun.intersect
        };
        ctx.queue.write_buffer(&scratch.intersect_uniform, 0, bytemuck::bytes_of(&intersect));
        let visible = counts.visible;
        let bind = self.intersect_bind_group(ctx, IntersectStage::Compact, scratch, 0);
        dispatch(ctx, encoder, "depth sort", &self.compact, &bind, self.groups(begun.splats));
        let key_bits = counts.depth_key_bits();
        if visible > 1 && key_bits > 0 {
            ctx.profile_stage("depth sort");
            self.sort.encode(
                ctx,
                encoder,
                &scratch.depth_keys,
                &scratch.splat_ids,
                visible,
                key_bits,
                &scratch.sort_splats,
            )?;
        }
        let bind = self.intersect_bind_group(ctx, IntersectStage::GatherCounts, scratch, 0);
        dispatch(ctx, encoder, "emit", &self.gather_counts, &bind, self.groups(visible));
        ctx.profile_stage("emit");
        self.scan.encode_exclusive(
            ctx,
            encoder,
            &scratch.counts,
            &scratch.offsets,
            &scratch.total,
            visible,
            &scratch.scan_visible,
        )?;
        if bands.is_some() {
            let bind = self.intersect_bind_group(ctx, IntersectStage::BandBounds, scratch, 0);
            dispatch(ctx, encoder, "emit", &self.band_bounds, &bind, self.groups(num_bands + 1));
            let bytes = u64::from(num_bands + 1) * 8;
            encoder.copy_buffer_to_buffer(&scratch.bounds, 0, &scratch.bounds_readback, 0, bytes);
        }
        Ok(())
    }

    /// Pass 1: project, flag and count the visible splats and their intersections
    /// (submitted, with the copy of the counts that [`FrameScratch::counts`] maps).
    fn encode_projection(
        &self,
        ctx: &GpuContext,
        splats: &GpuSplats,
        scratch: &FrameScratch,
    ) -> Result<(), GpuError> {
        let n = splats.count;
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("render pass 1"),
        });
        for (w, window) in splat_windows(n, self.window).enumerate() {
            let [p0, p1, p2, p3, p4, p5, p6, p7] = splats.window(&window);
            let buffers = [
                uniform_slot(&scratch.uniform, w),
                p0,
                p1,
                p2,
                p3,
                p4,
                p5,
                p6,
                p7,
                rows_binding(&scratch.depths, 4, &window),
                rows_binding(&scratch.tiles_touched, 4, &window),
                rows_binding(&scratch.counts, 4, &window),
                scratch.totals.as_entire_buffer_binding(),
                scratch.rules.as_entire_buffer_binding(),
            ];
            let key = ("project_forward", 0, w);
            let bind = bind_group(ctx, scratch, &self.project_forward, key, &buffers);
            let groups = self.groups(window.end - window.start);
            dispatch(ctx, &mut encoder, "projection", &self.project_forward, &bind, groups);
        }
        // Each visible splat's place among them (for the compaction) and their number.
        ctx.profile_stage("scan");
        self.scan.encode_exclusive(
            ctx,
            &mut encoder,
            &scratch.counts,
            &scratch.offsets,
            &scratch.total,
            n,
            &scratch.scan_splats,
        )?;
        encoder.copy_buffer_to_buffer(&scratch.total, 0, &scratch.counts_readback, 0, 4);
        encoder.copy_buffer_to_buffer(&scratch.totals, 4, &scratch.counts_readback, 4, 16);
        ctx.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// One forward and one backward pass of `splats` from `camera`, for the cotangent
    /// `v_image` (`[H, W]` of dL/d(rgb, alpha), 4 floats a pixel), on buffers of `owner` made
    /// here and let go on return: the image, every gradient group
    /// ([`SplatGradients::read_all`]) and the frame's depth bands. Blocks; for tests and the
    /// self-test, which compare these with a reference.
    pub fn forward_backward(
        &self,
        ctx: &GpuContext,
        splats: &splat_formats::Splats,
        (camera, settings): (&Camera, &RenderSettings),
        v_image: &[f32],
        owner: Owner,
    ) -> Result<ForwardBackward, GpuError> {
        let params = GpuSplats::upload(ctx, splats, owner)?;
        let grads = SplatGradients::new(ctx, &params, owner)?;
        let mut scratch = FrameScratch::new(ctx, self, owner)?;
        self.forward(ctx, &params, camera, settings, &mut scratch)?;
        let image = scratch.read_image(ctx)?;
        let v_image = ctx.create_buffer_init(
            "cotangent",
            bytemuck::cast_slice(v_image),
            wgpu::BufferUsages::STORAGE,
            Category::Other,
            owner,
        )?;
        self.backward(ctx, &params, &mut scratch, &v_image, &grads)?;
        let gradients = grads.read_all(ctx, splats.sh_degree)?;
        Ok(ForwardBackward { image, gradients, bands: scratch.bands() })
    }

    /// Backward pass of the last [`Renderer::forward`] with these splats and camera, for the
    /// per-pixel cotangent `v_image` (`[H, W]` of dL/d(rgb, alpha), vec4 f32). Writes the
    /// parameter gradients into `grads` and adds to its densification statistics.
    pub fn backward(
        &self,
        ctx: &GpuContext,
        splats: &GpuSplats,
        scratch: &mut FrameScratch,
        v_image: &wgpu::Buffer,
        grads: &SplatGradients,
    ) -> Result<(), GpuError> {
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("render backward"),
        });
        self.record_backward(ctx, &mut encoder, splats, scratch, v_image, grads)?;
        ctx.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// [`Renderer::backward`] recorded into `encoder` (the caller submits it).
    pub fn record_backward(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        splats: &GpuSplats,
        scratch: &mut FrameScratch,
        v_image: &wgpu::Buffer,
        grads: &SplatGradients,
    ) -> Result<(), GpuError> {
        ctx.checked("render backward", || {
            self.encode_backward(ctx, encoder, splats, scratch, v_image, grads)
        })
    }

    fn encode_backward(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        splats: &GpuSplats,
        scratch: &mut FrameScratch,
        v_image: &wgpu::Buffer,
        grads: &SplatGradients,
    ) -> Result<(), GpuError> {
        let frame = backward_frame(scratch, splats, grads)?;
        let n = splats.count;
        let (tiles_x, tiles_y) =
            (frame.width.div_ceil(crate::TILE_SIZE), frame.height.div_ceil(crate::TILE_SIZE));
        let plan = scratch.plan.clone();
        scratch.ensure_partials(ctx, plan.len())?;
        if plan.len() > 1 {
            scratch.ensure_carry(ctx, frame.width * frame.height)?;
        }
        let scratch = &*scratch;
        // The bands back to front, each pixel's walk carried from one to the next.
        for k in (0..plan.len()).rev() {
            let b = &scratch.bands[k];
            let bind = bind_group(
                ctx,
                scratch,
                &self.rasterize_backward,
                ("rasterize_backward", k, 0),
                &whole([
                    &b.raster_uniform,
                    &b.projected,
                    &b.isect_ids,
                    &b.ranges,
                    &scratch.final_t,
                    &scratch.last_entry,
                    v_image,
                    &b.splat_of,
                    &b.partials,
                    &scratch.last_band,
                    &scratch.carry,
                ]),
            );
            // One workgroup more than tiles: the sentinel tile's (rasterize_backward.wgsl).
            dispatch(
                ctx,
                encoder,
                "rasterize backward",
                &self.rasterize_backward,
                &bind,
                self.limits.grid(tiles_x * tiles_y + 1),
            );
        }
        // The whole chunks of a splat's partials, added once (intersect.wgsl, chunk_sums).
        for (k, band) in plan.iter().enumerate() {
            let chunks = whole_chunks(band);
            let bind = self.intersect_bind_group(ctx, IntersectStage::ChunkSums, scratch, k);
            let groups = self.groups(chunks);
            dispatch(ctx, encoder, "projection backward", &self.chunk_sums, &bind, groups);
        }
        // Each splat's partials from its own band, a window of splats at a time.
        for (w, window) in splat_windows(n, self.window).enumerate() {
            let [p0, p1, p2, p3, p4, p5, p6, p7] = splats.window(&window);
            let [g0, g1, g2, g3, g4, g5, g6, g7, stats] = grads.window(splats.sh_degree, &window);
            for (k, b) in scratch.bands.iter().enumerate().take(plan.len()) {
                let buffers = [
                    uniform_slot(&b.render_uniform, w),
                    p0.clone(),
                    p1.clone(),
                    p2.clone(),
                    p3.clone(),
                    p4.clone(),
                    p5.clone(),
                    p6.clone(),
                    p7.clone(),
                    b.partials.as_entire_buffer_binding(),
                    g0.clone(),
                    g1.clone(),
                    g2.clone(),
                    g3.clone(),
                    g4.clone(),
                    g5.clone(),
                    g6.clone(),
                    g7.clone(),
                    stats.clone(),
                    rows_binding(&scratch.tiles_touched, 4, &window),
                    scratch.counts.as_entire_buffer_binding(),
                    scratch.offsets.as_entire_buffer_binding(),
                ];
                let key = ("project_backward", k, w);
                let bind = bind_group(ctx, scratch, &self.project_backward, key, &buffers);
                let groups = self.groups(window.end - window.start);
                dispatch(
                    ctx,
                    encoder,
                    "projection backward",
                    &self.project_backward,
                    &bind,
                    groups,
                );
            }
        }
        Ok(())
    }

    fn intersect_bind_group(
        &self,
        ctx: &GpuContext,
        stage: IntersectStage,
        scratch: &FrameScratch,
        band: usize,
    ) -> wgpu::BindGroup {
        // Each entry point uses a subset of intersect.wgsl's bindings, those its declaration
        // names (renderer/kernels.rs): bind exactly them. The band's own buffers where a stage works
        // on one band (band 0's elsewhere: they are not used there).
        let b = &scratch.bands[band.min(scratch.bands.len().saturating_sub(1))];
        let all: [(u32, &wgpu::Buffer); 15] = [
            (0, &scratch.intersect_uniform),
            (1, &scratch.depths),
            (2, &scratch.tiles_touched),
            (3, &scratch.splat_ids),
            (4, &scratch.counts),
            (5, &scratch.offsets),
            (6, &b.tile_ids),
            (7, &b.isect_ids),
            (8, &b.ranges),
            (9, &scratch.depth_keys),
            (10, &b.splat_of),
            (11, &b.projected),
            (12, &b.band_uniform),
            (13, &scratch.bounds),
            (14, &b.partials),
        ];
        let kernel = match stage {
            IntersectStage::Compact => &self.compact,
            IntersectStage::GatherCounts => &self.gather_counts,
            IntersectStage::BandBounds => &self.band_bounds,
            IntersectStage::Emit => &self.emit,
            IntersectStage::TileRanges => &self.tile_ranges,
            IntersectStage::ChunkSums => &self.chunk_sums,
        };
        let (label, used) = (kernel.label(), kernel.bindings());
        // The buffers bound, in binding order (no allocation): the cache's key.
        let mut key: [_; 15] =
            std::array::from_fn(|_| scratch.intersect_uniform.as_entire_buffer_binding());
        for (slot, (_, buffer)) in all.iter().filter(|(b, _)| used.contains(b)).enumerate() {
            key[slot] = buffer.as_entire_buffer_binding();
        }
        scratch.cached_bind_group((label, band, 0), &key[..used.len()], || {
            let resources: Vec<wgpu::BindingResource<'_>> = key[..used.len()]
                .iter()
                .map(|buffer| wgpu::BindingResource::Buffer(buffer.clone()))
                .collect();
            kernel.bind(&ctx.device, &resources)
        })
    }
}

/// What [`Renderer::forward_backward`] gives back.
#[derive(Debug)]
pub struct ForwardBackward {
    /// `[H, W]` of rgb + alpha.
    pub image: Vec<[f32; 4]>,
    /// Means, log-scales, quaternions, opacities, SH bands 0..=degree, densification
    /// statistics.
    pub gradients: Vec<Vec<f32>>,
    /// Depth bands the frame was cut into.
    pub bands: usize,
}

/// The entry points of intersect.wgsl.
#[derive(Clone, Copy, Debug)]
enum IntersectStage {
    Compact,
    GatherCounts,
    BandBounds,
    Emit,
    TileRanges,
    ChunkSums,
}

/// Intersections a depth band starts at (multiples of): every buffer of a band must fit one
/// binding of the device (`GpuContext::whole_binding_limit`) after the scratch grows it by
/// half, and its projected splats (48 bytes, at most one an intersection) are the largest; a
/// band holds up to one splat's tiles past its start.
fn band_target(ctx: &GpuContext, tiles: u32) -> Result<u32, GpuError> {
    let (limit, which) = ctx.whole_binding_limit();
    let per_band = limit / (PROJECTED_BYTES * 3 / 2);
    let target = per_band.saturating_sub(u64::from(tiles) + 1);
    if target == 0 {
        return Err(GpuError::TooLarge {
            label: "one depth band (a splat on every tile)".into(),
            bytes: (u64::from(tiles) + 1) * PROJECTED_BYTES * 3 / 2,
            limit,
            which,
        });
    }
    Ok(u32::try_from(target).unwrap_or(u32::MAX / 2).min(u32::MAX / 2))
}
