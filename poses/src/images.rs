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

/// Photos of one focal length whose sizes differ by at most this fraction on each side come
/// from one lens cropped a little differently (an undistorter's crops, a camera's variants of a
/// few pixels): they share one camera, each cut to the smallest size, centred. Given a camera
/// each, such groups of two or three photos let COLMAP fit each one's lens distortion to
/// noise (radial k from −0.12 to +0.07 on desk-statue's already undistorted photos), which the
/// trainer's undistortion then applies.
pub(crate) const SAME_CAMERA_SIZE: f64 = 0.02;

/// Photos that share one COLMAP camera: its size, its focal length from EXIF, its photos.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CameraGroup {
    pub width: u32,
    pub height: u32,
    pub focal_px: Option<f64>,
    pub names: Vec<String>,
}

/// Groups prepared photos into cameras: focal lengths (or none) and sizes within
/// [`SAME_CAMERA_SIZE`] of the group's smallest photo's; the photos of a group larger than its
/// smallest size are cut to it in `images`, centred (the principal point stays the centre).
pub(crate) fn camera_groups(
    prepared: Vec<Prepared>,
    images: &Path,
) -> Result<Vec<CameraGroup>, PosesError> {
    let mut sorted = prepared;
    // Smallest first, so a group's first photo is its smallest (or nearly).
    sorted.sort_by_key(|p| (u64::from(p.width) * u64::from(p.height), p.name.clone()));
    let mut groups: Vec<(CameraGroup, Vec<(u32, u32)>)> = Vec::new();
    let near_f = |a: f64, b: f64| (a - b).abs() <= SAME_CAMERA_SIZE * a.min(b);
    let near = |a: u32, b: u32| near_f(f64::from(a), f64::from(b));
    // A focal length from the 35 mm equivalent follows the photo's diagonal: crops a few
    // pixels apart differ by as little as their sizes do.
    let same_focal = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => near_f(a, b),
        (a, b) => a.is_none() && b.is_none(),
    };
    for photo in sorted {
        let size = (photo.width, photo.height);
        let joined = groups.iter_mut().find(|(group, _)| {
            same_focal(group.focal_px, photo.focal_px)
                && near(group.width, photo.width)
                && near(group.height, photo.height)
        });
        match joined {
            Some((group, sizes)) => {
                group.width = group.width.min(photo.width);
                group.height = group.height.min(photo.height);
                group.names.push(photo.name);
                sizes.push(size);
            }
            None => groups.push((
                CameraGroup {
                    width: photo.width,
                    height: photo.height,
                    focal_px: photo.focal_px,
                    names: vec![photo.name],
                },
                vec![size],
            )),
        }
    }
    for (group, sizes) in &groups {
        for (name, &size) in group.names.iter().zip(sizes) {
            if size != (group.width, group.height) {
                crop_centred(&images.join(name), group.width, group.height)?;
            }
        }
    }
    Ok(groups.into_iter().map(|(group, _)| group).collect())
}

/// Cuts the image at `path` to `width`×`height` around its centre, in place.
/// Keeps the image's exposure EXIF.
fn crop_centred(path: &Path, width: u32, height: u32) -> Result<(), PosesError> {
    let bytes = std::fs::read(path).map_err(|e| PosesError::io(path, e))?;
    let image = image::load_from_memory(&bytes)
        .map_err(|e| PosesError::Image { path: path.to_path_buf(), message: e.to_string() })?;
    let exif = exif::Reader::new()
        .read_from_container(&mut Cursor::new(&bytes))
        .ok()
        .and_then(|exif| exposure_exif(exif.buf()));
    let (x, y) = ((image.width() - width) / 2, (image.height() - height) / 2);
    let png = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    write_image(&image.crop_imm(x, y, width, height), path, png, exif)
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
        let kept = exif.as_deref().and_then(exposure_exif);
        write_image(&image, &target, format == Some(ImageFormat::Png), kept)?;
    }
    let focal_px =
        exif.and_then(|exif| focal_length_px(exif, (width, height), (out_width, out_height)));
    Ok(Prepared { name, width: out_width, height: out_height, focal_px })
}

