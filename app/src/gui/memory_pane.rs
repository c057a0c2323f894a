//! The memory panel: the ledger's live allocations by owner and category, beside what the
//! memory model predicts for the run as it is now.

use std::time::{Duration, Instant};

use splat_trainer::config::TrainConfig;
use splat_trainer::memory::{MemoryModel, RunShape};
use splat_trainer::render::{Category, Ledger, LedgerSnapshot, Owner};
use splat_trainer::task::TaskState;
use splat_trainer::train::ImagePlacement;

use super::session::Session;
use crate::human_bytes;

pub(super) struct MemoryPane {
    /// The ledger snapshot the trainer sent last (the status bar's total).
    pub from_trainer: Option<LedgerSnapshot>,
    /// The snapshot the pane shows, and when it was taken.
    shown: Option<(Instant, LedgerSnapshot)>,
    /// The task's prediction for the run: peak bytes, budget bytes, splats it is capped at.
    pub prediction: Option<(u64, u64, u32)>,
    /// Where the current run keeps its images (from the task's prediction).
    pub images: ImagePlacement,
}

impl Default for MemoryPane {
    fn default() -> Self {
        Self { from_trainer: None, shown: None, prediction: None, images: ImagePlacement::Resident }
    }
}

impl MemoryPane {
    /// The ledger's allocations by owner and category; while training, the run's measured
    /// bytes beside the memory model's for its splats now (`train`: the settings pane's, which
    /// a run continued from a checkpoint may not share).
    pub(super) fn ui(
        &mut self,
        ui: &mut egui::Ui,
        ledger: &Ledger,
        session: &Session,
        train: &TrainConfig,
    ) {
        ui.heading("GPU memory");
        self.refresh(ledger);
        let Some((_, snapshot)) = &self.shown else { return };
        ui.label(format!(
            "Now {} · peak {}",
            human_bytes(snapshot.total_bytes),
            human_bytes(snapshot.peak_bytes)
        ));
        if let Some((peak, budget, splats)) = self.prediction {
            ui.label(format!(
                "Run predicted peak {} (budget {}, cap {splats} splats)",
                human_bytes(peak),
                human_bytes(budget)
            ));
        }
        // While training: a paused run keeps only its parameters on the GPU.
        if session.task_state == TaskState::Training
            && let Some((run, splats, model)) = self.run_now_predicted(session, train)
        {
            let measured = snapshot.owner_bytes(Owner::Run(run));
            let ratio = measured as f64 / model.max(1) as f64;
            ui.label(format!(
                "Run {run} now: {} measured, {} predicted for {splats} splats ({:+.1}%)",
                human_bytes(measured),
                human_bytes(model),
                (ratio - 1.0) * 100.0
            ));
        }
        let owners: Vec<Owner> = snapshot.by_owner.keys().copied().collect();
        ui.add_space(4.0);
        // A table wider than the panel scrolls sideways instead of widening the panel (its
        // width would then depend on which runs happened to be alive).
        egui::ScrollArea::horizontal().id_salt("ledger scroll").show(ui, |ui| {
            egui::Grid::new("ledger").striped(true).num_columns(owners.len() + 2).show(ui, |ui| {
                ui.strong("category");
                for owner in &owners {
                    ui.strong(owner.to_string());
                }
                ui.strong("total");
                ui.end_row();
                for category in Category::ALL {
                    let total = snapshot.category_bytes(category);
                    if total == 0 {
                        continue;
                    }
                    ui.label(category.name());
                    for owner in &owners {
                        let bytes: u64 = snapshot
                            .allocations
                            .iter()
                            .filter(|a| a.category == category && a.owner == *owner)
                            .map(|a| a.bytes)
                            .sum();
                        ui.label(if bytes > 0 { human_bytes(bytes) } else { "–".into() });
                    }
                    ui.label(human_bytes(total));
                    ui.end_row();
                }
                ui.strong("total");
                for owner in &owners {
                    ui.strong(human_bytes(snapshot.owner_bytes(*owner)));
                }
                ui.strong(human_bytes(snapshot.total_bytes));
                ui.end_row();
            });
        });
        ui.add_space(6.0);
        ui.collapsing(format!("{} allocations", snapshot.allocations.len()), |ui| {
            let mut allocations: Vec<_> = snapshot.allocations.iter().collect();
            allocations.sort_by_key(|a| std::cmp::Reverse(a.bytes));
            for a in allocations.iter().take(200) {
                ui.small(format!(
                    "{} · {} · {} · {}",
                    human_bytes(a.bytes),
                    a.owner,
                    a.category,
                    a.label
                ));
            }
        });
        ui.small(
            "Every GPU buffer goes through this ledger; a run's column goes back to zero when \
             it is torn down.",
        );
    }

    /// The memory model's bytes for the current run as it is now (its splat count), to set
    /// beside the ledger's measurement: `(run, splats, bytes)`.
    fn run_now_predicted(&self, session: &Session, train: &TrainConfig) -> Option<(u64, u32, u64)> {
        let run = session.run.as_ref()?;
        let splats = run.last?.splats;
        let dataset = &session.dataset.as_ref()?.dataset;
        let appearance = train.appearance.resolve(dataset).is_on();
        let views = if appearance { dataset.train.len() as u32 } else { 0 };
        let shape = RunShape::for_dataset(dataset, u64::from(splats), train.sh_degree)
            .with_precision(train.sh_precision)
            .with_appearance(views);
        let shape = if self.images == ImagePlacement::Streamed { shape.streamed() } else { shape };
        Some((run.id, splats, MemoryModel::default().predict(&shape).peak_bytes))
    }

    /// Refreshes the memory panel's ledger snapshot at most every 250 ms (a snapshot copies
    /// every live allocation's label: not worth doing at the frame rate).
    fn refresh(&mut self, ledger: &Ledger) {
        let stale =
            self.shown.as_ref().is_none_or(|(at, _)| at.elapsed() >= Duration::from_millis(250));
        if stale {
            self.shown = Some((Instant::now(), ledger.snapshot()));
        }
    }
}
