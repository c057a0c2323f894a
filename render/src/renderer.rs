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

use splat_formats::filter::{Filter, SceneCells, Selection, Shape};

use crate::gpu_splats::{
    GpuSplats, ShPrecision, SplatGradients, read_f32, rows_binding, splat_window, splat_windows,
};
use crate::kernels::scan::{PrefixScan, ScanScratch};
use crate::kernels::sort::{RadixSort, SortScratch};
use crate::kernels::{
    BandUniform, DispatchLimits, IntersectUniform, Kernel, PROJECTED_BYTES, PROJECTED_GRAD_FLOATS,
    RasterUniform, Reduction, RenderUniform,
};
use std::sync::{Mutex, PoisonError};

use crate::profiler::PassTimer;
use crate::{Camera, Category, GpuBuffer, GpuContext, GpuError, Owner};

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
}

impl Default for RenderSettings {
    fn default() -> Self {
        Self { background: [0.0; 3], antialiased: false, sh_degree: None, keep: Filter::default() }
    }
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
    project_forward: wgpu::ComputePipeline,
    project_rank: wgpu::ComputePipeline,
    project_backward: wgpu::ComputePipeline,
    compact: wgpu::ComputePipeline,
    gather_counts: wgpu::ComputePipeline,
    band_bounds: wgpu::ComputePipeline,
    emit: wgpu::ComputePipeline,
    tile_ranges: wgpu::ComputePipeline,
    chunk_sums: wgpu::ComputePipeline,
    rasterize_forward: wgpu::ComputePipeline,
    rasterize_backward: wgpu::ComputePipeline,
    reduction: Reduction,
    limits: DispatchLimits,
    /// Splats a kernel binds the rows of at once (`gpu_splats::splat_window`).
    window: u32,
    scan: PrefixScan,
    sort: RadixSort,
}

fn pipeline(ctx: &GpuContext, kernel: Kernel, entry: &str) -> wgpu::ComputePipeline {
    let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(kernel.label()),
        source: wgpu::ShaderSource::Wgsl(kernel.source().into()),
    });
    ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(kernel.label()),
        layout: None,
        module: &module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants: &kernel.constants(),
            ..wgpu::PipelineCompilationOptions::default()
        },
        cache: None,
    })
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
                project_forward: pipeline(ctx, Kernel::ProjectForward, "main"),
                project_rank: pipeline(ctx, Kernel::ProjectRank, "main"),
                project_backward: pipeline(ctx, Kernel::ProjectBackward, "main"),
                compact: pipeline(ctx, Kernel::Intersect, "compact"),
                gather_counts: pipeline(ctx, Kernel::Intersect, "gather_counts"),
                band_bounds: pipeline(ctx, Kernel::Intersect, "band_bounds"),
                emit: pipeline(ctx, Kernel::Intersect, "emit"),
                tile_ranges: pipeline(ctx, Kernel::Intersect, "tile_ranges"),
                chunk_sums: pipeline(ctx, Kernel::Intersect, "chunk_sums"),
                rasterize_forward: pipeline(ctx, Kernel::RasterizeForward, "main"),
                rasterize_backward: pipeline(ctx, Kernel::RasterizeBackward(reduction), "main"),
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
        // Each entry point uses a subset of intersect.wgsl's bindings; the automatic layout
        // holds only those, so bind exactly them. The band's own buffers where a stage works
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
        let (pipeline, label, used): (&wgpu::ComputePipeline, _, &[u32]) = match stage {
            IntersectStage::Compact => (&self.compact, "compact", &[0, 1, 3, 4, 5, 9]),
            IntersectStage::GatherCounts => (&self.gather_counts, "gather_counts", &[0, 2, 3, 4]),
            IntersectStage::BandBounds => (&self.band_bounds, "band_bounds", &[0, 5, 13]),
            IntersectStage::Emit => (&self.emit, "emit", &[0, 4, 5, 6, 7, 10, 11, 12]),
            IntersectStage::TileRanges => (&self.tile_ranges, "tile_ranges", &[6, 8, 12]),
            IntersectStage::ChunkSums => (&self.chunk_sums, "chunk_sums", &[10, 12, 14]),
        };
        // The buffers bound, in binding order (no allocation): the cache's key.
        let mut key: [_; 15] =
            std::array::from_fn(|_| scratch.intersect_uniform.as_entire_buffer_binding());
        for (slot, (_, buffer)) in all.iter().filter(|(b, _)| used.contains(b)).enumerate() {
            key[slot] = buffer.as_entire_buffer_binding();
        }
        scratch.cached_bind_group((label, band, 0), &key[..used.len()], || {
            let entries: Vec<wgpu::BindGroupEntry<'_>> = all
                .iter()
                .filter(|(binding, _)| used.contains(binding))
                .map(|(binding, buffer)| wgpu::BindGroupEntry {
                    binding: *binding,
                    resource: buffer.as_entire_binding(),
                })
                .collect();
            ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("intersect"),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            })
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

