//! Splat parameters and their gradients on the GPU.
//!
//! Flat f32 buffers (no vec3 padding). SH coefficients are split by band, coefficient-major
//! within a band (`[N, coefficients of the band, 3]`): no single binding then exceeds
//! lavapipe's 128 MiB limit at a million splats of degree 3, and degree-0 scenes carry no SH
//! rest at all. Bands above the stored degree are 16-byte placeholders (bindings cannot be
//! empty).

use splat_formats::{Splats, sh_coeffs_for_degree};

use crate::{Category, GpuBuffer, GpuContext, GpuError, Owner};

/// Coefficients per SH band (degree 0..=3).
pub const BAND_COEFFS: [u32; 4] = [1, 3, 5, 7];
/// First coefficient index of each band.
const BAND_START: [usize; 4] = [0, 1, 4, 9];

const PARAM_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC);

/// Splat parameters on the GPU (raw values, as `Splats` holds them).
#[derive(Debug)]
pub struct GpuSplats {
    pub count: u32,
    pub sh_degree: u32,
    pub means: GpuBuffer,
    pub log_scales: GpuBuffer,
    pub quats: GpuBuffer,
    pub opacities: GpuBuffer,
    pub sh: [GpuBuffer; 4],
}

fn band_len(count: usize, band: usize, sh_degree: u32) -> usize {
    if band as u32 <= sh_degree { count * BAND_COEFFS[band] as usize * 3 } else { 0 }
}

/// Bytes for `floats` f32 values, at least 16 (a binding may not be empty).
fn buffer_bytes(floats: usize) -> u64 {
    (floats as u64 * 4).max(16)
}

impl GpuSplats {
    /// Uploads a scene. Errors if it has more splats than a u32 counts or a buffer would
    /// exceed the device's limits.
    pub fn upload(ctx: &GpuContext, splats: &Splats, owner: Owner) -> Result<Self, GpuError> {
        let count = u32::try_from(splats.len()).map_err(|_| GpuError::TooLarge {
            label: "splats".into(),
            bytes: splats.len() as u64,
            limit: u64::from(u32::MAX),
        })?;
        let param = |label: &str, data: &[f32]| {
            ctx.create_buffer_init(
                label,
                bytemuck::cast_slice(if data.is_empty() { &[0.0; 4] } else { data }),
                PARAM_USAGE,
                Category::SplatParameters,
                owner,
            )
        };
        let bands = split_sh_bands(splats);
        Ok(Self {
            count,
            sh_degree: splats.sh_degree,
            means: param("means", splats.means.as_flattened())?,
            log_scales: param("log_scales", splats.log_scales.as_flattened())?,
            quats: param("quats", splats.rotations.as_flattened())?,
            opacities: param("opacities", &splats.opacity_logits)?,
            sh: [
                param("sh band 0", &bands[0])?,
                param("sh band 1", &bands[1])?,
                param("sh band 2", &bands[2])?,
                param("sh band 3", &bands[3])?,
            ],
        })
    }

    /// Zeroed parameter buffers for `count` splats of `sh_degree`, to be filled in chunks with
    /// [`GpuSplats::write_rows`] (so a large scene never has to exist whole on the host).
    pub fn allocate(
        ctx: &GpuContext,
        count: u32,
        sh_degree: u32,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let n = count as usize;
        let param = |label: &str, floats: usize| {
            ctx.create_buffer(
                label,
                buffer_bytes(floats),
                PARAM_USAGE,
                Category::SplatParameters,
                owner,
            )
        };
        Ok(Self {
            count,
            sh_degree,
            means: param("means", n * 3)?,
            log_scales: param("log_scales", n * 3)?,
            quats: param("quats", n * 4)?,
            opacities: param("opacities", n)?,
            sh: [
                param("sh band 0", band_len(n, 0, sh_degree))?,
                param("sh band 1", band_len(n, 1, sh_degree))?,
                param("sh band 2", band_len(n, 2, sh_degree))?,
                param("sh band 3", band_len(n, 3, sh_degree))?,
            ],
        })
    }

    /// Writes `rows` (same SH degree) as splats `first..first + rows.len()`. The data is
    /// staged by the queue and lands with the next submit.
    pub fn write_rows(&self, ctx: &GpuContext, first: u32, rows: &Splats) -> Result<(), GpuError> {
        let end = u64::from(first) + rows.len() as u64;
        if rows.sh_degree != self.sh_degree || end > u64::from(self.count) {
            return Err(GpuError::Validation {
                label: "splat upload".into(),
                message: format!(
                    "rows {first}..{end} of SH degree {} do not fit {} splats of degree {}",
                    rows.sh_degree, self.count, self.sh_degree
                ),
            });
        }
        let at = u64::from(first);
        let write = |buffer: &GpuBuffer, floats_per_splat: u64, data: &[f32]| {
            if !data.is_empty() {
                ctx.queue.write_buffer(
                    buffer,
                    at * floats_per_splat * 4,
                    bytemuck::cast_slice(data),
                );
            }
        };
        write(&self.means, 3, rows.means.as_flattened());
        write(&self.log_scales, 3, rows.log_scales.as_flattened());
        write(&self.quats, 4, rows.rotations.as_flattened());
        write(&self.opacities, 1, &rows.opacity_logits);
        let bands = split_sh_bands(rows);
        for (band, data) in bands.iter().enumerate() {
            write(&self.sh[band], u64::from(BAND_COEFFS[band]) * 3, data);
        }
        Ok(())
    }

