//! Opening files off the UI thread: a named worker (`splat-files`) decides what a path is and
//! reads splat files to view; native dialogs run on short-lived `file-dialog` threads. Results
//! come back through one bounded channel, and each wakes the UI. The worker holds the GPU, so
//! it is stopped and joined when `Files` goes: a GPU context dropped on a thread while the
//! process unloads its libraries at exit crashed lavapipe (a double free, about one exit in
//! twenty under load, 2026-11-28).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use splat_trainer::formats::{self, Loaded};
use splat_trainer::render::view_controller::focus_from_points;
use splat_trainer::render::{GpuContext, GpuSplats, Owner};

/// Paths waiting to be opened at most (a drop of many files beyond it is refused).
const JOB_CAPACITY: usize = 16;
const RESULT_CAPACITY: usize = 16;
/// How long closing waits for the worker to finish the file it is reading.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// What a path turned out to be.
pub enum Opened {
    /// A dataset folder or `.zip` (or a folder's `transforms.json`): the trainer loads it.
    Dataset(PathBuf),
    /// A splat scene, already on the GPU (owned by the viewer), to view.
    Splats { path: PathBuf, splats: Arc<GpuSplats>, focus: (glam::Vec3, f32) },
    /// A point cloud: init.ply for the loaded dataset.
    PointCloud { path: PathBuf, points: usize },
    /// A trainer checkpoint.
    Checkpoint(PathBuf),
    /// A folder of photos without camera poses, or a video: poses come first.
    NeedsPoses { path: PathBuf, input: splat_poses::Input },
}

/// What the UI hears back.
pub enum FileEvent {
    Opened(Opened),
    /// A file that cannot be used, with why.
    Failed(String),
    /// A save dialog's choice.
    SaveTo(SaveKind, PathBuf),
}

/// What a save dialog is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveKind {
    Export,
    Checkpoint,
    /// The self-test's report (JSON).
    SelfTestReport,
}

/// What an open dialog asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenKind {
    Dataset,
    DatasetFolder,
    SplatFile,
    InitPly,
    Checkpoint,
}

pub struct Files {
    /// Paths to open; `None` stops the worker (dialogs hold senders too, so the channel
    /// alone would not end it while one is open).
    jobs: SyncSender<Option<PathBuf>>,
    worker: Option<JoinHandle<()>>,
    results_tx: SyncSender<FileEvent>,
    results: Receiver<FileEvent>,
    egui_ctx: egui::Context,
    dialog_open: Arc<AtomicBool>,
}

impl Files {
    pub fn spawn(gpu: GpuContext, egui_ctx: egui::Context) -> std::io::Result<Self> {
        let (jobs, job_rx) = sync_channel::<Option<PathBuf>>(JOB_CAPACITY);
        let (results_tx, results) = sync_channel(RESULT_CAPACITY);
        let tx = results_tx.clone();
        let repaint = egui_ctx.clone();
        let worker = std::thread::Builder::new().name("splat-files".into()).spawn(move || {
            while let Ok(Some(path)) = job_rx.recv() {
                let event = match open(&gpu, &path) {
                    Ok(opened) => FileEvent::Opened(opened),
                    Err(message) => FileEvent::Failed(message),
                };
                if tx.send(event).is_err() {
                    break;
                }
                repaint.request_repaint();
            }
        })?;
        Ok(Self {
            jobs,
            worker: Some(worker),
            results_tx,
            results,
            egui_ctx,
            dialog_open: Arc::default(),
        })
    }

    /// Queues a path to open; refuses (with a message) when too many are waiting.
    pub fn open(&self, path: PathBuf) -> Result<(), String> {
        self.jobs.try_send(Some(path)).map_err(|e| {
            let (path, why) = match e {
                TrySendError::Full(path) => (path, "too many files are being opened; try again"),
                TrySendError::Disconnected(path) => (path, "the file worker has stopped"),
            };
            format!("{}: {why}", path.unwrap_or_default().display())
        })
    }

    /// The next result, if one is waiting.
    pub fn try_event(&self) -> Option<FileEvent> {
        self.results.try_recv().ok()
    }

    /// Shows an open dialog; the choice is opened like a dropped file.
    pub fn open_dialog(&self, kind: OpenKind, start: Option<PathBuf>) {
        let jobs = self.jobs.clone();
        let failed = self.results_tx.clone();
        self.dialog(move || {
            let mut dialog = rfd::AsyncFileDialog::new().set_title(match kind {
                OpenKind::Dataset | OpenKind::DatasetFolder => "Open a dataset",
                OpenKind::SplatFile => "Open a splat file to view",
                OpenKind::InitPly => "Choose a point cloud (init.ply) for the next runs",
                OpenKind::Checkpoint => "Load a checkpoint",
            });
            if let Some(start) = &start {
                dialog = dialog.set_directory(start);
            }
            dialog = match kind {
                OpenKind::Dataset => dialog
                    .add_filter("Dataset (.zip, transforms.json)", &["zip", "json"])
                    .add_filter("Any file", &["*"]),
                OpenKind::DatasetFolder => dialog,
                OpenKind::SplatFile => dialog
                    .add_filter("Splats", &["ply", "splat", "spz", "sog"])
                    .add_filter("Any", &["*"]),
                OpenKind::InitPly => dialog.add_filter("Point cloud", &["ply"]),
                OpenKind::Checkpoint => dialog.add_filter("Checkpoint", &["ckpt"]),
            };
            let picked = if kind == OpenKind::DatasetFolder {
                pollster::block_on(dialog.pick_folder())
            } else {
                pollster::block_on(dialog.pick_file())
            };
            if let Some(file) = picked {
                let path = file.path().to_path_buf();
                if let Err(e) = jobs.try_send(Some(path)) {
                    let _ = failed.try_send(FileEvent::Failed(format!("cannot open: {e}")));
                }
            }
        });
    }

