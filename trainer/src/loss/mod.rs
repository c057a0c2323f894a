//! The training loss and the evaluation metrics on the GPU (loss.wgsl beside this file).
//!
//! Loss = `w_l1`·L1 + `w_ssim`·(1 − SSIM), the 3DGS loss (0.8 / 0.2 by default):
//! - L1 is the mean over pixels and the three colour channels of |render − ground truth|;
//! - SSIM is the mean over pixels and channels of the SSIM map with a [`WINDOW`]×[`WINDOW`]
//!   Gaussian window of σ = [`SIGMA`] (normalised to sum 1), constants [`C1`] and [`C2`], and
//!   zero padding at the borders ("same" size), exactly as 3DGS's
//!   `F.conv2d(img, window, padding=5, groups=3)`;
//! - MSE (for PSNR) is the mean of (render − ground truth)² over pixels and channels.
//!
//! With a mask the means are weighted: each pixel by its weight w in 0..1 (the ground truth's
//! alpha byte / 255; 0 = left out), divided by Σw; and SSIM's window statistics leave out
//! what the mask leaves out: each pixel counts in a window with its weight, and a window that
//! holds a pixel of weight below 1 is divided by its total weight (the zero padding outside
//! the image counts with weight 1, as in 3DGS). So an undistorted view's uncovered border, or
//! a masked-out object, changes no counted pixel's SSIM. The gradient keeps the scale 1/(3·W·H)
//! (it is the gradient of Σw·term / (3·W·H)), so that a counted pixel weighs the same in every
//! image; for an image without a mask (w = 1 everywhere) both are the plain means.
//!
//! The render is the rasterizer's `array<vec4<f32>>` [H·W] (rgb + alpha, row-major); the
//! ground truth is packed RGBA8, `array<u32>` [H·W] with r in the low byte, value/255, and
//! the weight in the alpha byte. The gradient, when asked for, is dL/d(rgb, alpha) as
//! `array<vec4<f32>>` [H·W], alpha's 0 without the alpha loss.
//!
//! Transparency ([`TargetTransparency`]): the ground truth may carry the image's alpha α as a
//! plane after its pixels ([`target_words`]). Its colours were composited over one background
//! at load; a render over another background (training's random colour a step) compares with
//! `stored + (render background − load background)·(1 − α)`, the image over the render's
//! background (compositing is linear, so this is exact up to the stored rounding). The
//! optional L1 loss on alpha adds `w_alpha`·mean(w·|`α_render` − α|) (not in the reported loss
//! and metrics, which stay the colour's).
//!
//! Two kernels, each on 16×16 pixel tiles that blur in workgroup memory (horizontal pass, then
//! vertical):
//! 1. `ssim_forward` blurs x, y, xy and (x − y)² per channel, evaluates SSIM and writes each
//!    tile's sums of 1 − SSIM, |x − y| and (x − y)² (f32, a tree within the tile), and, for
//!    the gradient, the per-pixel derivatives of SSIM with respect to the blurred quantities;
//! 2. `ssim_backward` (only with a gradient) blurs those maps again (the zero-padded symmetric
//!    window is its own adjoint) and combines them with the L1 term into dL/d(render).
//!
//! The per-tile sums are copied into a mappable buffer in the same encoder, and
//! [`ImageLoss::read_metrics`] adds them in f64 on the CPU. So each sum carries the f32
//! rounding of at most 768 terms (relative error ~1e-6 at worst, far less typically) and no
//! more.
//!
//! Everything lives in a [`LossScratch`]: no buffer is allocated per call (an encode makes
//! its one or two bind groups, which hold no memory). The derivative maps take 36 bytes per
//! pixel in one storage binding, so an image may have up to the binding limit / 36 pixels
//! (3.7 M on lavapipe's 128 MiB); [`LossScratch::new`] says so when it is more.

pub mod reference;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytemuck::{Pod, Zeroable};
use splat_render::kernels::compute::Binding::{Read, ReadWrite};
use splat_render::kernels::compute::{Compile, ComputeKernel, KernelDecl, shader_module};
use splat_render::wgpu;
use splat_render::{Category, GpuBuffer, GpuContext, GpuError, Owner, SetOnDrop};

