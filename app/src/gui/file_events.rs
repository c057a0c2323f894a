//! What the window does with the file worker's results (`files.rs`): a dataset or splat file
//! opened, an export or checkpoint written, a failure said in words.

use splat_trainer::task::Command;

use super::app::SplatApp;
use super::files::{FileEvent, Opened, SaveKind};
use super::poses::PosesWindow;
use super::session::ViewedFile;

impl SplatApp {
    pub(super) fn on_file_event(&mut self, event: FileEvent) {
        match event {
            FileEvent::Failed(message) => self.log.error(message),
            FileEvent::SaveTo(SaveKind::Export, path) => self.export(path),
            FileEvent::SaveTo(SaveKind::Checkpoint, path) => self.checkpoint(path),
            FileEvent::SaveTo(SaveKind::SelfTestReport, path) => {
                let json = self.self_test_json.take().unwrap_or_default();
                match std::fs::write(&path, json) {
                    Ok(()) => {
                        self.log.info(format!("Saved the self-test report {}", path.display()));
                    }
                    Err(e) => self.log.error(format!("{}: {e}", path.display())),
                }
            }
            FileEvent::Opened(opened) => match opened {
                Opened::Dataset(path) => self.load_dataset(path),
                Opened::NeedsPoses { path, input } => {
                    if self.poses.as_ref().is_some_and(PosesWindow::is_running) {
                        self.log.error(format!(
                            "{}: camera poses are being computed for another input; wait for \
                             them or cancel them first",
                            path.display()
                        ));
                    } else {
                        self.poses = Some(PosesWindow::ask(path, input));
                    }
                }
                Opened::Checkpoint(path) => {
                    if self.session.dataset.is_some() {
                        self.log.info(format!("Loading checkpoint {}", path.display()));
                        self.send(Command::LoadCheckpoint { path });
                        self.session.show_file = false;
                    } else {
                        self.log.error(format!(
                            "{}: open the checkpoint's dataset first, then load the checkpoint",
                            path.display()
                        ));
                    }
                }
                Opened::PointCloud { path, points } => {
                    if self.session.dataset.is_some() {
                        self.log.info(format!(
                            "{}: {points} points, used as init.ply from the next run on \
                             (Ctrl+N starts one).",
                            path.display()
                        ));
                        self.send(Command::LoadInit { path: path.clone() });
                        self.session.init = Some(path);
                    } else {
                        self.log.error(format!(
                            "{}: a point cloud starts a run on a dataset: open a dataset first",
                            path.display()
                        ));
                    }
                }
                Opened::Splats { path, splats, focus } => {
                    self.log.info(format!("Viewing {} ({} splats).", path.display(), splats.count));
                    self.viewport.frame_scene(focus, self.session.up());
                    // The previous file's splats go when the viewer's next frame ends.
                    self.session.viewed_file = Some(ViewedFile { path, splats, focus });
                    self.video.keyframes.clear();
                    self.session.show_file = true;
                }
            },
        }
    }
}
