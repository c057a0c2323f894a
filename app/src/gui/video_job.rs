//! A video made from the window (a turntable or a camera path): rendered on a thread of its
//! own (`video`) on the window's GPU, with progress and Cancel; the same engine as
//! `render --turntable/--path` ([`crate::video`]). The splats it renders are a copy it holds
//! (the viewer's, or a file's) until it ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError, sync_channel};
use std::thread::JoinHandle;

use splat_poses::Cancel;
use splat_trainer::render::{Camera, GpuContext, GpuSplats, RenderSettings};

use crate::video::{self, Stage};

/// Frames a second of the window's videos.
pub const FPS: f64 = 30.0;

/// A video being made.
pub struct VideoJob {
    pub path: PathBuf,
    total: u64,
    rendered: Arc<AtomicU64>,
    encoded: Arc<AtomicU64>,
    cancel: Cancel,
    done: Receiver<Result<(), String>>,
    thread: Option<JoinHandle<()>>,
}

impl VideoJob {
    /// Starts rendering `splats` from `cameras` into `path` (a `.mp4`).
    pub fn start(
        gpu: GpuContext,
        splats: Arc<GpuSplats>,
        cameras: Vec<Camera>,
        settings: &RenderSettings,
        path: PathBuf,
    ) -> std::io::Result<Self> {
        let settings = settings.clone();
        let (rendered, encoded) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let cancel = Cancel::default();
        let (tx, done) = sync_channel(1);
        let total = cameras.len() as u64;
        let thread = std::thread::Builder::new().name("video".into()).spawn({
            let (rendered, encoded, cancel, path) =
                (Arc::clone(&rendered), Arc::clone(&encoded), cancel.clone(), path.clone());
            move || {
                let result = video::write(
                    &gpu,
                    &splats,
                    &cameras,
                    &settings,
                    &path,
                    (FPS, None),
                    &cancel,
                    &mut |stage, frames| match stage {
                        Stage::Rendering => rendered.store(frames, Ordering::Relaxed),
                        Stage::Encoding => encoded.store(frames, Ordering::Relaxed),
                    },
                );
                let _ = tx.send(result.map_err(|e| format!("{e:#}")));
            }
        })?;
        Ok(Self { path, total, rendered, encoded, cancel, done, thread: Some(thread) })
    }

    /// Frames rendered and encoded so far, of all.
    #[must_use]
    pub fn progress(&self) -> (u64, u64, u64) {
        (self.rendered.load(Ordering::Relaxed), self.encoded.load(Ordering::Relaxed), self.total)
    }

    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    #[must_use]
    pub fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// How it ended, once it has.
    pub fn finished(&mut self) -> Option<Result<(), String>> {
        let result = match self.done.try_recv() {
            Ok(result) => result,
            Err(TryRecvError::Empty) => return None,
            Err(TryRecvError::Disconnected) => Err("the video thread stopped".to_owned()),
        };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        Some(result)
    }
}

impl Drop for VideoJob {
    /// A window closed while a video is made stops it and waits for its thread.
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
