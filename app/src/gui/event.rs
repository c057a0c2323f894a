//! What the panes ask of the window. A pane draws itself from the state it owns and the
//! [`super::session::Session`] it reads, and sends these for anything beyond its own state;
//! [`super::app::SplatApp`] routes them (to the trainer, the file worker, another pane): the
//! keys' and dropped files' before the frame is drawn, the panes' after.

use std::path::PathBuf;

use super::files::{OpenKind, SaveKind};

/// How a video's camera moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum VideoMotion {
    /// Once round the scene.
    Turntable,
    /// Along the keyframes placed in the viewer.
    Path,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum UiEvent {
    /// A dropped file or folder.
    Open(PathBuf),
    OpenDialog(OpenKind),
    SaveDialog(SaveKind),
    /// Ctrl+E: the run's splats into the exports folder.
    ExportPly,
    /// Ctrl+S: a checkpoint into the exports folder.
    SaveCheckpoint,
    Start,
    Pause,
    /// Space: start, pause or resume, whichever makes sense.
    ToggleTraining,
    Stop,
    /// Ctrl+N.
    NewRun,
    /// The steps setting changed during a run.
    SetSteps(u32),
    /// Load the dataset again with the settings' loading options.
    ReloadDataset,
    /// Ask the trainer which splats are far from the dense scene, to hide them.
    HideLikelyFloaters,
    /// A selection was drawn while the crop holds all it can.
    SelectionsFull,
    /// Show the viewed file (true) or the run (false).
    ShowFile(bool),
    /// Frame what the viewport shows from the scene's up.
    ResetView,
    StartVideo(VideoMotion),
    /// A keyframe of the camera path where the viewport's camera is.
    AddKeyframe,
    SaveCameraPath,
    SelfTest,
}

/// A button that sends `event` when clicked (and does nothing while disabled).
pub(super) fn button(
    ui: &mut egui::Ui,
    enabled: bool,
    button: egui::Button<'_>,
    event: UiEvent,
    events: &mut Vec<UiEvent>,
) -> egui::Response {
    let response = ui.add_enabled(enabled, button);
    if response.clicked() {
        events.push(event);
    }
    response
}

/// Draws `pane` alone in a headless harness (no GPU), does `act` on it and returns what the
/// pane sent from then on.
#[cfg(test)]
pub(super) fn sent(
    mut pane: impl FnMut(&mut egui::Ui, &mut Vec<UiEvent>),
    act: impl FnOnce(&mut egui_kittest::Harness<'_, Vec<UiEvent>>),
) -> Vec<UiEvent> {
    let mut harness = egui_kittest::Harness::new_ui_state(
        |ui, events: &mut Vec<UiEvent>| pane(ui, events),
        vec![],
    );
    harness.run();
    harness.state_mut().clear();
    act(&mut harness);
    harness.run();
    std::mem::take(harness.state_mut())
}

/// What `pane` sends when the widgets labelled `labels` are clicked in turn (a menu, then its
/// item).
#[cfg(test)]
pub(super) fn clicks(
    labels: &[&str],
    pane: impl FnMut(&mut egui::Ui, &mut Vec<UiEvent>),
) -> Vec<UiEvent> {
    use egui_kittest::kittest::Queryable as _;
    sent(pane, |harness| {
        for label in labels {
            harness.get_by_label(label).click();
            harness.run();
        }
    })
}
