//! What the window does with the trainer's events: the session's state follows them, the
//! plots and the memory pane take their figures, the log says what happened.

use splat_trainer::render::Camera;
use splat_trainer::render::view_controller::{scene_focus, scene_up};
use splat_trainer::task::{Event, TaskState};

use super::app::SplatApp;
use super::history::History;
use super::session::{LoadedDataset, RunInfo};

impl SplatApp {
    pub(super) fn on_task_event(&mut self, event: Event) {
        match event {
            Event::State(state) => {
                self.session.task_state = state;
                if state == TaskState::Ready && self.session.dataset.is_some() {
                    self.session.run = None;
                }
                if state == TaskState::Ready && std::mem::take(&mut self.start_when_loaded) {
                    self.start();
                }
            }
            Event::DatasetLoaded { path, train, eval, init_points, dataset } => {
                self.session.kept = None;
                let cameras: Vec<Camera> = dataset.0.views().map(|v| v.camera).collect();
                let up = scene_up(&cameras);
                let focus = scene_focus(&cameras);
                let init = if init_points > 0 {
                    format!("{init_points} init points")
                } else {
                    "random init".into()
                };
                self.log.info(format!(
                    "Loaded {}: {train} training and {eval} eval views, {init}.",
                    path.display()
                ));
                self.session.loading = None;
                self.history = History::default();
                // A camera path is in its scene's coordinates.
                self.video.keyframes.clear();
                self.session.dataset = Some(LoadedDataset { path, dataset: dataset.0, up, focus });
                self.session.show_file = false;
                // The initial splats from the first camera, its image beside; moving the
                // view from there orbits the scene's focus.
                self.viewport.jump_to_camera(&self.session, 0);
            }
            Event::RunStarted { run, splats, steps, appearance } => {
                self.session.kept = None;
                self.log.info(format!("Run {run}: {splats} splats, {steps} steps."));
                self.log.info(format!("Run {run}: {appearance}."));
                self.session.run = Some(RunInfo::new(run, steps));
                self.history = History::default();
            }
            Event::Step(stats) => {
                self.history.step(&stats);
                if let Some(run) = self.session.run.as_mut() {
                    run.record(stats);
                }
            }
            Event::Metrics(metrics) => {
                self.history.metrics(&metrics);
                if let Some(run) = self.session.run.as_mut() {
                    run.last_metrics = Some(metrics);
                }
            }
            Event::Eval(eval) => {
                self.history.eval(&eval);
                let compensated = eval.compensated_psnr.map_or_else(String::new, |p| {
                    format!("; {p:.2} dB with each view's colours fitted on its left half")
                });
                self.log.info(format!(
                    "Step {}: eval PSNR {:.2} dB, SSIM {:.4} ({} views{compensated}).",
                    eval.step, eval.psnr, eval.ssim, eval.views
                ));
            }
            Event::Appearance(views) => self.history.appearance(&views),
            Event::Finished { step } => {
                self.log.info(format!(
                    "Finished {step} steps. Export it (Ctrl+E), or press Space to train on."
                ));
            }
            Event::Memory(snapshot) => {
                self.history.memory(&snapshot);
                self.memory.from_trainer = Some(snapshot);
            }
            Event::Exported(path) => {
                self.log.info(format!("Exported {}", path.display()));
                self.exported.push(path);
            }
            Event::CheckpointSaved(path) => {
                self.log.info(format!("Saved checkpoint {}", path.display()));
                self.checkpoints.push(path);
            }
            Event::Crop(crop) => self.crop.restore(&crop),
            Event::SceneCells { cells, outside, splats } => {
                self.crop_to_scene_cells(*cells, outside, splats);
            }
            Event::Warning(message) => self.log.warning(message),
            Event::RunFailed { run, message, kept, .. } => {
                self.session.kept = kept.map(|step| (run, step));
                self.log.error(message);
            }
            Event::Error(message) => {
                if self.session.loading.take().is_some() {
                    self.session.dataset = None;
                }
                self.log.error(message);
            }
            Event::Pong { .. } => {}
            Event::Prediction { peak_bytes, budget_bytes, max_splats, images } => {
                self.memory.prediction = Some((peak_bytes, budget_bytes, max_splats));
                self.memory.images = images;
            }
        }
    }

    /// The answer to [`SplatApp::hide_likely_floaters`]: the crop keeps only the dense
    /// scene's cells.
    fn crop_to_scene_cells(
        &mut self,
        cells: splat_trainer::formats::filter::SceneCells,
        outside: usize,
        splats: usize,
    ) {
        let keep = splat_trainer::formats::filter::Filter {
            scene_cells: Some(cells),
            ..self.crop.keep().clone()
        };
        self.crop.restore(&keep);
        self.log.info(format!(
            "Likely floaters: {outside} of {splats} splats are in small clusters apart from the \
             dense scene and now hidden (Undo, or Floaters hidden in the crop, shows them)"
        ));
    }
}
