//! What the renderer's kernels are told: each frame's uniform (camera, crop, windows of splats)
//! and the bind groups and dispatches over windows and chunks.

use splat_formats::filter::{Filter, Shape};

use super::RenderSettings;
use crate::gpu_splats::{GpuSplats, ShPrecision};
use crate::kernels::compute::ComputeKernel;
use crate::kernels::{BandUniform, RenderUniform};
use crate::profiler::PassTimer;
use crate::{Camera, GpuContext};

pub(super) fn render_uniform(
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
        growth: settings.growth as u32,
        _pad: [0; 2],
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
pub(super) fn filter_rules(keep: &Filter) -> (Vec<[u32; 4]>, f32) {
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
pub(super) fn keep_min(keep: &Filter) -> [f32; 4] {
    let [x, y, z] = keep.crop_box.map_or([-f32::MAX; 3], |b| b.min);
    let floor = keep.min_opacity.map_or(-f64::from(f32::MAX), |m| {
        let m = f64::from(m);
        (m / (1.0 - m)).ln()
    });
    [x, y, z, floor.clamp(-f64::from(f32::MAX), f64::from(f32::MAX)) as f32]
}

/// [`RenderUniform::keep_max`]: the box's greatest corner, and 1 when the filter keeps less
/// than everything.
pub(super) fn keep_max(keep: &Filter) -> [f32; 4] {
    let [x, y, z] = keep.crop_box.map_or([f32::MAX; 3], |b| b.max);
    [x, y, z, if keep.is_empty() { 0.0 } else { 1.0 }]
}

/// Bytes between the copies of a frame's `RenderUniform` in one buffer, one a window of
/// splats: a storage binding's offset is a multiple of `min_storage_buffer_offset_alignment`,
/// which is at most 256.
pub(super) const UNIFORM_STRIDE: u64 = (size_of::<RenderUniform>() as u64).next_multiple_of(256);

/// Bytes of a buffer of `windows` copies of the `RenderUniform`.
pub(super) fn window_uniform_bytes(windows: u32) -> u64 {
    u64::from(windows.max(1) - 1) * UNIFORM_STRIDE + size_of::<RenderUniform>() as u64
}

/// Copy `w` of the `RenderUniform` in `buffer`, as a binding.
pub(super) fn uniform_slot(buffer: &wgpu::Buffer, w: usize) -> wgpu::BufferBinding<'_> {
    wgpu::BufferBinding {
        buffer,
        offset: w as u64 * UNIFORM_STRIDE,
        size: wgpu::BufferSize::new(size_of::<RenderUniform>() as u64),
    }
}

/// `buffers` bound whole.
pub(super) fn whole<const N: usize>(buffers: [&wgpu::Buffer; N]) -> [wgpu::BufferBinding<'_>; N] {
    buffers.map(wgpu::Buffer::as_entire_buffer_binding)
}

/// Chunks of [`CHUNK`] intersections, numbered in the frame, wholly inside `band`.
pub(super) fn whole_chunks(band: &BandUniform) -> u32 {
    let end = u64::from(band.base) + u64::from(band.intersections);
    let first = u64::from(band.base).div_ceil(CHUNK);
    (end / CHUNK).saturating_sub(first) as u32
}

/// Intersections `chunk_sums` adds into one (`CHUNK` in common.wgsl).
pub(super) const CHUNK: u64 = 32;

/// One compute pass of one dispatch, filed under `stage` when profiling.
pub(super) fn dispatch(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    stage: &'static str,
    kernel: &ComputeKernel,
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
    pass.set_pipeline(kernel.pipeline());
    pass.set_bind_group(0, bind, &[]);
    pass.dispatch_workgroups(x, y, 1);
}
