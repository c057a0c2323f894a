//! COLMAP text model files. Lines starting with `#` and blank lines are skipped, except that
//! in `images.txt` every image line is followed by exactly one line of 2D points, which may be
//! empty.

use std::str::FromStr;

use splat_formats::PointCloud;

use super::{CameraModel, ColmapCamera, ColmapImage, check_point, color_from_u8};
use crate::dataset::DatasetError;

/// Reads `cameras.txt`: `CAMERA_ID MODEL WIDTH HEIGHT PARAMS...`.
pub(crate) fn read_cameras(file: &str, text: &str) -> Result<Vec<ColmapCamera>, DatasetError> {
    let mut cameras = Vec::new();
    for (line_number, line) in data_lines(text) {
        let mut fields = Fields::new(file, line_number, line);
        let id = fields.next("CAMERA_ID")?;
        let model_name: String = fields.next("MODEL")?;
        let width = fields.next("WIDTH")?;
        let height = fields.next("HEIGHT")?;
        let Some(model) = CameraModel::from_name(&model_name) else {
            return Err(DatasetError::UnsupportedCameraModel {
                file: file.to_owned(),
                camera_id: id,
                model: model_name,
            });
        };
        let params = fields.rest::<f64>("PARAMS")?;
        if params.len() != model.param_count {
            return Err(fields.error(&format!(
                "the {} camera model has {} parameters, found {}",
                model.name,
                model.param_count,
                params.len()
            )));
        }
        cameras.push(ColmapCamera::new(file, id, model, width, height, &params)?);
    }
    Ok(cameras)
}

/// Reads `images.txt`: per image, `IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME` and a line of
/// 2D points, which is skipped.
pub(crate) fn read_images(file: &str, text: &str) -> Result<Vec<ColmapImage>, DatasetError> {
    let mut images = Vec::new();
    let mut lines = text.lines().enumerate().map(|(index, line)| (index + 1, line));
    while let Some((line_number, line)) = lines.next() {
        if is_skipped(line) {
            continue;
        }
        let mut fields = Fields::new(file, line_number, line);
        let id = fields.next("IMAGE_ID")?;
        let qvec = [fields.next("QW")?, fields.next("QX")?, fields.next("QY")?, fields.next("QZ")?];
        let tvec = [fields.next("TX")?, fields.next("TY")?, fields.next("TZ")?];
        let camera_id = fields.next("CAMERA_ID")?;
        let name = fields.name("NAME")?;
        images.push(ColmapImage {
            id,
            camera_from_world_qvec: qvec,
            camera_from_world_tvec: tvec,
            camera_id,
            name,
        });
        let _points2d_line = lines.next();
    }
    Ok(images)
}

/// Reads `points3D.txt`: `POINT3D_ID X Y Z R G B ERROR TRACK...`.
pub(crate) fn read_points(file: &str, text: &str) -> Result<PointCloud, DatasetError> {
    let mut cloud = PointCloud { has_color: true, ..PointCloud::default() };
    for (line_number, line) in data_lines(text) {
        let mut fields = Fields::new(file, line_number, line);
        let id = fields.next("POINT3D_ID")?;
        let position = [fields.next("X")?, fields.next("Y")?, fields.next("Z")?];
        let rgb = [fields.next("R")?, fields.next("G")?, fields.next("B")?];
        cloud.positions.push(check_point(file, id, position)?);
        cloud.colors.push(color_from_u8(rgb));
    }
    Ok(cloud)
}

fn is_skipped(line: &str) -> bool {
    let line = line.trim();
    line.is_empty() || line.starts_with('#')
}

/// Non-comment, non-blank lines with their 1-based line numbers.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line))
        .filter(|(_, line)| !is_skipped(line))
}

/// The whitespace-separated fields of one line, parsed with errors that name file and line.
struct Fields<'a> {
    file: &'a str,
    line_number: usize,
    line: &'a str,
    tokens: std::str::SplitWhitespace<'a>,
}

impl<'a> Fields<'a> {
    fn new(file: &'a str, line_number: usize, line: &'a str) -> Self {
        Self { file, line_number, line, tokens: line.split_whitespace() }
    }

    fn error(&self, message: &str) -> DatasetError {
        DatasetError::invalid(self.file, format!("line {}: {message}", self.line_number))
    }

    fn parse<T: FromStr>(&self, name: &str, token: &str) -> Result<T, DatasetError> {
        token.parse().map_err(|_| self.error(&format!("{name} \"{token}\" is not a valid value")))
    }

    /// The next field, parsed as a `T`.
    fn next<T: FromStr>(&mut self, name: &str) -> Result<T, DatasetError> {
        let token = self.tokens.next().ok_or_else(|| self.error(&format!("{name} is missing")))?;
        self.parse(name, token)
    }

    /// All remaining fields, parsed as `T`s.
    fn rest<T: FromStr>(&mut self, name: &str) -> Result<Vec<T>, DatasetError> {
        let tokens: Vec<&str> = self.tokens.by_ref().collect();
        tokens.into_iter().map(|token| self.parse(name, token)).collect()
    }

    /// The rest of the line as a name (image names may contain spaces).
    fn name(&mut self, name: &str) -> Result<String, DatasetError> {
        let first = self.tokens.next().ok_or_else(|| self.error(&format!("{name} is missing")))?;
        // `first` borrows from `line`, so its offset there locates the rest of the line.
        let start = first.as_ptr() as usize - self.line.as_ptr() as usize;
        Ok(self.line[start..].trim_end().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_with_empty_point_lines() {
        let text = "# comment\n1 1 0 0 0 0 0 0 1 a.jpg\n\n2 1 0 0 0 1 2 3 1 b c.jpg\n1.0 2.0 -1\n";
        let images = read_images("images.txt", text).expect("valid");
        assert_eq!(images.len(), 2);
        assert_eq!(images[1].name, "b c.jpg");
        assert_eq!(format!("{:?}", images[1].camera_from_world_tvec), "[1.0, 2.0, 3.0]");
    }

    #[test]
    fn bad_number_names_line() {
        let error =
            read_cameras("cameras.txt", "# x\n1 PINHOLE 10 abc 1 1 5 5\n").expect_err("bad height");
        assert_eq!(error.to_string(), "cameras.txt: line 2: HEIGHT \"abc\" is not a valid value");
    }

    #[test]
    fn unknown_model_is_named() {
        let error = read_cameras("cameras.txt", "1 WEIRD 10 10 1 1 5 5\n").expect_err("unknown");
        assert!(error.to_string().contains("WEIRD camera model"), "{error}");
    }

    #[test]
    fn wrong_parameter_count() {
        let error = read_cameras("cameras.txt", "1 PINHOLE 10 10 1 1 5\n").expect_err("3 params");
        assert!(error.to_string().contains("has 4 parameters, found 3"), "{error}");
    }
}