fn render_uniform(
    splats: &GpuSplats,
    camera: &Camera,
    settings: &RenderSettings,
    tiles: (u32, u32),
    cells_at: f32,
) -> RenderUniform {
    let position = camera.position();
    RenderUniform {
        camera_from_world: camera.camera_from_world().to_cols_array_2d(),
        camera_position: [position.x, position.y, position.z, 1.0],
        background: [settings.background[0], settings.background[1], settings.background[2], 0.0],
        focal: [camera.fx, camera.fy],
        principal: [camera.cx, camera.cy],
        image_size: [camera.width, camera.height],
        tiles: [tiles.0, tiles.1],
        num_splats: splats.count,
        sh_degree: settings.sh_degree.unwrap_or(splats.sh_degree).min(splats.sh_degree),
        antialiased: u32::from(settings.antialiased),
        sh_degree_stored: splats.sh_degree,
        sh_half: u32::from(splats.sh_precision == ShPrecision::F16),
        band_first: 0,
        band_end: 0,
        band_base: 0,
        window_first: 0,
        _pad: [0; 3],
        keep_min: keep_min(&settings.keep),
        keep_max: keep_max(&settings.keep),
        keep_sphere: settings.keep.crop_sphere.map_or([0.0, 0.0, 0.0, -1.0], |b| {
            let [x, y, z] = b.center;
            [x, y, z, b.radius * b.radius]
        }),
        keep_size: [
            settings.keep.max_size.map_or(f32::MAX, |m| m.max(f32::MIN_POSITIVE).ln()),
            f32::from(u8::from(settings.keep.crop_box.is_some_and(|b| b.is_turned()))),
            settings.keep.selections.len() as f32,
            cells_at,
        ],
        keep_turn: settings
            .keep
            .crop_box
            .map_or([0.0, 0.0, 0.0, 1.0], |b| b.quaternion().map(|v| v as f32)),
    }
}

