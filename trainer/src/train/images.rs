//! Ground-truth images on the GPU: packed as RGBA8 (mask and alpha with them), resident for the
//! whole run or streamed a step ahead, and shrunk for the coarse stages of progressive training.

use splat_render::{Camera, Category, GpuBuffer, GpuContext, GpuError, Owner, wgpu};

use super::ImagePlacement;
use crate::dataset::{Dataset, View};
use crate::loss::target_words;

/// `camera` for its image shrunk `divisor` times (each pixel the mean of divisor × divisor;
/// at most the image's width and height): the size rounded down (the last columns and rows
/// that do not fill a block are left out), the intrinsics divided (pixel centres at +0.5 stay
/// centred on their blocks).
#[must_use]
pub fn shrunk_camera(camera: Camera, divisor: u32) -> Camera {
    if divisor <= 1 {
        return camera;
    }
    let d = divisor as f32;
    Camera {
        width: camera.width / divisor,
        height: camera.height / divisor,
        fx: camera.fx / d,
        fy: camera.fy / d,
        cx: camera.cx / d,
        cy: camera.cy / d,
        ..camera
    }
}

/// [`StepScratch::coarse`]: the two slots, and the host buffers the images are shrunk and
/// packed in (reused: no allocation per step).
pub(super) struct CoarseTargets {
    pub(super) slots: [GpuBuffer; 2],
    pack: Vec<u32>,
    sums: Vec<u32>,
}

impl CoarseTargets {
    pub(super) fn new(ctx: &GpuContext, dataset: &Dataset, owner: Owner) -> Result<Self, GpuError> {
        let (width, height) = dataset.largest_image();
        let pixels = u64::from(width / 2) * u64::from(height / 2);
        let words = target_words(pixels, dataset.has_transparency());
        Ok(Self {
            slots: image_slots(ctx, "coarse target image", words, owner)?,
            pack: Vec::with_capacity(words as usize),
            sums: Vec::with_capacity(3 * pixels as usize),
        })
    }

    /// Uploads `view`'s image shrunk `divisor` times into `slot` (it lands with the next
    /// submit).
    pub(super) fn prepare(&mut self, ctx: &GpuContext, view: &View, divisor: u32, slot: usize) {
        pack_shrunk_rgba8(view, divisor, &mut self.pack, &mut self.sums);
        ctx.queue.write_buffer(&self.slots[slot], 0, bytemuck::cast_slice(&self.pack));
    }
}

/// Two streamed image buffers of `words` packed words each, labelled `label 0` and `label 1`.
pub(super) fn image_slots(
    ctx: &GpuContext,
    label: &str,
    words: u64,
    owner: Owner,
) -> Result<[GpuBuffer; 2], GpuError> {
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
    let slot = |i: usize| {
        ctx.create_buffer(&format!("{label} {i}"), words * 4, usage, Category::DatasetImages, owner)
    };
    Ok([slot(0)?, slot(1)?])
}

/// The ground-truth images on the GPU.
pub(super) enum Targets {
    /// One buffer per view: train views, then eval views.
    Resident { train: Vec<GpuBuffer>, eval: Vec<GpuBuffer> },
    /// This step's image and the next one's; `pack` is the reused host buffer they are packed
    /// in (no allocation per step).
    Streamed { slots: [GpuBuffer; 2], pack: Vec<u32> },
}

/// Bytes of every train and eval image as packed RGBA8 (with its alpha plane when it has
/// transparency): what [`ImagePlacement::Resident`] puts on the GPU.
#[must_use]
pub fn resident_image_bytes(dataset: &Dataset) -> u64 {
    dataset.views().map(|v| 4 * target_words(pixels_of(v), v.alpha.is_some())).sum()
}

pub(super) fn pixels_of(view: &View) -> u64 {
    u64::from(view.camera.width) * u64::from(view.camera.height)
}

/// Upload in batches of at most this many bytes, waiting for each, so that wgpu's staging
/// copies of a large dataset do not pile up in host memory.
pub(super) const UPLOAD_BATCH_BYTES: u64 = 64 << 20;

