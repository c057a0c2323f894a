//! The video pane: the turntable and camera-path controls, the keyframes placed in the
//! viewer, and the video being made (`video_job.rs` runs it).

use std::path::PathBuf;
use std::sync::Arc;

use glam::Vec3;
use splat_trainer::formats::filter::Filter;
use splat_trainer::render::{Camera, GpuContext, GpuSplats};

use super::event::{UiEvent, VideoMotion};
use super::keyframes::Keyframes;
use super::log_pane::LogPane;
use super::video_job::{self, VideoJob};

/// What a video films: the splats, the scene's framing (centre, radius, up) and the file.
pub(super) struct VideoSubject {
    pub splats: Arc<GpuSplats>,
    pub framing: (Vec3, f32, Vec3),
    pub path: PathBuf,
}

pub(super) struct VideoPane {
    /// The video being made.
    job: Option<VideoJob>,
    /// The length of the next turntable, in seconds, and the frame size of the next video.
    pub seconds: f64,
    pub size: (u32, u32),
    /// The camera path placed in the viewer.
    pub keyframes: Keyframes,
    /// The videos written.
    pub videos: Vec<PathBuf>,
}

impl Default for VideoPane {
    fn default() -> Self {
        Self {
            job: None,
            seconds: 6.0,
            size: (1280, 720),
            keyframes: Keyframes::default(),
            videos: Vec::new(),
        }
    }
}

impl VideoPane {
    /// A video is being made.
    pub(super) fn busy(&self) -> bool {
        self.job.is_some()
    }

    /// Turntable video: the button and its length, or the running video's progress and
    /// Cancel; then the camera path's controls. `can_film`: there are splats to film;
    /// `has_camera`: the viewport has a camera to place a keyframe at.
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        can_film: bool,
        has_camera: bool,
        events: &mut Vec<UiEvent>,
    ) {
        if let Some(job) = &self.job {
            let (rendered, encoded, total) = job.progress();
            let (done, what) =
                if rendered < total { (rendered, "rendering") } else { (encoded, "encoding") };
            ui.add(
                egui::ProgressBar::new(done as f32 / total.max(1) as f32)
                    .desired_width(140.0)
                    .text(format!("video: {what} {done}/{total}")),
            );
            if ui.add_enabled(!job.cancelled(), egui::Button::new("Cancel video")).clicked() {
                job.cancel();
            }
            return;
        }
        if ui
            .add_enabled(can_film, egui::Button::new("Turntable video"))
            .on_hover_text(
                "Once round the scene into an .mp4 in the exports folder (ffmpeg), as shown: crop \
             included",
            )
            .clicked()
        {
            events.push(UiEvent::StartVideo(VideoMotion::Turntable));
        }
        ui.add(egui::DragValue::new(&mut self.seconds).range(1.0..=120.0).suffix(" s"));
        self.camera_path_ui(ui, can_film, has_camera, events);
    }

    /// The camera path: keyframes placed where the viewport's camera is, and its video.
    fn camera_path_ui(
        &mut self,
        ui: &mut egui::Ui,
        can_film: bool,
        has_camera: bool,
        events: &mut Vec<UiEvent>,
    ) {
        ui.horizontal(|ui| {
            if ui
                .add_enabled(has_camera, egui::Button::new("Add keyframe"))
                .on_hover_text(
                    "A keyframe of a camera path where the view is now: the path video goes \
                     smoothly through them, in order",
                )
                .clicked()
            {
                events.push(UiEvent::AddKeyframe);
            }
            ui.add(
                egui::DragValue::new(&mut self.keyframes.gap)
                    .range(0.1..=60.0)
                    .speed(0.1)
                    .suffix(" s apart"),
            )
            .on_hover_text("Seconds from one keyframe to the next one added");
        });
        if self.keyframes.is_empty() {
            return;
        }
        ui.label(format!("{} keyframes, {} s", self.keyframes.len(), self.keyframes.duration()));
        ui.horizontal(|ui| {
            let has_path = self.keyframes.len() >= 2;
            if ui
                .add_enabled(can_film && has_path, egui::Button::new("Path video"))
                .on_hover_text("Along the keyframes into an .mp4 in the exports folder (ffmpeg)")
                .clicked()
            {
                events.push(UiEvent::StartVideo(VideoMotion::Path));
            }
            if ui
                .add_enabled(has_path, egui::Button::new("Save path"))
                .on_hover_text("The path as a file for splatforge render --path")
                .clicked()
            {
                events.push(UiEvent::SaveCameraPath);
            }
            if ui.button("Remove last").clicked() {
                self.keyframes.remove_last();
            }
            if ui.button("Clear").clicked() {
                self.keyframes.clear();
            }
        });
    }

    /// Starts a video of `subject` (its path ends in `-turntable.mp4` or `-path.mp4`), the
    /// crop `keep` applied, in place of any being made (the caller asks [`Self::busy`] first);
    /// says in `log` why not where it cannot.
    pub(super) fn start(
        &mut self,
        motion: VideoMotion,
        subject: VideoSubject,
        keep: &Filter,
        gpu: &GpuContext,
        log: &mut LogPane,
    ) {
        let path = unused_name(subject.path);
        if let Some(dir) = path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            return log.error(format!("{}: cannot make the folder: {e}", dir.display()));
        }
        let fps = video_job::FPS;
        let cameras = match motion {
            VideoMotion::Turntable => {
                crate::video::turntable(subject.framing, self.seconds, fps, self.size)
            }
            VideoMotion::Path => match self.keyframes.path() {
                Ok(camera_path) => crate::video::path_cameras(&camera_path, fps, self.size),
                Err(e) => return log.warning(format!("No camera path: {e}.")),
            },
        };
        let cameras = match cameras {
            Ok(cameras) => cameras,
            Err(e) => return log.error(format!("{e:#}")),
        };
        let settings =
            splat_trainer::render::RenderSettings { keep: keep.clone(), ..Default::default() };
        match VideoJob::start(gpu.clone(), subject.splats, cameras, &settings, path) {
            Ok(job) => self.job = Some(job),
            Err(e) => log.error(format!("cannot start a thread for the video: {e}")),
        }
    }

    /// Says in `log` how the video being made ended, once it has.
    pub(super) fn poll(&mut self, log: &mut LogPane) {
        let Some(job) = &mut self.job else { return };
        let Some(result) = job.finished() else { return };
        match result {
            Ok(()) => {
                log.info(format!("Video written to {}.", job.path.display()));
                self.videos.push(job.path.clone());
            }
            Err(_) if job.cancelled() => log.info("Video cancelled."),
            Err(e) => log.error(format!("The video was not made: {e}")),
        }
        self.job = None;
    }

    /// Adds a keyframe of the camera path at `camera`.
    pub(super) fn add_keyframe(&mut self, camera: &Camera, log: &mut LogPane) {
        self.keyframes.add(camera);
        let (count, seconds) = (self.keyframes.len(), self.keyframes.duration());
        log.info(format!("Keyframe {count} placed at {seconds} s."));
    }

    /// Writes the camera path to `path` (made unused) as the file `render --path` reads.
    pub(super) fn save_camera_path(&mut self, path: PathBuf, log: &mut LogPane) {
        let path = unused_name(path);
        let written = self.keyframes.file_text().map_err(|e| e.to_string()).and_then(|text| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            }
            std::fs::write(&path, text).map_err(|e| e.to_string())
        });
        match written {
            Ok(()) => {
                log.info(format!(
                    "Camera path saved to {} (splatforge render SCENE --path FILE --out VIDEO.mp4).",
                    path.display()
                ));
                self.keyframes.saved.push(path);
            }
            Err(e) => log.error(format!("{}: the camera path was not saved: {e}", path.display())),
        }
    }
}

