//! A photo's exposure from its EXIF block: exposure time, f-number and ISO sensitivity, what a
//! camera on automatic exposure changes from one photo to the next. Per-view appearance
//! (`crate::appearance`) starts each view's transform from them.

use exif::{In, Reader, Tag, Value};

/// What a photo's EXIF says about its exposure; each `None` where the file does not say.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Exposure {
    /// Seconds (`ExposureTime`, else the APEX `ShutterSpeedValue`).
    pub time_s: Option<f64>,
    /// The f-number (`FNumber`, else the APEX `ApertureValue`).
    pub f_number: Option<f64>,
    /// ISO sensitivity (`PhotographicSensitivity`; where that saturates at 65,535, the
    /// `RecommendedExposureIndex` or `ISOSpeed`).
    pub iso: Option<f64>,
}

impl Exposure {
    /// The exposure EXIF gives for an image file's bytes (JPEG, PNG, TIFF, WebP, HEIF); all
    /// `None` where there is no EXIF block or it cannot be read: exposure is a hint, never a
    /// reason to refuse a photo. A block with flaws the tags do not depend on (piexif, for
    /// one, writes an IFD0 whose next-IFD link the strict reader refuses) gives what it holds.
    #[must_use]
    pub fn of_file(bytes: &[u8]) -> Self {
        Reader::new()
            .continue_on_error(true)
            .read_from_container(&mut std::io::Cursor::new(bytes))
            .or_else(|e| e.distill_partial_result(|_| {}))
            .map(|exif| Self::of_exif(&exif))
            .unwrap_or_default()
    }

    fn of_exif(exif: &exif::Exif) -> Self {
        let number = |tag: Tag| -> Option<f64> {
            let value = match &exif.get_field(tag, In::PRIMARY)?.value {
                Value::Rational(v) => v.first().map(exif::Rational::to_f64),
                Value::SRational(v) => v.first().map(exif::SRational::to_f64),
                value => value.get_uint(0).map(f64::from),
            };
            value.filter(|v| v.is_finite())
        };
        let positive = |v: f64| (v > 0.0).then_some(v);
        // APEX: Tv = −log2(t), Av = 2·log2(N).
        let time_s = number(Tag::ExposureTime)
            .and_then(positive)
            .or_else(|| number(Tag::ShutterSpeedValue).map(|tv| (-tv).exp2()));
        let f_number = number(Tag::FNumber)
            .and_then(positive)
            .or_else(|| number(Tag::ApertureValue).map(|av| (av / 2.0).exp2()));
        // The SHORT tag tops out at 65,535 ("65,535 or more"); the LONG ones then tell.
        let iso = number(Tag::PhotographicSensitivity)
            .filter(|&iso| iso < 65_535.0)
            .or_else(|| number(Tag::RecommendedExposureIndex))
            .or_else(|| number(Tag::ISOSpeed))
            .or_else(|| number(Tag::PhotographicSensitivity))
            .and_then(positive);
        Self { time_s, f_number, iso }
    }

    /// True where the file said nothing about its exposure.
    #[must_use]
    pub fn is_unknown(&self) -> bool {
        *self == Self::default()
    }
}

