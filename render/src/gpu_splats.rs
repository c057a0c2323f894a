//! Splat parameters and their gradients on the GPU.
//!
//! Flat buffers (no vec3 padding). SH coefficients are split by band, coefficient-major
//! within a band (`[N, coefficients of the band, 3]`): a degree-0 scene carries no SH rest at
//! all, and the widest row (SH band 3's gradient, 84 bytes) sets how many splats a kernel
//! binds at once ([`splat_window`]). Bands above the stored degree are 16-byte placeholders
//! (bindings cannot be empty).
//!
//! Every buffer holds f32 values, except that a scene stored with [`ShPrecision::F16`] keeps
//! SH bands 1..=3 (the view-dependent colour: 45 of a splat's 59 values at degree 3) as IEEE
//! binary16, two values in each 32-bit word (the first in the low half; kernels convert them
//! with `kernels/binary16.wgsl`), each splat's row padded to whole words so that a splat
//! never shares a word with another (a gather or an Adam step writes whole words). Gradients
//! are f32 in every case.

use std::borrow::Cow;

use splat_formats::{Splats, sh_coeffs_for_degree};

use crate::{Category, GpuBuffer, GpuContext, GpuError, Owner};

/// Floats of densification statistics per splat (`SplatGradients::densify`): NDC gradient
/// norm sum, visible count, largest radius.
pub const DENSIFY_FLOATS: u64 = 3;
/// Coefficients per SH band (degree 0..=3).
pub const BAND_COEFFS: [u32; 4] = [1, 3, 5, 7];
/// First coefficient index of each band.
const BAND_START: [usize; 4] = [0, 1, 4, 9];
/// Parameter buffers of a scene, in the order of [`GpuSplats::buffers`]: means, log-scales,
/// quats, opacities, SH bands 0..=3.
pub const PARAM_BUFFERS: usize = 8;
/// Index of SH band 0 among the parameter buffers.
pub const FIRST_SH_BUFFER: usize = 4;
/// Values a splat has in each parameter buffer, SH bands counted as if present.
pub const VALUES_PER_SPLAT: [u32; PARAM_BUFFERS] =
    [3, 3, 4, 1, BAND_COEFFS[0] * 3, BAND_COEFFS[1] * 3, BAND_COEFFS[2] * 3, BAND_COEFFS[3] * 3];
/// Size of a parameter (or gradient, or moment) buffer that holds nothing: a binding may not
/// be empty.
pub const EMPTY_BUFFER_BYTES: u64 = 16;

/// How SH bands 1..=3 (parameters and their Adam moments) are stored on the GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShPrecision {
    /// 32-bit floats, like every other parameter.
    #[default]
    F32,
    /// IEEE binary16, two to a 32-bit word: half the bytes. The rasterizer reads them as f32;
    /// Adam rounds its results to them stochastically (`optim/adam.wgsl` in the trainer).
    F16,
}

impl std::fmt::Display for ShPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl ShPrecision {
    /// The name used on the command line and in files: `f32` or `f16`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        }
    }

    /// The precision named `name` (see [`ShPrecision::name`]).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::F32, Self::F16].into_iter().find(|p| p.name() == name)
    }
}

/// 32-bit words a splat takes in parameter buffer `b` of a scene of SH degree `sh_degree`
/// (0 for a band above it, which is a placeholder). Moments have the same layout; gradients
/// are always [`VALUES_PER_SPLAT`] f32 values.
#[must_use]
pub fn words_per_splat(b: usize, sh_degree: u32, precision: ShPrecision) -> u32 {
    let values = VALUES_PER_SPLAT[b];
    if b < FIRST_SH_BUFFER {
        return values;
    }
    let band = (b - FIRST_SH_BUFFER) as u32;
    match (band > sh_degree, band > 0 && precision == ShPrecision::F16) {
        (true, _) => 0,
        (false, true) => values.div_ceil(2),
        (false, false) => values,
    }
}

