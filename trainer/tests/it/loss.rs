//! The image loss (0.8·L1 + 0.2·(1 − SSIM)) and the eval metrics: the WGSL validates, the f64
//! CPU reference is right (closed forms, properties, finite differences), and the GPU kernels
//! match the reference on random and real images, on a real (software or hardware) device.
//!
//! Every GPU output buffer starts full of garbage and one scratch serves images of several
//! sizes, so no kernel can lean on zeroed memory or on the scratch's size.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::time::{Duration, Instant};

use splat_formats::random::SplitMix64;
use splat_render::wgpu::{self, BufferUsages, naga};
use splat_render::{Category, GpuBuffer, GpuContext, Owner};
use splat_test_support::dataset_path;
use splat_trainer::dataset::{LoadOptions, load_dataset};
use splat_trainer::loss::reference::{self, Rgb};
use splat_trainer::loss::{
    C1, C2, ImageLoss, ImageMetrics, LossImages, LossScratch, LossWeights, RADIUS, SIGMA,
    TargetTransparency, WINDOW, gaussian_window, shader_sources, target_words,
};

use crate::helpers::context;

const GARBAGE: f32 = -12345.0;
const USAGE: BufferUsages =
    BufferUsages::STORAGE.union(BufferUsages::COPY_DST).union(BufferUsages::COPY_SRC);

/// An image pair as the GPU sees it: the render as rgb + alpha f32, the ground truth as
/// packed RGBA8.
struct Pair {
    width: usize,
    height: usize,
    render: Vec<[f32; 4]>,
    target: Vec<u32>,
}

impl Pair {
    /// A smooth random ground truth (so SSIM's statistics are not all noise) and a render
    /// that is it plus noise of amplitude `noise`, partly outside 0..1 as a render can be.
    fn random(width: usize, height: usize, noise: f64, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let phase: Vec<f64> = (0..6).map(|_| rng.next_f64() * 6.0).collect();
        let mut render = Vec::with_capacity(width * height);
        let mut target = Vec::with_capacity(width * height);
        for y in 0..height {
            for x in 0..width {
                let mut bytes = [0_u8, 0, 0, 255];
                let mut rgba = [0.0_f32, 0.0, 0.0, rng.next_f64() as f32];
                for c in 0..3 {
                    let smooth = 0.5
                        + 0.3
                            * (x as f64 * 0.21 + phase[c]).sin()
                            * (y as f64 * 0.17 + phase[c + 3]).cos();
                    let value = (smooth + 0.15 * (rng.next_f64() - 0.5)).clamp(0.0, 1.0);
                    bytes[c] = (value * 255.0).round() as u8;
                    rgba[c] =
                        (f64::from(bytes[c]) / 255.0 + noise * (rng.next_f64() - 0.5) * 2.0) as f32;
                }
                target.push(u32::from_le_bytes(bytes));
                render.push(rgba);
            }
        }
        Self { width, height, render, target }
    }

    /// Two unrelated uniform random images.
    fn independent(width: usize, height: usize, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let render =
            (0..width * height).map(|_| [0, 1, 2, 3].map(|_| rng.next_f64() as f32)).collect();
        let target = (0..width * height)
            .map(|_| u32::from_le_bytes([0, 1, 2, 3].map(|_| (rng.next_f64() * 256.0) as u8)))
            .collect();
        Self { width, height, render, target }
    }

    /// The ground truth as the render: what the GPU computes for it, bit for bit.
    fn identical(width: usize, height: usize, seed: u64) -> Self {
        let mut pair = Self::random(width, height, 0.0, seed);
        for (render, &target) in pair.render.iter_mut().zip(&pair.target) {
            let [r, g, b, _] = target.to_le_bytes();
            *render = [f32::from(r) / 255.0, f32::from(g) / 255.0, f32::from(b) / 255.0, 1.0];
        }
        pair
    }

    /// Both images in f64 for the reference, the ground truth as the GPU reads it: byte/255
    /// rounded to f32. So where render and ground truth agree in f32 (photos, identical
    /// images), both sides see x − y = 0 and sign(0) = 0; with the exact byte/255 the
    /// reference would see ±1e-9 and a different L1 gradient there.
    fn reference_images(&self) -> (Vec<Rgb>, Vec<Rgb>) {
        let render = self.render.iter().map(|p| [0, 1, 2].map(|c| f64::from(p[c]))).collect();
        let target = self
            .target
            .iter()
            .map(|&p| {
                let bytes = p.to_le_bytes();
                [0, 1, 2].map(|c| f64::from(f32::from(bytes[c]) / 255.0))
            })
            .collect();
        (render, target)
    }

    /// The ground truth's alpha bytes as the GPU reads them: the pixels' weights.
    fn reference_mask(&self) -> Vec<f64> {
        self.target.iter().map(|&p| f64::from(f32::from(p.to_le_bytes()[3]) / 255.0)).collect()
    }

