//! Lens distortion, and undistorting an image to the pinhole camera of the same intrinsics.
//!
//! The models are COLMAP's and OpenCV's, on normalised camera coordinates (x, y) = (X/Z, Y/Z):
//! - [`Distortion::Radial`] (`SIMPLE_RADIAL`, `RADIAL`, `OPENCV`, `FULL_OPENCV`, and
//!   transforms.json's `k1 k2 k3 p1 p2`): with r² = x² + y²,
//!   `radial = (1 + k1 r² + k2 r⁴ + k3 r⁶) / (1 + k4 r² + k5 r⁴ + k6 r⁶)`,
//!   `x' = x·radial + 2 p1 x y + p2 (r² + 2x²)`, `y' = y·radial + p1 (r² + 2y²) + 2 p2 x y`;
//! - [`Distortion::Fisheye`] (`OPENCV_FISHEYE`, `SIMPLE_RADIAL_FISHEYE`, `RADIAL_FISHEYE`, and
//!   transforms.json's `OPENCV_FISHEYE` with `k1..k4`): with θ = atan(r),
//!   `θd = θ (1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸)` and `(x', y') = θd / r · (x, y)`.
//!
//! Datasets are undistorted once, at load ([`undistort`]): every output pixel of the pinhole
//! camera with the same fx, fy, cx, cy looks up where the lens put that ray and samples the
//! source bilinearly; output pixels whose ray falls outside the source get mask 0, and are left
//! out of the loss and of evaluation. Why at load and not in the projection:
//! docs/architecture/data.md, "Datasets".

use image::{GrayImage, Luma, RgbImage};

/// A lens distortion model with its coefficients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distortion {
    /// OpenCV's rational radial model with tangential terms: `k` = k1..k6, `p` = p1, p2.
    Radial { k: [f64; 6], p: [f64; 2] },
    /// OpenCV's fisheye (equidistant) model: `k` = k1..k4.
    Fisheye { k: [f64; 4] },
}

impl Distortion {
    /// Where the lens puts the ray through normalised pinhole coordinates `(x, y)`.
    #[must_use]
    pub fn distort(&self, x: f64, y: f64) -> (f64, f64) {
        let r2 = x * x + y * y;
        match *self {
            Self::Radial { k, p } => {
                let radial = (1.0 + r2 * (k[0] + r2 * (k[1] + r2 * k[2])))
                    / (1.0 + r2 * (k[3] + r2 * (k[4] + r2 * k[5])));
                let xy = x * y;
                (
                    x * radial + 2.0 * p[0] * xy + p[1] * (r2 + 2.0 * x * x),
                    y * radial + p[0] * (r2 + 2.0 * y * y) + 2.0 * p[1] * xy,
                )
            }
            Self::Fisheye { k } => {
                let r = r2.sqrt();
                if r < 1e-12 {
                    return (x, y);
                }
                let theta = r.atan();
                let t2 = theta * theta;
                let theta_d = theta * (1.0 + t2 * (k[0] + t2 * (k[1] + t2 * (k[2] + t2 * k[3]))));
                let scale = theta_d / r;
                (x * scale, y * scale)
            }
        }
    }

    /// `None` when every coefficient is zero (the pinhole camera).
    #[must_use]
    pub fn nonzero(self) -> Option<Self> {
        let any = match self {
            Self::Radial { k, p } => k.iter().chain(&p).any(|&c| c != 0.0),
            Self::Fisheye { .. } => true, // the equidistant projection itself is not pinhole
        };
        any.then_some(self)
    }
}

/// Pinhole intrinsics in pixels (pixel (i, j) has its centre at (i + 0.5, j + 0.5)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pinhole {
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
}

/// An undistorted image and which of its pixels the source covered.
pub struct Undistorted {
    pub image: RgbImage,
    /// 255 where the source covered the pixel (and `mask`, if given, kept it), 0 elsewhere;
    /// `None` when every pixel is kept.
    pub mask: Option<GrayImage>,
}