    /// The parameter buffers in binding order: means, log-scales, quats, opacities, SH bands
    /// 0..=3 (the order of `splat_params.wgsl`, of Adam's moments and of the gradients).
    #[must_use]
    pub fn buffers(&self) -> [&wgpu::Buffer; 8] {
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

    /// A copy on the GPU, for another owner (the viewer).
    pub fn duplicate(&self, ctx: &GpuContext, owner: Owner) -> Result<Self, GpuError> {
        let copy = Self::allocate(ctx, self.count, self.sh_degree, owner)?;
        copy.copy_from(ctx, self);
        Ok(copy)
    }

    /// Overwrites these buffers with `source`'s (same count and degree); recorded and
    /// submitted, not waited for.
    pub fn copy_from(&self, ctx: &GpuContext, source: &Self) {
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("copy splats") });
        for (from, to) in source.buffers().into_iter().zip(self.buffers()) {
            encoder.copy_buffer_to_buffer(from, 0, to, 0, from.size().min(to.size()));
        }
        ctx.queue.submit([encoder.finish()]);
    }

    /// Reads the parameters back (blocks until the GPU is done). Not from async code: see
    /// [`GpuSplats::download_async`].
    pub fn download(&self, ctx: &GpuContext) -> Result<Splats, GpuError> {
        pollster::block_on(self.download_async(ctx))
    }

    /// [`GpuSplats::download`] without blocking the thread. Async code must await this: a
    /// blocking read inside a tokio task can wait forever (tokio's cooperative budget defers
    /// the read's wake-up to the scheduler the block holds).
    pub async fn download_async(&self, ctx: &GpuContext) -> Result<Splats, GpuError> {
        let n = self.count as usize;
        let means = read_f32_async(ctx, &self.means, n * 3).await?;
        let log_scales = read_f32_async(ctx, &self.log_scales, n * 3).await?;
        let quats = read_f32_async(ctx, &self.quats, n * 4).await?;
        let opacities = read_f32_async(ctx, &self.opacities, n).await?;
        let mut bands: [Vec<f32>; 4] = Default::default();
        for (band, out) in bands.iter_mut().enumerate() {
            *out = read_f32_async(ctx, &self.sh[band], band_len(n, band, self.sh_degree)).await?;
        }
        Ok(merge_sh_bands(
            Splats {
                means: to_arrays(&means),
                log_scales: to_arrays(&log_scales),
                rotations: to_arrays(&quats),
                opacity_logits: opacities,
                sh_dc: Vec::new(),
                sh_rest: Vec::new(),
                sh_degree: self.sh_degree,
            },
            &bands,
        ))
    }
}

fn to_arrays<const K: usize>(flat: &[f32]) -> Vec<[f32; K]> {
    flat.chunks_exact(K).map(|c| std::array::from_fn(|i| c[i])).collect()
}

/// `Splats` (DC + channel-major rest) to per-band coefficient-major arrays.
#[must_use]
pub fn split_sh_bands(splats: &Splats) -> [Vec<f32>; 4] {
    let n = splats.len();
    let rest = sh_coeffs_for_degree(splats.sh_degree) - 1;
    let mut bands: [Vec<f32>; 4] =
        std::array::from_fn(|band| Vec::with_capacity(band_len(n, band, splats.sh_degree)));
    bands[0].extend_from_slice(splats.sh_dc.as_flattened());
    for i in 0..n {
        let row = &splats.sh_rest[i * 3 * rest..(i + 1) * 3 * rest];
        for band in 1..=splats.sh_degree as usize {
            for k in BAND_START[band]..BAND_START[band] + BAND_COEFFS[band] as usize {
                for c in 0..3 {
                    bands[band].push(row[c * rest + k - 1]);
                }
            }
        }
    }
    bands
}

/// Per-band arrays back into `splats.sh_dc` / `sh_rest`.
#[must_use]
pub fn merge_sh_bands(mut splats: Splats, bands: &[Vec<f32>; 4]) -> Splats {
    let n = splats.means.len();
    let rest = sh_coeffs_for_degree(splats.sh_degree) - 1;
    splats.sh_dc = to_arrays(&bands[0]);
    splats.sh_rest = vec![0.0; n * 3 * rest];
    for i in 0..n {
        for band in 1..=splats.sh_degree as usize {
            let coeffs = BAND_COEFFS[band] as usize;
            for j in 0..coeffs {
                let k = BAND_START[band] + j;
                for c in 0..3 {
                    splats.sh_rest[i * 3 * rest + c * rest + k - 1] =
                        bands[band][(i * coeffs + j) * 3 + c];
                }
            }
        }
    }
    splats
}

