//! Why poses could not be computed. Every message says what happened and what to try.

use std::path::PathBuf;

/// A poses run that did not give a dataset.
#[derive(Debug, thiserror::Error)]
pub enum PosesError {
    /// The input is neither a folder of images nor a video we read.
    #[error("{}: {message}", path.display())]
    Input { path: PathBuf, message: String },
    /// A file or folder could not be read or written.
    #[error("{}: {cause}", path.display())]
    Io { path: PathBuf, cause: std::io::Error },
    /// An image of the input could not be decoded or written.
    #[error("{}: {message}", path.display())]
    Image { path: PathBuf, message: String },
    /// The output exists and holds something: we never write into it.
    #[error(
        "{}: already exists and is not empty; choose another output folder or remove it",
        path.display()
    )]
    OutputExists { path: PathBuf },
    /// An engine (COLMAP, ffmpeg) is not installed where we looked.
    #[error("{program} was not found (tried `{}`). {advice}", tried.display())]
    Missing { program: &'static str, tried: PathBuf, advice: &'static str },
    /// An engine ran and failed in a way we do not recognise: its last lines of output.
    #[error("{what} failed ({status}):\n{tail}")]
    Failed { what: String, status: String, tail: String },
    /// The video could not be read by ffmpeg.
    #[error("{}: cannot read the video: {message}", path.display())]
    Video { path: PathBuf, message: String },
    /// COLMAP found no two images to start from.
    #[error(
        "COLMAP found no pair of images to start the reconstruction from: the images share \
         too few features. Likely causes: too little overlap between neighbouring photos \
         (take one every few steps, keeping most of the scene in view), motion blur, \
         textureless or shiny surfaces, or exposure changes"
    )]
    NoInitialPair,
    /// Too few of the images got a pose for the scene to train.
    #[error(
        "COLMAP gave poses to only {registered} of {images} images ({percent:.0}%, below \
         {min_percent:.0}%). Likely causes: blurred images, too little overlap between \
         neighbouring views, or exposure changes; try more images with more overlap"
    )]
    TooFewRegistered { registered: usize, images: usize, percent: f64, min_percent: f64 },
    /// An engine printed nothing and used no CPU time for its idle limit: it was stopped.
    /// `command` is the engine and its subcommand (`colmap feature_extractor`).
    #[error(
        "{what} printed nothing and used no CPU time for {} s and was stopped (it may be \
         waiting on a display, a GPU driver or a locked file): run `{command}` yourself with \
         the same options (`RUST_LOG=debug` prints them) to see where it stops, or give it \
         longer with `splatforge poses --idle-limit SECONDS` or the window's \"Stop when idle \
         for\" under COLMAP",
        idle.as_secs()
    )]
    Stalled { what: String, command: String, idle: std::time::Duration },
    /// ffmpeg runs but cannot write the video asked for.
    #[error("ffmpeg (`{}`) has no {encoder} encoder, which {purpose} needs: install a build with it, or write the PNG frames to a folder", tried.display())]
    NoEncoder { tried: PathBuf, encoder: &'static str, purpose: &'static str },
    /// The user cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl PosesError {
    pub(crate) fn io(path: impl Into<PathBuf>, cause: std::io::Error) -> Self {
        Self::Io { path: path.into(), cause }
    }
}
