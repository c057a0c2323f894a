//! The settings pane: the next run's [`Settings`] (the command line's own types) as a grid of
//! rows, what a run with them would reach and its predicted memory.

use egui::Color32;
use splat_trainer::appearance::{Compensation, Decision};
use splat_trainer::config::{
    DEFAULT_ALPHA_LOSS_WEIGHT, Progressive, SplatBudget, TrainConfig, Transparency,
};
use splat_trainer::dataset::{Dataset, LoadOptions};
use splat_trainer::densify::Strategy;
use splat_trainer::memory::{MemoryBudget, MemoryModel};
use splat_trainer::render::ShPrecision;
use splat_trainer::task::TaskState;

use super::event::UiEvent;
use super::session::Session;
use crate::human_bytes;

/// What the strategies do, for the strategy setting's tooltip.
const STRATEGY_HINT: &str = "How splats grow and go. Compact (the default): 3DGS's rules with \
    growth paced and unneeded splats faded out: a fraction of the splats for a picture as good \
    on most captures (smaller files, faster steps). 3DGS: the original adaptive density control, grows wherever \
    the gradients are high. MCMC: relocates faint splats and grows to the max splats";

/// What the SH precision setting does, for its tooltip.
const SH_PRECISION_HINT: &str = "How the view-dependent colour (SH bands 1-3) and its optimizer \
    state are stored on the GPU: f16 takes 252 fewer bytes a splat at degree 3";

/// The settings of the next run, as the settings pane edits them: the command line's own
/// types, so that a setting added there is here too.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// How the dataset is loaded (applied when it is (re)loaded).
    pub load: LoadOptions,
    pub train: TrainConfig,
    pub memory_budget_mib: u64,
}

impl Settings {
    #[must_use]
    pub fn budget_bytes(&self) -> u64 {
        self.memory_budget_mib.saturating_mul(1 << 20)
    }
}

pub(super) struct SettingsPane {
    /// The settings of the next run.
    pub next: Settings,
    /// The budget the driver (or the host's memory) gives runs on this device, and why.
    default_budget: MemoryBudget,
}

impl SettingsPane {
    pub(super) fn new(settings: Settings, default_budget: MemoryBudget) -> Self {
        Self { next: settings, default_budget }
    }

    /// The memory budget of the settings: the default (and where it came from) unless the
    /// user changed it.
    pub(super) fn budget(&self) -> MemoryBudget {
        let bytes = self.next.budget_bytes();
        if bytes == self.default_budget.bytes >> 20 << 20 {
            self.default_budget
        } else {
            MemoryBudget::given(bytes)
        }
    }