/// Side of the SSIM window, in pixels. Keep in sync with 3DGS (11).
pub const WINDOW: usize = 11;
/// Pixels on each side of the window's centre.
pub const RADIUS: usize = WINDOW / 2;
/// Standard deviation of the Gaussian window, in pixels.
pub const SIGMA: f64 = 1.5;
/// SSIM's luminance constant, (0.01·L)² for a dynamic range L = 1.
pub const C1: f64 = 0.01 * 0.01;
/// SSIM's contrast constant, (0.03·L)² for a dynamic range L = 1.
pub const C2: f64 = 0.03 * 0.03;
/// Side of the pixel tiles the kernels work on (one workgroup, one invocation per pixel).
pub const TILE: u32 = 16;

/// The kernels' WGSL, without the generated constants (see [`shader_sources`]).
const SHADER: &str = include_str!("loss.wgsl");

/// Workgroup memory of the kernels in bytes (keep in sync with loss.wgsl): it must fit the
/// 16 KiB every WebGPU device offers.
const SPAN: usize = TILE as usize + 2 * RADIUS;
const FORWARD_SHARED_BYTES: usize = SPAN * SPAN * (8 + 4) + SPAN * TILE as usize * 16;
const BACKWARD_SHARED_BYTES: usize = SPAN * SPAN * 16;
const _: () = assert!(FORWARD_SHARED_BYTES <= 16384 && BACKWARD_SHARED_BYTES <= 16384);
const _: () = assert!(TILE * TILE <= 256, "the WebGPU minimum of invocations per workgroup");

/// Bytes per pixel of each buffer. Keep in sync with loss.wgsl.
const RENDERED_BYTES_PER_PIXEL: u64 = 16; // vec4<f32>
const TARGET_BYTES_PER_PIXEL: u64 = 4; // packed RGBA8 (the alpha plane is extra)
const MAPS_BYTES_PER_PIXEL: u64 = 3 * 3 * 4; // 3 channels × 3 maps × f32
const PARTIAL_BYTES: u64 = 16; // vec4<f32> per tile

/// The normalised 1D Gaussian window; the 2D window is its outer product with itself.
#[must_use]
pub fn gaussian_window() -> [f64; WINDOW] {
    let mut window = [0.0; WINDOW];
    for (k, w) in window.iter_mut().enumerate() {
        let x = k as f64 - RADIUS as f64;
        *w = (-x * x / (2.0 * SIGMA * SIGMA)).exp();
    }
    let sum: f64 = window.iter().sum();
    window.map(|w| w / sum)
}

/// The constants loss.wgsl expects, as WGSL, from the Rust constants above.
fn wgsl_constants() -> String {
    let window: Vec<String> =
        gaussian_window().iter().map(|&w| format!("{:?}", w as f32)).collect();
    format!(
        "// Generated by trainer/src/loss/mod.rs from its constants.\n\
         const TILE: u32 = {TILE}u;\n\
         const RADIUS: u32 = {RADIUS}u;\n\
         const WINDOW: u32 = {WINDOW}u;\n\
         const C1: f32 = {c1:?};\n\
         const C2: f32 = {c2:?};\n\
         const GAUSSIAN = array<f32, {WINDOW}>({window});\n\n",
        c1 = C1 as f32,
        c2 = C2 as f32,
        window = window.join(", "),
    )
}

/// The full WGSL of the kernels: the generated constants, then loss.wgsl.
fn shader_source() -> String {
    wgsl_constants() + SHADER
}

/// Every WGSL composition of this module, labelled, for naga validation in tests.
#[must_use]
pub fn shader_sources() -> Vec<(String, String)> {
    vec![("image loss (constants + loss.wgsl)".to_string(), shader_source())]
}

/// Weights of the two loss terms.
#[derive(Clone, Copy, Debug, PartialEq, clap::Parser, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossWeights {
    /// Weight of the mean absolute error in the loss.
    #[arg(long = "l1-weight", default_value_t = 0.8)]
    #[serde(with = "crate::exact")]
    pub l1: f32,
    /// Weight of 1 − SSIM in the loss (3DGS's λ: 0.8·L1 + 0.2·(1 − SSIM)).
    #[arg(long = "ssim-weight", default_value_t = 0.2)]
    #[serde(with = "crate::exact")]
    pub ssim: f32,
}

impl Default for LossWeights {
    /// What the command line gives when no option is given.
    fn default() -> Self {
        <Self as clap::Parser>::try_parse_from(["defaults"]).expect("the defaults parse")
    }
}

