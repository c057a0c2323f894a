//! Image decoding: any PNG / JPEG to 8-bit RGB, alpha composited over the background colour,
//! downscaled to the maximum resolution.
//!
//! Work on whole images goes through `DynamicImage` methods, which are compiled inside the
//! `image` crate (optimised even in dev builds) rather than instantiated here.

use image::imageops::FilterType;
use image::{DynamicImage, GrayImage, ImageReader, RgbImage, RgbaImage};

/// Filter used to downscale: a tent filter, smooth enough for the modest ratios of training
/// photos and much cheaper than Lanczos.
const DOWNSCALE_FILTER: FilterType = FilterType::Triangle;

/// A decoded image ready for training.
pub(crate) struct DecodedImage {
    /// RGB, downscaled so that its long side is at most the maximum resolution.
    pub image: RgbImage,
    /// Size of the image file before downscaling, in pixels.
    pub file_width: u32,
    pub file_height: u32,
    /// The alpha channel, downscaled likewise, when it was asked for as a mask (the colours are
    /// then not composited).
    pub alpha: Option<GrayImage>,
    /// The alpha channel, downscaled likewise, when the colours were composited over the
    /// background and some pixel is not opaque: what training needs to put the image over
    /// another colour (`image + (other − background)·(1 − α)`, linear, so downscaling keeps
    /// it true) or to supervise the rendered alpha.
    pub transparency: Option<GrayImage>,
}

/// Decodes an image file's bytes, composites alpha over `background` (0..1) (or, with
/// `alpha_as_mask`, keeps it as a mask) and downscales so that the long side is at most
/// `max_resolution` (0 = no limit). Errors are messages without the file name.
pub(crate) fn decode(
    bytes: &[u8],
    max_resolution: u32,
    background: [f32; 3],
    alpha_as_mask: bool,
) -> Result<DecodedImage, String> {
    let decoded = read(bytes)?;
    let (file_width, file_height) = (decoded.width(), decoded.height());
    if file_width == 0 || file_height == 0 {
        return Err("image has no pixels".to_owned());
    }
    let (width, height) = fit_within(file_width, file_height, max_resolution);
    let resized = |rgb: RgbImage| {
        if (width, height) == (file_width, file_height) {
            rgb
        } else {
            downscale(rgb, width, height)
        }
    };
    let (rgb, alpha, transparency) = match (decoded.color().has_alpha(), alpha_as_mask) {
        (true, true) => {
            let rgba = decoded.into_rgba8();
            let alpha = alpha_channel(&rgba);
            let rgb = DynamicImage::ImageRgba8(rgba).into_rgb8();
            (rgb, Some(resize_gray(alpha, width, height)), None)
        }
        (true, false) => {
            let rgba = decoded.into_rgba8();
            let alpha = alpha_channel(&rgba);
            // An RGBA file that is opaque everywhere has nothing to supervise.
            let transparent = alpha.as_raw().iter().any(|&a| a < u8::MAX);
            let rgb = composite_over(&rgba, background);
            (rgb, None, transparent.then(|| resize_gray(alpha, width, height)))
        }
        (false, _) => (decoded.into_rgb8(), None, None),
    };
    Ok(DecodedImage { image: resized(rgb), file_width, file_height, alpha, transparency })
}

/// The alpha channel of `rgba`.
fn alpha_channel(rgba: &RgbaImage) -> GrayImage {
    let alpha: Vec<u8> = rgba.as_raw().chunks_exact(4).map(|pixel| pixel[3]).collect();
    GrayImage::from_raw(rgba.width(), rgba.height(), alpha)
        .unwrap_or_else(|| GrayImage::new(rgba.width(), rgba.height()))
}

/// Decodes a mask image (any format; its luma, 0 = left out) at `width` × `height`.
pub(crate) fn decode_mask(bytes: &[u8], width: u32, height: u32) -> Result<GrayImage, String> {
    let mask = read(bytes)?.into_luma8();
    Ok(resize_gray(mask, width, height))
}

fn read(bytes: &[u8]) -> Result<DynamicImage, String> {
    ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?
        .decode()
        .map_err(|e| e.to_string())
}

