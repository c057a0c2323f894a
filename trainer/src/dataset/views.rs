//! Turning the views a format parser found into loaded [`View`]s: parallel decoding, intrinsics
//! fitted to the loaded image, the train / eval split.

use glam::Mat4;
use rayon::prelude::*;

use super::distortion::{Distortion, Pinhole, undistort, undistort_alpha};
use super::images;
use super::intrinsics::IntrinsicsSpec;
use super::source::DatasetSource;
use super::{Camera, DatasetError, Exposure, LoadOptions, View};

/// Folder of per-image masks, at the dataset root.
const MASKS_FOLDER: &str = "masks";

/// How many missing file names a warning lists before it says "and N more".
const MISSING_NAMES_SHOWN: usize = 5;

/// A view whose image is not loaded yet.
#[derive(Clone, Debug)]
pub(crate) struct PendingView {
    /// Dataset-relative path of the image file (it exists).
    pub image_path: String,
    /// The file that describes the camera (`transforms.json`, `images.bin`), as
    /// [`DatasetSource::display`] names it, for messages.
    pub described_in: String,
    pub intrinsics: IntrinsicsSpec,
    /// The lens distortion; `None` for a pinhole camera.
    pub distortion: Option<Distortion>,
    /// Camera-to-world, `OpenCV` convention.
    pub world_from_camera: Mat4,
}

/// Decodes every view's image in parallel and fits its camera to the image as loaded.
pub(crate) fn load_views(
    source: &DatasetSource,
    pending: Vec<PendingView>,
    options: &LoadOptions,
) -> Result<Vec<View>, DatasetError> {
    pending.into_par_iter().map(|view| load_view(source, view, options)).collect()
}

fn load_view(
    source: &DatasetSource,
    pending: PendingView,
    options: &LoadOptions,
) -> Result<View, DatasetError> {
    let file = || source.display(&pending.image_path);
    let bytes = source.read(&pending.image_path)?;
    let exposure = Exposure::of_file(&bytes);
    let decoded =
        images::decode(&bytes, options.max_resolution, options.background, options.alpha_as_mask)
            .map_err(|message| DatasetError::Image { file: file(), message })?;
    let (width, height) = decoded.image.dimensions();
    let intrinsics = pending
        .intrinsics
        .resolve(decoded.file_width, decoded.file_height)
        .map_err(|message| {
            DatasetError::invalid(
                &pending.described_in,
                format!("{}: {message}", pending.image_path),
            )
        })?
        .scaled_to(width, height);
    let file_mask = match mask_file(source, &pending.image_path) {
        Some(rel) => Some(
            images::decode_mask(&source.read(&rel)?, width, height)
                .map_err(|message| DatasetError::Image { file: source.display(&rel), message })?,
        ),
        None => None,
    };
    // Both a mask file and the alpha as mask: a pixel counts as much as the lesser says.
    let mask = match (file_mask, decoded.alpha) {
        (Some(mut file), Some(alpha)) => {
            file.pixels_mut().zip(alpha.pixels()).for_each(|(m, a)| m[0] = m[0].min(a[0]));
            Some(file)
        }
        (file, alpha) => file.or(alpha),
    };
    let (image, mask, alpha) = match &pending.distortion {
        Some(distortion) => {
            let pinhole = Pinhole {
                fx: intrinsics.fx,
                fy: intrinsics.fy,
                cx: intrinsics.cx,
                cy: intrinsics.cy,
            };
            let undistorted = undistort(&decoded.image, mask.as_ref(), pinhole, distortion);
            let alpha = decoded.transparency.map(|a| undistort_alpha(&a, pinhole, distortion));
            (undistorted.image, undistorted.mask, alpha)
        }
        None => (decoded.image, mask, decoded.transparency),
    };
    let camera = Camera {
        width,
        height,
        fx: intrinsics.fx as f32,
        fy: intrinsics.fy as f32,
        cx: intrinsics.cx as f32,
        cy: intrinsics.cy as f32,
        world_from_camera: pending.world_from_camera,
    };
    Ok(View { index: 0, name: pending.image_path, camera, image, mask, alpha, exposure })
}

/// The mask of the image at `image_path`, if the dataset has one: in `masks/` beside the
/// images folder (COLMAP's `images/a.jpg` → `masks/a.jpg` or `masks/a.jpg.png`; other
/// layouts' `x/a.png` → `masks/x/a.png` or `masks/x/a.png.png`), or with the same name but
/// `.png` (`masks/a.png`).
fn mask_file(source: &DatasetSource, image_path: &str) -> Option<String> {
    let relative = image_path.strip_prefix("images/").unwrap_or(image_path);
    let stem = relative.rsplit_once('.').map_or(relative, |(stem, _)| stem);
    [
        format!("{MASKS_FOLDER}/{relative}"),
        format!("{MASKS_FOLDER}/{relative}.png"),
        format!("{MASKS_FOLDER}/{stem}.png"),
    ]
    .into_iter()
    .find(|rel| source.is_file(rel))
}

/// Splits views into (train, eval): every `eval_every`-th view starting with the first is an
/// eval view. `eval_every == 0` gives no eval views, and so does a split that would leave no
/// train view (a one-image dataset trains on its image rather than on nothing).
pub(crate) fn split_every_nth<T>(views: Vec<T>, eval_every: usize) -> (Vec<T>, Vec<T>) {
    if eval_every == 0 || views.len() <= 1 || eval_every == 1 {
        return (views, Vec::new());
    }
    let (mut train, mut eval) = (Vec::new(), Vec::new());
    for (index, view) in views.into_iter().enumerate() {
        if index % eval_every == 0 {
            eval.push(view);
        } else {
            train.push(view);
        }
    }
    (train, eval)
}

/// Number of distinct intrinsics (size, focal lengths, principal point) among `cameras`.
pub(crate) fn distinct_intrinsics<'a>(cameras: impl Iterator<Item = &'a Camera>) -> usize {
    let mut keys: Vec<[u32; 6]> = cameras
        .map(|c| {
            [c.width, c.height, c.fx.to_bits(), c.fy.to_bits(), c.cx.to_bits(), c.cy.to_bits()]
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.len()
}

/// One warning for image files a dataset lists but does not hold, naming a few of them.
pub(crate) fn missing_images_warning(listed_in: &str, missing: &[String], total: usize) -> String {
    let shown = missing.iter().take(MISSING_NAMES_SHOWN).cloned().collect::<Vec<_>>().join(", ");
    let more = missing.len().saturating_sub(MISSING_NAMES_SHOWN);
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!(
        "{listed_in}: skipped {} of {total} images whose files are missing: {shown}{more}",
        missing.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_every_nth_starting_with_first() {
        let (train, eval) = split_every_nth((0..23).collect(), 8);
        assert_eq!(eval, [0, 8, 16]);
        assert_eq!(train.len(), 20);
        let (train, eval) = split_every_nth((0..3).collect::<Vec<i32>>(), 0);
        assert_eq!((train.len(), eval.len()), (3, 0));
        let (train, eval) = split_every_nth(vec![0], 8);
        assert_eq!((train.len(), eval.len()), (1, 0));
    }

    #[test]
    fn missing_warning_lists_a_few_names() {
        let missing: Vec<String> = (0..8).map(|i| format!("f{i}.jpg")).collect();
        let warning = missing_images_warning("t.json", &missing, 10);
        assert!(warning.contains("skipped 8 of 10"));
        assert!(warning.contains("f4.jpg") && !warning.contains("f5.jpg"));
        assert!(warning.contains("and 3 more"));
    }
}