/// The loss and metrics of one image, means over pixels and the three colour channels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImageMetrics {
    /// `w_l1`·`l1` + `w_ssim`·(1 − `ssim`).
    pub loss: f64,
    /// Mean absolute error.
    pub l1: f64,
    /// Mean squared error.
    pub mse: f64,
    /// Mean SSIM.
    pub ssim: f64,
}

impl ImageMetrics {
    /// Peak signal-to-noise ratio in dB for values in 0..1: −10·log10(MSE), infinite for
    /// identical images.
    #[must_use]
    pub fn psnr(&self) -> f64 {
        if self.mse <= 0.0 { f64::INFINITY } else { -10.0 * self.mse.log10() }
    }

    /// The metrics from sums over pixels and channels of (1 − SSIM), |x − y| and (x − y)².
    #[must_use]
    pub fn from_sums(
        dissimilarity: f64,
        abs_error: f64,
        squared_error: f64,
        elements: f64,
        weights: LossWeights,
    ) -> Self {
        let l1 = abs_error / elements;
        let mse = squared_error / elements;
        let one_minus_ssim = dissimilarity / elements;
        Self {
            loss: f64::from(weights.l1) * l1 + f64::from(weights.ssim) * one_minus_ssim,
            l1,
            mse,
            ssim: 1.0 - one_minus_ssim,
        }
    }
}

/// Words of a ground-truth buffer of `pixels` pixels: one packed RGBA8 word a pixel, and with
/// `alpha_plane` the image's alpha after them, a byte a pixel (four a word, pixel i in byte
/// i % 4 of word `pixels` + i / 4).
#[must_use]
pub fn target_words(pixels: u64, alpha_plane: bool) -> u64 {
    pixels + if alpha_plane { pixels.div_ceil(4) } else { 0 }
}

/// How the ground truth's transparency enters the loss (see the module docs). The default
/// uses none: the image as stored, no alpha loss.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TargetTransparency {
    /// The target buffer carries an alpha plane ([`target_words`]).
    pub alpha_plane: bool,
    /// The render's background minus the one the image was composited over at load: the
    /// target's colour is moved by this times (1 − α); nothing without the alpha plane.
    pub background_shift: [f32; 3],
    /// Weight of the mean absolute error between the rendered alpha and the image's (0:
    /// none; the image's is 1 everywhere without the alpha plane).
    pub alpha_weight: f32,
}

/// Per-encode parameters. Keep in sync with `LossParams` in loss.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
struct LossParams {
    width: u32,
    height: u32,
    /// 1: `ssim_forward` writes the derivative maps for `ssim_backward`.
    write_maps: u32,
    /// 1: the target has an alpha plane after its pixels.
    alpha_plane: u32,
    /// dL/d|x − y| per element: `w_l1` / (3·W·H).
    l1_scale: f32,
    /// dL/dS per element: −`w_ssim` / (3·W·H).
    ssim_scale: f32,
    /// dL/d|`α_render` − α| per pixel: `w_alpha` / (W·H).
    alpha_scale: f32,
    _pad0: u32,
    /// xyz: the render's background minus the target's (w unused).
    background_shift: [f32; 4],
}
const _: () = assert!(size_of::<LossParams>() == 48);

/// Tiles (workgroups) along x and y for an image.
fn tile_grid(width: u32, height: u32) -> (u32, u32) {
    (width.div_ceil(TILE), height.div_ceil(TILE))
}

/// What the per-tile sums of an encode mean: enough to turn them into metrics once they
/// are read back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SumsLayout {
    width: u32,
    height: u32,
    weights: LossWeights,
}

impl SumsLayout {
    /// Bytes of the per-tile sums.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        let (tiles_x, tiles_y) = tile_grid(self.width, self.height);
        u64::from(tiles_x * tiles_y) * PARTIAL_BYTES
    }

    /// The metrics from the per-tile sums (`self.bytes()` of them), added in f64.
    #[must_use]
    pub fn metrics(&self, sums: &[u8]) -> ImageMetrics {
        let mut total = [0.0_f64; 4];
        for (k, bytes) in sums.chunks_exact(4).enumerate() {
            total[k % 4] += f64::from(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
        }
        // Σw: the pixels that count (all, without a mask).
        let [dissimilarity, abs_error, squared_error, counted] = total;
        let elements = 3.0 * counted.max(1.0);
        ImageMetrics::from_sums(dissimilarity, abs_error, squared_error, elements, self.weights)
    }
}