    /// The grid of settings, what a run with them would reach, and a button to reload the
    /// dataset where it was loaded otherwise. Sends [`UiEvent::SetSteps`] when the steps
    /// change during a run (the only setting a run takes while it goes on).
    pub(super) fn ui(&mut self, ui: &mut egui::Ui, session: &Session, events: &mut Vec<UiEvent>) {
        ui.heading("Settings");
        let editable = matches!(session.task_state, TaskState::Ready | TaskState::Empty);
        let steps_before = self.next.train.steps;
        let default_budget = format!("Default: {}", self.default_budget);
        egui::Grid::new("settings").num_columns(2).striped(true).show(ui, |ui| {
            let settings = &mut self.next;
            let label = ui.label("Steps");
            ui.add(egui::DragValue::new(&mut settings.train.steps).range(1..=1_000_000).speed(100))
                .labelled_by(label.id);
            ui.end_row();
            strategy_row(ui, editable, &mut settings.train.strategy);
            let auto = session.dataset.as_ref().map(|d| fixed_budget(&settings.train, &d.dataset));
            budget_row(ui, editable, &mut settings.train.max_splats, auto);
            let label = ui.label("SH degree");
            ui.add_enabled(editable, egui::Slider::new(&mut settings.train.sh_degree, 0..=3))
                .labelled_by(label.id);
            ui.end_row();
            let precisions = [ShPrecision::F32, ShPrecision::F16].map(|p| (p, p.name()));
            let label = ("SH precision", Some(SH_PRECISION_HINT));
            choice_row(ui, label, editable, &mut settings.train.sh_precision, &precisions);
            let label = ui.label("Resolution");
            ui.add(
                egui::DragValue::new(&mut settings.load.max_resolution)
                    .range(16..=8192)
                    .speed(8)
                    .suffix(" px"),
            )
            .labelled_by(label.id)
            .on_hover_text("Longest image side; applied when the dataset is (re)loaded");
            ui.end_row();
            ui.label("Masks");
            ui.checkbox(&mut settings.load.alpha_as_mask, "Alpha as mask").on_hover_text(
                "Leave out the pixels a transparent image's alpha is 0 at, instead of \
                 compositing them over the background; applied when the dataset is (re)loaded",
            );
            ui.end_row();
            transparency_row(ui, editable, &mut settings.train.transparency);
            progressive_row(ui, editable, &mut settings.train.progressive);
            let auto = session.dataset.as_ref().map(|d| Compensation::Auto.decide(&d.dataset));
            appearance_row(ui, editable, &mut settings.train.appearance, auto.as_ref());
            let label = ui.label("Eval every");
            ui.add(
                egui::DragValue::new(&mut settings.train.eval_every)
                    .range(0..=100_000)
                    .suffix(" steps"),
            )
            .labelled_by(label.id);
            ui.end_row();
            let label = ui.label("Memory budget");
            ui.add_enabled(
                editable,
                egui::DragValue::new(&mut settings.memory_budget_mib)
                    .range(64..=1 << 20)
                    .speed(16)
                    .suffix(" MiB"),
            )
            .on_hover_text(default_budget)
            .labelled_by(label.id);
            ui.end_row();
        });
        let steps = self.next.train.steps;
        if steps != steps_before && session.run.is_some() && session.running() {
            events.push(UiEvent::SetSteps(steps));
        }
        if let Some(loaded) = &session.dataset {
            let dataset = &loaded.dataset;
            // What a run on the loaded dataset would reach.
            let splats = match self.expected_splats(dataset) {
                Some(most) => format!("Splats: up to {most} with these settings"),
                None => {
                    format!(
                        "Splats: as many as the images ask, up to {}",
                        fixed_budget(&self.next.train, dataset)
                    )
                }
            };
            ui.label(splats);
            let (peak, fits) = self.predicted(dataset);
            let budget = self.next.budget_bytes();
            let text = format!("Predicted peak {} of {}", human_bytes(peak), human_bytes(budget));
            if peak > budget {
                ui.colored_label(Color32::from_rgb(230, 160, 40), text)
                    .on_hover_text(format!("Over budget: the run will be capped at {fits} splats"));
            } else {
                ui.label(text);
            }
            if self.stale(dataset) && ui.button("Reload with these settings").clicked() {
                events.push(UiEvent::ReloadDataset);
            }
        }
    }

    /// The dataset was loaded otherwise than the settings now say (a larger image than the
    /// resolution asks for, or the other alpha handling).
    fn stale(&self, dataset: &Dataset) -> bool {
        let wanted = &self.next.load;
        let side = dataset.train.first().map_or(0, |v| v.camera.width.max(v.camera.height));
        dataset.options.alpha_as_mask != wanted.alpha_as_mask || side > wanted.max_resolution
    }

    /// Predicted peak GPU bytes of a run with the current settings on `dataset`, and the most
    /// splats the budget allows.
    fn predicted(&self, dataset: &Dataset) -> (u64, u64) {
        let train = &self.next.train;
        let model = MemoryModel::default();
        let budget = self.next.budget_bytes();
        // The task also caps by the device's binding limits; the budget is what the user sets.
        let appearance = train.appearance.resolve(dataset).is_on();
        let sh = (train.sh_degree, train.sh_precision, appearance);
        let shape = model.plan_run(dataset, fixed_budget(train, dataset), sh, budget, None).shape;
        let peak = model.predict(&shape).peak_bytes;
        let fits = model.max_splats_for_budget(budget, &shape);
        (peak, fits)
    }

    /// The most splats the next run on `dataset` can reach with the current settings, where
    /// its strategy bounds it (see [`Strategy::most_splats`]), from its initial points.
    fn expected_splats(&self, dataset: &Dataset) -> Option<u32> {
        let config = &self.next.train;
        let budget = fixed_budget(config, dataset);
        config.strategy.most_splats(initial_splats(dataset), config.steps, budget)
    }
}

/// The splats a run on `dataset` starts from (without an init.ply): its points, else the
/// random ones.
fn initial_splats(dataset: &Dataset) -> u32 {
    let initial = dataset
        .init_points
        .as_ref()
        .map_or(splat_trainer::task::RANDOM_INIT_POINTS, splat_trainer::formats::PointCloud::len);
    u32::try_from(initial).unwrap_or(u32::MAX)
}