/// Writes `image` as PNG or JPEG (quality 95) with the EXIF block `exif` (a TIFF stream).
fn write_image(
    image: &DynamicImage,
    target: &Path,
    png: bool,
    exif: Option<Vec<u8>>,
) -> Result<(), PosesError> {
    use image::ImageEncoder;
    let file = std::fs::File::create(target).map_err(|e| PosesError::io(target, e))?;
    let mut writer = std::io::BufWriter::new(file);
    // Both encoders take EXIF; were one not to, the photo goes without.
    let with_exif = |encoder: &mut dyn ImageEncoder, exif: Option<Vec<u8>>| {
        if let Some(exif) = exif {
            let _ = encoder.set_exif_metadata(exif);
        }
    };
    let encoded = if png {
        let mut encoder = image::codecs::png::PngEncoder::new(&mut writer);
        with_exif(&mut encoder, exif);
        image.write_with_encoder(encoder)
    } else {
        let mut encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut writer, 95);
        with_exif(&mut encoder, exif);
        image.to_rgb8().write_with_encoder(encoder)
    };
    encoded
        .map_err(|e| PosesError::Image { path: target.to_path_buf(), message: e.to_string() })?;
    std::io::Write::flush(&mut writer).map_err(|e| PosesError::io(target, e))
}