/// The loss's buffers for images up to a size: uniforms, derivative maps, per-tile sums and
/// their readback copy. Grow-only (see [`LossScratch::ensure`]). One encode per scratch per
/// submit: the uniforms are written with `queue.write_buffer`, which lands at the next submit.
#[derive(Debug)]
pub struct LossScratch {
    /// [`LossParams`].
    params: GpuBuffer,
    /// [3 channels, 3 maps, pixels] f32: the derivative maps.
    maps: GpuBuffer,
    /// [tiles] `vec4<f32>`: per-tile sums.
    partials: GpuBuffer,
    /// The per-tile sums, copied for mapping.
    staging: GpuBuffer,
    /// Most pixels an image may have.
    pixel_capacity: u64,
    /// Most tiles an image may have.
    tile_capacity: u32,
    owner: Owner,
    /// The last encode, for `read_metrics`.
    last: Mutex<Option<SumsLayout>>,
    /// Bind groups of earlier encodes, one per (image, target, gradient, size): a training
    /// run renders into one image and reads a fixed set of targets, so after the first
    /// epoch an encode makes none. Entries for another rendered image are dropped when one
    /// appears (the image buffer grew), so no stale buffer is kept alive.
    bindings: Mutex<Vec<LossBindings>>,
}

#[derive(Debug)]
struct LossBindings {
    rendered: wgpu::Buffer,
    target: wgpu::Buffer,
    v_image: Option<wgpu::Buffer>,
    pixels: u64,
    alpha_plane: bool,
    forward: wgpu::BindGroup,
    backward: Option<wgpu::BindGroup>,
}

impl LossScratch {
    /// Buffers for images of up to `width`×`height` pixels (and as many 16×16 tiles), in the
    /// ledger under `owner` (rasterizer scratch; uniforms and readback as other).
    pub fn new(ctx: &GpuContext, width: u32, height: u32, owner: Owner) -> Result<Self, GpuError> {
        let pixels = u64::from(width.max(1)) * u64::from(height.max(1));
        let (tiles_x, tiles_y) = tile_grid(width.max(1), height.max(1));
        Self::with_capacity(ctx, pixels, tiles_x * tiles_y, owner)
    }

    fn with_capacity(
        ctx: &GpuContext,
        pixels: u64,
        tiles: u32,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let maps_bytes = pixels * MAPS_BYTES_PER_PIXEL;
        ctx.check_whole_binding("loss derivative maps", maps_bytes)?;
        let partial_bytes = u64::from(tiles) * PARTIAL_BYTES;
        Ok(Self {
            params: ctx.create_buffer(
                "loss params",
                size_of::<LossParams>() as u64,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                Category::Other,
                owner,
            )?,
            maps: ctx.create_buffer(
                "loss derivative maps",
                maps_bytes,
                wgpu::BufferUsages::STORAGE,
                Category::RasterizerScratch,
                owner,
            )?,
            partials: ctx.create_buffer(
                "loss per-tile sums",
                partial_bytes,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                Category::RasterizerScratch,
                owner,
            )?,
            staging: ctx.create_buffer(
                "loss sums readback",
                partial_bytes,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                Category::Other,
                owner,
            )?,
            pixel_capacity: pixels,
            tile_capacity: tiles,
            owner,
            last: Mutex::new(None),
            bindings: Mutex::new(Vec::new()),
        })
    }

    /// Grows the buffers (never shrinks them) so that a `width`×`height` image fits; returns
    /// whether it had to. Forgets the last encode when it grows.
    pub fn ensure(&mut self, ctx: &GpuContext, width: u32, height: u32) -> Result<bool, GpuError> {
        if self.fits(width, height) {
            return Ok(false);
        }
        let (tiles_x, tiles_y) = tile_grid(width, height);
        let pixels = self.pixel_capacity.max(u64::from(width) * u64::from(height));
        let tiles = self.tile_capacity.max(tiles_x * tiles_y);
        *self = Self::with_capacity(ctx, pixels, tiles, self.owner)?;
        Ok(true)
    }

    /// Whether a `width`×`height` image fits this scratch.
    #[must_use]
    pub fn fits(&self, width: u32, height: u32) -> bool {
        let (tiles_x, tiles_y) = tile_grid(width, height);
        u64::from(width) * u64::from(height) <= self.pixel_capacity
            && u64::from(tiles_x) * u64::from(tiles_y) <= u64::from(self.tile_capacity)
    }