fn resize_gray(gray: GrayImage, width: u32, height: u32) -> GrayImage {
    if gray.dimensions() == (width, height) {
        return gray;
    }
    DynamicImage::ImageLuma8(gray).resize_exact(width, height, DOWNSCALE_FILTER).into_luma8()
}

/// Resizes through 32-bit float RGB: `image`'s resampler runs about twice as fast on floats as
/// on 8-bit pixels (~95 vs ~170 ms for 1080×1920 → 900×1600), and rounds only once.
fn downscale(rgb: RgbImage, width: u32, height: u32) -> RgbImage {
    let float_rgb = DynamicImage::ImageRgb8(rgb).to_rgb32f();
    DynamicImage::ImageRgb32F(float_rgb).resize_exact(width, height, DOWNSCALE_FILTER).into_rgb8()
}

/// The size of a `width` × `height` image scaled down, keeping its aspect ratio, so that its
/// long side is `max_side`; unchanged when it already fits or `max_side` is 0.
pub(crate) fn fit_within(width: u32, height: u32, max_side: u32) -> (u32, u32) {
    let long_side = width.max(height);
    if max_side == 0 || long_side <= max_side {
        return (width, height);
    }
    let scale = f64::from(max_side) / f64::from(long_side);
    let scaled = |side: u32| ((f64::from(side) * scale).round() as u32).clamp(1, max_side);
    (scaled(width), scaled(height))
}

/// Composites straight (non-premultiplied) RGBA over an opaque background colour (0..1), in
/// the image's own encoding, as NeRF-style loaders do: `rgb · α + background · (1 − α)`,
/// rounded.
///
/// A plain indexed loop: our crate is not optimised in dev builds, and iterator adaptors there
/// cost about ten times as much per pixel.
fn composite_over(rgba: &RgbaImage, background: [f32; 3]) -> RgbImage {
    const OPAQUE: u32 = 255;
    let background_u8 = background.map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8);
    let source = rgba.as_raw().as_slice();
    let pixel_count = source.len() / 4;
    let mut rgb = vec![0u8; pixel_count * 3];
    let mut pixel = 0;
    while pixel < pixel_count {
        let (from, to) = (pixel * 4, pixel * 3);
        let alpha = u32::from(source[from + 3]);
        if alpha == OPAQUE {
            rgb[to..to + 3].copy_from_slice(&source[from..from + 3]);
        } else if alpha == 0 {
            rgb[to..to + 3].copy_from_slice(&background_u8);
        } else {
            let mut channel = 0;
            while channel < 3 {
                // At most 255·255 + 255·255 + 127, far below u32::MAX; the quotient is ≤ 255.
                let blended = u32::from(source[from + channel]) * alpha
                    + u32::from(background_u8[channel]) * (OPAQUE - alpha)
                    + 127;
                rgb[to + channel] = (blended / OPAQUE) as u8;
                channel += 1;
            }
        }
        pixel += 1;
    }
    // The buffer holds exactly width × height × 3 bytes, so this cannot fail; fall back to a
    // background-free conversion rather than panic.
    RgbImage::from_raw(rgba.width(), rgba.height(), rgb)
        .unwrap_or_else(|| DynamicImage::ImageRgba8(rgba.clone()).into_rgb8())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_long_side_and_keeps_aspect() {
        assert_eq!(fit_within(1080, 1920, 1600), (900, 1600));
        assert_eq!(fit_within(1919, 1079, 1600), (1600, 900));
        assert_eq!(fit_within(800, 800, 1600), (800, 800));
        assert_eq!(fit_within(4000, 3, 1000), (1000, 1));
        assert_eq!(fit_within(4000, 3000, 0), (4000, 3000));
    }

    #[test]
    fn composites_alpha_over_background() {
        let rgba = RgbaImage::from_raw(3, 1, vec![255, 0, 0, 255, 255, 0, 0, 0, 255, 0, 0, 128])
            .expect("3 pixels");
        let rgb = composite_over(&rgba, [0.0, 0.0, 1.0]);
        assert_eq!(rgb.as_raw(), &[255, 0, 0, 0, 0, 255, 128, 0, 127]);
    }
}