/// A filter's selections and scene cells as `project_forward.wgsl` reads them (`rules`, words:
/// floats as their bits): four vec4s a selection — the camera's rotation, its position and
/// keep flag, the shape's bounds on the image plane at depth 1, and a stroke's first point
/// (the vec4 holding it), point count and radius — then the strokes' points, two to a vec4;
/// then the scene cells: the grid's origin and scale, its size, its bits four words to a vec4.
/// Empty when the filter has neither. With it, [`RenderUniform::keep_size`]`[3]`: where the
/// scene cells start, plus one (0: no cells).
fn filter_rules(keep: &Filter) -> (Vec<[u32; 4]>, f32) {
    let word = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let floats = |v: [f32; 4]| v.map(f32::to_bits);
    let mut points_at = 4 * keep.selections.len();
    let mut rules = Vec::with_capacity(points_at);
    let mut points: Vec<[u32; 4]> = Vec::new();
    for s in &keep.selections {
        let [x, y, z] = s.position;
        let stroke = match &s.shape {
            Shape::Rect(_) => [0; 4],
            Shape::Stroke { radius, points: path } => {
                let first = points_at;
                points.extend(path.chunks(2).map(|pair| {
                    let [a, b] = [pair[0], *pair.last().unwrap_or(&pair[0])];
                    floats([a[0], a[1], b[0], b[1]])
                }));
                points_at += path.len().div_ceil(2);
                [word(first), word(path.len()), radius.to_bits(), 0]
            }
        };
        rules.extend([
            floats(s.camera_from_world),
            floats([x, y, z, f32::from(u8::from(s.keep))]),
            floats(s.shape.bounds()),
            stroke,
        ]);
    }
    rules.extend(points);
    let cells_at = keep.scene_cells.as_ref().map_or(0.0, |_| (rules.len() + 1) as f32);
    if let Some(cells) = &keep.scene_cells {
        let [x, y, z] = cells.origin;
        let [dx, dy, dz] = cells.dims;
        rules.extend([floats([x, y, z, cells.scale]), [dx, dy, dz, 0]]);
        rules.extend(
            cells.bits.chunks(4).map(|w| std::array::from_fn(|k| w.get(k).copied().unwrap_or(0))),
        );
    }
    (rules, cells_at)
}

/// [`RenderUniform::keep_min`] of a filter: the box's least corner and the opacity floor as a
/// logit (finite: fast math may assume no infinities).
fn keep_min(keep: &Filter) -> [f32; 4] {
    let [x, y, z] = keep.crop_box.map_or([-f32::MAX; 3], |b| b.min);
    let floor = keep.min_opacity.map_or(-f64::from(f32::MAX), |m| {
        let m = f64::from(m);
        (m / (1.0 - m)).ln()
    });
    [x, y, z, floor.clamp(-f64::from(f32::MAX), f64::from(f32::MAX)) as f32]
}

/// [`RenderUniform::keep_max`]: the box's greatest corner, and 1 when the filter keeps less
/// than everything.
fn keep_max(keep: &Filter) -> [f32; 4] {
    let [x, y, z] = keep.crop_box.map_or([f32::MAX; 3], |b| b.max);
    [x, y, z, if keep.is_empty() { 0.0 } else { 1.0 }]
}

/// Bytes between the copies of a frame's `RenderUniform` in one buffer, one a window of
/// splats: a storage binding's offset is a multiple of `min_storage_buffer_offset_alignment`,
/// which is at most 256.
const UNIFORM_STRIDE: u64 = (size_of::<RenderUniform>() as u64).next_multiple_of(256);

/// Bytes of a buffer of `windows` copies of the `RenderUniform`.
fn window_uniform_bytes(windows: u32) -> u64 {
    u64::from(windows.max(1) - 1) * UNIFORM_STRIDE + size_of::<RenderUniform>() as u64
}

/// Copy `w` of the `RenderUniform` in `buffer`, as a binding.
fn uniform_slot(buffer: &wgpu::Buffer, w: usize) -> wgpu::BufferBinding<'_> {
    wgpu::BufferBinding {
        buffer,
        offset: w as u64 * UNIFORM_STRIDE,
        size: wgpu::BufferSize::new(size_of::<RenderUniform>() as u64),
    }
}

/// `buffers` bound whole.
fn whole<const N: usize>(buffers: [&wgpu::Buffer; N]) -> [wgpu::BufferBinding<'_>; N] {
    buffers.map(wgpu::Buffer::as_entire_buffer_binding)
}