    fn set_last(&self, encoded: Option<SumsLayout>) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = encoded;
    }

    /// Records a copy of the last encode's per-tile sums into `dst` (`MAP_READ | COPY_DST`,
    /// at least [`LossScratch::sums_capacity`] bytes) and says how to read them.
    pub fn copy_sums(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        dst: &wgpu::Buffer,
    ) -> Result<SumsLayout, GpuError> {
        let Some(layout) = *self.last.lock().unwrap_or_else(PoisonError::into_inner) else {
            return Err(GpuError::Validation {
                label: "image loss".into(),
                message: "read_metrics before any encode with this scratch".into(),
            });
        };
        encoder.copy_buffer_to_buffer(&self.partials, 0, dst, 0, layout.bytes());
        Ok(layout)
    }

    /// Bytes a copy of the per-tile sums may need.
    #[must_use]
    pub fn sums_capacity(&self) -> u64 {
        u64::from(self.tile_capacity) * PARTIAL_BYTES
    }

    /// Records a copy of the last encode's sums into this scratch's read-back buffer; after the
    /// submit, [`LossScratch::read_recorded`] reads them.
    pub fn record_readback(
        &self,
        encoder: &mut wgpu::CommandEncoder,
    ) -> Result<SumsLayout, GpuError> {
        self.copy_sums(encoder, &self.staging)
    }

    /// The metrics [`LossScratch::record_readback`] copied, once the GPU has them (awaits
    /// without blocking the thread).
    pub async fn read_recorded(
        &self,
        ctx: &GpuContext,
        layout: SumsLayout,
    ) -> Result<ImageMetrics, GpuError> {
        ctx.read_mapped(&self.staging, layout.bytes(), |sums| layout.metrics(sums)).await
    }
}

/// The loss kernels: `ssim_forward` and `ssim_backward` of loss.wgsl.
#[derive(Debug)]
pub struct ImageLoss {
    forward: ComputeKernel,
    backward: ComputeKernel,
}

/// Bindings of loss.wgsl. Keep in sync with it.
/// loss.wgsl `ssim_forward`: the parameters, the render, the ground truth, the SSIM maps and
/// the per-tile sums written.
const FORWARD: KernelDecl = KernelDecl {
    label: "image loss forward",
    entry: "ssim_forward",
    bindings: &[(0, Read), (1, Read), (2, Read), (3, ReadWrite), (4, ReadWrite)],
};

/// loss.wgsl `ssim_backward`: the same inputs and maps, the image's gradient written.
const BACKWARD: KernelDecl = KernelDecl {
    label: "image loss backward",
    entry: "ssim_backward",
    bindings: &[(0, Read), (1, Read), (2, Read), (3, ReadWrite), (5, ReadWrite)],
};

impl ImageLoss {
    /// Compiles the kernels. A failure (which a driver bug could cause) shows in
    /// [`GpuContext::take_uncaptured_errors`] and makes later encodes fail.
    #[must_use]
    pub fn new(ctx: &GpuContext) -> Self {
        let module = shader_module(&ctx.device, "image loss", &shader_source());
        let kernel = |decl| ComputeKernel::new(&ctx.device, &module, decl, &Compile::default());
        Self { forward: kernel(&FORWARD), backward: kernel(&BACKWARD) }
    }

    /// A scratch for images of up to `width`×`height` pixels; see [`LossScratch::new`].
    pub fn scratch(
        &self,
        ctx: &GpuContext,
        width: u32,
        height: u32,
        owner: Owner,
    ) -> Result<LossScratch, GpuError> {
        LossScratch::new(ctx, width, height, owner)
    }

    /// Records the loss of `rendered` ([H·W] `vec4<f32>`) against `target` ([H·W] packed
    /// RGBA8), and its gradient into `v_image` ([H·W] `vec4<f32>`) when that is `Some`, plus the
    /// copy of the sums that [`ImageLoss::read_metrics`] reads after the submit. Writes the
    /// scratch's uniforms (one encode per scratch per submit). A size that does not fit, a
    /// buffer too small or an aliased `v_image` is an error before anything is recorded.
    #[expect(clippy::too_many_arguments, reason = "one call per image; each input is distinct")]
    pub fn encode(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        rendered: &wgpu::Buffer,
        target: &wgpu::Buffer,
        width: u32,
        height: u32,
        weights: LossWeights,
        v_image: Option<&wgpu::Buffer>,
        scratch: &LossScratch,
    ) -> Result<(), GpuError> {
        let images = LossImages { rendered, target, width, height, v_image };
        self.encode_with(ctx, encoder, images, weights, TargetTransparency::default(), scratch)
    }