/// The splat budget a run of `config` on `dataset` would fix (auto's count, or the count set).
fn fixed_budget(config: &TrainConfig, dataset: &Dataset) -> u32 {
    config.max_splats.fixed(&config.strategy, dataset, initial_splats(dataset)).count()
}

/// The settings' max splats row: an Auto check box, with the count it gives on the loaded
/// dataset (`auto`) beside it; unticked, that count to edit.
fn budget_row(ui: &mut egui::Ui, editable: bool, budget: &mut SplatBudget, auto: Option<u32>) {
    let label = ui.label("Max splats");
    let hint = "The most splats the run may have: compact grows toward it, no strategy passes \
                it. Auto: for compact 7.5 × the square root of the train images' pixels (half \
                what Brush 1.0 grows at full resolution) or 1.3 × the dataset's sparse points, \
                whichever is more; for 3DGS and MCMC 3,000,000; never fewer than the initial \
                points. Lowered where the memory budget cannot hold it";
    ui.add_enabled_ui(editable, |ui| {
        ui.horizontal(|ui| {
            let mut is_auto = *budget == SplatBudget::Auto;
            let check = ui.checkbox(&mut is_auto, "Auto").labelled_by(label.id).on_hover_text(hint);
            if check.changed() {
                *budget = if is_auto {
                    SplatBudget::Auto
                } else {
                    SplatBudget::Count(auto.unwrap_or(AUTO_WITHOUT_DATASET))
                };
            }
            match budget {
                SplatBudget::Auto => {
                    if let Some(count) = auto {
                        ui.label(format!("{count}"));
                    }
                }
                SplatBudget::Count(count) => {
                    ui.add(egui::DragValue::new(count).range(1..=20_000_000).speed(1000))
                        .on_hover_text(hint);
                }
            }
        });
    });
    ui.end_row();
}

/// The count an unticked Auto starts from when no dataset is loaded to fix it from.
const AUTO_WITHOUT_DATASET: u32 = 100_000;

/// A grid row: `label` (with its tooltip), and a combo box setting `value` to one of
/// `choices` (value, text).
fn choice_row<T: PartialEq + Copy>(
    ui: &mut egui::Ui,
    (label, hint): (&str, Option<&str>),
    enabled: bool,
    value: &mut T,
    choices: &[(T, &str)],
) {
    let label_response = ui.label(label);
    ui.add_enabled_ui(enabled, |ui| {
        let selected = choices.iter().find(|(choice, _)| choice == value).map_or("", |c| c.1);
        let response = egui::ComboBox::from_id_salt(label)
            .selected_text(selected)
            .show_ui(ui, |ui| {
                for &(choice, text) in choices {
                    ui.selectable_value(value, choice, text);
                }
            })
            .response
            .labelled_by(label_response.id);
        if let Some(hint) = hint {
            response.on_hover_text(hint);
        }
    });
    ui.end_row();
}

/// The settings' strategy row, by name: a choice gives the strategy's default settings.
fn strategy_row(ui: &mut egui::Ui, editable: bool, strategy: &mut Strategy) {
    let strategies = [("compact", "Compact"), ("3dgs", "3DGS"), ("mcmc", "MCMC")];
    let mut name = strategy.name();
    choice_row(ui, ("Strategy", Some(STRATEGY_HINT)), editable, &mut name, &strategies);
    if name != strategy.name()
        && let Ok(chosen) = Strategy::parse(name)
    {
        *strategy = chosen;
    }
}

/// The settings' coarse-to-fine row: its label and check box.
fn progressive_row(ui: &mut egui::Ui, editable: bool, progressive: &mut Progressive) {
    ui.label("Coarse to fine");
    let mut on = *progressive != Progressive::Off;
    ui.add_enabled(editable, egui::Checkbox::new(&mut on, "Progressive resolution")).on_hover_text(
        "The first tenth of the steps on images shrunk 4 times, the second tenth shrunk \
             twice, the rest at full size: those steps cost a fraction as much; measured, a \
             run 5-9% faster and 0.2-0.3 dB lower",
    );
    if on != (*progressive != Progressive::Off) {
        *progressive = if on { Progressive::On } else { Progressive::Off };
    }
    ui.end_row();
}

