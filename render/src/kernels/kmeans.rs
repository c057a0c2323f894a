//! k-means on the GPU for SOG's SH palette (`formats::sog`): the assignment step — n points ×
//! k centroids × dim, the whole cost of Lloyd's algorithm — in `kmeans.wgsl`; the rest
//! (start, centroid means) is `formats::sog::kmeans_with`'s, shared with the CPU reference.
//!
//! The points are uploaded once, in chunks that each fit one storage binding; each round
//! uploads the centroids, assigns every chunk and reads the labels back (4 bytes a point).
//! Every buffer is in the ledger under the caller's owner and dropped at the end.
//!
//! Tolerance against the CPU ([`splat_formats::sog::assign_nearest`]): each distance is the
//! same sum in the same order, but WGSL lets a driver fuse the multiply-adds, so a point whose
//! two nearest centroids are within rounding of each other may take either.

use splat_formats::sog::{ShPalette, kmeans_with};

use crate::buffer::GpuBuffer;
use crate::context::GpuContext;
use crate::error::GpuError;
use crate::gpu_splats::read_bytes;
use crate::kernels::DispatchLimits;
use crate::kernels::compute::{Binding, Compile, ComputeKernel, KernelDecl, shader_module};
use crate::ledger::{Category, Owner};

/// Keep in sync with kmeans.wgsl.
const WORKGROUP_SIZE: u32 = 128;
/// The widest point the kernel takes: SH degree 3's 45 coefficients. Keep in sync with
/// kmeans.wgsl.
pub const MAX_DIM: usize = 45;
/// Points a chunk holds at most, whatever the binding allows: bounds one upload.
const MAX_CHUNK_POINTS: usize = 1 << 20;
/// Centroids one dispatch compares (kmeans.wgsl): 1,024 × 45 dimensions is about 47,000
/// iterations of the kernel's loop nest, under the 65,535 after which llvmpipe silently ends a
/// loop, and 1,024 × 45 × a million points is milliseconds on a discrete GPU.
const CENTROIDS_PER_PASS: usize = 1024;
/// Bytes between the parameter slots of a chunk's dispatches (dynamic offsets): WebGPU's
/// largest `min_storage_buffer_offset_alignment`.
const PARAM_STRIDE: u64 = 256;

/// The WGSL source.
pub const SHADER: &str = include_str!("kmeans.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    points: u32,
    first: u32,
    count: u32,
    dim: u32,
    groups_x: u32,
}

/// The assignment kernel.
const ASSIGN: KernelDecl = KernelDecl {
    label: "k-means assign",
    entry: "assign",
    bindings: &[
        (0, Binding::Slot(size_of::<Params>() as u64)),
        (1, Binding::Read),
        (2, Binding::Read),
        (3, Binding::ReadWrite),
        (4, Binding::ReadWrite),
    ],
};

/// The assignment pipeline.
pub struct Kmeans {
    assign: ComputeKernel,
}

impl Kmeans {
    pub fn new(ctx: &GpuContext) -> Result<Self, GpuError> {
        ctx.checked("k-means pipeline", || {
            let module = shader_module(&ctx.device, "kmeans.wgsl", SHADER);
            Ok(Self {
                assign: ComputeKernel::new(&ctx.device, &module, &ASSIGN, &Compile::default()),
            })
        })
    }

    /// [`splat_formats::sog::kmeans`] with the assignment on the GPU: `points` rows of `dim`
    /// (1..=[`MAX_DIM`]) into at most `k` centroids, `iterations` rounds.
    pub fn run(
        &self,
        ctx: &GpuContext,
        points: &[f32],
        dim: usize,
        k: usize,
        iterations: usize,
        owner: Owner,
    ) -> Result<ShPalette, GpuError> {
        if !(1..=MAX_DIM).contains(&dim) {
            return Err(GpuError::Validation {
                label: "k-means".into(),
                message: format!("points of {dim} values (1 to {MAX_DIM} are supported)"),
            });
        }
        let uploaded = self.upload(ctx, points, dim, k, owner)?;
        kmeans_with(points, dim, k, iterations, &mut |centroids, labels| {
            uploaded.assign(ctx, self.assign.pipeline(), centroids, labels)
        })
    }