/// `image` (and its `mask`, if any) as the pinhole camera `camera` of the same size would have
/// seen them, for a lens with `distortion`. Bilinear for the colours; a pixel is kept when
/// its source point lies within the source's pixel centres and, with a mask, when the
/// bilinear mask there is at least half.
#[must_use]
pub fn undistort(
    image: &RgbImage,
    mask: Option<&GrayImage>,
    camera: Pinhole,
    distortion: &Distortion,
) -> Undistorted {
    let (width, height) = image.dimensions();
    let mut out = RgbImage::new(width, height);
    let mut kept = GrayImage::new(width, height);
    let mut all_kept = true;
    for v in 0..height {
        for u in 0..width {
            let source = source_point(u, v, (width, height), camera, distortion);
            let covered = source.is_some_and(|(sx, sy)| {
                mask.is_none_or(|m| bilinear::<_, 1>(m, sx, sy)[0] >= 127.5)
            });
            if let Some((sx, sy)) = source {
                let rgb: [f64; 3] = bilinear(image, sx, sy);
                out.put_pixel(u, v, image::Rgb(rgb.map(|c| c.round() as u8)));
            }
            if covered {
                kept.put_pixel(u, v, Luma([255]));
            } else {
                all_kept = false;
            }
        }
    }
    Undistorted { image: out, mask: (!all_kept).then_some(kept) }
}

/// An image's alpha channel as the pinhole camera `camera` would have seen it: the same
/// bilinear resampling as [`undistort`]'s colours (which were composited over the background
/// before, and compositing commutes with it), 0 where the source does not cover the pixel
/// (those pixels are masked anyway).
#[must_use]
pub fn undistort_alpha(alpha: &GrayImage, camera: Pinhole, distortion: &Distortion) -> GrayImage {
    let size = alpha.dimensions();
    GrayImage::from_fn(size.0, size.1, |u, v| {
        let source = source_point(u, v, size, camera, distortion);
        Luma([source.map_or(0, |(sx, sy)| bilinear::<_, 1>(alpha, sx, sy)[0].round() as u8)])
    })
}

/// Where pixel (`u`, `v`) of the pinhole image comes from in the distorted source of the same
/// `size`, in pixel-index space (centres at integers); `None` outside the source's pixel
/// centres.
fn source_point(
    u: u32,
    v: u32,
    (width, height): (u32, u32),
    camera: Pinhole,
    distortion: &Distortion,
) -> Option<(f64, f64)> {
    let x = (f64::from(u) + 0.5 - camera.cx) / camera.fx;
    let y = (f64::from(v) + 0.5 - camera.cy) / camera.fy;
    let (xd, yd) = distortion.distort(x, y);
    let (sx, sy) = (xd * camera.fx + camera.cx - 0.5, yd * camera.fy + camera.cy - 0.5);
    let inside = (0.0..=f64::from(width) - 1.0).contains(&sx)
        && (0.0..=f64::from(height) - 1.0).contains(&sy);
    inside.then_some((sx, sy))
}