/// `path`, or `path` with `-2`, `-3`, … before its extension when that is taken.
fn unused_name(path: PathBuf) -> PathBuf {
    if !path.exists() {
        return path;
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let extension = path.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
    (2..10_000)
        .map(|n| path.with_file_name(format!("{stem}-{n}.{extension}")))
        .find(|p| !p.exists())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gui::event::clicks;

    /// What clicking `label` sends, with splats to film or not and a camera or not.
    fn clicked(label: &str, can_film: bool, has_camera: bool, keyframes: usize) -> Vec<UiEvent> {
        let mut pane = VideoPane::default();
        let view = splat_trainer::render::view_controller::ViewController::framing(
            Vec3::ZERO,
            1.0,
            Vec3::NEG_Y,
        );
        let camera = view.camera(64, 48);
        for _ in 0..keyframes {
            pane.keyframes.add(&camera);
        }
        clicks(&[label], |ui, events| pane.ui(ui, can_film, has_camera, events))
    }

    #[test]
    fn video_buttons_send_their_events_when_there_is_something_to_film() {
        let turntable = UiEvent::StartVideo(VideoMotion::Turntable);
        assert_eq!(clicked("Turntable video", true, true, 0), [turntable]);
        assert_eq!(clicked("Turntable video", false, true, 0), []);
        assert_eq!(clicked("Add keyframe", true, true, 0), [UiEvent::AddKeyframe]);
        assert_eq!(clicked("Add keyframe", true, false, 0), []);
        let path = UiEvent::StartVideo(VideoMotion::Path);
        assert_eq!(clicked("Path video", true, true, 2), [path]);
        assert_eq!(clicked("Path video", false, true, 2), []);
        assert_eq!(clicked("Save path", false, true, 2), [UiEvent::SaveCameraPath]);
        // Keyframes are the pane's own: removing one sends nothing.
        assert_eq!(clicked("Remove last", true, true, 2), []);
    }
}
