//! COLMAP binary model files (little-endian), as `colmap/scene/reconstruction_io.cc` writes
//! them. Every count is checked against the bytes left before anything is allocated for it.

use splat_formats::PointCloud;

use super::{CameraModel, ColmapCamera, ColmapImage, check_point, color_from_u8};
use crate::dataset::DatasetError;

/// Fewest bytes a `cameras.bin` record takes: id, model, width, height (then parameters).
const CAMERA_MIN_BYTES: usize = 4 + 4 + 8 + 8;
/// Fewest bytes an `images.bin` record takes: id, qvec, tvec, camera id, empty name with its
/// NUL, 2D point count.
const IMAGE_MIN_BYTES: usize = 4 + 4 * 8 + 3 * 8 + 4 + 1 + 8;
/// Bytes of one 2D point in `images.bin`: x, y, point3D id.
const POINT2D_BYTES: usize = 8 + 8 + 8;
/// Fewest bytes a `points3D.bin` record takes: id, xyz, rgb, error, track length.
const POINT3D_MIN_BYTES: usize = 8 + 3 * 8 + 3 + 8 + 8;
/// Bytes of one track element in `points3D.bin`: image id, 2D point index.
const TRACK_ELEMENT_BYTES: usize = 4 + 4;

/// Reads `cameras.bin`. `file` names it in errors.
pub(crate) fn read_cameras(file: &str, bytes: &[u8]) -> Result<Vec<ColmapCamera>, DatasetError> {
    let mut reader = Reader::new(file, bytes);
    let count = reader.count("cameras", CAMERA_MIN_BYTES)?;
    let mut cameras = Vec::with_capacity(count);
    for index in 0..count {
        let what = || format!("camera {} of {count}", index + 1);
        let id = reader.u32(&what)?;
        let model_id = reader.i32(&what)?;
        let width = reader.u64(&what)?;
        let height = reader.u64(&what)?;
        let Some(model) = CameraModel::from_id(model_id) else {
            return Err(DatasetError::UnsupportedCameraModel {
                file: file.to_owned(),
                camera_id: id,
                model: format!("unknown (id {model_id})"),
            });
        };
        let params =
            (0..model.param_count).map(|_| reader.f64(&what)).collect::<Result<Vec<_>, _>>()?;
        cameras.push(ColmapCamera::new(file, id, model, width, height, &params)?);
    }
    Ok(cameras)
}

/// Reads `images.bin`, skipping the 2D points.
pub(crate) fn read_images(file: &str, bytes: &[u8]) -> Result<Vec<ColmapImage>, DatasetError> {
    let mut reader = Reader::new(file, bytes);
    let count = reader.count("images", IMAGE_MIN_BYTES)?;
    let mut images = Vec::with_capacity(count);
    for index in 0..count {
        let what = || format!("image {} of {count}", index + 1);
        let id = reader.u32(&what)?;
        let qvec = [reader.f64(&what)?, reader.f64(&what)?, reader.f64(&what)?, reader.f64(&what)?];
        let tvec = [reader.f64(&what)?, reader.f64(&what)?, reader.f64(&what)?];
        let camera_id = reader.u32(&what)?;
        let name = reader.nul_terminated(&what)?;
        let point_count = reader.count(&format!("2D points in {}", what()), POINT2D_BYTES)?;
        reader.skip(point_count * POINT2D_BYTES, &what)?;
        images.push(ColmapImage {
            id,
            camera_from_world_qvec: qvec,
            camera_from_world_tvec: tvec,
            camera_id,
            name,
        });
    }
    Ok(images)
}

/// Reads `points3D.bin` into a coloured point cloud, skipping the tracks.
pub(crate) fn read_points(file: &str, bytes: &[u8]) -> Result<PointCloud, DatasetError> {
    let mut reader = Reader::new(file, bytes);
    let count = reader.count("points", POINT3D_MIN_BYTES)?;
    let mut cloud = PointCloud {
        positions: Vec::with_capacity(count),
        colors: Vec::with_capacity(count),
        has_color: true,
    };
    for index in 0..count {
        let what = || format!("point {} of {count}", index + 1);
        let id = reader.u64(&what)?;
        let position = [reader.f64(&what)?, reader.f64(&what)?, reader.f64(&what)?];
        let rgb = [reader.u8(&what)?, reader.u8(&what)?, reader.u8(&what)?];
        let _reprojection_error = reader.f64(&what)?;
        let track_length =
            reader.count(&format!("track elements in {}", what()), TRACK_ELEMENT_BYTES)?;
        reader.skip(track_length * TRACK_ELEMENT_BYTES, &what)?;
        cloud.positions.push(check_point(file, id, position)?);
        cloud.colors.push(color_from_u8(rgb));
    }
    Ok(cloud)
}