impl Targets {
    pub(super) fn new(
        ctx: &GpuContext,
        dataset: &Dataset,
        placement: ImagePlacement,
        owner: Owner,
    ) -> Result<Self, GpuError> {
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let mut pack = Vec::new();
        match placement {
            ImagePlacement::Resident => {
                let mut batch = 0;
                let mut upload = |view: &View, label: &str| -> Result<GpuBuffer, GpuError> {
                    pack_rgba8(view, &mut pack);
                    let bytes = pack.len() as u64 * 4;
                    let buffer =
                        ctx.create_buffer(label, bytes, storage, Category::DatasetImages, owner)?;
                    ctx.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&pack));
                    batch += bytes;
                    if batch >= UPLOAD_BATCH_BYTES {
                        ctx.queue.submit([]);
                        ctx.wait_idle()?;
                        batch = 0;
                    }
                    Ok(buffer)
                };
                let train = dataset
                    .train
                    .iter()
                    .map(|v| upload(v, "train image"))
                    .collect::<Result<Vec<_>, _>>()?;
                let eval = dataset
                    .eval
                    .iter()
                    .map(|v| upload(v, "eval image"))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Self::Resident { train, eval })
            }
            ImagePlacement::Streamed => {
                let (width, height) = dataset.largest_image();
                let pixels = u64::from(width) * u64::from(height);
                let words = target_words(pixels, dataset.has_transparency());
                pack.reserve(words as usize);
                Ok(Self::Streamed { slots: image_slots(ctx, "target image", words, owner)?, pack })
            }
        }
    }

    /// Makes `view`'s image available in `slot` (streamed: uploads it; it lands with the next
    /// submit) and returns its buffer.
    pub(super) fn prepare(
        &mut self,
        ctx: &GpuContext,
        view: &View,
        which: TargetRef,
    ) -> &GpuBuffer {
        match self {
            Self::Resident { train, eval } => match which {
                TargetRef::Train(i, _) => &train[i],
                TargetRef::Eval(i, _) => &eval[i],
            },
            Self::Streamed { slots, pack } => {
                let (TargetRef::Train(_, slot) | TargetRef::Eval(_, slot)) = which;
                pack_rgba8(view, pack);
                ctx.queue.write_buffer(&slots[slot], 0, bytemuck::cast_slice(pack));
                &slots[slot]
            }
        }
    }

    /// The buffer holding `which` (already prepared).
    pub(super) fn get(&self, which: TargetRef) -> &GpuBuffer {
        match (self, which) {
            (Self::Resident { train, .. }, TargetRef::Train(i, _)) => &train[i],
            (Self::Resident { eval, .. }, TargetRef::Eval(i, _)) => &eval[i],
            (Self::Streamed { slots, .. }, TargetRef::Train(_, s) | TargetRef::Eval(_, s)) => {
                &slots[s]
            }
        }
    }
}

/// A view's image: its index among the train (or eval) views, and the streaming slot it goes
/// to when images are streamed.
#[derive(Clone, Copy, Debug)]
pub(super) enum TargetRef {
    Train(usize, usize),
    Eval(usize, usize),
}

/// Packs `view`'s image as RGBA8 words into `out` (reused: no allocation once it is large
/// enough), its mask in the alpha byte (the loss's pixel weight; 255 without a mask), and,
/// when it has transparency, its alpha plane after the pixels (`loss::target_words`).
pub(super) fn pack_rgba8(view: &View, out: &mut Vec<u32>) {
    out.clear();
    let rgb = view.image.pixels().map(|p| p.0);
    match &view.mask {
        Some(mask) => out.extend(
            rgb.zip(mask.pixels()).map(|([r, g, b], w)| u32::from_le_bytes([r, g, b, w.0[0]])),
        ),
        None => out.extend(rgb.map(|[r, g, b]| u32::from_le_bytes([r, g, b, 255]))),
    }
    if let Some(alpha) = &view.alpha {
        out.extend(alpha.as_raw().chunks(4).map(|bytes| {
            let mut word = [0; 4];
            word[..bytes.len()].copy_from_slice(bytes);
            u32::from_le_bytes(word)
        }));
    }
}

/// [`pack_rgba8`] of `view`'s image shrunk `divisor` times: each colour, mask weight and alpha
/// the rounded mean of its divisor × divisor block; the last columns and rows that do not fill
/// a block are left out, as in [`shrunk_camera`]. `sums` is scratch.
pub(super) fn pack_shrunk_rgba8(
    view: &View,
    divisor: u32,
    out: &mut Vec<u32>,
    sums: &mut Vec<u32>,
) {
    let size = (view.image.width() / divisor, view.image.height() / divisor);
    let width = view.image.width();
    let n = divisor * divisor;
    let mean = |sum: u32| ((sum + n / 2) / n) as u8;
    out.clear();
    block_sums(view.image.as_raw(), width, 3, divisor, size, sums);
    out.extend(
        sums.chunks_exact(3).map(|c| u32::from_le_bytes([mean(c[0]), mean(c[1]), mean(c[2]), 255])),
    );
    if let Some(mask) = &view.mask {
        block_sums(mask.as_raw(), width, 1, divisor, size, sums);
        for (word, &sum) in out.iter_mut().zip(sums.iter()) {
            *word = (*word & 0x00ff_ffff) | (u32::from(mean(sum)) << 24);
        }
    }
    if let Some(alpha) = &view.alpha {
        block_sums(alpha.as_raw(), width, 1, divisor, size, sums);
        out.extend(sums.chunks(4).map(|c| {
            let mut word = [0; 4];
            for (byte, &sum) in word.iter_mut().zip(c) {
                *byte = mean(sum);
            }
            u32::from_le_bytes(word)
        }));
    }
}

