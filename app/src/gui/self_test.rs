//! Help → Self-test: the command line's self-test (`splat_trainer::self_test`) on the
//! window's own device, on a thread of its own (`splat-self-test`); its summary in a window,
//! the report copied or saved as JSON for a bug report. The UI never waits for it.

use std::sync::mpsc::{Receiver, TryRecvError, sync_channel};
use std::time::Instant;

use splat_trainer::memory::MemoryBudget;
use splat_trainer::render::GpuContext;
use splat_trainer::self_test::SelfTestReport;

use super::sample;

enum State {
    Running { since: Instant, result: Receiver<Result<SelfTestReport, String>> },
    Done { report: Box<SelfTestReport>, json: String },
    Failed(String),
}

/// What the user asked of the window this frame.
pub(super) enum Action {
    None,
    /// Save the report (its JSON) through a save dialog.
    Save(String),
}

pub(super) struct SelfTestWindow {
    state: State,
    open: bool,
    /// The self-test's thread, which holds the GPU: joined when the window goes after it
    /// has reported (`files.rs` says why a GPU context must not outlive the process's exit).
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SelfTestWindow {
    /// Starts the self-test on `gpu`. Without per-pass times: the profiler is the device's,
    /// and the window's trainer and viewer use it too (`splatforge self-test` has them).
    pub(super) fn start(
        gpu: GpuContext,
        budget: MemoryBudget,
        repaint: egui::Context,
    ) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(1);
        let thread =
            std::thread::Builder::new().name("splat-self-test".into()).spawn(move || {
                let result = run(&gpu, budget);
                drop(gpu);
                let _ = tx.send(result);
                repaint.request_repaint();
            })?;
        let state = State::Running { since: Instant::now(), result: rx };
        Ok(Self { state, open: true, thread: Some(thread) })
    }

    pub(super) fn is_running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    /// Whether every check passed, once the self-test has finished (false when it could not
    /// run).
    pub(super) fn passed(&self) -> Option<bool> {
        match &self.state {
            State::Running { .. } => None,
            State::Done { report, .. } => Some(report.passed),
            State::Failed(_) => Some(false),
        }
    }

    /// Whether the window is still shown (closing it forgets a finished report).
    pub(super) fn is_open(&self) -> bool {
        self.open || self.is_running()
    }

    pub(super) fn show(&mut self, ctx: &egui::Context) -> Action {
        if let State::Running { result, .. } = &self.state {
            match result.try_recv() {
                Ok(Ok(report)) => {
                    let json = serde_json::to_string_pretty(&report)
                        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
                    self.state = State::Done { report: Box::new(report), json };
                }
                Ok(Err(message)) => self.state = State::Failed(message),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    self.state = State::Failed("the self-test thread stopped".into());
                }
            }
        }
        let mut action = Action::None;
        let mut open = self.open;
        let mut window = egui::Window::new("Self-test").resizable(true);
        // No closing while it runs: its report would have nowhere to go.
        if !self.is_running() {
            window = window.open(&mut open);
        }
        window.show(ctx, |ui| match &self.state {
            State::Running { since, .. } => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(format!(
                        "Checking the rasterizer and training on this GPU… {:.0} s",
                        since.elapsed().as_secs_f32()
                    ));
                });
                ui.ctx().request_repaint_after(std::time::Duration::from_millis(500));
            }
            State::Done { report, json } => {
                let verdict = if report.passed {
                    egui::RichText::new("All checks passed.").strong()
                } else {
                    egui::RichText::new(
                        "Some checks failed: please attach the report to a bug report.",
                    )
                    .strong()
                    .color(ui.visuals().error_fg_color)
                };
                ui.label(verdict);
                egui::ScrollArea::vertical().max_height(360.0).show(ui, |ui| {
                    ui.add(
                        egui::Label::new(egui::RichText::new(report.summary()).monospace()).wrap(),
                    );
                });
                ui.horizontal(|ui| {
                    if ui.button("Copy report (JSON)").clicked() {
                        ui.ctx().copy_text(json.clone());
                    }
                    if ui.button("Save report…").clicked() {
                        action = Action::Save(json.clone());
                    }
                });
            }
            State::Failed(message) => {
                ui.colored_label(
                    ui.visuals().error_fg_color,
                    format!("The self-test could not run: {message}"),
                );
            }
        });
        self.open = open;
        action
    }
}

impl Drop for SelfTestWindow {
    /// A self-test that has reported holds nothing more than the end of its thread: waited
    /// for. One still running cannot be stopped and is left to the process's end.
    fn drop(&mut self) {
        if !self.is_running()
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

fn run(gpu: &GpuContext, budget: MemoryBudget) -> Result<SelfTestReport, String> {
    let dataset = sample::load_dataset().map_err(|e| format!("{e:#}"))?;
    let options =
        splat_trainer::self_test::Options { memory_budget: budget, profile: false, quick: false };
    splat_trainer::self_test::run(gpu, &dataset, &options).map_err(|e| e.to_string())
}