    /// The same pair with `mask` (one byte a pixel) in the ground truth's alpha.
    fn with_mask(mut self, mask: impl Fn(usize, usize) -> u8) -> Self {
        for (i, target) in self.target.iter_mut().enumerate() {
            let [r, g, b, _] = target.to_le_bytes();
            *target = u32::from_le_bytes([r, g, b, mask(i % self.width, i / self.width)]);
        }
        self
    }
}

/// The GPU side of a test: kernels, one scratch for every size, buffers that grow.
struct Gpu {
    ctx: GpuContext,
    loss: ImageLoss,
    scratch: LossScratch,
}

/// What one GPU evaluation gives.
struct GpuResult {
    metrics: ImageMetrics,
    /// dL/d(rgb, alpha) per pixel.
    gradient: Option<Vec<[f32; 4]>>,
}

impl Gpu {
    fn new(width: u32, height: u32) -> Self {
        let ctx = context();
        let loss = ImageLoss::new(&ctx);
        let scratch = loss.scratch(&ctx, width, height, Owner::Shared).unwrap();
        Self { ctx, loss, scratch }
    }

    fn upload(&self, label: &str, bytes: &[u8]) -> GpuBuffer {
        self.ctx.create_buffer_init(label, bytes, USAGE, Category::Other, Owner::Shared).unwrap()
    }

    /// Uploads the pair (and a garbage-filled gradient buffer), encodes, submits, reads.
    fn run(&self, pair: &Pair, weights: LossWeights, gradient: bool) -> GpuResult {
        self.run_with(pair, weights, TargetTransparency::default(), gradient)
    }

    /// [`Gpu::run`] with the target's transparency (`pair.target` then carries its alpha
    /// plane when `transparency` says so).
    fn run_with(
        &self,
        pair: &Pair,
        weights: LossWeights,
        transparency: TargetTransparency,
        gradient: bool,
    ) -> GpuResult {
        let rendered = self.upload("rendered", bytemuck::cast_slice(&pair.render));
        let target = self.upload("target", bytemuck::cast_slice(&pair.target));
        let v_image =
            self.upload("v_image", bytemuck::cast_slice(&vec![GARBAGE; pair.render.len() * 4]));
        let ctx = &self.ctx;
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("loss test") });
        let images = LossImages {
            rendered: &rendered,
            target: &target,
            width: pair.width as u32,
            height: pair.height as u32,
            v_image: gradient.then_some(&*v_image),
        };
        self.loss
            .encode_with(ctx, &mut encoder, images, weights, transparency, &self.scratch)
            .unwrap();
        ctx.queue.submit([encoder.finish()]);
        let metrics = self.loss.read_metrics(ctx, &self.scratch).unwrap();
        let gradient = gradient.then(|| {
            let floats =
                splat_render::gpu_splats::read_f32(&self.ctx, &v_image, pair.render.len() * 4)
                    .unwrap();
            floats.chunks_exact(4).map(|v| [v[0], v[1], v[2], v[3]]).collect()
        });
        GpuResult { metrics, gradient }
    }

    fn encode_and_read(
        &self,
        rendered: &wgpu::Buffer,
        target: &wgpu::Buffer,
        pair: &Pair,
        weights: LossWeights,
        v_image: Option<&wgpu::Buffer>,
    ) -> ImageMetrics {
        let ctx = &self.ctx;
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("loss test") });
        let (width, height) = (pair.width as u32, pair.height as u32);
        self.loss
            .encode(
                ctx,
                &mut encoder,
                rendered,
                target,
                width,
                height,
                weights,
                v_image,
                &self.scratch,
            )
            .unwrap();
        ctx.queue.submit([encoder.finish()]);
        self.loss.read_metrics(ctx, &self.scratch).unwrap()
    }

    fn finish(self) {
        self.ctx.wait_idle().unwrap();
        let errors = self.ctx.take_uncaptured_errors();
        assert!(errors.is_empty(), "uncaptured GPU errors: {errors:?}");
    }
}

/// Largest |a − b| over two gradients, and the largest |b|; alpha's gradient must be 0.
#[expect(clippy::float_cmp, reason = "alpha's gradient is written as an exact 0")]
fn gradient_error(gpu: &[[f32; 4]], reference: &[Rgb]) -> (f64, f64) {
    let mut error: f64 = 0.0;
    let mut scale: f64 = 0.0;
    for (g, r) in gpu.iter().zip(reference) {
        for c in 0..3 {
            error = error.max((f64::from(g[c]) - r[c]).abs());
            scale = scale.max(r[c].abs());
        }
        assert_eq!(g[3], 0.0, "alpha's gradient");
    }
    (error, scale)
}

// ---- WGSL -------------------------------------------------------------------------------