/// Each photo's exposure relative to the others', in stops (log2; their mean is 0): from
/// H ∝ t · S / N² (the light a pixel collects grows with the time t and the aperture's area
/// ∝ 1/N², and the camera's gain with the sensitivity S), using each of t, N and S that every
/// photo gives. `None` when not one of them is known for every photo.
#[must_use]
pub fn relative_stops(exposures: &[Exposure]) -> Option<Vec<f64>> {
    let all = |get: fn(&Exposure) -> Option<f64>| exposures.iter().all(|e| get(e).is_some());
    let (time, aperture, iso) = (all(|e| e.time_s), all(|e| e.f_number), all(|e| e.iso));
    if exposures.is_empty() || !(time || aperture || iso) {
        return None;
    }
    let stops: Vec<f64> = exposures
        .iter()
        .map(|e| {
            let part = |used: bool, value: Option<f64>| {
                if used { value.map_or(0.0, f64::log2) } else { 0.0 }
            };
            part(time, e.time_s) + part(iso, e.iso) - 2.0 * part(aperture, e.f_number)
        })
        .collect();
    let mean = stops.iter().sum::<f64>() / stops.len() as f64;
    Some(stops.into_iter().map(|s| s - mean).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_use_what_every_photo_gives() {
        let photo = |t: Option<f64>, n: Option<f64>, s: Option<f64>| Exposure {
            time_s: t,
            f_number: n,
            iso: s,
        };
        // t doubles (+1 stop), N × √2 (−1 stop), ISO × 4 (+2 stops): +1, −1, +2 from the first.
        let stops = relative_stops(&[
            photo(Some(0.01), Some(2.0), Some(100.0)),
            photo(Some(0.02), Some(2.0), Some(100.0)),
            photo(Some(0.01), Some(2.0 * 2f64.sqrt()), Some(100.0)),
            photo(Some(0.01), Some(2.0), Some(400.0)),
        ])
        .expect("all known");
        let expected = [0.0, 1.0, -1.0, 2.0].map(|s| s - 0.5);
        for (got, want) in stops.iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{stops:?}");
        }
        // ISO missing from one photo: time alone.
        let stops =
            relative_stops(&[photo(Some(0.01), None, Some(100.0)), photo(Some(0.04), None, None)])
                .expect("time known");
        assert!((stops[1] - stops[0] - 2.0).abs() < 1e-12, "{stops:?}");
        assert_eq!(relative_stops(&[photo(Some(0.01), None, None), Exposure::default()]), None);
        assert_eq!(relative_stops(&[]), None);
    }

    #[test]
    fn a_file_without_exif_says_nothing() {
        assert!(Exposure::of_file(b"not an image").is_unknown());
        let mut png = Vec::new();
        image::RgbImage::new(2, 2)
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .expect("png");
        assert!(Exposure::of_file(&png).is_unknown());
    }

    /// Photos from seven real cameras (three phones), each EXIF block as its camera wrote it:
    /// Pillow 11.0.0's test images (`.ci/run` unpacks them from its source package on `PyPI`
    /// and names the folder in `SPLATFORGE_EXIF_PHOTOS`). The figures are `ExifTool` 12.57's
    /// (`exiftool -n -ExposureTime -FNumber -ISO`), to its printed precision; the Canon S40
    /// writes no ISO tag (`ExifTool`'s 100 is from Canon's maker note), so its ISO is unknown.
    #[test]
    fn real_cameras_exif_gives_their_exposure() {
        let Some(folder) = std::env::var_os("SPLATFORGE_EXIF_PHOTOS") else {
            eprintln!("SPLATFORGE_EXIF_PHOTOS is not set: real cameras' EXIF not checked");
            return;
        };
        let folder = std::path::PathBuf::from(folder);
        let cameras = [
            ("flower.jpg", "Canon PowerShot S40", 0.002, 4.9, None),
            ("xmp_test.jpg", "Canon EOS Rebel T6", 0.01, 4.0, Some(100.0)),
            ("broken_exif_dpi.jpg", "Nikon D800", 0.004, 8.0, Some(400.0)),
            ("iptc.jpg", "Nokia N70", 0.007_396, 3.2, Some(125.0)),
            ("empty_gps_ifd.jpg", "Redmi Note 9S", 1.0 / 14.0, 1.79, Some(25_600.0)),
            ("ultrahdr.jpg", "Pixel 6", 0.04, 1.85, Some(89.0)),
            ("fujifilm.mpo", "FinePix REAL 3D W3", 1.0 / 300.0, 3.7, Some(800.0)),
        ];
        let mut exposures = Vec::new();
        for (file, camera, time_s, f_number, iso) in cameras {
            let bytes = std::fs::read(folder.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            let exposure = Exposure::of_file(&bytes);
            let near = |got: Option<f64>, want: Option<f64>| match (got, want) {
                (Some(g), Some(w)) => (g / w - 1.0).abs() < 1e-3,
                (got, want) => got == want,
            };
            assert!(
                near(exposure.time_s, Some(time_s))
                    && near(exposure.f_number, Some(f_number))
                    && near(exposure.iso, iso),
                "{camera} ({file}): {exposure:?}, ExifTool: {time_s} s, f/{f_number}, ISO {iso:?}"
            );
            exposures.push(exposure);
        }
        // The Nikon at 1/250 s, f/8, ISO 400 against the Rebel at 1/100 s, f/4, ISO 100:
        // log2((0.004 · 400 / 64) / (0.01 · 100 / 16)) = −1.32 stops.
        let stops = relative_stops(&exposures[1..3]).expect("all known");
        assert!((stops[1] - stops[0] - (0.025_f64 / 0.0625).log2()).abs() < 1e-6, "{stops:?}");
        // All seven: the S40 has no ISO, so time and aperture alone.
        let stops = relative_stops(&exposures).expect("time and aperture known");
        assert!(
            (stops[2] - stops[1] - (0.000_062_5_f64 / 0.000_625).log2()).abs() < 1e-3,
            "{stops:?}"
        );
    }
}
