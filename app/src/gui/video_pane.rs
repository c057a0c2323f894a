//! Videos from the window: the turntable and camera-path controls, keyframes placed in the
//! viewer, and the video jobs they start (`video_job.rs` runs them).

use std::path::Path;
use std::sync::Arc;

use super::app::{SplatApp, VideoMotion, VideoSubject, ViewMode, unused_name};

impl SplatApp {
    /// Turntable video: the button and its length, or the running video's progress and
    /// Cancel.
    pub(super) fn video_controls(&mut self, ui: &mut egui::Ui, has_splats: bool) {
        if let Some(job) = &self.video {
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
        let can_film = has_splats || self.viewed_file.is_some();
        if ui
            .add_enabled(can_film, egui::Button::new("Turntable video"))
            .on_hover_text(
                "Once round the scene into an .mp4 in the exports folder (ffmpeg), as shown: crop \
             included",
            )
            .clicked()
        {
            self.start_turntable_video();
        }
        ui.add(egui::DragValue::new(&mut self.video_seconds).range(1.0..=120.0).suffix(" s"));
        self.camera_path_controls(ui, can_film);
    }

    /// The camera path: keyframes placed where the viewport's camera is, and its video.
    pub(super) fn camera_path_controls(&mut self, ui: &mut egui::Ui, can_film: bool) {
        ui.horizontal(|ui| {
            if ui
                .add_enabled(self.requested_camera.is_some(), egui::Button::new("Add keyframe"))
                .on_hover_text(
                    "A keyframe of a camera path where the view is now: the path video goes \
                     smoothly through them, in order",
                )
                .clicked()
            {
                self.add_keyframe();
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
                self.start_path_video();
            }
            if ui
                .add_enabled(has_path, egui::Button::new("Save path"))
                .on_hover_text("The path as a file for splatforge render --path")
                .clicked()
            {
                self.save_camera_path();
            }
            if ui.button("Remove last").clicked() {
                self.keyframes.remove_last();
            }
            if ui.button("Clear").clicked() {
                self.keyframes.clear();
            }
        });
    }

    pub(super) fn step_camera(&mut self, count: usize, delta: isize) {
        let current = match self.view_mode {
            ViewMode::DatasetCamera(i) => i as isize,
            ViewMode::Free => -1,
        };
        let next = (current + delta).rem_euclid(count as isize) as usize;
        self.jump_to_camera(next);
    }

    /// Starts a turntable video of what the viewport shows (the run's splats or a file's,
    /// with the crop) into the exports folder.
    pub fn start_turntable_video(&mut self) {
        self.start_video(VideoMotion::Turntable);
    }

    /// Starts a video along the keyframes placed in the viewer (at least two), as
    /// [`Self::start_turntable_video`] does.
    pub fn start_path_video(&mut self) {
        self.start_video(VideoMotion::Path);
    }

    pub(super) fn start_video(&mut self, motion: VideoMotion) {
        if self.video.is_some() {
            return;
        }
        let suffix = match motion {
            VideoMotion::Turntable => "turntable",
            VideoMotion::Path => "path",
        };
        let Some((splats, framing, path)) = self.video_subject(&format!("{suffix}.mp4")) else {
            return;
        };
        let path = unused_name(path);
        if let Some(dir) = path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            self.error(format!("{}: cannot make the folder: {e}", dir.display()));
            return;
        }
        let fps = super::video_job::FPS;
        let cameras = match motion {
            VideoMotion::Turntable => {
                crate::video::turntable(framing, self.video_seconds, fps, self.video_size)
            }
            VideoMotion::Path => match self.keyframes.path() {
                Ok(camera_path) => crate::video::path_cameras(&camera_path, fps, self.video_size),
                Err(e) => return self.warning(format!("No camera path: {e}.")),
            },
        };
        let cameras = match cameras {
            Ok(cameras) => cameras,
            Err(e) => return self.error(format!("{e:#}")),
        };
        let settings = splat_trainer::render::RenderSettings {
            keep: self.crop.keep().clone(),
            ..Default::default()
        };
        match super::video_job::VideoJob::start(self.gpu.clone(), splats, cameras, &settings, path)
        {
            Ok(job) => self.video = Some(job),
            Err(e) => self.error(format!("cannot start a thread for the video: {e}")),
        }
    }

    /// What a video films (the splats the viewport shows: a file's, or the run's), the
    /// scene's framing for a turntable, and the path `NAME-{suffix}` it goes to (beside the
    /// file, or in the exports folder); `None`, with a warning, when nothing is shown.
    pub(super) fn video_subject(&mut self, suffix: &str) -> Option<VideoSubject> {
        let showing_file =
            self.viewed_file.as_ref().filter(|_| self.show_file || self.run.is_none());
        if let Some(file) = showing_file {
            let dir = self.out.clone().or_else(|| file.path.parent().map(Path::to_path_buf))?;
            let stem = file.path.file_stem()?.to_string_lossy().into_owned();
            let (center, radius) = file.focus;
            let framing = (center, radius, splat_trainer::render::view_controller::DEFAULT_UP);
            return Some((Arc::clone(&file.splats), framing, dir.join(format!("{stem}-{suffix}"))));
        }
        let (Some(latest), Some(dataset), Some(path)) =
            (self.task.viewer().latest(), self.dataset.as_ref(), self.output_path("mp4"))
        else {
            self.warning("Nothing to film: start a run or open a splat file first.");
            return None;
        };
        let framing = (dataset.focus.0, dataset.focus.1, dataset.up);
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Some((latest.splats, framing, path.with_file_name(format!("{name}-{suffix}"))))
    }

    /// Adds a keyframe of the camera path where the viewport's camera is.
    pub fn add_keyframe(&mut self) {
        if let Some(camera) = self.requested_camera {
            self.keyframes.add(&camera);
            let (count, seconds) = (self.keyframes.len(), self.keyframes.duration());
            self.info(format!("Keyframe {count} placed at {seconds} s."));
        }
    }

    /// Writes the camera path to the exports folder as the file `render --path` reads.
    pub fn save_camera_path(&mut self) {
        let Some((_, _, path)) = self.video_subject("path.json") else { return };
        let path = unused_name(path);
        let written = self.keyframes.file_text().map_err(|e| e.to_string()).and_then(|text| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            }
            std::fs::write(&path, text).map_err(|e| e.to_string())
        });
        match written {
            Ok(()) => {
                self.info(format!(
                    "Camera path saved to {} (splatforge render SCENE --path FILE --out VIDEO.mp4).",
                    path.display()
                ));
                self.keyframes.saved.push(path);
            }
            Err(e) => self.error(format!("{}: the camera path was not saved: {e}", path.display())),
        }
    }

    /// The length and frame size of the next turntable video (the panel's fields).
    pub fn set_video(&mut self, seconds: f64, size: (u32, u32)) {
        self.video_seconds = seconds;
        self.video_size = size;
    }
}