#[test]
fn every_composition_validates() {
    let sources = shader_sources();
    assert!(!sources.is_empty());
    for (label, source) in sources {
        let module = naga::front::wgsl::parse_str(&source)
            .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&source)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&source)));
        for entry in ["ssim_forward", "ssim_backward"] {
            assert!(module.entry_points.iter().any(|e| e.name == entry), "{label}: no {entry}");
        }
    }
}

// ---- CPU reference ----------------------------------------------------------------------

#[test]
#[expect(clippy::float_cmp, reason = "the window is symmetric to the bit")]
fn window_is_the_normalised_gaussian() {
    let window = gaussian_window();
    assert_eq!(window.len(), WINDOW);
    assert!((window.iter().sum::<f64>() - 1.0).abs() < 1e-15);
    // exp(−k²/(2σ²)) relative to the centre, symmetric.
    for k in 0..=RADIUS {
        let expected = (-((k * k) as f64) / (2.0 * SIGMA * SIGMA)).exp();
        assert!((window[RADIUS + k] / window[RADIUS] - expected).abs() < 1e-15);
        assert_eq!(window[RADIUS + k], window[RADIUS - k]);
    }
    // The centre tap of the 1D window, as 3DGS's `gaussian(11, 1.5)` gives it.
    assert!((window[RADIUS] - 0.266_011_72).abs() < 1e-8, "{}", window[RADIUS]);
}

#[test]
fn reference_ssim_of_an_image_with_itself_is_one() {
    let (render, _) = Pair::random(19, 13, 0.0, 1).reference_images();
    let ssim = reference::ssim(&render, &render, 19, 13);
    assert!((ssim - 1.0).abs() < 1e-12, "{ssim}");
    let (value, grad) = reference::loss(&render, &render, 19, 13, LossWeights::default());
    assert!(value.abs() < 1e-12, "{value}");
    assert!(grad.iter().flatten().all(|g| g.abs() < 1e-12));
}

/// By hand: a constant image pair x ≡ a, y ≡ b. Where the window lies inside the image,
/// μx = a, μy = b and every σ = 0, so S = (2ab + C1)/(a² + b² + C1). A 1×1 image sees only
/// the centre tap s = g₀² of the 2D window: μx = a·s, E[x²] = a²·s, so σx² = a²·s(1 − s),
/// σxy = ab·s(1 − s), and S follows from the definition with those.
#[test]
fn reference_ssim_of_constant_images_matches_closed_forms() {
    let (a, b) = (0.7, 0.2);
    let expected_inside = (2.0 * a * b + C1) / (a * a + b * b + C1);
    let (w, h) = (2 * WINDOW + 1, 2 * WINDOW + 1);
    let map = reference::ssim_map(&vec![[a; 3]; w * h], &vec![[b; 3]; w * h], w, h);
    for (y, x) in [(RADIUS, RADIUS), (WINDOW, WINDOW), (h - 1 - RADIUS, w - 1 - RADIUS)] {
        assert!((map[y * w + x][0] - expected_inside).abs() < 1e-12, "{:?}", map[y * w + x]);
    }
    // At the border the zero padding lowers the means and creates variance.
    assert!((map[0][0] - expected_inside).abs() > 1e-3);

    let g0 = gaussian_window()[RADIUS];
    let s = g0 * g0;
    let (mu_x, mu_y) = (a * s, b * s);
    let (var_x, var_y, cov) = (a * a * s * (1.0 - s), b * b * s * (1.0 - s), a * b * s * (1.0 - s));
    let expected_pixel = (2.0 * mu_x * mu_y + C1) * (2.0 * cov + C2)
        / ((mu_x * mu_x + mu_y * mu_y + C1) * (var_x + var_y + C2));
    let single = reference::ssim(&[[a; 3]], &[[b; 3]], 1, 1);
    assert!((single - expected_pixel).abs() < 1e-12, "{single} vs {expected_pixel}");
    // The same as plain numbers, so a change of window or constants shows: g₀ = 0.26601172,
    // s = 0.07076224; a1 = 0.00150204, a2 = 0.01931138, b1 = 0.00275387, b2 = 0.03575012;
    // S = a1·a2/(b1·b2) = 0.29462886.
    assert!((single - 0.294_628_86).abs() < 1e-8, "{single}");
}

#[test]
fn reference_ssim_is_symmetric_bounded_and_falls_with_noise() {
    let (w, h) = (31, 17);
    let (_, gt) = Pair::random(w, h, 0.0, 2).reference_images();
    let mut last = 1.0;
    for (k, noise) in [0.02, 0.05, 0.1, 0.2, 0.4].into_iter().enumerate() {
        let (render, _) = Pair::random(w, h, noise, 2).reference_images();
        let forward = reference::ssim(&render, &gt, w, h);
        let backward = reference::ssim(&gt, &render, w, h);
        assert!((forward - backward).abs() < 1e-12, "symmetric: {forward} vs {backward}");
        assert!(
            reference::ssim_map(&render, &gt, w, h).iter().flatten().all(|&s| s <= 1.0 + 1e-12)
        );
        assert!(forward < last, "noise {noise} (#{k}): SSIM {forward} not below {last}");
        last = forward;
    }
}

