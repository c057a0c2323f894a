//! The log pane: what the window says, in order, with the latest warning or error over the
//! viewport for a few seconds.

use std::collections::VecDeque;
use std::time::Instant;

use egui::{Color32, RichText};

/// Log lines kept (older ones scroll away).
const LOG_LINES: usize = 1000;
/// How long a notification stays over the viewport.
const TOAST_SECONDS: f32 = 8.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Level {
    Info,
    Warning,
    Error,
}

#[derive(Clone, Debug)]
struct LogLine {
    seconds: f32,
    level: Level,
    text: String,
}

pub(super) struct LogPane {
    started: Instant,
    lines: VecDeque<LogLine>,
    toast: Option<(Instant, Level, String)>,
    /// Every error said, for tests.
    errors: Vec<String>,
}

impl LogPane {
    pub(super) fn new() -> Self {
        Self { started: Instant::now(), lines: VecDeque::new(), toast: None, errors: Vec::new() }
    }

    fn push(&mut self, level: Level, text: String) {
        match level {
            Level::Error => log::error!("{text}"),
            Level::Warning => log::warn!("{text}"),
            Level::Info => log::info!("{text}"),
        }
        if level != Level::Info {
            self.toast = Some((Instant::now(), level, text.clone()));
        }
        if level == Level::Error {
            self.errors.push(text.clone());
        }
        let seconds = self.started.elapsed().as_secs_f32();
        self.lines.push_back(LogLine { seconds, level, text });
        while self.lines.len() > LOG_LINES {
            self.lines.pop_front();
        }
    }

    pub(super) fn info(&mut self, text: impl Into<String>) {
        self.push(Level::Info, text.into());
    }

    pub(super) fn warning(&mut self, text: impl Into<String>) {
        self.push(Level::Warning, text.into());
    }

    pub(super) fn error(&mut self, text: impl Into<String>) {
        self.push(Level::Error, text.into());
    }

    pub(super) fn errors(&self) -> &[String] {
        &self.errors
    }

    /// The notification to show now, if any.
    pub(super) fn toast(&self) -> Option<(Level, &str)> {
        self.toast
            .as_ref()
            .filter(|(at, _, _)| at.elapsed().as_secs_f32() < TOAST_SECONDS)
            .map(|(_, level, text)| (*level, text.as_str()))
    }

    pub(super) fn clear_toast(&mut self) {
        self.toast = None;
    }

    pub(super) fn ui(&self, ui: &mut egui::Ui) {
        ui.strong("Log");
        egui::ScrollArea::vertical().stick_to_bottom(true).auto_shrink([false; 2]).show(ui, |ui| {
            for line in &self.lines {
                let color = match line.level {
                    Level::Info => ui.visuals().text_color(),
                    Level::Warning => Color32::from_rgb(220, 160, 40),
                    Level::Error => Color32::from_rgb(230, 80, 80),
                };
                ui.label(
                    RichText::new(format!("{:>7.1}s  {}", line.seconds, line.text))
                        .color(color)
                        .monospace(),
                );
            }
        });
    }
}
