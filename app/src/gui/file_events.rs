//! What the window does with the file worker's results (`files.rs`): a dataset or splat file
//! opened, an export or checkpoint written, a failure said in words.

use glam::Vec3;
use splat_trainer::render::view_controller::ViewController;
use splat_trainer::task::Command;

use super::app::{SplatApp, ViewMode, ViewedFile};
use super::files::{FileEvent, Opened, SaveKind};
use super::poses::PosesWindow;

impl SplatApp {
    pub(super) fn on_file_event(&mut self, event: FileEvent) {
        match event {
            FileEvent::Failed(message) => self.error(message),
            FileEvent::SaveTo(SaveKind::Export, path) => {
                self.send(Command::Export {
                    path,
                    up: self.export_up(),
                    keep: self.crop.keep().clone(),
                });
            }
            FileEvent::SaveTo(SaveKind::Checkpoint, path) => {
                self.send(Command::SaveCheckpoint { path, crop: self.crop.keep().clone() });
            }
            FileEvent::SaveTo(SaveKind::SelfTestReport, path) => {
                let json = self.self_test_json.take().unwrap_or_default();
                match std::fs::write(&path, json) {
                    Ok(()) => self.info(format!("Saved the self-test report {}", path.display())),
                    Err(e) => self.error(format!("{}: {e}", path.display())),
                }
            }
            FileEvent::Opened(opened) => match opened {
                Opened::Dataset(path) => self.load_dataset(path),
                Opened::NeedsPoses { path, input } => {
                    if self.poses.as_ref().is_some_and(PosesWindow::is_running) {
                        self.error(format!(
                            "{}: camera poses are being computed for another input; wait for \
                             them or cancel them first",
                            path.display()
                        ));
                    } else {
                        self.poses = Some(PosesWindow::ask(path, input));
                    }
                }
                Opened::Checkpoint(path) => {
                    if self.dataset.is_some() {
                        self.info(format!("Loading checkpoint {}", path.display()));
                        self.send(Command::LoadCheckpoint { path });
                        self.show_file = false;
                    } else {
                        self.error(format!(
                            "{}: open the checkpoint's dataset first, then load the checkpoint",
                            path.display()
                        ));
                    }
                }
                Opened::PointCloud { path, points } => {
                    if self.dataset.is_some() {
                        self.info(format!(
                            "{}: {points} points, used as init.ply from the next run on \
                             (Ctrl+N starts one).",
                            path.display()
                        ));
                        self.send(Command::LoadInit { path: path.clone() });
                        self.init = Some(path);
                    } else {
                        self.error(format!(
                            "{}: a point cloud starts a run on a dataset: open a dataset first",
                            path.display()
                        ));
                    }
                }
                Opened::Splats { path, splats, focus } => {
                    self.info(format!("Viewing {} ({} splats).", path.display(), splats.count));
                    let up = self.dataset.as_ref().map_or(Vec3::NEG_Y, |d| d.up);
                    self.view = ViewController::framing(focus.0, focus.1, up);
                    self.view_mode = ViewMode::Free;
                    // The previous file's splats go when the viewer's next frame ends.
                    self.viewed_file = Some(ViewedFile { path, splats, focus });
                    self.keyframes.clear();
                    self.show_file = true;
                }
            },
        }
    }
}