/// Central differences of the f64 reference loss against its analytic gradient, on an image
/// whose size is no multiple of anything. With h = 1e-6 the truncation error is O(h²·L''')
/// ~1e-12 and the rounding error ~ε·L/h ~1e-10 while the gradient entries are ~1e-3 (the
/// loss is a mean over 741 elements), so 1e-8 absolute is 1e-5 relative and catches any
/// missing or wrong term.
#[test]
fn reference_gradient_matches_finite_differences() {
    let (w, h) = (19, 13);
    let (render, gt) = Pair::random(w, h, 0.2, 3).reference_images();
    let weights = LossWeights::default();
    let (_, grad) = reference::loss(&render, &gt, w, h, weights);
    let step = 1e-6;
    let mut worst: f64 = 0.0;
    for i in 0..w * h {
        for c in 0..3 {
            let at = |delta: f64| {
                let mut image = render.clone();
                image[i][c] += delta;
                reference::loss(&image, &gt, w, h, weights).0
            };
            let numeric = (at(step) - at(-step)) / (2.0 * step);
            worst = worst.max((numeric - grad[i][c]).abs());
            assert!(
                (numeric - grad[i][c]).abs() < 1e-8,
                "pixel {i} channel {c}: analytic {} vs numeric {numeric}",
                grad[i][c]
            );
        }
    }
    eprintln!("finite differences: worst |error| {worst:.2e}");
    // And the SSIM term alone (the L1 term's gradient is trivially right).
    let ssim_only = LossWeights { l1: 0.0, ssim: 1.0 };
    let (_, grad) = reference::loss(&render, &gt, w, h, ssim_only);
    for i in [0, 7, w * h / 2, w * h - 1] {
        let mut plus = render.clone();
        let mut minus = render.clone();
        plus[i][1] += step;
        minus[i][1] -= step;
        let numeric = (reference::loss(&plus, &gt, w, h, ssim_only).0
            - reference::loss(&minus, &gt, w, h, ssim_only).0)
            / (2.0 * step);
        assert!((numeric - grad[i][1]).abs() < 1e-8, "{numeric} vs {}", grad[i][1]);
    }
    // With a mask: the gradient is that of Σw·term / (3·W·H), i.e. of the weighted mean
    // scaled by Σw / (W·H).
    let pair = Pair::random(w, h, 0.2, 4).with_mask(|x, y| ((x * 31 + y * 17) % 256) as u8);
    let (render, gt) = pair.reference_images();
    let mask = pair.reference_mask();
    let scale = mask.iter().sum::<f64>() / (w * h) as f64;
    let (_, grad) = reference::masked(&render, &gt, Some(&mask), w, h, weights);
    for i in [0, 5, 40, w * h / 2, w * h - 1] {
        for c in 0..3 {
            let at = |delta: f64| {
                let mut image = render.clone();
                image[i][c] += delta;
                reference::masked(&image, &gt, Some(&mask), w, h, weights).0.loss * scale
            };
            let numeric = (at(step) - at(-step)) / (2.0 * step);
            assert!((numeric - grad[i][c]).abs() < 1e-8, "masked: {numeric} vs {}", grad[i][c]);
        }
    }
}

// ---- GPU against the reference ----------------------------------------------------------