/// Gradients of the raw parameters (same layout as [`GpuSplats`]) and the densification
/// statistics `[N, 3]` (NDC gradient norm sum, visible count, largest radius in pixels),
/// which accumulate across backward passes until the owner clears them.
#[derive(Debug)]
pub struct SplatGradients {
    pub count: u32,
    pub v_means: GpuBuffer,
    pub v_log_scales: GpuBuffer,
    pub v_quats: GpuBuffer,
    pub v_opacities: GpuBuffer,
    pub v_sh: [GpuBuffer; 4],
    pub densify: GpuBuffer,
}

impl SplatGradients {
    /// The gradient buffers in the order of [`GpuSplats::buffers`].
    #[must_use]
    pub fn buffers(&self) -> [&wgpu::Buffer; 8] {
        [
            &self.v_means,
            &self.v_log_scales,
            &self.v_quats,
            &self.v_opacities,
            &self.v_sh[0],
            &self.v_sh[1],
            &self.v_sh[2],
            &self.v_sh[3],
        ]
    }

    pub fn new(ctx: &GpuContext, splats: &GpuSplats, owner: Owner) -> Result<Self, GpuError> {
        let n = splats.count as usize;
        let grad = |label: &str, floats: usize| {
            ctx.create_buffer(label, buffer_bytes(floats), PARAM_USAGE, Category::Gradients, owner)
        };
        Ok(Self {
            count: splats.count,
            v_means: grad("v_means", n * 3)?,
            v_log_scales: grad("v_log_scales", n * 3)?,
            v_quats: grad("v_quats", n * 4)?,
            v_opacities: grad("v_opacities", n)?,
            v_sh: [
                grad("v_sh band 0", band_len(n, 0, splats.sh_degree))?,
                grad("v_sh band 1", band_len(n, 1, splats.sh_degree))?,
                grad("v_sh band 2", band_len(n, 2, splats.sh_degree))?,
                grad("v_sh band 3", band_len(n, 3, splats.sh_degree))?,
            ],
            densify: ctx.create_buffer(
                "densification statistics",
                buffer_bytes(n * crate::kernels::DENSIFY_FLOATS as usize),
                PARAM_USAGE,
                Category::DensificationStats,
                owner,
            )?,
        })
    }
}

/// Reads `floats` f32 values from the start of a buffer (which needs `COPY_SRC`). Blocks.
pub fn read_f32(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    floats: usize,
) -> Result<Vec<f32>, GpuError> {
    pollster::block_on(read_f32_async(ctx, buffer, floats))
}

/// [`read_f32`] without blocking the thread: awaits the GPU (see [`GpuContext::read_mapped`]).
pub async fn read_f32_async(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    floats: usize,
) -> Result<Vec<f32>, GpuError> {
    let bytes = read_bytes_async(ctx, buffer, floats as u64 * 4).await?;
    Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

/// Reads the first `bytes` bytes of a buffer through a staging buffer. Blocks until the GPU
/// is done; for tests, the command line and end-of-run exports, never per frame in the UI.
pub fn read_bytes(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    bytes: u64,
) -> Result<Vec<u8>, GpuError> {
    pollster::block_on(read_bytes_async(ctx, buffer, bytes))
}

/// [`read_bytes`] without blocking the thread. The staging buffer lives until the read ends.
pub async fn read_bytes_async(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    bytes: u64,
) -> Result<Vec<u8>, GpuError> {
    if bytes == 0 {
        return Ok(Vec::new());
    }
    let padded = bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
    let staging = ctx.create_buffer(
        "readback",
        padded,
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        Category::Other,
        Owner::Shared,
    )?;
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, padded);
    ctx.queue.submit([encoder.finish()]);
    ctx.read_mapped(&staging, padded, |view| view[..bytes as usize].to_vec()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[expect(clippy::float_cmp, reason = "values are small integers, exact in f32")]
    fn sh_bands_round_trip() {
        for degree in 0..=3 {
            let n = 3;
            let rest = sh_coeffs_for_degree(degree) - 1;
            let splats = Splats {
                means: vec![[0.0; 3]; n],
                log_scales: vec![[0.0; 3]; n],
                rotations: vec![[1.0, 0.0, 0.0, 0.0]; n],
                opacity_logits: vec![0.0; n],
                sh_dc: (0..n).map(|i| [i as f32, 0.5, -1.0]).collect(),
                sh_rest: (0..n * 3 * rest).map(|v| v as f32).collect(),
                sh_degree: degree,
            };
            let bands = split_sh_bands(&splats);
            if degree >= 1 {
                // Splat 0, coefficient 1, green = rest index (c = 1) * rest + 0.
                assert_eq!(bands[1][1], (rest) as f32);
            }
            let back =
                merge_sh_bands(Splats { sh_dc: vec![], sh_rest: vec![], ..splats.clone() }, &bands);
            assert_eq!(back, splats);
        }
    }
}