    /// Shows a save dialog for `kind`, starting at `suggested`.
    pub fn save_dialog(&self, kind: SaveKind, suggested: PathBuf) {
        let results = self.results_tx.clone();
        self.dialog(move || {
            let mut dialog = rfd::AsyncFileDialog::new();
            if let Some(dir) = suggested.parent() {
                dialog = dialog.set_directory(dir);
            }
            if let Some(name) = suggested.file_name() {
                dialog = dialog.set_file_name(name.to_string_lossy());
            }
            dialog = match kind {
                SaveKind::Export => dialog
                    .set_title("Export splats")
                    .add_filter("PLY (3DGS)", &["ply"])
                    .add_filter("SPZ (compressed)", &["spz"])
                    .add_filter("SOG (web viewers)", &["sog"]),
                SaveKind::Checkpoint => {
                    dialog.set_title("Save a checkpoint").add_filter("Checkpoint", &["ckpt"])
                }
                SaveKind::SelfTestReport => {
                    dialog.set_title("Save the self-test report").add_filter("JSON", &["json"])
                }
            };
            if let Some(file) = pollster::block_on(dialog.save_file()) {
                let _ = results.try_send(FileEvent::SaveTo(kind, file.path().to_path_buf()));
            }
        });
    }

    /// Runs `show` on its own thread, one dialog at a time.
    fn dialog(&self, show: impl FnOnce() + Send + 'static) {
        if self.dialog_open.swap(true, Ordering::AcqRel) {
            return;
        }
        let open = Arc::clone(&self.dialog_open);
        let repaint = self.egui_ctx.clone();
        let failed = self.results_tx.clone();
        let spawned = std::thread::Builder::new().name("file-dialog".into()).spawn(move || {
            show();
            open.store(false, Ordering::Release);
            repaint.request_repaint();
        });
        if let Err(e) = spawned {
            self.dialog_open.store(false, Ordering::Release);
            let _ = failed.try_send(FileEvent::Failed(format!("cannot show a dialog: {e}")));
        }
    }
}

impl Drop for Files {
    /// Stops the worker: its next result has nowhere to go, which ends it, and an idle one
    /// hears `None`. Waits for it up to [`STOP_WAIT`]; one still reading then (a file on a
    /// mount that hangs) is left to the process's end rather than holding the window open.
    fn drop(&mut self) {
        let Some(worker) = self.worker.take() else { return };
        self.results = sync_channel(0).1;
        let _ = self.jobs.try_send(None);
        let deadline = Instant::now() + STOP_WAIT;
        while !worker.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if !worker.is_finished() {
            log::warn!("the file worker is still reading a file: left to the process's end");
        } else if worker.join().is_err() {
            log::error!("the file worker panicked");
        }
    }
}

/// Decides what `path` is and, for a splat scene, reads and uploads it.
fn open(gpu: &GpuContext, path: &Path) -> Result<Opened, String> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let metadata = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let needs_poses = !splat_trainer::dataset::has_poses(path);
    if needs_poses && let Ok(input) = splat_poses::Input::detect(path) {
        return Ok(Opened::NeedsPoses { path: path.to_path_buf(), input });
    }
    if metadata.is_dir() {
        return Ok(Opened::Dataset(path.to_path_buf()));
    }
    let extension = Path::new(&name).extension().and_then(|e| e.to_str()).unwrap_or_default();
    match extension {
        "zip" => Ok(Opened::Dataset(path.to_path_buf())),
        // An unbundled SOG scene, its images beside it.
        "json" if formats::sog::is_meta_name(path) => open_splats(path, gpu),
        // A dataset's own description: open the folder it is in.
        "json" => path
            .parent()
            .map(|dir| Opened::Dataset(dir.to_path_buf()))
            .ok_or_else(|| format!("{}: no folder around it", path.display())),
        "ckpt" => Ok(Opened::Checkpoint(path.to_path_buf())),
        "ply" | "splat" | "spz" | "ksplat" | "sog" => open_splats(path, gpu),
        _ => Err(format!(
            "{}: not something Splatforge opens (a dataset folder or .zip, a folder of \
             photos or a video to compute camera poses for, a .ply, .compressed.ply, .splat, \
             .spz or .sog scene (or a SOG's meta.json), a point-cloud .ply or a .ckpt \
             checkpoint)",
            path.display()
        )),
    }
}

/// Reads a splat scene (or a point cloud) and uploads a scene for the viewer.
fn open_splats(path: &Path, gpu: &GpuContext) -> Result<Opened, String> {
    match formats::load_file(path) {
        Ok(Loaded::Splats { splats, .. }) => {
            let gpu_splats = GpuSplats::upload(gpu, &splats, Owner::Viewer)
                .map_err(|e| format!("{}: cannot upload: {e}", path.display()))?;
            Ok(Opened::Splats {
                path: path.to_path_buf(),
                splats: Arc::new(gpu_splats),
                focus: focus_from_points(&splats.means),
            })
        }
        Ok(Loaded::Points(cloud)) => {
            Ok(Opened::PointCloud { path: path.to_path_buf(), points: cloud.len() })
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A path's file name, or the whole path where it has none.
pub(super) fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into())
}