/// Compares one GPU result with the reference and returns (metric error, gradient error
/// relative to the largest gradient entry).
fn compare(label: &str, gpu: &GpuResult, pair: &Pair, weights: LossWeights) -> (f64, f64) {
    let (render, gt) = pair.reference_images();
    let mask = pair.reference_mask();
    let (w, h) = (pair.width, pair.height);
    let (expected, expected_grad) = reference::masked(&render, &gt, Some(&mask), w, h, weights);
    let got = gpu.metrics;
    let metric_error = [
        (got.loss - expected.loss).abs(),
        (got.l1 - expected.l1).abs() / expected.l1.max(1e-12),
        (got.mse - expected.mse).abs() / expected.mse.max(1e-12),
        (got.ssim - expected.ssim).abs(),
    ];
    eprintln!(
        "{label}: GPU {got:?}\n{label}: ref {expected:?}\n\
         {label}: errors (loss, L1 rel., MSE rel., SSIM) {:?}",
        metric_error.map(|e| format!("{e:.1e}"))
    );
    // L1 and MSE: both sides see the same inputs (x in f32, y = byte/255 rounded to f32), so
    // each element differs only by one f32 rounding of x − y (and of its square); the sums
    // add ≤ 768 terms per tile in f32 (a 256-way tree after 3 channels: ≤ 11 roundings,
    // relative ≤ 7e-7) and the tiles in f64. So 1e-6 relative is a bound, not a guess (seen:
    // ≤ 6e-8). SSIM: each pixel's S is f32 arithmetic on blurred moments whose cancellation
    // (E[xy] − μxμy against C2 = 9e-4) can cost up to ~1e-4 relative in a flat region, but
    // those errors have both signs and average out over the image: 1e-5 absolute (seen:
    // ≤ 2.1e-7, on the photos). The loss is 0.8·L1 + 0.2·(1 − SSIM): 1e-5 as well.
    assert!(metric_error[0] < 1e-5, "{label}: loss {} vs {}", got.loss, expected.loss);
    assert!(metric_error[1] < 1e-6, "{label}: L1 {} vs {}", got.l1, expected.l1);
    assert!(metric_error[2] < 1e-6, "{label}: MSE {} vs {}", got.mse, expected.mse);
    assert!(metric_error[3] < 1e-5, "{label}: SSIM {} vs {}", got.ssim, expected.ssim);
    let psnr_error = (got.psnr() - expected.psnr()).abs();
    assert!(psnr_error < 1e-4, "{label}: PSNR {} vs {}", got.psnr(), expected.psnr());

    let Some(gradient) = &gpu.gradient else { return (metric_error[3], 0.0) };
    let (error, scale) = gradient_error(gradient, &expected_grad);
    let relative = error / scale;
    eprintln!("{label}: gradient max |error| {error:.2e} of max |g| {scale:.2e} ({relative:.2e})");
    // Each entry sums 121 window taps of three maps, each map value an f32 expression with the
    // cancellation above (~1e-4 relative at worst in flat regions), plus the L1 term's exact
    // ±w/(3HW): 1e-3 of the largest entry (seen: ≤ 3.6e-5, on the photos). A missing or wrong
    // term, or a wrong border, is off by 1e-1 or more.
    assert!(relative < 1e-3, "{label}: gradient error {error:e} of {scale:e}");
    (metric_error[3], relative)
}

#[test]
fn gpu_matches_reference_on_random_images() {
    let sizes = [(37, 23), (64, 64), (200, 150), (1, 1), (17, 3)];
    let gpu = Gpu::new(200, 150);
    let weights = LossWeights::default();
    for (k, &(w, h)) in sizes.iter().enumerate() {
        let seed = 10 + k as u64;
        let pairs = [
            ("near", Pair::random(w, h, 0.05, seed)),
            ("far", Pair::random(w, h, 0.4, seed)),
            ("independent", Pair::independent(w, h, seed)),
        ];
        for (kind, pair) in &pairs {
            let label = format!("{w}×{h} {kind}");
            let result = gpu.run(pair, weights, true);
            compare(&label, &result, pair, weights);
            // Without a gradient: the same numbers.
            let plain = gpu.run(pair, weights, false);
            assert_eq!(plain.metrics, result.metrics, "{label}: with and without gradient");
        }
    }
    // Masks (the ground truth's alpha): left out, counted, and weights between.
    for (label, pair) in [
        (
            "a masked band",
            Pair::random(64, 48, 0.2, 7).with_mask(|x, _| if x < 20 { 0 } else { 255 }),
        ),
        (
            "a soft mask",
            Pair::random(37, 23, 0.2, 8).with_mask(|x, y| ((x * 7 + y * 13) % 256) as u8),
        ),
    ] {
        let result = gpu.run(&pair, weights, true);
        compare(&format!("{label} {}×{}", pair.width, pair.height), &result, &pair, weights);
    }
    // Other weights: the scales reach the gradient.
    let pair = Pair::random(37, 23, 0.1, 99);
    for weights in [LossWeights { l1: 1.0, ssim: 0.0 }, LossWeights { l1: 0.0, ssim: 1.0 }] {
        let result = gpu.run(&pair, weights, true);
        compare(&format!("37×23 weights {weights:?}"), &result, &pair, weights);
    }
    gpu.finish();
}

fn dataset_image(name: &str, width: u32, height: u32) -> image::RgbImage {
    let path = dataset_path("desk-statue-colmap/images").join(name);
    let image = image::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    image::imageops::resize(&image.to_rgb8(), width, height, image::imageops::FilterType::Triangle)
}