/// The sum of each `divisor` × `divisor` block of an image `width` pixels wide of `channels`
/// bytes a pixel, for an image of `size` blocks, into `sums` (row-major, `channels` a block).
pub(super) fn block_sums(
    raw: &[u8],
    width: u32,
    channels: usize,
    divisor: u32,
    size: (u32, u32),
    sums: &mut Vec<u32>,
) {
    let (d, width, out_width) = (divisor as usize, width as usize, size.0 as usize);
    sums.clear();
    sums.resize(out_width * size.1 as usize * channels, 0);
    for y in 0..size.1 as usize * d {
        let row = &raw[y * width * channels..][..out_width * d * channels];
        let out = &mut sums[(y / d) * out_width * channels..][..out_width * channels];
        for (x, pixel) in row.chunks_exact(channels).enumerate() {
            for (sum, &byte) in out[(x / d) * channels..].iter_mut().zip(pixel) {
                *sum += u32::from(byte);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use splat_formats::random::SplitMix64;

    use super::*;

    /// A view of `width` × `height` with every byte of its image, mask and alpha drawn from
    /// `seed`.
    fn random_view(width: u32, height: u32, seed: u64) -> View {
        let mut rng = SplitMix64::new(seed);
        let mut byte = || (rng.next_u64() >> 56) as u8;
        let image =
            image::RgbImage::from_fn(width, height, |_, _| image::Rgb([byte(), byte(), byte()]));
        let mask = image::GrayImage::from_fn(width, height, |_, _| image::Luma([byte()]));
        let alpha = image::GrayImage::from_fn(width, height, |_, _| image::Luma([byte()]));
        let camera = Camera {
            width,
            height,
            fx: 50.0,
            fy: 50.0,
            cx: width as f32 / 2.0,
            cy: height as f32 / 2.0,
            world_from_camera: glam::Mat4::IDENTITY,
        };
        View {
            index: 0,
            name: "random".into(),
            camera,
            image,
            mask: Some(mask),
            alpha: Some(alpha),
            exposure: crate::dataset::Exposure::default(),
        }
    }

    /// The reference: each shrunk pixel's channels, one at a time, the rounded mean of its
    /// block, read pixel by pixel.
    fn shrunk_reference(view: &View, d: u32) -> Vec<u32> {
        let (w, h) = (view.image.width() / d, view.image.height() / d);
        let mean = |get: &dyn Fn(u32, u32) -> u8, x: u32, y: u32| {
            let sum: u32 = (0..d * d).map(|k| u32::from(get(x * d + k % d, y * d + k / d))).sum();
            ((sum + d * d / 2) / (d * d)) as u8
        };
        let mask = view.mask.as_ref().unwrap();
        let alpha = view.alpha.as_ref().unwrap();
        let mut words = Vec::new();
        let mut alphas = Vec::new();
        for y in 0..h {
            for x in 0..w {
                let c = |i: usize| mean(&|px, py| view.image.get_pixel(px, py).0[i], x, y);
                let weight = mean(&|px, py| mask.get_pixel(px, py).0[0], x, y);
                words.push(u32::from_le_bytes([c(0), c(1), c(2), weight]));
                alphas.push(mean(&|px, py| alpha.get_pixel(px, py).0[0], x, y));
            }
        }
        words.extend(alphas.chunks(4).map(|c| {
            let mut word = [0; 4];
            word[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(word)
        }));
        words
    }

    #[test]
    fn shrunk_images_are_the_means_of_their_blocks() {
        // Sizes that divide and that leave columns and rows out; a pixel count that leaves
        // the last alpha word part-filled.
        for (width, height, d) in [(16, 8, 2), (17, 9, 2), (23, 13, 4), (9, 7, 4)] {
            let view = random_view(width, height, u64::from(width * 31 + d));
            let (mut out, mut sums) = (Vec::new(), Vec::new());
            pack_shrunk_rgba8(&view, d, &mut out, &mut sums);
            assert_eq!(out, shrunk_reference(&view, d), "{width}×{height} / {d}");
            let pixels = u64::from(width / d) * u64::from(height / d);
            assert_eq!(out.len() as u64, target_words(pixels, true));
        }
    }

    #[test]
    fn a_shrunk_camera_sees_the_same_point_at_the_centre_of_its_block() {
        let camera = random_view(1601, 899, 1).camera;
        let camera = Camera { fx: 1200.0, fy: 1100.0, cx: 801.3, cy: 447.9, ..camera };
        let shrunk = shrunk_camera(camera, 4);
        assert_eq!((shrunk.width, shrunk.height), (400, 224));
        // A point on the ray through full-size pixel centre (u, v): at shrunk pixel
        // ((u + 0.5) / 4 − 0.5) … i.e. continuous coordinates divide by 4.
        let (x, y) = (0.3_f32, -0.2_f32);
        let u = camera.fx * x + camera.cx;
        let v = camera.fy * y + camera.cy;
        assert!((shrunk.fx * x + shrunk.cx - u / 4.0).abs() < 1e-4);
        assert!((shrunk.fy * y + shrunk.cy - v / 4.0).abs() < 1e-4);
        assert_eq!(shrunk_camera(camera, 1), camera);
    }
}