/// A kept bind group's name: its kernel, depth band and window of splats.
type BindKey = (&'static str, usize, usize);

/// The bind group of `buffers` at bindings 0, 1, … for `pipeline`, made once and kept in
/// `scratch` (under `key`) while the same buffers come back.
fn bind_group(
    ctx: &GpuContext,
    scratch: &FrameScratch,
    pipeline: &wgpu::ComputePipeline,
    key: BindKey,
    buffers: &[wgpu::BufferBinding<'_>],
) -> wgpu::BindGroup {
    scratch.cached_bind_group(key, buffers, || {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .enumerate()
            .map(|(i, buffer)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(buffer.clone()),
            })
            .collect();
        ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(key.0),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    })
}

/// Chunks of [`CHUNK`] intersections, numbered in the frame, wholly inside `band`.
fn whole_chunks(band: &BandUniform) -> u32 {
    let end = u64::from(band.base) + u64::from(band.intersections);
    let first = u64::from(band.base).div_ceil(CHUNK);
    (end / CHUNK).saturating_sub(first) as u32
}

/// Intersections `chunk_sums` adds into one (`CHUNK` in common.wgsl).
const CHUNK: u64 = 32;

/// One compute pass of one dispatch, filed under `stage` when profiling.
fn dispatch(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    stage: &'static str,
    pipeline: &wgpu::ComputePipeline,
    bind: &wgpu::BindGroup,
    (x, y): (u32, u32),
) {
    if x == 0 {
        return;
    }
    ctx.profile_stage(stage);
    let timer = ctx.pass_timer();
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(stage),
        timestamp_writes: timer.as_ref().map(PassTimer::writes),
    });
    pass.set_pipeline(pipeline);
    pass.set_bind_group(0, bind, &[]);
    pass.dispatch_workgroups(x, y, 1);
}