/// Two neighbouring photos of the desk statue (a small camera move apart), downscaled:
/// PSNR and SSIM as the reference computes them.
#[test]
fn gpu_matches_reference_on_a_real_image_pair() {
    let (w, h) = (150, 100);
    let render = dataset_image("DSC_5283.jpg", w, h);
    let gt = dataset_image("DSC_5284.jpg", w, h);
    let pair = Pair {
        width: w as usize,
        height: h as usize,
        render: render
            .pixels()
            .map(|p| [p[0], p[1], p[2]].map(|v| f32::from(v) / 255.0))
            .map(|[r, g, b]| [r, g, b, 1.0])
            .collect(),
        target: gt.pixels().map(|p| u32::from_le_bytes([p[0], p[1], p[2], 255])).collect(),
    };
    let gpu = Gpu::new(w, h);
    let weights = LossWeights::default();
    let result = gpu.run(&pair, weights, true);
    compare("desk statue 5283 vs 5284", &result, &pair, weights);
    let (r, g) = pair.reference_images();
    let psnr = -10.0 * reference::mse(&r, &g).log10();
    let ssim = reference::ssim(&r, &g, w as usize, h as usize);
    eprintln!(
        "desk statue: PSNR {:.4} dB (reference {psnr:.4}), SSIM {:.6} (reference {ssim:.6})",
        result.metrics.psnr(),
        result.metrics.ssim
    );
    assert!((result.metrics.psnr() - psnr).abs() < 1e-4);
    assert!((result.metrics.ssim - ssim).abs() < 2e-5);
    // A real pair of different photos is neither identical nor unrelated.
    assert!(psnr > 8.0 && psnr < 40.0, "{psnr}");
    assert!(ssim > 0.05 && ssim < 0.99, "{ssim}");
    gpu.finish();
}

/// A transparent image (lego, RGBA, composited over one colour at load) against a render over
/// another colour, with the alpha loss: the GPU puts the target over the render's background
/// from its alpha plane and adds the alpha term's gradient, as the reference does; then a
/// band of the image masked out, which must leave both terms there.
#[test]
fn gpu_matches_reference_with_transparency() {
    let loaded = [0.2_f32, 0.4, 0.6];
    let options = LoadOptions { max_resolution: 40, background: loaded, ..LoadOptions::default() };
    let dataset = load_dataset(&lego(), &options).unwrap();
    let view = &dataset.train[3];
    let alpha = view.alpha.as_ref().expect("lego's images are transparent");
    let (w, h) = (view.camera.width as usize, view.camera.height as usize);
    let render_background = [0.9_f32, 0.1, 0.35];
    let shift: [f32; 3] = std::array::from_fn(|c| render_background[c] - loaded[c]);
    let alpha_weight = 0.7_f32;
    // The render: the image over the render's background, plus noise, and a noisy alpha.
    let mut rng = SplitMix64::new(21);
    let mut render = Vec::with_capacity(w * h);
    for (p, a) in view.image.pixels().zip(alpha.pixels()) {
        let a = f32::from(a[0]) / 255.0;
        let mut rgba = [0.0; 4];
        for c in 0..3 {
            let over = f32::from(p[c]) / 255.0 + shift[c] * (1.0 - a);
            rgba[c] = over + (0.2 * (rng.next_f64() - 0.5)) as f32;
        }
        rgba[3] = (f64::from(a) + 0.3 * (rng.next_f64() - 0.5)).clamp(0.0, 1.0) as f32;
        render.push(rgba);
    }
    let gpu = Gpu::new(w as u32, h as u32);
    let weights = LossWeights::default();
    let transparency =
        TargetTransparency { alpha_plane: true, background_shift: shift, alpha_weight };
    for (label, mask) in [("lego, no mask", None), ("lego, a masked band", Some(12))] {
        let mut target: Vec<u32> = view
            .image
            .pixels()
            .enumerate()
            .map(|(i, p)| {
                let weight = if mask.is_some_and(|band| i % w < band) { 0 } else { 255 };
                u32::from_le_bytes([p[0], p[1], p[2], weight])
            })
            .collect();
        target.extend(
            alpha.as_raw().chunks(4).map(|b| {
                u32::from_le_bytes(std::array::from_fn(|k| b.get(k).copied().unwrap_or(0)))
            }),
        );
        assert_eq!(target.len() as u64, target_words((w * h) as u64, true));
        let pair = Pair { width: w, height: h, render: render.clone(), target };
        let GpuResult { metrics, gradient } = gpu.run_with(&pair, weights, transparency, true);
        let gradient = gradient.unwrap();

        // The reference, on the inputs as the GPU reads them (bytes / 255 in f32).
        // (The first W·H words are the pixels; the alpha plane follows.)
        let (render_rgb, mut stored) = pair.reference_images();
        stored.truncate(w * h);
        let mut weight = pair.reference_mask();
        weight.truncate(w * h);
        let alpha_f: Vec<f64> =
            alpha.pixels().map(|a| f64::from(f32::from(a[0]) / 255.0)).collect();
        let over = reference::over_background(&stored, &alpha_f, shift.map(f64::from));
        let (expected, expected_grad) =
            reference::masked(&render_rgb, &over, Some(&weight), w, h, weights);
        let render_alpha: Vec<f64> = pair.render.iter().map(|p| f64::from(p[3])).collect();
        let (_, expected_alpha_grad) =
            reference::alpha_l1(&render_alpha, &alpha_f, Some(&weight), f64::from(alpha_weight));
        eprintln!("{label}: GPU {metrics:?}\n{label}: ref {expected:?}");
        // As in `compare`: f32 sums of ≤ 768 terms a tile; the shifted target adds one f32
        // multiply-add a value (relative 1e-7).
        assert!((metrics.l1 - expected.l1).abs() < 1e-6 * expected.l1, "{label}: L1");
        assert!((metrics.mse - expected.mse).abs() < 1e-6 * expected.mse, "{label}: MSE");
        assert!((metrics.ssim - expected.ssim).abs() < 1e-5, "{label}: SSIM");
        // Had the target not been moved to the render's background, L1 would be far larger.
        let unshifted = reference::masked(&render_rgb, &stored, Some(&weight), w, h, weights).0;
        assert!(unshifted.l1 > 2.0 * expected.l1, "{label}: {unshifted:?}");

        let (mut rgb_error, mut rgb_scale) = (0.0_f64, 0.0_f64);
        for (i, (g, r)) in gradient.iter().zip(&expected_grad).enumerate() {
            for c in 0..3 {
                rgb_error = rgb_error.max((f64::from(g[c]) - r[c]).abs());
                rgb_scale = rgb_scale.max(r[c].abs());
            }
            // The alpha term is exact: ±weight·w/(W·H) or 0, one f32 rounding.
            let a = expected_alpha_grad[i];
            assert!(
                (f64::from(g[3]) - a).abs() <= 1e-6 * a.abs(),
                "{label}: alpha gradient at {i}: {} vs {a}",
                g[3]
            );
        }
        // The tolerance of `compare`, for the same reason.
        assert!(rgb_error < 1e-3 * rgb_scale, "{label}: {rgb_error:e} of {rgb_scale:e}");
        assert!(expected_alpha_grad.iter().any(|&a| a != 0.0), "{label}: an alpha gradient");
    }
    gpu.finish();
}