/// A cursor over a file's bytes whose reads fail, never panic, past the end.
struct Reader<'a> {
    file: &'a str,
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn new(file: &'a str, bytes: &'a [u8]) -> Self {
        Self { file, bytes, offset: 0 }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }

    /// The next `len` bytes; `what` names the record for the error.
    fn take(&mut self, len: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], DatasetError> {
        if len > self.remaining() {
            return Err(DatasetError::invalid(
                self.file,
                format!(
                    "truncated: {} needs {len} more bytes at offset {} but the file has {} bytes",
                    what(),
                    self.offset,
                    self.bytes.len()
                ),
            ));
        }
        let taken = &self.bytes[self.offset..self.offset + len];
        self.offset += len;
        Ok(taken)
    }

    fn skip(&mut self, len: usize, what: &dyn Fn() -> String) -> Result<(), DatasetError> {
        self.take(len, what).map(|_| ())
    }

    fn array<const N: usize>(
        &mut self,
        what: &dyn Fn() -> String,
    ) -> Result<[u8; N], DatasetError> {
        let bytes = self.take(N, what)?;
        let mut array = [0; N];
        array.copy_from_slice(bytes);
        Ok(array)
    }

    fn u8(&mut self, what: &dyn Fn() -> String) -> Result<u8, DatasetError> {
        self.array::<1>(what).map(|[b]| b)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, DatasetError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn i32(&mut self, what: &dyn Fn() -> String) -> Result<i32, DatasetError> {
        self.array(what).map(i32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, DatasetError> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn f64(&mut self, what: &dyn Fn() -> String) -> Result<f64, DatasetError> {
        self.array(what).map(f64::from_le_bytes)
    }

    /// A NUL-terminated UTF-8 string (the NUL is consumed).
    fn nul_terminated(&mut self, what: &dyn Fn() -> String) -> Result<String, DatasetError> {
        let rest = &self.bytes[self.offset..];
        let Some(len) = rest.iter().position(|&b| b == 0) else {
            return Err(DatasetError::invalid(
                self.file,
                format!(
                    "truncated: the name of {} has no terminating NUL before the end of the file",
                    what()
                ),
            ));
        };
        let name = std::str::from_utf8(&rest[..len])
            .map_err(|_| {
                DatasetError::invalid(self.file, format!("the name of {} is not UTF-8", what()))
            })?
            .to_owned();
        self.offset += len + 1;
        Ok(name)
    }

    /// A u64 count of records that take at least `min_record_bytes` each, checked against the
    /// bytes left so that a lying count fails before any allocation.
    fn count(&mut self, what: &str, min_record_bytes: usize) -> Result<usize, DatasetError> {
        let count = self.u64(&|| format!("the number of {what}"))?;
        let max_count = self.remaining() / min_record_bytes;
        match usize::try_from(count) {
            Ok(count) if count <= max_count => Ok(count),
            _ => Err(DatasetError::invalid(
                self.file,
                format!(
                    "truncated or corrupt: claims {count} {what}, but the {} bytes left hold at \
                     most {max_count}",
                    self.remaining()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_count_fails_before_allocating() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 1000]);
        let error = read_points("points3D.bin", &bytes).expect_err("count too large");
        let message = error.to_string();
        assert!(message.starts_with("points3D.bin: "), "{message}");
        assert!(message.contains("claims 18446744073709551615 points"), "{message}");
    }

    #[test]
    fn empty_file_is_truncated() {
        let error = read_cameras("cameras.bin", &[]).expect_err("no count");
        assert!(error.to_string().contains("truncated"), "{error}");
    }

    #[test]
    fn reads_one_pinhole_camera() {
        let mut bytes = 1u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&7u32.to_le_bytes());
        bytes.extend_from_slice(&1i32.to_le_bytes());
        bytes.extend_from_slice(&640u64.to_le_bytes());
        bytes.extend_from_slice(&480u64.to_le_bytes());
        for v in [500.0f64, 501.0, 320.0, 240.0] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let cameras = read_cameras("cameras.bin", &bytes).expect("valid");
        assert_eq!(cameras.len(), 1);
        assert_eq!(cameras[0].id, 7);
        assert!((cameras[0].intrinsics.fy - 501.0).abs() < 1e-12);
        assert!(read_cameras("cameras.bin", &bytes[..bytes.len() - 1]).is_err());
    }
}