/// The frame the backward pass differentiates: the last forward pass's, which must have
/// rendered these splats, with a gradient row for each.
fn backward_frame(
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

#[derive(Clone, Copy, Debug)]
struct LastFrame {
    splats: u32,
    width: u32,
    height: u32,
}

/// A forward pass between its two halves, with the parameters its bands start from.
#[derive(Clone, Copy, Debug)]
struct BegunFrame {
    splats: u32,
    width: u32,
    height: u32,
    intersect: IntersectUniform,
    render: RenderUniform,
    raster: RasterUniform,
}

/// Per-frame buffers of the rasterizer, owned by whoever renders (a run, the viewer). They
/// only grow, by half again past what is needed, so a steady scene allocates nothing per
/// frame.
#[derive(Debug)]
pub struct FrameScratch {
    owner: Owner,
    splat_capacity: u32,
    /// Copies of the `RenderUniform` the uniforms hold: one a window of splats.
    window_capacity: u32,
    pixel_capacity: u32,
    carry_capacity: u32,
    bounds_capacity: u32,
    last_frame: Option<LastFrame>,
    begun: Option<BegunFrame>,
    /// The frame's depth bands (those of the last forward pass: the backward's).
    plan: Vec<BandUniform>,
    /// The begun frame's depth order is made and its bands read back
    /// ([`Renderer::prepare_bands`]).
    depth_ordered: bool,
    uniform: GpuBuffer,
    /// The frame's selections and scene cells as the projection reads them (`filter_rules`),
    /// grown to the largest filter drawn.
    rules: GpuBuffer,
    /// The selections and scene cells whose rules `rules` holds, and where the cells start
    /// there (a crop box dragged over them does not write them again).
    rules_of: (Vec<Selection>, Option<SceneCells>, f32),
    intersect_uniform: GpuBuffer,
    total: GpuBuffer,
    /// [`FrameCounts`] as the projection adds them up (visible left 0: the scan's total).
    totals: GpuBuffer,
    counts_readback: GpuBuffer,
    // Per splat.
    /// Each visible splat's camera-space depth, as bits (the depth sort's key).
    depths: GpuBuffer,
    /// Tiles each splat touches (the projection), then each visible one's depth rank + 1
    /// (`gather_counts`; 0 = not visible), by which the backward pass finds its intersections.
    tiles_touched: GpuBuffer,
    depth_keys: GpuBuffer,
    splat_ids: GpuBuffer,
    counts: GpuBuffer,
    offsets: GpuBuffer,
    scan_splats: ScanScratch,
    scan_visible: ScanScratch,
    sort_splats: SortScratch,
    // Per depth band.
    /// The bands' first ranks and intersections (`band_bounds`), and their read-back.
    bounds: GpuBuffer,
    bounds_readback: GpuBuffer,
    bands: Vec<BandScratch>,
    // Per pixel.
    /// `[H, W]` of rgb + alpha, f32.
    pub image: GpuBuffer,
    final_t: GpuBuffer,
    last_entry: GpuBuffer,
    /// The band of each pixel's last composited splat, and whether it saturated.
    last_band: GpuBuffer,
    /// The backward pass's walk of each pixel between bands (only with several bands).
    carry: GpuBuffer,
    /// Bind groups of earlier frames; see [`FrameScratch::cached_bind_group`].
    bindings: Mutex<Vec<CachedBindGroup>>,
}

/// One depth band's buffers: its splats projected in depth order, its intersections, tile
/// lists and partials, and its parameter blocks. Kept from frame to frame, grown like the
/// rest.
#[derive(Debug)]
struct BandScratch {
    splat_capacity: u32,
    /// Copies of the `RenderUniform` `render_uniform` holds: one a window of splats.
    window_capacity: u32,
    intersection_capacity: u32,
    partial_capacity: u32,
    tile_capacity: u32,
    band_uniform: GpuBuffer,
    raster_uniform: GpuBuffer,
    /// The frame's `RenderUniform` with this band's ranks (the projection's passes).
    render_uniform: GpuBuffer,
    projected: GpuBuffer,
    tile_ids: GpuBuffer,
    isect_ids: GpuBuffer,
    /// Each intersection's splat, as its place in the band's `projected`.
    splat_of: GpuBuffer,
    /// dL/d(projected) of each intersection, summed over its tile: `[M, 9]`, made by the first
    /// backward pass.
    partials: GpuBuffer,
    ranges: GpuBuffer,
    sort: SortScratch,
}

/// A bind group and the buffers it binds (handles: they keep those buffers alive, which is
/// why a holder of splats it rendered calls [`FrameScratch::forget_bindings`] when it drops
/// them).
#[derive(Debug)]
struct CachedBindGroup {
    key: BindKey,
    buffers: Vec<(wgpu::Buffer, u64, Option<wgpu::BufferSize>)>,
    group: wgpu::BindGroup,
}

fn scratch_buffer(
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
fn grown(needed: u32) -> u32 {
    needed.saturating_add(needed / 2).max(256)
}

impl BandScratch {
    fn new(ctx: &GpuContext, renderer: &Renderer, owner: Owner) -> Result<Self, GpuError> {
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
    fn ensure(
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
    fn ensure_partials(&mut self, ctx: &GpuContext, owner: Owner) -> Result<(), GpuError> {
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
    fn cached_bind_group(
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

    fn ensure(
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
    fn ensure_bounds(&mut self, ctx: &GpuContext, bands: u32) -> Result<(), GpuError> {
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
    fn ensure_bands(
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
    fn ensure_partials(&mut self, ctx: &GpuContext, bands: usize) -> Result<(), GpuError> {
        let owner = self.owner;
        for band in self.bands.iter_mut().take(bands) {
            band.ensure_partials(ctx, owner)?;
        }
        Ok(())
    }

    /// The backward pass's carried walk, for frames of several bands.
    fn ensure_carry(&mut self, ctx: &GpuContext, pixels: u32) -> Result<(), GpuError> {
        if pixels > self.carry_capacity {
            let bytes = u64::from(pixels) * 16;
            self.carry = scratch_buffer(ctx, "backward carry", bytes, STORAGE, self.owner)?;
            self.carry_capacity = pixels;
        }
        Ok(())
    }
}
