//! The image loss on the CPU in f64, written from the textbook definitions (not from the
//! kernels' rearranged formulas), to check the GPU kernels against. For tests; slow.
//!
//! Images are row-major `[f64; 3]` RGB per pixel, values nominally in 0..1.
//!
//! SSIM per pixel and channel, with μ, σ², σxy from the blurred x, y, x², y², xy:
//! `S = (2μxμy + C1)(2σxy + C2) / ((μx² + μy² + C1)(σx² + σy² + C2))`.
//! Its gradient follows the chain through the blurred quantities μx, E\[x²\] and E\[xy\] at
//! every pixel q: `Σ_q ∂S_q/∂x_p = blur(∂S/∂μx) + 2·x·blur(∂S/∂E[x²]) + y·blur(∂S/∂E[xy])`
//! at p, since the zero-padded symmetric window is its own adjoint.
//!
//! With a mask (a weight w a pixel, 0..1), the window's statistics are weighted means: each
//! pixel counts with its weight, the zero padding outside the image with weight 1 (as
//! without a mask), and each moment is divided by the window's total weight
//! N = blur(w) + (1 − blur(1)). A pixel left out (w = 0) is in no window's statistics, so it
//! changes no counted pixel's SSIM and gets no SSIM gradient: the gradient at p becomes
//! `w_p·[blur(w∂S/∂μx / N) + 2·x·blur(w∂S/∂E[x²] / N) + y·blur(w∂S/∂E[xy] / N)]`.

use super::{C1, C2, ImageMetrics, LossWeights, RADIUS, gaussian_window};

/// One pixel's red, green and blue.
pub type Rgb = [f64; 3];

/// A packed RGBA8 pixel (r in the low byte) as RGB in 0..1; alpha is ignored.
#[must_use]
pub fn unpack_rgba8(pixel: u32) -> Rgb {
    let [r, g, b, _] = pixel.to_le_bytes();
    [f64::from(r) / 255.0, f64::from(g) / 255.0, f64::from(b) / 255.0]
}

/// The 2D Gaussian blur of one channel with zero padding ("same" size): horizontal then
/// vertical. `plane` is row-major `width`×`height`.
#[must_use]
pub fn blur(plane: &[f64], width: usize, height: usize) -> Vec<f64> {
    assert_eq!(plane.len(), width * height, "plane size");
    let window = gaussian_window();
    // Sum of window[t]·f(i + t − RADIUS) over the taps that fall inside 0..len.
    let taps = |i: usize, len: usize, f: &dyn Fn(usize) -> f64| -> f64 {
        window
            .iter()
            .enumerate()
            .filter_map(|(t, w)| {
                let j = (i + t).checked_sub(RADIUS).filter(|&j| j < len)?;
                Some(w * f(j))
            })
            .sum()
    };
    let mut rows = vec![0.0; plane.len()];
    for y in 0..height {
        for x in 0..width {
            rows[y * width + x] = taps(x, width, &|j| plane[y * width + j]);
        }
    }
    let mut out = vec![0.0; plane.len()];
    for y in 0..height {
        for x in 0..width {
            out[y * width + x] = taps(y, height, &|j| rows[j * width + x]);
        }
    }
    out
}

/// The blurred statistics of one channel at every pixel.
struct Moments {
    mu_x: Vec<f64>,
    mu_y: Vec<f64>,
    /// E[x²], E[y²], E[xy].
    xx: Vec<f64>,
    yy: Vec<f64>,
    xy: Vec<f64>,
}

/// Channel `c` of an image as a plane.
fn channel(image: &[Rgb], c: usize) -> Vec<f64> {
    image.iter().map(|p| p[c]).collect()
}

/// The windows' total weights N (see the module docs): 1 everywhere without a mask.
fn window_weights(mask: Option<&[f64]>, width: usize, height: usize) -> Vec<f64> {
    let Some(mask) = mask else { return vec![1.0; width * height] };
    let inside = blur(&vec![1.0; width * height], width, height);
    blur(mask, width, height).iter().zip(inside).map(|(w, one)| w + (1.0 - one)).collect()
}