    /// The points in chunks of whole workgroups that each fit one binding, room for `k`
    /// centroids, and a bind group a chunk.
    fn upload(
        &self,
        ctx: &GpuContext,
        points: &[f32],
        dim: usize,
        k: usize,
        owner: Owner,
    ) -> Result<Uploaded, GpuError> {
        let n = points.len() / dim;
        let limits = DispatchLimits::of(&ctx.device);
        let binding = ctx.device.limits().max_storage_buffer_binding_size as usize;
        let workgroup = WORKGROUP_SIZE as usize;
        let chunk =
            ((binding / (dim * 4)).min(MAX_CHUNK_POINTS) / workgroup * workgroup).max(workgroup);
        let storage = wgpu::BufferUsages::STORAGE;
        let k = k.min(n).max(1);
        let passes = k.div_ceil(CENTROIDS_PER_PASS);
        let centroids = ctx.create_buffer(
            "k-means centroids",
            (k * dim * 4) as u64,
            storage | wgpu::BufferUsages::COPY_DST,
            Category::Other,
            owner,
        )?;
        let chunks = (0..n.div_ceil(chunk))
            .map(|c| -> Result<Chunk, GpuError> {
                let range = c * chunk..((c + 1) * chunk).min(n);
                let count = range.len();
                let points = ctx.create_buffer_init(
                    "k-means points",
                    bytemuck::cast_slice(&points[range.start * dim..range.end * dim]),
                    storage,
                    Category::Other,
                    owner,
                )?;
                let labels = ctx.create_buffer(
                    "k-means labels",
                    count as u64 * 4,
                    storage | wgpu::BufferUsages::COPY_SRC,
                    Category::Other,
                    owner,
                )?;
                let best = ctx.create_buffer(
                    "k-means best distance",
                    count as u64 * 4,
                    storage,
                    Category::Other,
                    owner,
                )?;
                let grid = limits.grid((count as u32).div_ceil(WORKGROUP_SIZE));
                let slots: Vec<u8> = (0..passes)
                    .flat_map(|pass| {
                        let first = pass * CENTROIDS_PER_PASS;
                        let params = Params {
                            points: count as u32,
                            first: first as u32,
                            count: (k - first).min(CENTROIDS_PER_PASS) as u32,
                            dim: dim as u32,
                            groups_x: grid.0,
                        };
                        let mut slot = bytemuck::bytes_of(&params).to_vec();
                        slot.resize(PARAM_STRIDE as usize, 0);
                        slot
                    })
                    .collect();
                let params = ctx.create_buffer_init(
                    "k-means params",
                    &slots,
                    wgpu::BufferUsages::STORAGE,
                    Category::Other,
                    owner,
                )?;
                let bind_group = self.assign.bind(
                    &ctx.device,
                    &[
                        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &params,
                            offset: 0,
                            size: wgpu::BufferSize::new(size_of::<Params>() as u64),
                        }),
                        points.as_entire_binding(),
                        centroids.as_entire_binding(),
                        labels.as_entire_binding(),
                        best.as_entire_binding(),
                    ],
                );
                let grid = limits.grid((count as u32).div_ceil(WORKGROUP_SIZE));
                Ok(Chunk {
                    first: range.start,
                    count,
                    _buffers: [points, best, params],
                    labels,
                    bind_group,
                    grid,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Uploaded { passes, centroids, chunks })
    }
}

/// The points on the GPU, ready for rounds of assignment.
struct Uploaded {
    /// Dispatches a chunk takes a round, each over `CENTROIDS_PER_PASS` centroids.
    passes: usize,
    centroids: GpuBuffer,
    chunks: Vec<Chunk>,
}

impl Uploaded {
    /// One assignment round: `centroids` up, every chunk assigned, the labels read back.
    fn assign(
        &self,
        ctx: &GpuContext,
        pipeline: &wgpu::ComputePipeline,
        centroids: &[f32],
        labels: &mut [u32],
    ) -> Result<(), GpuError> {
        ctx.checked("k-means assign", || {
            ctx.queue.write_buffer(&self.centroids, 0, bytemuck::cast_slice(centroids));
            let mut encoder = ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("k-means") });
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("k-means assign"),
                timestamp_writes: None,
            });
            pass.set_pipeline(pipeline);
            for chunk in &self.chunks {
                for slot in 0..self.passes {
                    let offset = (slot as u64 * PARAM_STRIDE) as u32;
                    pass.set_bind_group(0, &chunk.bind_group, &[offset]);
                    pass.dispatch_workgroups(chunk.grid.0, chunk.grid.1, 1);
                }
            }
            drop(pass);
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })?;
        for chunk in &self.chunks {
            let bytes = read_bytes(ctx, &chunk.labels, chunk.count as u64 * 4)?;
            let out = &mut labels[chunk.first..chunk.first + chunk.count];
            for (label, word) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *label = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            }
        }
        Ok(())
    }
}

/// One binding's worth of points and their labels.
struct Chunk {
    first: usize,
    count: usize,
    /// The points, their best distances so far and the parameters of each dispatch: bound by
    /// `bind_group`, kept alive with it.
    _buffers: [GpuBuffer; 3],
    labels: GpuBuffer,
    bind_group: wgpu::BindGroup,
    grid: (u32, u32),
}

