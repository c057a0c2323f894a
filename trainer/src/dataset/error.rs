//! Why a dataset did not load.

use super::colmap::SUPPORTED_CAMERA_MODELS;

/// A dataset that could not be loaded. Every message starts with the file concerned: a path on
/// disk, or `archive.zip:entry/path` for a file inside a zip.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A file or folder could not be read from disk.
    #[error("{file}: cannot read: {cause}")]
    Read { file: String, cause: std::io::Error },
    /// The zip archive itself is unusable or refused (bad archive, unsafe entry name, entry
    /// too large).
    #[error("{file}: {message}")]
    Archive { file: String, message: String },
    /// The folder or zip holds no layout we recognise.
    #[error("{file}: no dataset found: {message}")]
    NotADataset { file: String, message: String },
    /// A dataset file's content is wrong: truncated, bad count, invalid JSON, bad value.
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    /// A COLMAP camera model that we do not load.
    #[error(
        "{file}: camera {camera_id} uses the {model} camera model, which is not supported \
         (supported: {SUPPORTED_CAMERA_MODELS}); undistort the images with COLMAP's \
         image_undistorter first"
    )]
    UnsupportedCameraModel { file: String, camera_id: u32, model: String },
    /// An image file could not be decoded.
    #[error("{file}: cannot decode image: {message}")]
    Image { file: String, message: String },
    /// An `init.ply` / `points3D.ply` could not be read.
    #[error("{file}: {cause}")]
    Points { file: String, cause: splat_formats::ParseError },
    /// Not a single image of the dataset could be loaded.
    #[error("{file}: no usable images: {message}")]
    NoImages { file: String, message: String },
}

impl DatasetError {
    /// The file (or `archive.zip:entry`) the error is about.
    #[must_use]
    pub fn file(&self) -> &str {
        match self {
            Self::Read { file, .. }
            | Self::Archive { file, .. }
            | Self::NotADataset { file, .. }
            | Self::Invalid { file, .. }
            | Self::UnsupportedCameraModel { file, .. }
            | Self::Image { file, .. }
            | Self::Points { file, .. }
            | Self::NoImages { file, .. } => file,
        }
    }

    pub(crate) fn invalid(file: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid { file: file.into(), message: message.into() }
    }
}
