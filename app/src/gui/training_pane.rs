//! The training pane: the dataset, the run's controls and progress, and what can be written
//! from it (exports, checkpoints, videos).

use egui::RichText;
use splat_trainer::task::TaskState;

use super::event::{UiEvent, button};
use super::files::{OpenKind, SaveKind, file_name};
use super::session::{RunInfo, Session};

pub(super) struct TrainingPane {
    /// Exports turned so that the cameras' up is −y, as web viewers expect. On: exports from
    /// the window are for sharing, upright in every viewer.
    pub level_exports: bool,
}

impl Default for TrainingPane {
    fn default() -> Self {
        Self { level_exports: true }
    }
}

impl TrainingPane {
    /// The dataset: its name, views and initial points, or what is being loaded.
    pub(super) fn dataset_ui(ui: &mut egui::Ui, session: &Session, events: &mut Vec<UiEvent>) {
        ui.heading("Dataset");
        match (&session.dataset, &session.loading) {
            (_, Some(path)) => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(format!("Loading {}", file_name(path)));
                });
            }
            (Some(loaded), None) => {
                ui.label(RichText::new(file_name(&loaded.path)).strong())
                    .on_hover_text(loaded.path.display().to_string());
                let d = &loaded.dataset;
                let (w, h) = d.train.first().map_or((0, 0), |v| (v.camera.width, v.camera.height));
                ui.label(format!(
                    "{} · {} train + {} eval views · {w}×{h}",
                    d.format.name(),
                    d.train.len(),
                    d.eval.len()
                ));
                let init = match (&session.init, &d.init_points) {
                    (Some(path), _) => format!("init: {}", file_name(path)),
                    (None, Some(points)) if !points.is_empty() => {
                        format!("init: {} dataset points", points.len())
                    }
                    _ => "init: random points".into(),
                };
                ui.label(init);
            }
            (None, None) => {
                ui.label("Drop a dataset folder or .zip here, or press Ctrl+O.");
            }
        }
        let open = UiEvent::OpenDialog(OpenKind::Dataset);
        button(ui, true, egui::Button::new("Open…"), open, events);
    }

    /// Start, pause, stop and new run; the run's progress; exports, checkpoints and the
    /// video pane's controls (`video`, given whether there are splats to film: the run's, a
    /// failed run's kept ones, or a file's) in one row.
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        session: &Session,
        eval_psnr: Option<f64>,
        events: &mut Vec<UiEvent>,
        video: impl FnOnce(&mut egui::Ui, bool, &mut Vec<UiEvent>),
    ) {
        ui.heading("Training");
        let state = session.task_state;
        let running = session.running();
        ui.horizontal_wrapped(|ui| {
            let start = egui::Button::new("Start");
            button(ui, state == TaskState::Ready, start, UiEvent::Start, events);
            match state {
                TaskState::Training => {
                    button(ui, true, egui::Button::new("Pause"), UiEvent::Pause, events);
                }
                TaskState::Paused => {
                    let resume = egui::Button::new("Resume");
                    button(ui, true, resume, UiEvent::ToggleTraining, events);
                }
                _ => {
                    button(ui, false, egui::Button::new("Pause"), UiEvent::Pause, events);
                }
            }
            button(ui, running, egui::Button::new("Stop"), UiEvent::Stop, events);
            let new_run = egui::Button::new("New run");
            button(ui, running || state == TaskState::Ready, new_run, UiEvent::NewRun, events)
                .on_hover_text("Ctrl+N: start again from the init with these settings");
        });
        if let Some(run) = &session.run {
            progress_ui(ui, run, state, eval_psnr);
        }
        ui.horizontal_wrapped(|ui| {
            let (has_run, has_splats) = (session.run.is_some(), session.has_splats());
            let export = egui::Button::new("Export PLY");
            button(ui, has_splats, export, UiEvent::ExportPly, events);
            let export_as = egui::Button::new("Export…");
            button(ui, has_splats, export_as, UiEvent::SaveDialog(SaveKind::Export), events);
            let save = egui::Button::new("Save checkpoint");
            button(ui, has_run, save, UiEvent::SaveCheckpoint, events);
            video(ui, has_splats || session.viewed_file.is_some(), events);
            ui.checkbox(&mut self.level_exports, "Level exports").on_hover_text(
                "Turn exported splats so that the cameras' up is −y, the up of 3DGS files and \
                 web viewers. Checkpoints keep the dataset's frame.",
            );
            let load = egui::Button::new("Load checkpoint…");
            let open = UiEvent::OpenDialog(OpenKind::Checkpoint);
            button(ui, session.dataset.is_some(), load, open, events);
        });
        if let Some(dir) = session.exports_dir() {
            ui.small(format!("Exports go to {}", dir.display()));
        }
    }
}