/// The image bilinearly at `(x, y)` in pixel-index space, within `[0, w − 1] × [0, h − 1]`.
fn bilinear<P: image::Pixel<Subpixel = u8>, const N: usize>(
    image: &image::ImageBuffer<P, Vec<u8>>,
    x: f64,
    y: f64,
) -> [f64; N] {
    let (width, height) = image.dimensions();
    let (x0, y0) = (x.floor() as u32, y.floor() as u32);
    let (x1, y1) = ((x0 + 1).min(width - 1), (y0 + 1).min(height - 1));
    let (fx, fy) = (x - f64::from(x0), y - f64::from(y0));
    let at = |px: u32, py: u32, c: usize| f64::from(image.get_pixel(px, py).channels()[c]);
    std::array::from_fn(|c| {
        let top = at(x0, y0, c) * (1.0 - fx) + at(x1, y0, c) * fx;
        let bottom = at(x0, y1, c) * (1.0 - fx) + at(x1, y1, c) * fx;
        top * (1.0 - fy) + bottom * fy
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_coefficients_are_the_pinhole() {
        let none = Distortion::Radial { k: [0.0; 6], p: [0.0; 2] };
        assert_eq!(none.nonzero(), None);
        assert_eq!(none.distort(0.3, -0.2), (0.3, -0.2));
    }

    #[test]
    fn radial_and_tangential_terms_follow_opencv() {
        // OpenCV's cv::projectPoints, by hand: x = 0.3, y = −0.2, r² = 0.13.
        let d = Distortion::Radial { k: [0.1, -0.05, 0.01, 0.0, 0.0, 0.0], p: [0.002, -0.003] };
        let (x, y) = d.distort(0.3, -0.2);
        let r2: f64 = 0.13;
        let radial = 1.0 + 0.1 * r2 - 0.05 * r2 * r2 + 0.01 * r2 * r2 * r2;
        let ex = 0.3 * radial + 2.0 * 0.002 * 0.3 * -0.2 - 0.003 * (r2 + 2.0 * 0.09);
        let ey = -0.2 * radial + 0.002 * (r2 + 2.0 * 0.04) + 2.0 * -0.003 * 0.3 * -0.2;
        assert!((x - ex).abs() < 1e-15 && (y - ey).abs() < 1e-15, "{x} {y} vs {ex} {ey}");
    }

    #[test]
    fn fisheye_is_equidistant_without_coefficients() {
        // θd = θ: a ray at 45° lands at radius π/4, not tan(45°) = 1.
        let d = Distortion::Fisheye { k: [0.0; 4] };
        let (x, y) = d.distort(1.0, 0.0);
        assert!((x - std::f64::consts::FRAC_PI_4).abs() < 1e-12 && y == 0.0);
        assert_eq!(d.distort(0.0, 0.0), (0.0, 0.0));
    }

    /// A pattern drawn through a distorting lens comes back as drawn by the pinhole camera:
    /// render a smooth function of the ray through each source pixel, undistort, and compare
    /// with the same function on the output's rays.
    #[test]
    fn undistorting_a_distorted_pattern_gives_the_pinhole_pattern() {
        let camera = Pinhole { fx: 90.0, fy: 88.0, cx: 64.5, cy: 47.0 };
        let pattern = |x: f64, y: f64| {
            [128.0 + 100.0 * (6.0 * x).sin(), 128.0 + 100.0 * (5.0 * y).cos(), 128.0 + 80.0 * x * y]
        };
        for distortion in [
            Distortion::Radial { k: [-0.12, 0.03, 0.0, 0.0, 0.0, 0.0], p: [0.001, -0.002] },
            Distortion::Radial { k: [0.08, 0.0, 0.0, 0.0, 0.0, 0.0], p: [0.0, 0.0] },
            Distortion::Fisheye { k: [0.02, -0.01, 0.0, 0.0] },
        ] {
            // The source: each pixel shows the pattern at the ray the lens maps to it, found
            // by inverting `distort` with Newton-free fixed-point iterations.
            let source = RgbImage::from_fn(128, 96, |u, v| {
                let xd = (f64::from(u) + 0.5 - camera.cx) / camera.fx;
                let yd = (f64::from(v) + 0.5 - camera.cy) / camera.fy;
                let (mut x, mut y) = (xd, yd);
                for _ in 0..200 {
                    let (dx, dy) = distortion.distort(x, y);
                    x += xd - dx;
                    y += yd - dy;
                }
                image::Rgb(pattern(x, y).map(|c| c.round() as u8))
            });
            let result = undistort(&source, None, camera, &distortion);
            let mut worst: f64 = 0.0;
            let mut compared = 0;
            for (u, v, pixel) in result.image.enumerate_pixels() {
                if result.mask.as_ref().is_some_and(|m| m.get_pixel(u, v)[0] == 0) {
                    continue;
                }
                let x = (f64::from(u) + 0.5 - camera.cx) / camera.fx;
                let y = (f64::from(v) + 0.5 - camera.cy) / camera.fy;
                let expected = pattern(x, y);
                for c in 0..3 {
                    worst = worst.max((f64::from(pixel[c]) - expected[c]).abs());
                }
                compared += 1;
            }
            // Bilinear interpolation of a pattern varying ≤ ~7 levels a pixel, and rounding.
            assert!(worst <= 4.0, "{distortion:?}: off by {worst}");
            assert!(compared > 128 * 96 / 2, "{distortion:?}: {compared} pixels kept");
        }
    }

    #[test]
    fn pixels_the_source_does_not_cover_are_masked() {
        // Pincushion: the corners of the pinhole view lie outside the source.
        let camera = Pinhole { fx: 50.0, fy: 50.0, cx: 32.0, cy: 32.0 };
        let distortion = Distortion::Radial { k: [0.3, 0.0, 0.0, 0.0, 0.0, 0.0], p: [0.0; 2] };
        let source = RgbImage::from_pixel(64, 64, image::Rgb([200, 100, 50]));
        let result = undistort(&source, None, camera, &distortion);
        let mask = result.mask.expect("some pixels uncovered");
        assert_eq!(mask.get_pixel(0, 0)[0], 0);
        assert_eq!(mask.get_pixel(32, 32)[0], 255);
        assert_eq!(result.image.get_pixel(32, 32).0, [200, 100, 50]);
        // A given mask is carried through: all masked stays all masked.
        let none_kept = GrayImage::new(64, 64);
        let result = undistort(&source, Some(&none_kept), camera, &distortion);
        assert!(result.mask.expect("masked").pixels().all(|p| p[0] == 0));
    }
}