    /// [`ImageLoss::encode`] with the target's transparency: its alpha plane, the shift of
    /// its background and the alpha loss ([`TargetTransparency`]; the target then holds
    /// [`target_words`] words).
    pub fn encode_with(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        images: LossImages<'_>,
        weights: LossWeights,
        transparency: TargetTransparency,
        scratch: &LossScratch,
    ) -> Result<(), GpuError> {
        let LossImages { rendered, target, width, height, v_image } = images;
        let invalid =
            |message: String| GpuError::Validation { label: "image loss".into(), message };
        if width == 0 || height == 0 {
            return Err(invalid(format!("the image is {width}×{height} pixels")));
        }
        if !scratch.fits(width, height) {
            return Err(invalid(format!(
                "a {width}×{height} image does not fit the scratch ({} pixels, {} tiles); \
                 grow it with LossScratch::ensure",
                scratch.pixel_capacity, scratch.tile_capacity
            )));
        }
        let (tiles_x, tiles_y) = tile_grid(width, height);
        let max_groups = ctx.device.limits().max_compute_workgroups_per_dimension;
        if tiles_x > max_groups || tiles_y > max_groups {
            return Err(invalid(format!("{tiles_x}×{tiles_y} tiles is more than {max_groups}")));
        }
        let pixels = u64::from(width) * u64::from(height);
        // Without a plane the image is opaque (α = 1): a shift moves nothing, and the alpha
        // loss asks for an opaque render (an opaque view of a transparent dataset).
        let alpha_plane = transparency.alpha_plane;
        let target_bytes = target_words(pixels, alpha_plane) * TARGET_BYTES_PER_PIXEL;
        let buffers = [
            Some(("rendered", rendered, pixels * RENDERED_BYTES_PER_PIXEL)),
            Some(("target", target, target_bytes)),
            v_image.map(|v| ("v_image", v, pixels * RENDERED_BYTES_PER_PIXEL)),
        ];
        for (name, buffer, bytes) in buffers.into_iter().flatten() {
            if buffer.size() < bytes {
                return Err(invalid(format!(
                    "buffer '{name}' is {} bytes; a {width}×{height} image needs {bytes}",
                    buffer.size(),
                )));
            }
        }

        if v_image.is_some_and(|v| v == rendered || v == target) {
            return Err(invalid("v_image must be a buffer of its own".into()));
        }

        let elements = 3.0 * pixels as f64;
        let [r, g, b] = transparency.background_shift;
        let params = LossParams {
            width,
            height,
            write_maps: u32::from(v_image.is_some()),
            alpha_plane: u32::from(alpha_plane),
            l1_scale: (f64::from(weights.l1) / elements) as f32,
            ssim_scale: (-f64::from(weights.ssim) / elements) as f32,
            alpha_scale: (f64::from(transparency.alpha_weight) / pixels as f64) as f32,
            background_shift: [r, g, b, 0.0],
            ..LossParams::default()
        };
        ctx.checked("image loss", || {
            let binding = Binding { rendered, target, pixels, alpha_plane, v_image };
            let (forward_group, backward_group) = self.bind_groups(ctx, binding, scratch);
            ctx.queue.write_buffer(&scratch.params, 0, bytemuck::bytes_of(&params));
            ctx.profile_stage("loss");
            {
                let timer = ctx.pass_timer();
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("image loss forward"),
                    timestamp_writes: timer.as_ref().map(splat_render::PassTimer::writes),
                });
                pass.set_pipeline(self.forward.pipeline());
                pass.set_bind_group(0, &forward_group, &[]);
                pass.dispatch_workgroups(tiles_x, tiles_y, 1);
            }
            // A pass of its own, so the maps are complete before they are read.
            if let Some(backward_group) = &backward_group {
                let timer = ctx.pass_timer();
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("image loss backward"),
                    timestamp_writes: timer.as_ref().map(splat_render::PassTimer::writes),
                });
                pass.set_pipeline(self.backward.pipeline());
                pass.set_bind_group(0, backward_group, &[]);
                pass.dispatch_workgroups(tiles_x, tiles_y, 1);
            }
            Ok(())
        })?;
        scratch.set_last(Some(SumsLayout { width, height, weights }));
        Ok(())
    }

    /// The bind groups of one encode: the forward's, and the backward's when there is a
    /// gradient to write (made once per set of buffers and size; see `LossScratch::bindings`).
    fn bind_groups(
        &self,
        ctx: &GpuContext,
        binding: Binding<'_>,
        scratch: &LossScratch,
    ) -> (wgpu::BindGroup, Option<wgpu::BindGroup>) {
        let Binding { rendered, target, pixels, alpha_plane, v_image } = binding;
        let mut cache = scratch.bindings.lock().unwrap_or_else(PoisonError::into_inner);
        let found = cache.iter().find(|b| {
            b.rendered == *rendered
                && b.target == *target
                && b.pixels == pixels
                && b.alpha_plane == alpha_plane
                && b.v_image.as_ref() == v_image
        });
        if let Some(b) = found {
            return (b.forward.clone(), b.backward.clone());
        }
        cache.retain(|b| b.rendered == *rendered);
        let (forward, backward) = self.make_bind_groups(ctx, binding, scratch);
        cache.push(LossBindings {
            rendered: rendered.clone(),
            target: target.clone(),
            v_image: v_image.cloned(),
            pixels,
            alpha_plane,
            forward: forward.clone(),
            backward: backward.clone(),
        });
        (forward, backward)
    }

    /// The images are bound for exactly `pixels` pixels (the target with its alpha plane
    /// when it has one).
    fn make_bind_groups(
        &self,
        ctx: &GpuContext,
        binding: Binding<'_>,
        scratch: &LossScratch,
    ) -> (wgpu::BindGroup, Option<wgpu::BindGroup>) {
        let Binding { rendered, target, pixels, alpha_plane, v_image } = binding;
        let image = |buffer, bytes_per_pixel| prefix_binding(buffer, pixels * bytes_per_pixel);
        let target_bytes = target_words(pixels, alpha_plane) * TARGET_BYTES_PER_PIXEL;
        let common = [
            scratch.params.as_entire_binding(),
            image(rendered, RENDERED_BYTES_PER_PIXEL),
            prefix_binding(target, target_bytes),
            scratch.maps.as_entire_binding(),
        ];
        let with = |last| {
            let mut resources = common.to_vec();
            resources.push(last);
            resources
        };
        let forward = self.forward.bind(&ctx.device, &with(scratch.partials.as_entire_binding()));
        let backward = v_image.map(|v_image| {
            let resources = with(image(v_image, RENDERED_BYTES_PER_PIXEL));
            self.backward.bind(&ctx.device, &resources)
        });
        (forward, backward)
    }

    /// Blocks until the GPU is done and returns the metrics of the last encode with this
    /// scratch (whose command buffer must have been submitted).
    pub fn read_metrics(
        &self,
        ctx: &GpuContext,
        scratch: &LossScratch,
    ) -> Result<ImageMetrics, GpuError> {
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("loss sums") });
        let layout = scratch.record_readback(&mut encoder)?;
        ctx.queue.submit([encoder.finish()]);
        pollster::block_on(scratch.read_recorded(ctx, layout))
    }
}