/// An opaque view of a transparent dataset (no alpha plane) with a background shift and the
/// alpha loss: α = 1, so the target is the one stored and the alpha loss asks for an opaque
/// render.
#[test]
fn gpu_opaque_target_keeps_its_colours_under_a_shift() {
    let (w, h) = (37, 23);
    let gpu = Gpu::new(w as u32, h as u32);
    let weights = LossWeights::default();
    let alpha_weight = 0.7_f32;
    let transparency = TargetTransparency {
        alpha_plane: false,
        background_shift: [0.7, -0.3, 0.25],
        alpha_weight,
    };
    let pair = Pair::random(w, h, 0.2, 5);
    let GpuResult { metrics, gradient } = gpu.run_with(&pair, weights, transparency, true);
    let plain = gpu.run(&pair, weights, false).metrics;
    assert_eq!(metrics, plain, "no plane: the target as stored");
    let render_alpha: Vec<f64> = pair.render.iter().map(|p| f64::from(p[3])).collect();
    let (_, expected) =
        reference::alpha_l1(&render_alpha, &vec![1.0; w * h], None, f64::from(alpha_weight));
    for (g, a) in gradient.unwrap().iter().zip(&expected) {
        assert!((f64::from(g[3]) - a).abs() <= 1e-6 * a.abs(), "{} vs {a}", g[3]);
    }
    gpu.finish();
}

fn lego() -> std::path::PathBuf {
    dataset_path("lego-blender")
}

/// Identical images: loss 0, SSIM 1, MSE 0 and a zero gradient, exactly. The kernels arrange
/// SSIM as 1 − (b1·d2 + a2·d1)/(b1·b2) with d1 = (μx − μy)², d2 = Var(x − y), so every term
/// is an exact zero whatever the compiler fuses; the render holds byte/255 in f32, which the
/// kernel computes the same way.
#[test]
#[expect(clippy::float_cmp, reason = "exact zeros are the point")]
fn gpu_identical_images_give_zero_loss() {
    let gpu = Gpu::new(64, 48);
    for (w, h) in [(64, 48), (23, 9)] {
        let pair = Pair::identical(w, h, 5);
        let result = gpu.run(&pair, LossWeights::default(), true);
        let m = result.metrics;
        assert_eq!((m.loss, m.l1, m.mse, m.ssim), (0.0, 0.0, 0.0, 1.0), "{w}×{h}: {m:?}");
        assert_eq!(m.psnr(), f64::INFINITY);
        let gradient = result.gradient.unwrap();
        assert!(gradient.iter().flatten().all(|&g| g == 0.0), "{w}×{h}: nonzero gradient");
    }
    gpu.finish();
}