/// The weighted window statistics of `x` and `y` (`n`: the windows' total weights).
fn moments(
    (x, y): (&[f64], &[f64]),
    mask: Option<&[f64]>,
    n: &[f64],
    width: usize,
    height: usize,
) -> Moments {
    let weight = |i: usize| mask.map_or(1.0, |m| m[i]);
    let mean = |f: &dyn Fn(usize) -> f64| -> Vec<f64> {
        let blurred =
            blur(&(0..x.len()).map(|i| weight(i) * f(i)).collect::<Vec<_>>(), width, height);
        // A window of pixels all left out has N = 0 (and nothing to count).
        blurred.iter().zip(n).map(|(b, n)| if *n == 0.0 { 0.0 } else { b / n }).collect()
    };
    Moments {
        mu_x: mean(&|i| x[i]),
        mu_y: mean(&|i| y[i]),
        xx: mean(&|i| x[i] * x[i]),
        yy: mean(&|i| y[i] * y[i]),
        xy: mean(&|i| x[i] * y[i]),
    }
}

/// SSIM at one pixel and its partial derivatives with respect to μx, E[x²] and E[xy] (μy and
/// E[y²] held fixed).
fn ssim_at(m: &Moments, i: usize) -> (f64, [f64; 3]) {
    let (mu_x, mu_y) = (m.mu_x[i], m.mu_y[i]);
    let var_x = m.xx[i] - mu_x * mu_x;
    let var_y = m.yy[i] - mu_y * mu_y;
    let cov = m.xy[i] - mu_x * mu_y;
    let a1 = 2.0 * mu_x * mu_y + C1;
    let a2 = 2.0 * cov + C2;
    let b1 = mu_x * mu_x + mu_y * mu_y + C1;
    let b2 = var_x + var_y + C2;
    let s = a1 * a2 / (b1 * b2);
    // ∂a1/∂μx = 2μy, ∂a2/∂μx = −2μy, ∂b1/∂μx = 2μx, ∂b2/∂μx = −2μx;
    // ∂b2/∂E[x²] = 1; ∂a2/∂E[xy] = 2.
    let d_mu =
        (2.0 * mu_y * a2 - 2.0 * mu_y * a1) / (b1 * b2) - s * (2.0 * mu_x / b1 - 2.0 * mu_x / b2);
    let d_xx = -s / b2;
    let d_xy = 2.0 * a1 / (b1 * b2);
    (s, [d_mu, d_xx, d_xy])
}

/// The SSIM map: SSIM at every pixel and channel.
#[must_use]
pub fn ssim_map(render: &[Rgb], gt: &[Rgb], width: usize, height: usize) -> Vec<Rgb> {
    assert_eq!(render.len(), gt.len(), "image sizes");
    let mut map = vec![[0.0; 3]; render.len()];
    let n = window_weights(None, width, height);
    for c in 0..3 {
        let m = moments((&channel(render, c), &channel(gt, c)), None, &n, width, height);
        for (i, pixel) in map.iter_mut().enumerate() {
            pixel[c] = ssim_at(&m, i).0;
        }
    }
    map
}

/// Mean SSIM over pixels and channels.
#[must_use]
pub fn ssim(render: &[Rgb], gt: &[Rgb], width: usize, height: usize) -> f64 {
    let map = ssim_map(render, gt, width, height);
    map.iter().flatten().sum::<f64>() / (3 * map.len()) as f64
}

/// Mean absolute error over pixels and channels.
#[must_use]
pub fn l1(render: &[Rgb], gt: &[Rgb]) -> f64 {
    assert_eq!(render.len(), gt.len(), "image sizes");
    let sum: f64 =
        render.iter().flatten().zip(gt.iter().flatten()).map(|(x, y)| (x - y).abs()).sum();
    sum / (3 * render.len()) as f64
}

/// Mean squared error over pixels and channels.
#[must_use]
pub fn mse(render: &[Rgb], gt: &[Rgb]) -> f64 {
    assert_eq!(render.len(), gt.len(), "image sizes");
    let sum: f64 =
        render.iter().flatten().zip(gt.iter().flatten()).map(|(x, y)| (x - y) * (x - y)).sum();
    sum / (3 * render.len()) as f64
}

/// Loss, L1, MSE and SSIM.
#[must_use]
pub fn metrics(
    render: &[Rgb],
    gt: &[Rgb],
    width: usize,
    height: usize,
    weights: LossWeights,
) -> ImageMetrics {
    masked(render, gt, None, width, height, weights).0
}

/// The loss `w_l1`·L1 + `w_ssim`·(1 − SSIM) and its gradient with respect to the render.
/// |x − y| contributes sign(x − y), with sign(0) = 0.
#[must_use]
pub fn loss(
    render: &[Rgb],
    gt: &[Rgb],
    width: usize,
    height: usize,
    weights: LossWeights,
) -> (f64, Vec<Rgb>) {
    let (metrics, grad) = masked(render, gt, None, width, height, weights);
    (metrics.loss, grad)
}