/// The EXIF block a re-encoded photo keeps: its exposure (time, f-number, sensitivity: what
/// per-view appearance starts from), as a TIFF stream; not its orientation (the pixels are
/// upright now) nor anything else. `None` where the photo's EXIF says nothing of exposure.
fn exposure_exif(exif: &[u8]) -> Option<Vec<u8>> {
    use exif::{In, Tag};
    // As the trainer reads it: what a flawed block holds still counts.
    let exif = exif::Reader::new()
        .continue_on_error(true)
        .read_raw(exif.to_vec())
        .or_else(|e| e.distill_partial_result(|_| {}))
        .ok()?;
    let fields: Vec<&exif::Field> = [
        Tag::ExposureTime,
        Tag::FNumber,
        Tag::PhotographicSensitivity,
        Tag::SensitivityType,
        Tag::RecommendedExposureIndex,
        Tag::ISOSpeed,
        Tag::ShutterSpeedValue,
        Tag::ApertureValue,
    ]
    .into_iter()
    .filter_map(|tag| exif.get_field(tag, In::PRIMARY))
    .collect();
    if fields.is_empty() {
        return None;
    }
    let mut writer = exif::experimental::Writer::new();
    for field in &fields {
        writer.push_field(field);
    }
    let mut tiff = std::io::Cursor::new(Vec::new());
    writer.write(&mut tiff, false).ok()?;
    Some(tiff.into_inner())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG of `image` with an EXIF block (orientation, 35 mm focal length) after SOI.
    fn jpeg_with_exif(image: &image::RgbImage, orientation: u16, focal_35mm: u16) -> Vec<u8> {
        let mut jpeg = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 95)
            .encode_image(image)
            .unwrap();
        // TIFF, little-endian: IFD0 at 8 with Orientation and the Exif IFD's offset; the Exif
        // IFD at 38 with FocalLengthIn35mmFilm.
        let entry = |tag: u16, kind: u16, value: u32| -> Vec<u8> {
            [&tag.to_le_bytes()[..], &kind.to_le_bytes(), &1u32.to_le_bytes(), &value.to_le_bytes()]
                .concat()
        };
        let mut tiff = b"II\x2a\x00\x08\x00\x00\x00".to_vec();
        tiff.extend(2u16.to_le_bytes());
        tiff.extend(entry(0x0112, 3, u32::from(orientation)));
        tiff.extend(entry(0x8769, 4, 38));
        tiff.extend(0u32.to_le_bytes());
        assert_eq!(tiff.len(), 38);
        tiff.extend(1u16.to_le_bytes());
        tiff.extend(entry(0xa405, 3, u32::from(focal_35mm)));
        tiff.extend(0u32.to_le_bytes());
        let mut app1 = b"Exif\x00\x00".to_vec();
        app1.extend(tiff);
        let length = u16::try_from(app1.len() + 2).unwrap();
        let mut out = jpeg[..2].to_vec();
        out.extend([0xff, 0xe1]);
        out.extend(length.to_be_bytes());
        out.extend(app1);
        out.extend(&jpeg[2..]);
        out
    }

    /// A turned photo, re-encoded upright, keeps its exposure's EXIF (time, f-number, ISO)
    /// and loses its orientation; one without exposure tags is written without EXIF.
    #[test]
    fn a_turned_photo_keeps_its_exposure() {
        use exif::{Field, In, Rational, Tag, Value};
        let dir = scratch("exposure");
        let stored = image::RgbImage::from_pixel(32, 24, image::Rgb([90, 120, 150]));
        let fields = [
            Field { tag: Tag::Orientation, ifd_num: In::PRIMARY, value: Value::Short(vec![6]) },
            Field {
                tag: Tag::ExposureTime,
                ifd_num: In::PRIMARY,
                value: Value::Rational(vec![Rational { num: 1, denom: 50 }]),
            },
            Field {
                tag: Tag::FNumber,
                ifd_num: In::PRIMARY,
                value: Value::Rational(vec![Rational { num: 18, denom: 10 }]),
            },
            Field {
                tag: Tag::PhotographicSensitivity,
                ifd_num: In::PRIMARY,
                value: Value::Short(vec![200]),
            },
        ];
        let mut writer = exif::experimental::Writer::new();
        for field in &fields {
            writer.push_field(field);
        }
        let mut tiff = std::io::Cursor::new(Vec::new());
        writer.write(&mut tiff, false).unwrap();
        let mut jpeg = Vec::new();
        let mut encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 95);
        image::ImageEncoder::set_exif_metadata(&mut encoder, tiff.into_inner()).unwrap();
        encoder.encode_image(&stored).unwrap();
        std::fs::write(dir.join("phone.jpg"), jpeg).unwrap();
        prepare(&dir.join("phone.jpg"), &dir.join("out"), 16).unwrap();
        let written = std::fs::read(dir.join("out/phone.jpg")).unwrap();
        let exif = exif::Reader::new()
            .read_from_container(&mut std::io::Cursor::new(&written))
            .expect("the exposure's EXIF");
        let value = |tag: Tag| exif.get_field(tag, In::PRIMARY).map(|f| f.value.clone());
        assert!(
            matches!(value(Tag::ExposureTime), Some(Value::Rational(v)) if (v[0].num, v[0].denom) == (1, 50))
        );
        assert!(
            matches!(value(Tag::FNumber), Some(Value::Rational(v)) if (v[0].num, v[0].denom) == (18, 10))
        );
        assert_eq!(value(Tag::PhotographicSensitivity).and_then(|v| v.get_uint(0)), Some(200));
        assert!(value(Tag::Orientation).is_none(), "the pixels are upright now");
        // Orientation alone: nothing about exposure to keep.
        std::fs::write(dir.join("plain.jpg"), jpeg_with_exif(&stored, 6, 26)).unwrap();
        prepare(&dir.join("plain.jpg"), &dir.join("out"), 16).unwrap();
        let written = std::fs::read(dir.join("out/plain.jpg")).unwrap();
        assert!(
            exif::Reader::new().read_from_container(&mut std::io::Cursor::new(&written)).is_err()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("splat-poses-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("out")).unwrap();
        dir
    }

    /// A portrait phone photo stored landscape with orientation 6 (turn 90° clockwise) comes
    /// out upright, its focal length from the 35 mm equivalent.
    #[test]
    fn a_turned_photo_is_made_upright_with_its_focal_length() {
        let dir = scratch("upright");
        // 64×48 stored; a red block in its top-left corner.
        let stored = image::RgbImage::from_fn(64, 48, |x, y| {
            if x < 16 && y < 16 { image::Rgb([250, 10, 10]) } else { image::Rgb([20, 20, 200]) }
        });
        let source = dir.join("phone.jpg");
        std::fs::write(&source, jpeg_with_exif(&stored, 6, 26)).unwrap();
        let prepared = prepare(&source, &dir.join("out"), 1600).unwrap();
        assert_eq!((prepared.width, prepared.height), (48, 64));
        let written = image::open(dir.join("out/phone.jpg")).unwrap().to_rgb8();
        assert_eq!(written.dimensions(), (48, 64));
        // Turned clockwise, the stored top-left is the upright top-right.
        let red = |p: &image::Rgb<u8>| p.0[0] > 200 && p.0[2] < 60;
        assert!(red(written.get_pixel(40, 8)), "{:?}", written.get_pixel(40, 8));
        assert!(!red(written.get_pixel(8, 8)));
        // 26 mm on 35 mm film: 26 / 43.27 of the diagonal (80 px).
        let focal = prepared.focal_px.unwrap();
        assert!((focal - 26.0 * 80.0 / FILM_DIAGONAL_MM).abs() < 1e-9, "{focal}");

        // Halved to 32 on the long side: the same photo, half the focal length.
        std::fs::remove_file(dir.join("out/phone.jpg")).unwrap();
        let small = prepare(&source, &dir.join("out"), 32).unwrap();
        assert_eq!((small.width, small.height), (24, 32));
        assert!((small.focal_px.unwrap() - focal / 2.0).abs() < 1e-9);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Sizes a few pixels apart share a camera (the larger cut to the smallest, centred);
    /// another size or another focal length has its own.
    #[test]
    fn near_sizes_share_a_camera() {
        let dir = scratch("groups");
        let images = dir.join("out");
        let photo = |name: &str, width: u32, height: u32, focal_px: Option<f64>| {
            // A bright row at the middle height, so a centred cut keeps it in the middle.
            let image = image::RgbImage::from_fn(width, height, |_, y| {
                image::Rgb(if y == height / 2 { [255; 3] } else { [0; 3] })
            });
            image.save(images.join(name)).unwrap();
            Prepared { name: name.into(), width, height, focal_px }
        };
        let prepared = vec![
            photo("a.png", 200, 133, None),
            photo("b.png", 200, 131, None),
            photo("c.png", 202, 132, None),
            photo("d.png", 200, 180, None),
            photo("e.png", 200, 131, Some(240.0)),
            // A 35 mm focal length follows the diagonal: a crop 1% larger has one 1% longer.
            photo("f.png", 202, 132, Some(242.2)),
            photo("g.png", 200, 131, Some(300.0)),
        ];
        let mut groups = camera_groups(prepared, &images).unwrap();
        groups.sort_by_key(|g| (g.height, g.focal_px.is_some()));
        let summary: Vec<_> =
            groups.iter().map(|g| (g.width, g.height, g.focal_px, g.names.clone())).collect();
        assert_eq!(
            summary,
            [
                (200, 131, None, vec!["b.png".to_owned(), "a.png".into(), "c.png".into()]),
                (200, 131, Some(240.0), vec!["e.png".into(), "f.png".into()]),
                (200, 131, Some(300.0), vec!["g.png".into()]),
                (200, 180, None, vec!["d.png".into()]),
            ]
        );
        for name in ["a.png", "c.png", "f.png"] {
            let cut = image::open(images.join(name)).unwrap().to_rgb8();
            assert_eq!(cut.dimensions(), (200, 131), "{name}");
            // The middle row stays in the middle (to the half pixel an odd cut leaves).
            let bright = (0..131).find(|&y| cut.get_pixel(100, y).0 == [255; 3]);
            assert!(bright.is_some_and(|y| y.abs_diff(65) <= 1), "{name}: {bright:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An upright photo that fits keeps its own bytes; one without EXIF has no focal prior.
    #[test]
    fn an_upright_photo_that_fits_is_copied() {
        let dir = scratch("copied");
        let image = image::RgbImage::from_pixel(40, 30, image::Rgb([90, 120, 30]));
        let mut bytes = Vec::new();
        image::codecs::jpeg::JpegEncoder::new(&mut bytes).encode_image(&image).unwrap();
        let source = dir.join("plain.JPG");
        std::fs::write(&source, &bytes).unwrap();
        let prepared = prepare(&source, &dir.join("out"), 1600).unwrap();
        assert_eq!(
            (prepared.name.as_str(), prepared.width, prepared.height),
            ("plain.JPG", 40, 30)
        );
        assert_eq!(prepared.focal_px, None);
        assert_eq!(std::fs::read(dir.join("out/plain.JPG")).unwrap(), bytes);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