#[test]
fn gpu_repeated_encodes_allocate_nothing() {
    let gpu = Gpu::new(64, 64);
    let pair = Pair::random(61, 47, 0.1, 7);
    let rendered = gpu.upload("rendered", bytemuck::cast_slice(&pair.render));
    let target = gpu.upload("target", bytemuck::cast_slice(&pair.target));
    let v_image = gpu.upload("v_image", &vec![0; pair.render.len() * 16]);
    let weights = LossWeights::default();
    // Once to warm anything lazy, then the ledger must not move.
    let first = gpu.encode_and_read(&rendered, &target, &pair, weights, Some(&v_image));
    gpu.ctx.wait_idle().unwrap();
    let before = gpu.ctx.ledger().snapshot();
    for k in 0..6 {
        let v_image = (k % 2 == 0).then_some(&*v_image);
        let metrics = gpu.encode_and_read(&rendered, &target, &pair, weights, v_image);
        assert_eq!(metrics, first, "encode {k}: the same numbers every time");
    }
    gpu.ctx.wait_idle().unwrap();
    let after = gpu.ctx.ledger().snapshot();
    assert_eq!(before.allocations, after.allocations);
    assert_eq!(before.total_bytes, after.total_bytes);
    assert_eq!(after.peak_bytes, before.peak_bytes, "nothing came and went either");
    gpu.finish();
}

#[test]
fn scratch_rejects_what_does_not_fit_and_grows() {
    let mut gpu = Gpu::new(32, 32);
    let ctx = gpu.ctx.clone();
    assert!(gpu.loss.read_metrics(&ctx, &gpu.scratch).is_err(), "no encode yet");
    let pair = Pair::random(40, 20, 0.1, 8); // fewer pixels than 32×32, but more tiles (6 > 4)
    let rendered = gpu.upload("rendered", bytemuck::cast_slice(&pair.render));
    let target = gpu.upload("target", bytemuck::cast_slice(&pair.target));
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("too big") });
    let weights = LossWeights::default();
    let too_big = gpu.loss.encode(
        &ctx,
        &mut encoder,
        &rendered,
        &target,
        40,
        20,
        weights,
        None,
        &gpu.scratch,
    );
    assert!(too_big.is_err());
    let too_small_buffer = gpu.loss.encode(
        &ctx,
        &mut encoder,
        &rendered,
        &target,
        32,
        32,
        weights,
        None,
        &gpu.scratch,
    );
    assert!(too_small_buffer.is_err(), "40×20 pixels of render cannot hold 32×32");
    let aliased = gpu.loss.encode(
        &ctx,
        &mut encoder,
        &rendered,
        &target,
        20,
        20,
        weights,
        Some(&rendered),
        &gpu.scratch,
    );
    assert!(aliased.is_err(), "the gradient cannot overwrite the render it reads");
    drop(encoder);

    let owner_bytes = || ctx.ledger().owner_bytes(Owner::Shared);
    let before = owner_bytes();
    assert!(gpu.scratch.ensure(&ctx, 40, 20).unwrap(), "grew");
    assert!(!gpu.scratch.ensure(&ctx, 40, 20).unwrap(), "already fits");
    assert!(!gpu.scratch.ensure(&ctx, 32, 32).unwrap(), "grow-only: the old size still fits");
    assert!(owner_bytes() > before);
    let result = gpu.run(&pair, weights, true);
    compare("40×20 after growing", &result, &pair, weights);
    gpu.finish();
}

/// One encode + submit + `read_metrics` with the gradient at 800×800, after a warm-up.
#[test]
fn gpu_timing_800x800() {
    let (w, h) = (800, 800);
    let gpu = Gpu::new(w, h);
    let pair = Pair::random(w as usize, h as usize, 0.1, 9);
    let rendered = gpu.upload("rendered", bytemuck::cast_slice(&pair.render));
    let target = gpu.upload("target", bytemuck::cast_slice(&pair.target));
    let v_image = gpu.upload("v_image", &vec![0; pair.render.len() * 16]);
    let weights = LossWeights::default();
    let warm = gpu.encode_and_read(&rendered, &target, &pair, weights, Some(&v_image));
    let runs = 7;
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let metrics = gpu.encode_and_read(&rendered, &target, &pair, weights, Some(&v_image));
        times.push(start.elapsed());
        assert_eq!(metrics, warm);
    }
    let start = Instant::now();
    gpu.encode_and_read(&rendered, &target, &pair, weights, None);
    let without = start.elapsed();
    times.sort();
    let median = times[runs / 2];
    eprintln!(
        "800×800 on {}: encode + read_metrics with gradient median {:.1} ms \
         (min {:.1}, max {:.1}); without gradient {:.1} ms",
        gpu.ctx.adapter_info.name,
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[runs - 1].as_secs_f64() * 1e3,
        without.as_secs_f64() * 1e3,
    );
    // Cheap checks of the numbers: L1 and MSE on the CPU.
    let (render, gt) = pair.reference_images();
    assert!((warm.l1 - reference::l1(&render, &gt)).abs() < 1e-6);
    assert!((warm.mse - reference::mse(&render, &gt)).abs() < 1e-6);
    // Generous: a guard against a pathological slowdown, not a benchmark.
    assert!(median < Duration::from_secs(20), "{median:?}");
    gpu.finish();
}
