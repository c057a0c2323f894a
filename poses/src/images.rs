//! Photos made ready for COLMAP: upright (COLMAP 3.8 ignores EXIF orientation, so a portrait
//! phone photo would be matched lying on its side), no larger than the size asked for, and
//! their focal length in pixels where EXIF tells it (COLMAP's own guess without it is 1.2 ×
//! the long side, and the guess it then refines).

use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};

use crate::PosesError;

/// The photo files we read, by extension (any case).
pub(crate) const PHOTO_EXTENSIONS: [&str; 3] = ["jpg", "jpeg", "png"];

/// The diagonal of a 35 mm film frame (36 × 24 mm), in mm: the reference of EXIF's
/// `FocalLengthIn35mmFilm`.
const FILM_DIAGONAL_MM: f64 = 43.266_615;

/// A photo as written for COLMAP.
#[derive(Clone, Debug)]
pub(crate) struct Prepared {
    /// File name in the dataset's `images/`.
    pub name: String,
    pub width: u32,
    pub height: u32,
    /// Focal length in pixels of the image as written, from EXIF.
    pub focal_px: Option<f64>,
}

impl Prepared {
    /// Images that share this key share one COLMAP camera: same size, same focal length
    /// (to 0.1 px), or both without one.
    pub fn camera_key(&self) -> (u32, u32, Option<i64>) {
        (self.width, self.height, self.focal_px.map(|f| (f * 10.0).round() as i64))
    }
}

/// The photos directly in `folder`, sorted by name.
pub(crate) fn list_photos(folder: &Path) -> Result<Vec<PathBuf>, PosesError> {
    let entries = std::fs::read_dir(folder).map_err(|e| PosesError::io(folder, e))?;
    let mut photos = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| PosesError::io(folder, e))?.path();
        let is_photo = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| PHOTO_EXTENSIONS.iter().any(|known| e.eq_ignore_ascii_case(known)));
        if is_photo && path.is_file() {
            photos.push(path);
        }
    }
    photos.sort();
    Ok(photos)
}

/// Writes `source` into `images` upright and at most `max_size` on its long side: the file's
/// own bytes when it already is, re-encoded (JPEG quality 95, or PNG) otherwise.
pub(crate) fn prepare(source: &Path, images: &Path, max_size: u32) -> Result<Prepared, PosesError> {
    let image_error = |message: String| PosesError::Image { path: source.to_path_buf(), message };
    let bytes = std::fs::read(source).map_err(|e| PosesError::io(source, e))?;
    let reader = ImageReader::new(Cursor::new(&bytes))
        .with_guessed_format()
        .map_err(|e| image_error(e.to_string()))?;
    let format = reader.format();
    let mut decoder = reader.into_decoder().map_err(|e| image_error(e.to_string()))?;
    let exif = decoder.exif_metadata().ok().flatten();
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let (width, height) = decoder.dimensions();
    let turned = !matches!(
        orientation,
        Orientation::NoTransforms
            | Orientation::FlipHorizontal
            | Orientation::Rotate180
            | Orientation::FlipVertical
    );
    let (upright_width, upright_height) = if turned { (height, width) } else { (width, height) };
    let scale = f64::from(max_size) / f64::from(upright_width.max(upright_height));
    let (out_width, out_height) = if scale < 1.0 {
        (
            ((f64::from(upright_width) * scale).round() as u32).max(1),
            ((f64::from(upright_height) * scale).round() as u32).max(1),
        )
    } else {
        (upright_width, upright_height)
    };
    let name = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let target = images.join(&name);
    let as_is = orientation == Orientation::NoTransforms
        && (out_width, out_height) == (width, height)
        && matches!(format, Some(ImageFormat::Jpeg | ImageFormat::Png));
    if as_is {
        std::fs::write(&target, &bytes).map_err(|e| PosesError::io(&target, e))?;
    } else {
        let mut image =
            DynamicImage::from_decoder(decoder).map_err(|e| image_error(e.to_string()))?;
        image.apply_orientation(orientation);
        if (out_width, out_height) != (image.width(), image.height()) {
            image =
                image.resize_exact(out_width, out_height, image::imageops::FilterType::Triangle);
        }
        write_image(&image, &target, format == Some(ImageFormat::Png))?;
    }
    let focal_px =
        exif.and_then(|exif| focal_length_px(exif, (width, height), (out_width, out_height)));
    Ok(Prepared { name, width: out_width, height: out_height, focal_px })
}

fn write_image(image: &DynamicImage, target: &Path, png: bool) -> Result<(), PosesError> {
    let file = std::fs::File::create(target).map_err(|e| PosesError::io(target, e))?;
    let mut writer = std::io::BufWriter::new(file);
    let encoded = if png {
        image.write_to(&mut writer, ImageFormat::Png)
    } else {
        let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut writer, 95);
        image.to_rgb8().write_with_encoder(encoder)
    };
    encoded
        .map_err(|e| PosesError::Image { path: target.to_path_buf(), message: e.to_string() })?;
    std::io::Write::flush(&mut writer).map_err(|e| PosesError::io(target, e))
}

/// The focal length in pixels of the image as written (`written`, upright and resized) from
/// the EXIF of the file as stored (`stored`): from the 35 mm equivalent focal length (defined
/// on the diagonal, so it holds whatever the aspect ratio), else from the focal length in mm
/// and the focal plane's resolution.
fn focal_length_px(exif: Vec<u8>, stored: (u32, u32), written: (u32, u32)) -> Option<f64> {
    use exif::{In, Tag, Value};
    let exif = exif::Reader::new().read_raw(exif).ok()?;
    let number = |tag: Tag| -> Option<f64> {
        match &exif.get_field(tag, In::PRIMARY)?.value {
            Value::Rational(values) => values.first().map(exif::Rational::to_f64),
            value => value.get_uint(0).map(f64::from),
        }
    };
    let positive = |v: f64| (v.is_finite() && v > 0.0).then_some(v);
    let diagonal = |(w, h): (u32, u32)| f64::from(w).hypot(f64::from(h));
    if let Some(f35) = number(Tag::FocalLengthIn35mmFilm).and_then(positive) {
        return Some(f35 * diagonal(written) / FILM_DIAGONAL_MM);
    }
    let focal_mm = number(Tag::FocalLength).and_then(positive)?;
    let pixels_per_unit = number(Tag::FocalPlaneXResolution).and_then(positive)?;
    let unit_mm = match exif
        .get_field(Tag::FocalPlaneResolutionUnit, In::PRIMARY)
        .and_then(|f| f.value.get_uint(0))
    {
        Some(3) => 10.0,
        Some(4) => 1.0,
        Some(5) => 0.001,
        // 2 (inches) is the default.
        _ => 25.4,
    };
    // The resolution is the sensor's at the stored size: scale to the written one.
    let stored_long = f64::from(stored.0.max(stored.1));
    let written_long = f64::from(written.0.max(written.1));
    positive(focal_mm * pixels_per_unit / unit_mm * written_long / stored_long)
}