/// The images of one loss encode.
#[derive(Clone, Copy, Debug)]
pub struct LossImages<'a> {
    /// [H·W] `vec4<f32>`: the render, rgb and alpha.
    pub rendered: &'a wgpu::Buffer,
    /// The ground truth: [H·W] packed RGBA8, then its alpha plane if it has one.
    pub target: &'a wgpu::Buffer,
    pub width: u32,
    pub height: u32,
    /// [H·W] `vec4<f32>`: where the gradient goes; `None`: metrics only.
    pub v_image: Option<&'a wgpu::Buffer>,
}

/// What a pair of bind groups binds.
#[derive(Clone, Copy)]
struct Binding<'a> {
    rendered: &'a wgpu::Buffer,
    target: &'a wgpu::Buffer,
    pixels: u64,
    alpha_plane: bool,
    v_image: Option<&'a wgpu::Buffer>,
}

/// The training loss of recent steps, read back without waiting: each step copies its
/// per-tile sums into a free slot of a small ring; the slot is mapped after the submit and
/// read a step or so later, when the GPU has got there. A step that finds every slot in
/// flight is not measured (nothing queues up on the GPU: the ring is all there is).
#[derive(Debug)]
pub struct MetricsRing {
    slots: Vec<RingSlot>,
}

#[derive(Debug)]
struct RingSlot {
    buffer: GpuBuffer,
    state: SlotState,
    ready: Arc<AtomicBool>,
    tag: u32,
    layout: Option<SumsLayout>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    /// Copied into by an encoder not yet known to be submitted.
    Copied,
    Mapping,
}