/// [`metrics`] and the gradient of [`loss`] with a weight w a pixel (`mask`, 0..1; `None`: 1
/// everywhere). The metrics are weighted means: the sum over pixels of w times the sum over
/// channels of the term, over 3·Σw; each pixel's S comes from its window's weighted
/// statistics (the module docs). The gradient is that of the same sums of
/// `w_l1`·|x − y| + `w_ssim`·(1 − S) over 3·W·H.
#[must_use]
pub fn masked(
    render: &[Rgb],
    gt: &[Rgb],
    mask: Option<&[f64]>,
    width: usize,
    height: usize,
    weights: LossWeights,
) -> (ImageMetrics, Vec<Rgb>) {
    assert_eq!(render.len(), gt.len(), "image sizes");
    assert_eq!(render.len(), width * height, "image size");
    let weight = |i: usize| mask.map_or(1.0, |m| m[i]);
    let pixels = render.len() as f64;
    let (w_l1, w_ssim) = (f64::from(weights.l1), f64::from(weights.ssim));
    let (mut dissimilarity, mut abs_sum, mut squared_sum) = (0.0, 0.0, 0.0);
    let mut grad = vec![[0.0; 3]; render.len()];
    let n = window_weights(mask, width, height);
    for c in 0..3 {
        let (x, y) = (channel(render, c), channel(gt, c));
        let m = moments((&x, &y), mask, &n, width, height);
        let mut maps = [vec![0.0; x.len()], vec![0.0; x.len()], vec![0.0; x.len()]];
        for i in 0..x.len() {
            let (s, partials) = ssim_at(&m, i);
            dissimilarity += weight(i) * (1.0 - s);
            for (map, partial) in maps.iter_mut().zip(partials) {
                // A pixel left out has weight 0 and may have an empty window (N = 0).
                map[i] = if weight(i) > 0.0 { weight(i) * partial / n[i] } else { 0.0 };
            }
        }
        let [d_mu, d_xx, d_xy] = maps.map(|map| blur(&map, width, height));
        for (i, g) in grad.iter_mut().enumerate() {
            let d = x[i] - y[i];
            abs_sum += weight(i) * d.abs();
            squared_sum += weight(i) * d * d;
            let sign = sign_or_zero(d);
            let d_ssim = weight(i) * (d_mu[i] + 2.0 * x[i] * d_xx[i] + y[i] * d_xy[i]);
            g[c] = (w_l1 * weight(i) * sign - w_ssim * d_ssim) / (3.0 * pixels);
        }
    }
    let counted: f64 = (0..render.len()).map(weight).sum();
    let elements = 3.0 * counted.max(1.0);
    let metrics = ImageMetrics::from_sums(dissimilarity, abs_sum, squared_sum, elements, weights);
    (metrics, grad)
}

/// The ground truth put over another background: `stored + shift·(1 − α)` per channel, with
/// `alpha` the image's alpha (0..1) and `shift` the new background minus the one the image
/// was composited over (the loss's transparency, loss/mod.rs).
#[must_use]
pub fn over_background(gt: &[Rgb], alpha: &[f64], shift: [f64; 3]) -> Vec<Rgb> {
    assert_eq!(gt.len(), alpha.len(), "image sizes");
    gt.iter()
        .zip(alpha)
        .map(|(y, a)| std::array::from_fn(|c| y[c] + shift[c] * (1.0 - a)))
        .collect()
}

/// The alpha loss `weight`·Σ w·|`rendered` − `alpha`| / pixels (w: `mask`, 1 without) and its
/// gradient with respect to the rendered alpha; sign(0) = 0.
#[must_use]
pub fn alpha_l1(
    rendered: &[f64],
    alpha: &[f64],
    mask: Option<&[f64]>,
    weight: f64,
) -> (f64, Vec<f64>) {
    assert_eq!(rendered.len(), alpha.len(), "image sizes");
    let pixels = rendered.len() as f64;
    let w = |i: usize| mask.map_or(1.0, |m| m[i]);
    let loss = (0..rendered.len()).map(|i| w(i) * (rendered[i] - alpha[i]).abs()).sum::<f64>();
    let grad = (0..rendered.len())
        .map(|i| {
            let d = rendered[i] - alpha[i];
            let sign = sign_or_zero(d);
            weight * w(i) * sign / pixels
        })
        .collect();
    (weight * loss / pixels, grad)
}

/// The L1 loss's derivative: the sign of `d`, 0 at ±0 (`f64::signum` gives ±1 there).
fn sign_or_zero(d: f64) -> f64 {
    if d > 0.0 {
        1.0
    } else if d < 0.0 {
        -1.0
    } else {
        0.0
    }
}