/// Bytes of parameter buffer `b` (or of one of its moments) for `count` splats.
#[must_use]
pub fn param_buffer_bytes(b: usize, count: u32, sh_degree: u32, precision: ShPrecision) -> u64 {
    let words = u64::from(count) * u64::from(words_per_splat(b, sh_degree, precision));
    if words == 0 { EMPTY_BUFFER_BYTES } else { words * 4 }
}

/// Bytes of gradient buffer `b` for `count` splats (always f32).
#[must_use]
pub fn gradient_buffer_bytes(b: usize, count: u32, sh_degree: u32) -> u64 {
    param_buffer_bytes(b, count, sh_degree, ShPrecision::F32)
}

const PARAM_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC);

const LABELS: [&str; PARAM_BUFFERS] = [
    "means",
    "log_scales",
    "quats",
    "opacities",
    "sh band 0",
    "sh band 1",
    "sh band 2",
    "sh band 3",
];

/// The label of parameter buffer `b` (its moments and gradient add to it).
#[must_use]
pub fn param_label(b: usize) -> &'static str {
    LABELS[b]
}

/// Splat parameters on the GPU (raw values, as `Splats` holds them).
#[derive(Debug)]
pub struct GpuSplats {
    pub count: u32,
    pub sh_degree: u32,
    pub sh_precision: ShPrecision,
    pub means: GpuBuffer,
    pub log_scales: GpuBuffer,
    pub quats: GpuBuffer,
    pub opacities: GpuBuffer,
    pub sh: [GpuBuffer; 4],
}

/// The values of each parameter buffer of `splats`, f32, in buffer order (SH per band,
/// coefficient-major): the geometry borrowed, the SH bands rearranged.
fn buffer_values(splats: &Splats) -> [Cow<'_, [f32]>; PARAM_BUFFERS] {
    let [b0, b1, b2, b3] = split_sh_bands(splats);
    [
        Cow::Borrowed(splats.means.as_flattened()),
        Cow::Borrowed(splats.log_scales.as_flattened()),
        Cow::Borrowed(splats.rotations.as_flattened()),
        Cow::Borrowed(&splats.opacity_logits),
        Cow::Owned(b0),
        Cow::Owned(b1),
        Cow::Owned(b2),
        Cow::Owned(b3),
    ]
}

/// `values` (rows of `values_per_splat`) as the bytes buffer `b` stores: the f32 values
/// themselves, or for an f16 band pairs of binary16 (rounded to nearest, clamped to the
/// largest finite one) in rows padded to whole words.
fn encode(values: &[f32], b: usize, precision: ShPrecision) -> Cow<'_, [u8]> {
    if b <= FIRST_SH_BUFFER || precision == ShPrecision::F32 {
        return Cow::Borrowed(bytemuck::cast_slice(values));
    }
    let row = VALUES_PER_SPLAT[b] as usize;
    let mut bytes = Vec::with_capacity(values.len().div_ceil(row) * row.div_ceil(2) * 4);
    for splat in values.chunks(row) {
        for pair in splat.chunks(2) {
            let lo = f16_bits(pair[0]);
            let hi = pair.get(1).map_or(0, |&v| f16_bits(v));
            bytes.extend_from_slice(&(u32::from(lo) | (u32::from(hi) << 16)).to_le_bytes());
        }
    }
    Cow::Owned(bytes)
}

/// The inverse of [`encode`]: `count` splats' values of buffer `b` from its bytes, as f32.
fn decode(bytes: &[u8], b: usize, count: usize, precision: ShPrecision) -> Vec<f32> {
    let words = bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    if b <= FIRST_SH_BUFFER || precision == ShPrecision::F32 {
        return words.map(f32::from_bits).collect();
    }
    let row = VALUES_PER_SPLAT[b] as usize;
    let mut values = Vec::with_capacity(count * row);
    let halves = words.flat_map(|w| [w as u16, (w >> 16) as u16]);
    // Each row's padding half (odd rows) is skipped.
    for (k, h) in halves.take(count * row.next_multiple_of(2)).enumerate() {
        if k % row.next_multiple_of(2) < row {
            values.push(half::f16::from_bits(h).to_f32());
        }
    }
    values
}

