//! The menu bar, the keyboard shortcuts and files dropped on the window: what they ask for,
//! as [`UiEvent`]s.

use egui::{Key, KeyboardShortcut, Modifiers};

use super::event::{UiEvent, button};
use super::files::{OpenKind, SaveKind};

const OPEN: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::O);
const NEW_RUN: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::N);
const EXPORT: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::E);
const SAVE: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::S);

/// Which optional panes are shown (the View menu).
#[derive(Clone, Copy, Debug)]
pub(super) struct Panels {
    pub plots: bool,
    pub log: bool,
    pub memory: bool,
}

/// Keys and dropped files (the viewport's fly keys are read where it is drawn).
pub(super) fn input(ctx: &egui::Context, events: &mut Vec<UiEvent>) {
    ctx.input(|i| {
        events.extend(i.raw.dropped_files.iter().map(|f| UiEvent::Open(f.path().to_path_buf())));
    });
    let typing = ctx.egui_wants_keyboard_input();
    ctx.input_mut(|i| {
        for (shortcut, event) in [
            (OPEN, UiEvent::OpenDialog(OpenKind::Dataset)),
            (NEW_RUN, UiEvent::NewRun),
            (EXPORT, UiEvent::ExportPly),
            (SAVE, UiEvent::SaveCheckpoint),
        ] {
            if i.consume_shortcut(&shortcut) {
                events.push(event);
            }
        }
        if !typing && i.consume_key(Modifiers::NONE, Key::Space) {
            events.push(UiEvent::ToggleTraining);
        }
    });
}

/// The menu bar.
pub(super) fn ui(ui: &mut egui::Ui, panels: &mut Panels, events: &mut Vec<UiEvent>) {
    egui::MenuBar::new().ui(ui, |ui| {
        ui.menu_button("File", |ui| {
            let open = egui::Button::new("Open dataset…").shortcut_text("Ctrl+O");
            item(ui, events, open, UiEvent::OpenDialog(OpenKind::Dataset));
            let folder = egui::Button::new("Open dataset folder…");
            item(ui, events, folder, UiEvent::OpenDialog(OpenKind::DatasetFolder));
            let splats = egui::Button::new("Open splat file to view…");
            item(ui, events, splats, UiEvent::OpenDialog(OpenKind::SplatFile));
            let init = egui::Button::new("Use point cloud as init.ply…");
            item(ui, events, init, UiEvent::OpenDialog(OpenKind::InitPly));
            ui.separator();
            let export = egui::Button::new("Export PLY").shortcut_text("Ctrl+E");
            item(ui, events, export, UiEvent::ExportPly);
            item(
                ui,
                events,
                egui::Button::new("Export as…"),
                UiEvent::SaveDialog(SaveKind::Export),
            );
            let save = egui::Button::new("Save checkpoint").shortcut_text("Ctrl+S");
            item(ui, events, save, UiEvent::SaveCheckpoint);
            let save_as = egui::Button::new("Save checkpoint as…");
            item(ui, events, save_as, UiEvent::SaveDialog(SaveKind::Checkpoint));
            let load = egui::Button::new("Load checkpoint…");
            item(ui, events, load, UiEvent::OpenDialog(OpenKind::Checkpoint));
            ui.separator();
            if ui.button("Quit").clicked() {
                ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
            }
        });
        ui.menu_button("View", |ui| {
            ui.checkbox(&mut panels.plots, "Plots");
            ui.checkbox(&mut panels.log, "Log");
            ui.checkbox(&mut panels.memory, "Memory");
            item(ui, events, egui::Button::new("Reset camera"), UiEvent::ResetView);
        });
        ui.menu_button("Help", |ui| {
            let self_test = egui::Button::new("Self-test");
            button(ui, true, self_test, UiEvent::SelfTest, events).on_hover_text(
                "Check the rasterizer and training on this GPU against the CPU reference (about \
                 a minute); the report can go with a bug report.",
            );
            ui.separator();
            ui.label(
                "Space: start / pause / resume\nCtrl+N: new run\nCtrl+E: export PLY\n\
                 Ctrl+S: save checkpoint\nCtrl+O: open\n\nViewport: drag to orbit, \
                 right-drag to pan, scroll to zoom, Ctrl+drag to look around, \
                 W A S D Q E to fly, double-click to reset.\n\nDrop a dataset folder or \
                 .zip, a folder of photos or a video (camera poses by COLMAP), a splat \
                 file to view, a point-cloud .ply (init.ply) or a checkpoint onto the \
                 window.",
            );
        });
    });
}

/// A menu item that sends `event` when clicked.
fn item(ui: &mut egui::Ui, events: &mut Vec<UiEvent>, item: egui::Button<'_>, event: UiEvent) {
    button(ui, true, item, event, events);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gui::event::clicks;

    #[test]
    fn menu_items_send_their_events() {
        let mut panels = Panels { plots: true, log: true, memory: true };
        let mut menu =
            |ui: &mut egui::Ui, events: &mut Vec<UiEvent>| super::ui(ui, &mut panels, events);
        assert_eq!(clicks(&["File", "Export PLY Ctrl+E"], &mut menu), [UiEvent::ExportPly]);
        let load = UiEvent::OpenDialog(OpenKind::Checkpoint);
        assert_eq!(clicks(&["File", "Load checkpoint…"], &mut menu), [load]);
        assert_eq!(clicks(&["View", "Reset camera"], &mut menu), [UiEvent::ResetView]);
        assert_eq!(clicks(&["Help", "Self-test"], &mut menu), [UiEvent::SelfTest]);
        // The View menu's panes are the menu's own state: no event.
        assert_eq!(clicks(&["View", "Plots"], &mut menu), []);
        assert!(!panels.plots);
    }

    #[test]
    fn shortcuts_send_their_events() {
        let mut harness = egui_kittest::Harness::new_ui_state(
            |ui, events: &mut Vec<UiEvent>| input(ui.ctx(), events),
            Vec::new(),
        );
        harness.run();
        let mut pressed = |modifiers: Modifiers, key: Key| {
            harness.key_press_modifiers(modifiers, key);
            harness.run();
            std::mem::take(harness.state_mut())
        };
        assert_eq!(pressed(Modifiers::NONE, Key::Space), [UiEvent::ToggleTraining]);
        assert_eq!(pressed(Modifiers::COMMAND, Key::E), [UiEvent::ExportPly]);
        assert_eq!(pressed(Modifiers::COMMAND, Key::S), [UiEvent::SaveCheckpoint]);
        assert_eq!(pressed(Modifiers::COMMAND, Key::N), [UiEvent::NewRun]);
        let open = UiEvent::OpenDialog(OpenKind::Dataset);
        assert_eq!(pressed(Modifiers::COMMAND, Key::O), [open]);
        assert_eq!(pressed(Modifiers::NONE, Key::E), []);
    }
}