#[cfg(test)]
mod tests {
    use splat_formats::sog::{assign_nearest, kmeans};

    use super::*;

    fn context() -> GpuContext {
        pollster::block_on(GpuContext::new_headless()).expect("a GPU adapter (lavapipe in CI)")
    }

    /// Points spread in 45 dimensions (SH degree 3), deterministic.
    fn points(n: usize, dim: usize) -> Vec<f32> {
        let mut state = 0x2545_f491_u32;
        (0..n * dim)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state as f32 / u32::MAX as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn the_gpu_assigns_each_point_its_nearest_centroid_as_the_cpu_does() {
        let ctx = context();
        let kernel = Kmeans::new(&ctx).unwrap();
        for dim in [9, 24, 45] {
            let data = points(3_000, dim);
            // Centroids: 300 of the points (one iteration, no update: the assignment alone).
            let gpu = kernel.run(&ctx, &data, dim, 300, 0, Owner::Shared).unwrap();
            let mut cpu = vec![0; 3_000];
            assign_nearest(&data, dim, &gpu.centroids, &mut cpu);
            let distance = |i: usize, c: u32| -> f32 {
                let c = c as usize;
                data[i * dim..(i + 1) * dim]
                    .iter()
                    .zip(&gpu.centroids[c * dim..(c + 1) * dim])
                    .map(|(p, q)| (p - q) * (p - q))
                    .sum()
            };
            for (i, (&g, &c)) in gpu.labels.iter().zip(&cpu).enumerate() {
                if g != c {
                    // Only a tie within rounding may go either way (module docs).
                    let (dg, dc) = (distance(i, g), distance(i, c));
                    assert!(
                        (dg - dc).abs() <= 1e-5 * dc.max(1e-6),
                        "dim {dim} point {i}: {g} {dg} vs {c} {dc}"
                    );
                }
            }
        }
        assert_eq!(ctx.ledger().owner_bytes(Owner::Shared), 0, "every buffer freed");
    }

    #[test]
    fn every_centroid_of_a_full_size_palette_is_reached() {
        // 4,096 points, each its own centroid (no iterations: the start is the points), at
        // SH degree 3's 45 dimensions: every point's label is itself. One dispatch over all
        // of them stopped at centroid 1,380 on llvmpipe (the module docs of kmeans.wgsl).
        let ctx = context();
        let kernel = Kmeans::new(&ctx).unwrap();
        let dim = 45;
        let data: Vec<f32> = (0..4_096 * dim)
            .map(|i| (i / dim) as f32 + 0.001 * ((i * 7_919) % 1_000) as f32)
            .collect();
        let palette = kernel.run(&ctx, &data, dim, 4_096, 0, Owner::Shared).unwrap();
        let wrong = palette.labels.iter().enumerate().filter(|&(i, &l)| l as usize != i).count();
        assert_eq!(wrong, 0);
    }

    #[test]
    fn the_gpu_palette_is_the_cpu_palette_on_separate_clusters() {
        let ctx = context();
        let kernel = Kmeans::new(&ctx).unwrap();
        // 40 clumps far apart: no point is near a tie, so both find the same palette.
        let dim = 24;
        let data: Vec<f32> = (0..4_000)
            .flat_map(|i| {
                (0..dim).map(move |d| ((i % 40) * 10 + d) as f32 + 0.001 * (i % 7) as f32)
            })
            .collect();
        let gpu = kernel.run(&ctx, &data, dim, 40, 5, Owner::Shared).unwrap();
        let cpu = kmeans(&data, dim, 40, 5);
        assert_eq!(gpu, cpu);
    }

    #[test]
    fn points_beyond_one_binding_go_in_chunks() {
        // A device whose storage bindings hold 1,024 points of 9 values: 9,000 points take
        // nine chunks, and the labels still match the CPU's.
        let options = crate::HeadlessOptions {
            max_storage_buffer_binding_size: Some(9 * 4 * 1_024),
            ..crate::HeadlessOptions::default()
        };
        let ctx = pollster::block_on(GpuContext::new_headless_with(&options)).unwrap();
        let kernel = Kmeans::new(&ctx).unwrap();
        let data = points(9_000, 9);
        let gpu = kernel.run(&ctx, &data, 9, 64, 0, Owner::Shared).unwrap();
        let mut cpu = vec![0; 9_000];
        assign_nearest(&data, 9, &gpu.centroids, &mut cpu);
        let same = gpu.labels.iter().zip(&cpu).filter(|(a, b)| a == b).count();
        assert!(same >= 8_990, "{same} of 9000 agree");
    }
}