/// `value` as binary16 bits, rounded to nearest; beyond the largest finite binary16 it is
/// clamped to it (a splat's colour coefficients are never that large, but an infinity would
/// cull the splat). NaN stays NaN.
fn f16_bits(value: f32) -> u16 {
    let clamped = if value.is_nan() { value } else { value.clamp(-65_504.0, 65_504.0) };
    half::f16::from_f32(clamped).to_bits()
}

/// `value` rounded to the nearest binary16 (as an [`ShPrecision::F16`] upload stores it),
/// as f32.
#[must_use]
pub fn round_to_f16(value: f32) -> f32 {
    half::f16::from_bits(f16_bits(value)).to_f32()
}

impl GpuSplats {
    /// Uploads a scene with f32 storage. Errors if it has more splats than a u32 counts or a
    /// buffer would exceed the device's limits.
    pub fn upload(ctx: &GpuContext, splats: &Splats, owner: Owner) -> Result<Self, GpuError> {
        Self::upload_as(ctx, splats, ShPrecision::F32, owner)
    }

    /// Uploads a scene storing SH bands 1..=3 with `precision` (values rounded to nearest).
    pub fn upload_as(
        ctx: &GpuContext,
        splats: &Splats,
        precision: ShPrecision,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let count = u32::try_from(splats.len()).map_err(|_| GpuError::TooMany {
            label: "splats".into(),
            count: splats.len() as u64,
        })?;
        let values = buffer_values(splats);
        let mut buffers = Vec::with_capacity(PARAM_BUFFERS);
        for (b, values) in values.iter().enumerate() {
            let encoded = encode(values, b, precision);
            let bytes: &[u8] =
                if encoded.is_empty() { &[0; EMPTY_BUFFER_BYTES as usize] } else { &encoded };
            buffers.push(ctx.create_buffer_init(
                LABELS[b],
                bytes,
                PARAM_USAGE,
                Category::SplatParameters,
                owner,
            )?);
        }
        Ok(Self::from_buffers(count, splats.sh_degree, precision, all_buffers(buffers)))
    }

    /// The scene made of parameter buffers in [`GpuSplats::buffers`] order.
    #[must_use]
    pub fn from_buffers(
        count: u32,
        sh_degree: u32,
        sh_precision: ShPrecision,
        buffers: [GpuBuffer; PARAM_BUFFERS],
    ) -> Self {
        let [means, log_scales, quats, opacities, sh0, sh1, sh2, sh3] = buffers;
        Self {
            count,
            sh_degree,
            sh_precision,
            means,
            log_scales,
            quats,
            opacities,
            sh: [sh0, sh1, sh2, sh3],
        }
    }

    /// The parameter buffers, owned, in [`GpuSplats::buffers`] order.
    #[must_use]
    pub fn into_buffers(self) -> [GpuBuffer; PARAM_BUFFERS] {
        let Self { means, log_scales, quats, opacities, sh: [sh0, sh1, sh2, sh3], .. } = self;
        [means, log_scales, quats, opacities, sh0, sh1, sh2, sh3]
    }

    /// Zeroed parameter buffers for `count` splats of `sh_degree`, to be filled in chunks with
    /// [`GpuSplats::write_rows`] (so a large scene never has to exist whole on the host).
    pub fn allocate(
        ctx: &GpuContext,
        count: u32,
        sh_degree: u32,
        precision: ShPrecision,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let mut buffers = Vec::with_capacity(PARAM_BUFFERS);
        for (b, label) in LABELS.iter().enumerate() {
            buffers.push(ctx.create_buffer(
                label,
                param_buffer_bytes(b, count, sh_degree, precision),
                PARAM_USAGE,
                Category::SplatParameters,
                owner,
            )?);
        }
        Ok(Self::from_buffers(count, sh_degree, precision, all_buffers(buffers)))
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
        let buffers = self.buffers();
        for (b, values) in buffer_values(rows).iter().enumerate() {
            let encoded = encode(values, b, self.sh_precision);
            if !encoded.is_empty() {
                let row_bytes =
                    u64::from(words_per_splat(b, self.sh_degree, self.sh_precision)) * 4;
                ctx.queue.write_buffer(buffers[b], u64::from(first) * row_bytes, &encoded);
            }
        }
        Ok(())
    }