/// The settings' per-view appearance row: its label and combo box. `auto`: what Auto decides
/// for the loaded dataset, shown in its name and said on hover.
fn appearance_row(
    ui: &mut egui::Ui,
    editable: bool,
    appearance: &mut Compensation,
    auto: Option<&Decision>,
) {
    let label = ui.label("Appearance");
    let name = |c: Compensation| match (c, auto) {
        (Compensation::Auto, Some(decided)) => format!("Auto ({})", decided.compensation),
        (Compensation::Auto, None) => "Auto".to_owned(),
        (Compensation::On, _) => "Per-view exposure and colour".to_owned(),
        (Compensation::Off, _) => "Off".to_owned(),
    };
    let hint = "Learn a colour transform for each photo (exposure, white balance) that the loss \
                sees the render through: for phone captures whose exposure or colour changes \
                between photos. Each starts from its photo's EXIF exposure where every photo \
                has one. Auto turns it on where those differ by a third of a stop or more, or \
                else where the photos' colours drift against the sparse points' (a video's \
                frames have no EXIF). The splats, exports and evaluation stay untouched";
    let hint =
        auto.map_or_else(|| hint.to_owned(), |decided| format!("{hint}.\n\nAuto: {decided}"));
    ui.add_enabled_ui(editable, |ui| {
        egui::ComboBox::from_id_salt("appearance")
            .selected_text(name(*appearance))
            .show_ui(ui, |ui| {
                for choice in [Compensation::Auto, Compensation::On, Compensation::Off] {
                    ui.selectable_value(appearance, choice, name(choice));
                }
            })
            .response
            .labelled_by(label.id)
    })
    .response
    .on_hover_text(hint);
    ui.end_row();
}

/// The settings' transparency row: its label and combo box.
fn transparency_row(ui: &mut egui::Ui, editable: bool, transparency: &mut Transparency) {
    let label = ui.label("Transparency");
    ui.add_enabled_ui(editable, |ui| transparency_choice(ui, transparency).labelled_by(label.id))
        .response
        .on_hover_text(
            "How a transparent image's alpha is learnt: each step over a random colour, an L1 \
             loss on the rendered alpha, or not at all (only the colour it was composited \
             over)",
        );
    ui.end_row();
}

/// The transparency combo box of the settings.
fn transparency_choice(ui: &mut egui::Ui, transparency: &mut Transparency) -> egui::Response {
    let name = |t: &Transparency| match t {
        Transparency::RandomBackground => "Random background",
        Transparency::AlphaLoss(_) => "Alpha loss",
        Transparency::Composite => "Composite",
    };
    egui::ComboBox::from_id_salt("transparency")
        .selected_text(name(transparency))
        .show_ui(ui, |ui| {
            for choice in [
                Transparency::RandomBackground,
                Transparency::AlphaLoss(DEFAULT_ALPHA_LOSS_WEIGHT),
                Transparency::Composite,
            ] {
                let selected =
                    std::mem::discriminant(transparency) == std::mem::discriminant(&choice);
                if ui.selectable_label(selected, name(&choice)).clicked() {
                    *transparency = choice;
                }
            }
        })
        .response
}

#[cfg(test)]
mod tests {
    use egui_kittest::kittest::Queryable as _;

    use super::*;
    use crate::gui::event::sent;
    use crate::gui::session::RunInfo;

    /// What the pane sends when its Steps field is set to 9,000 in `state`, with a run or not.
    fn steps_set(state: TaskState, run: bool) -> Vec<UiEvent> {
        let mut session = Session::new(None);
        session.task_state = state;
        session.run = run.then(|| RunInfo::new(1, 100));
        let settings = Settings {
            load: LoadOptions::default(),
            train: TrainConfig::default(),
            memory_budget_mib: 1024,
        };
        let mut pane = SettingsPane::new(settings, MemoryBudget::given(1 << 30));
        sent(
            |ui, events| pane.ui(ui, &session, events),
            |harness| harness.get_by_label("Steps").set_value_accesskit(9000.0),
        )
    }

    #[test]
    fn steps_changed_during_a_run_go_to_the_run() {
        assert_eq!(steps_set(TaskState::Training, true), [UiEvent::SetSteps(9000)]);
        assert_eq!(steps_set(TaskState::Paused, true), [UiEvent::SetSteps(9000)]);
        // Between runs the next run takes them when it starts.
        assert_eq!(steps_set(TaskState::Ready, false), []);
        assert_eq!(steps_set(TaskState::Ready, true), []);
    }
}