/// Slots of a [`MetricsRing`]: one being written, one in flight, one spare.
pub const METRICS_SLOTS: usize = 3;

impl MetricsRing {
    /// A ring for the sums of `scratch`'s images, in the ledger under `owner`.
    pub fn new(ctx: &GpuContext, scratch: &LossScratch, owner: Owner) -> Result<Self, GpuError> {
        let slots = (0..METRICS_SLOTS)
            .map(|_| {
                Ok(RingSlot {
                    buffer: ctx.create_buffer(
                        "loss sums ring",
                        scratch.sums_capacity(),
                        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        Category::Other,
                        owner,
                    )?,
                    state: SlotState::Free,
                    ready: Arc::default(),
                    tag: 0,
                    layout: None,
                })
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(Self { slots })
    }

    /// Records a copy of `scratch`'s last sums under `tag` (a step number). False when every
    /// slot is in flight (that step goes unmeasured).
    pub fn record(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        scratch: &LossScratch,
        tag: u32,
    ) -> Result<bool, GpuError> {
        let Some(slot) = self.slots.iter_mut().find(|s| s.state == SlotState::Free) else {
            return Ok(false);
        };
        slot.layout = Some(scratch.copy_sums(encoder, &slot.buffer)?);
        slot.tag = tag;
        slot.state = SlotState::Copied;
        Ok(true)
    }

    /// Asks for the slots recorded since the last call to be mapped. Call after submitting
    /// the encoder given to [`MetricsRing::record`].
    pub fn map_recorded(&mut self, ctx: &GpuContext) {
        for slot in &mut self.slots {
            if slot.state != SlotState::Copied {
                continue;
            }
            let Some(layout) = slot.layout else { continue };
            // Ready when the callback runs or is dropped uncalled: a flag set only by the call
            // left `settle` waiting forever when wgpu dropped one (see `SetOnDrop`).
            let ready = SetOnDrop(Arc::clone(&slot.ready));
            slot.buffer.slice(..layout.bytes()).map_async(wgpu::MapMode::Read, move |result| {
                let _ready = ready;
                // A run torn down with a read-back in flight ends here (its buffer went): that
                // step goes unmeasured, which is no news for anyone reading the log.
                if let Err(e) = result {
                    log::debug!("reading the loss back failed: {e}");
                }
            });
            slot.state = SlotState::Mapping;
        }
        ctx.poll_soon();
    }

    /// The oldest measurement the GPU has finished, if any: (tag, metrics). Never waits.
    pub fn take_ready(&mut self) -> Option<(u32, ImageMetrics)> {
        let slot = self
            .slots
            .iter_mut()
            .filter(|s| s.state == SlotState::Mapping && s.ready.load(Ordering::Acquire))
            .min_by_key(|s| s.tag)?;
        let layout = slot.layout.take()?;
        let metrics = slot
            .buffer
            .slice(..layout.bytes())
            .get_mapped_range()
            .map(|sums| layout.metrics(&sums))
            .ok();
        slot.buffer.unmap();
        slot.ready.store(false, Ordering::Release);
        slot.state = SlotState::Free;
        metrics.map(|m| (slot.tag, m))
    }

    /// Waits until every measurement requested is readable (so a run that pauses or ends
    /// reports all of its steps). Awaits without blocking the thread.
    pub async fn settle(&mut self, ctx: &GpuContext) -> Result<(), GpuError> {
        // A mapping's callback runs in the poll that finds its work done; an `idle` that
        // resolves in that same poll may be seen first, so wait until the flags say so.
        while self
            .slots
            .iter()
            .any(|s| s.state == SlotState::Mapping && !s.ready.load(Ordering::Acquire))
        {
            ctx.idle().await?;
        }
        Ok(())
    }
}

/// The first `bytes` of `buffer`.
fn prefix_binding(buffer: &wgpu::Buffer, bytes: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset: 0,
        size: wgpu::BufferSize::new(bytes),
    })
}