    /// The parameter buffers in binding order: means, log-scales, quats, opacities, SH bands
    /// 0..=3 (the order of `splat_params.wgsl`, of Adam's moments and of the gradients).
    #[must_use]
    pub fn buffers(&self) -> [&wgpu::Buffer; PARAM_BUFFERS] {
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
        let copy = Self::allocate(ctx, self.count, self.sh_degree, self.sh_precision, owner)?;
        copy.copy_from(ctx, self);
        Ok(copy)
    }

    /// Overwrites these buffers with `source`'s (same count, degree and precision); recorded
    /// and submitted, not waited for.
    pub fn copy_from(&self, ctx: &GpuContext, source: &Self) {
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("copy splats") });
        for (from, to) in source.buffers().into_iter().zip(self.buffers()) {
            encoder.copy_buffer_to_buffer(from, 0, to, 0, from.size().min(to.size()));
        }
        ctx.queue.submit([encoder.finish()]);
    }

    /// Reads the parameters back as f32 (blocks until the GPU is done). Not from async code:
    /// see [`GpuSplats::download_async`].
    pub fn download(&self, ctx: &GpuContext) -> Result<Splats, GpuError> {
        pollster::block_on(self.download_async(ctx))
    }

    /// [`GpuSplats::download`] without blocking the thread. Async code must await this: a
    /// blocking read inside a tokio task can wait forever (tokio's cooperative budget defers
    /// the read's wake-up to the scheduler the block holds).
    pub async fn download_async(&self, ctx: &GpuContext) -> Result<Splats, GpuError> {
        let n = self.count as usize;
        let mut values: [Vec<f32>; PARAM_BUFFERS] = Default::default();
        for (b, (buffer, out)) in self.buffers().into_iter().zip(&mut values).enumerate() {
            let words = n * words_per_splat(b, self.sh_degree, self.sh_precision) as usize;
            let bytes = read_bytes_async(ctx, buffer, words as u64 * 4).await?;
            *out = decode(&bytes, b, n, self.sh_precision);
        }
        let [means, log_scales, quats, opacities, b0, b1, b2, b3] = values;
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
            &[b0, b1, b2, b3],
        ))
    }
}

/// `buffers`, made one per parameter buffer, as an array.
fn all_buffers(buffers: Vec<GpuBuffer>) -> [GpuBuffer; PARAM_BUFFERS] {
    buffers.try_into().unwrap_or_else(|_| unreachable!("one buffer per parameter buffer"))
}

fn to_arrays<const K: usize>(flat: &[f32]) -> Vec<[f32; K]> {
    flat.chunks_exact(K).map(|c| std::array::from_fn(|i| c[i])).collect()
}