/// The run's progress bar, rate and time left, its loss and PSNR.
fn progress_ui(ui: &mut egui::Ui, run: &RunInfo, state: TaskState, eval_psnr: Option<f64>) {
    let step = run.step();
    let fraction = step as f32 / run.planned_steps.max(1) as f32;
    ui.add(egui::ProgressBar::new(fraction).text(format!("{step} / {}", run.planned_steps)));
    match state {
        TaskState::Training => {
            let rate = run.steps_per_second();
            let eta = run.eta_seconds().map_or_else(|| "–".into(), duration);
            ui.label(format!(
                "{} · ETA {eta}",
                rate.map_or_else(|| "– steps/s".into(), |r| format!("{r:.1} steps/s")),
            ));
        }
        TaskState::Paused if run.finished() => {
            ui.label("Finished: export it, or press Space to train on.");
        }
        _ => {
            ui.label("Paused.");
        }
    }
    if let (Some(last), Some(metrics)) = (run.last, run.last_metrics) {
        ui.label(format!(
            "loss {:.4} · train PSNR {:.2} dB · {} splats",
            metrics.loss, metrics.train_psnr, last.splats
        ));
        let [width, height] = last.image_size;
        ui.label(format!("training at {width}×{height} px"));
    }
    if let Some(psnr) = eval_psnr {
        ui.label(format!("eval PSNR {psnr:.2} dB"));
    }
}

fn duration(seconds: f64) -> String {
    let s = seconds.round() as u64;
    if s >= 3600 {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gui::event::clicks;

    /// What clicking `label` sends in `state`, with a run or without.
    fn clicked(state: TaskState, run: bool, label: &str) -> Vec<UiEvent> {
        let mut session = Session::new(None);
        session.task_state = state;
        session.run = run.then(|| RunInfo::new(1, 100));
        let mut pane = TrainingPane::default();
        clicks(&[label], |ui, events| pane.ui(ui, &session, None, events, |_, _, _| {}))
    }

    #[test]
    fn each_button_sends_its_event_where_the_state_allows_it() {
        use TaskState::{Empty, Loading, Paused, Ready, Training};
        assert_eq!(clicked(Ready, false, "Start"), [UiEvent::Start]);
        assert_eq!(clicked(Empty, false, "Start"), []);
        assert_eq!(clicked(Training, true, "Start"), []);
        assert_eq!(clicked(Training, true, "Pause"), [UiEvent::Pause]);
        assert_eq!(clicked(Ready, false, "Pause"), []);
        assert_eq!(clicked(Paused, true, "Resume"), [UiEvent::ToggleTraining]);
        assert_eq!(clicked(Paused, true, "Stop"), [UiEvent::Stop]);
        assert_eq!(clicked(Ready, false, "Stop"), []);
        assert_eq!(clicked(Ready, false, "New run"), [UiEvent::NewRun]);
        assert_eq!(clicked(Loading, false, "New run"), []);
        assert_eq!(clicked(Paused, true, "Export PLY"), [UiEvent::ExportPly]);
        assert_eq!(clicked(Ready, false, "Export PLY"), []);
        assert_eq!(clicked(Paused, true, "Export…"), [UiEvent::SaveDialog(SaveKind::Export)]);
        assert_eq!(clicked(Paused, true, "Save checkpoint"), [UiEvent::SaveCheckpoint]);
        assert_eq!(clicked(Ready, false, "Save checkpoint"), []);
    }

    #[test]
    fn a_failed_runs_kept_splats_can_be_exported_not_checkpointed() {
        let mut session = Session::new(None);
        session.task_state = TaskState::Ready;
        session.kept = Some((1, 40));
        let mut pane = TrainingPane::default();
        let mut draw = |ui: &mut egui::Ui, events: &mut Vec<UiEvent>| {
            pane.ui(ui, &session, None, events, |_, _, _| {});
        };
        assert_eq!(clicks(&["Export PLY"], &mut draw), [UiEvent::ExportPly]);
        assert_eq!(clicks(&["Save checkpoint"], &mut draw), []);
    }
}