/// `Splats` (DC + channel-major rest) to per-band coefficient-major arrays.
#[must_use]
pub fn split_sh_bands(splats: &Splats) -> [Vec<f32>; 4] {
    let n = splats.len();
    let rest = sh_coeffs_for_degree(splats.sh_degree) - 1;
    let mut bands: [Vec<f32>; 4] = std::array::from_fn(|band| {
        let b = FIRST_SH_BUFFER + band;
        Vec::with_capacity(n * words_per_splat(b, splats.sh_degree, ShPrecision::F32) as usize)
    });
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
        let mut buffers = Vec::with_capacity(PARAM_BUFFERS);
        for (b, label) in LABELS.iter().enumerate() {
            buffers.push(ctx.create_buffer(
                &format!("v_{label}"),
                gradient_buffer_bytes(b, splats.count, splats.sh_degree),
                PARAM_USAGE,
                Category::Gradients,
                owner,
            )?);
        }
        let [v_means, v_log_scales, v_quats, v_opacities, s0, s1, s2, s3] = all_buffers(buffers);
        let densify_bytes = u64::from(splats.count) * DENSIFY_FLOATS * 4;
        Ok(Self {
            count: splats.count,
            v_means,
            v_log_scales,
            v_quats,
            v_opacities,
            v_sh: [s0, s1, s2, s3],
            densify: ctx.create_buffer(
                "densification statistics",
                densify_bytes.max(EMPTY_BUFFER_BYTES),
                PARAM_USAGE,
                Category::DensificationStats,
                owner,
            )?,
        })
    }

    /// Every gradient read back (blocking), in f32: means, log-scales, quaternions,
    /// opacities, each SH band up to `sh_degree`, and the densification statistics. For
    /// tests and the self-test.
    pub fn read_all(&self, ctx: &GpuContext, sh_degree: u32) -> Result<Vec<Vec<f32>>, GpuError> {
        let n = self.count as usize;
        let mut groups = vec![
            read_f32(ctx, &self.v_means, n * 3)?,
            read_f32(ctx, &self.v_log_scales, n * 3)?,
            read_f32(ctx, &self.v_quats, n * 4)?,
            read_f32(ctx, &self.v_opacities, n)?,
        ];
        for (band, buffer) in self.v_sh.iter().enumerate().take(sh_degree as usize + 1) {
            groups.push(read_f32(ctx, buffer, n * (2 * band + 1) * 3)?);
        }
        groups.push(read_f32(ctx, &self.densify, n * 3)?);
        Ok(groups)
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

/// Bytes of the widest per-splat row a kernel binds: a gradient of SH band 3 (21 f32). The
/// refinement's plan (32 bytes) and every other parameter, moment and statistic row are
/// narrower.
pub const WIDEST_SPLAT_ROW: u64 = VALUES_PER_SPLAT[PARAM_BUFFERS - 1] as u64 * 4;

/// Splats a window starts on a multiple of: 64 splats of any row of whole 32-bit words are
/// a multiple of 256 bytes, the largest storage offset alignment WebGPU allows.
const WINDOW_ALIGN: u32 = 64;

/// Splats in one window of a device with `limits`: the most, a multiple of 64, whose widest
/// row ([`WIDEST_SPLAT_ROW`]) still fits one storage binding (at least 64: WebGPU promises
/// 128 MiB bindings, 25,000 times what 64 need).
///
/// A kernel that reads or writes rows of every splat (parameters, gradients, moments, the
/// densification statistics, the refinement's plan) is dispatched once a window, each
/// binding the window's rows at their offset: no binding then grows with the splats, and
/// a run's splats are capped by the memory budget and by one buffer (`max_buffer_size`),
/// not by a binding. A window is as large as the binding allows, so on a real GPU (2 GiB
/// bindings: 25 million splats) every run is one window.
#[must_use]
pub fn splat_window(limits: &wgpu::Limits) -> u32 {
    let (binding, _) = crate::Limit::whole_binding(limits);
    let splats = (binding / WIDEST_SPLAT_ROW).min(u64::from(u32::MAX));
    ((splats as u32) / WINDOW_ALIGN * WINDOW_ALIGN).max(WINDOW_ALIGN)
}

/// The windows of `count` splats, `window` at a time (see [`splat_window`]): none for none.
pub fn splat_windows(count: u32, window: u32) -> impl Iterator<Item = std::ops::Range<u32>> {
    let window = window.max(1);
    (0..count.div_ceil(window))
        .map(move |k| k * window..(k * window).saturating_add(window).min(count))
}

/// Rows `splats` of a buffer with `row_bytes` bytes a splat, as a binding; the whole buffer
/// when its rows are empty (a placeholder band).
#[must_use]
pub fn rows_binding<'a>(
    buffer: &'a wgpu::Buffer,
    row_bytes: u64,
    splats: &std::ops::Range<u32>,
) -> wgpu::BufferBinding<'a> {
    let size = row_bytes * u64::from(splats.end - splats.start);
    if size == 0 {
        return wgpu::BufferBinding { buffer, offset: 0, size: None };
    }
    wgpu::BufferBinding {
        buffer,
        offset: row_bytes * u64::from(splats.start),
        size: std::num::NonZeroU64::new(size),
    }
}

impl GpuSplats {
    /// The parameter buffers' rows of `splats` (a window, [`splat_window`]), in the order of
    /// [`GpuSplats::buffers`].
    #[must_use]
    pub fn window(
        &self,
        splats: &std::ops::Range<u32>,
    ) -> [wgpu::BufferBinding<'_>; PARAM_BUFFERS] {
        let buffers = self.buffers();
        std::array::from_fn(|b| {
            let row = u64::from(words_per_splat(b, self.sh_degree, self.sh_precision)) * 4;
            rows_binding(buffers[b], row, splats)
        })
    }
}

impl SplatGradients {
    /// The gradient buffers' rows of `splats` (a window, [`splat_window`]) for a scene of SH
    /// degree `sh_degree`, in the order of [`GpuSplats::buffers`], then the densification
    /// statistics'.
    #[must_use]
    pub fn window(
        &self,
        sh_degree: u32,
        splats: &std::ops::Range<u32>,
    ) -> [wgpu::BufferBinding<'_>; PARAM_BUFFERS + 1] {
        let buffers = self.buffers();
        std::array::from_fn(|b| match buffers.get(b) {
            Some(buffer) => {
                let row = u64::from(words_per_splat(b, sh_degree, ShPrecision::F32)) * 4;
                rows_binding(buffer, row, splats)
            }
            None => rows_binding(&self.densify, DENSIFY_FLOATS * 4, splats),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[expect(clippy::float_cmp, reason = "binary16 values are exact in f32")]
    fn sixteen_bit_rows_are_padded_words_rounded_to_nearest() {
        // Band 1: 9 values a splat, 5 words; the tenth half is padding.
        let b = FIRST_SH_BUFFER + 1;
        assert_eq!(words_per_splat(b, 3, ShPrecision::F16), 5);
        assert_eq!(words_per_splat(b, 0, ShPrecision::F16), 0);
        assert_eq!(words_per_splat(FIRST_SH_BUFFER, 3, ShPrecision::F16), 3, "DC stays f32");
        assert_eq!(param_buffer_bytes(b, 7, 3, ShPrecision::F16), 7 * 5 * 4);
        assert_eq!(param_buffer_bytes(b, 0, 3, ShPrecision::F16), EMPTY_BUFFER_BYTES);
        let values: Vec<f32> =
            (0..18).map(|i| [1.0, -0.5, 1e-6, 0.1, 70_000.0, -1e9][i % 6]).collect();
        let bytes = encode(&values, b, ShPrecision::F16);
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        assert_eq!(words.len(), 10);
        // The first value in the low half (1.0 is 0x3c00, -0.5 is 0xb800).
        assert_eq!(words[0], 0x3c00 | (0xb800 << 16));
        assert_eq!(words[4] >> 16, 0, "padding");
        let back = decode(&bytes, b, 2, ShPrecision::F16);
        assert_eq!(back.len(), 18);
        for (got, want) in back.iter().zip(&values) {
            // Rounded to nearest, clamped to the largest finite binary16.
            let expected = half::f16::from_f32(want.clamp(-65_504.0, 65_504.0)).to_f32();
            assert_eq!(*got, expected, "{want}");
            assert!(got.is_finite());
        }
        assert_eq!(round_to_f16(0.1), back[3]);
        // Other buffers, and f32 storage, keep the bits.
        let round_trip =
            |b, count, precision| decode(&encode(&values, b, precision), b, count, precision);
        assert_eq!(round_trip(b, 2, ShPrecision::F32), values);
        assert_eq!(round_trip(0, 6, ShPrecision::F16), values);
    }

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
