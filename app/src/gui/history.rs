//! What the plots show: per-step series of the current run, bounded in memory however long
//! the run is.

use std::collections::BTreeMap;

use egui_plot::{Legend, Line, Plot, PlotPoint, PlotPoints};

use splat_trainer::appearance::ViewAppearance;
use splat_trainer::render::{Category, LedgerSnapshot};
use splat_trainer::train::{EvalStats, StepMetrics, StepStats};

/// Height of the plots (and so of the bottom panel), in points.
const PLOT_HEIGHT: f32 = 190.0;

/// Points a series keeps at most; past it, every other point is dropped and from then on
/// only every `stride`-th step is kept, so a 1M-step run costs what a 4k-step run does.
const MAX_POINTS: usize = 4096;

/// `(step, value)` points, thinned evenly as they accumulate.
#[derive(Clone, Debug, Default)]
pub struct Series {
    points: Vec<PlotPoint>,
    stride: u32,
}

impl Series {
    pub fn push(&mut self, step: u32, value: f64) {
        let stride = self.stride.max(1);
        if !value.is_finite() || !step.is_multiple_of(stride) {
            return;
        }
        self.points.push(PlotPoint::new(step, value));
        if self.points.len() > MAX_POINTS {
            self.stride = stride * 2;
            let stride = self.stride;
            // Steps are whole numbers stored as f64.
            self.points.retain(|p| (p.x as u32).is_multiple_of(stride));
        }
    }

    #[must_use]
    pub fn points(&self) -> &[PlotPoint] {
        &self.points
    }

    #[must_use]
    pub fn last(&self) -> Option<f64> {
        self.points.last().map(|p| p.y)
    }
}

/// Every series of one run.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub loss: Series,
    pub train_psnr: Series,
    pub eval_psnr: Series,
    pub splats: Series,
    /// GPU memory by ledger category in MiB (the plot's unit), sampled with the memory
    /// events.
    pub memory: BTreeMap<Category, Series>,
    /// With per-view appearance, the exposure of each train view's transform in stops, per
    /// channel (x: the view's place among the train views), as of the last evaluation.
    pub appearance: [Vec<PlotPoint>; 3],
    last_step: u32,
}

impl History {
    pub fn step(&mut self, stats: &StepStats) {
        self.last_step = stats.step;
        self.splats.push(stats.step, f64::from(stats.splats));
    }

    /// A step's loss, which arrives a step or so after the step itself.
    pub fn metrics(&mut self, metrics: &StepMetrics) {
        self.loss.push(metrics.step, metrics.loss);
        self.train_psnr.push(metrics.step, metrics.train_psnr);
    }

    pub fn eval(&mut self, eval: &EvalStats) {
        // Evaluations are rare: never thinned by the step stride.
        self.eval_psnr.points.push(PlotPoint::new(eval.step, eval.psnr));
        if self.eval_psnr.points.len() > MAX_POINTS {
            self.eval_psnr.points.remove(0);
        }
    }

    /// The per-view transforms sent after an evaluation: each view's channel gains in stops.
    pub fn appearance(&mut self, views: &[ViewAppearance]) {
        for (channel, points) in self.appearance.iter_mut().enumerate() {
            *points = views
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    PlotPoint::new(i as f64, f64::from(v.matrix[channel][channel].max(1e-6).log2()))
                })
                .collect();
        }
    }

    pub fn memory(&mut self, snapshot: &LedgerSnapshot) {
        for category in Category::ALL {
            let bytes = snapshot.category_bytes(category);
            let series = self.memory.entry(category).or_default();
            let point = PlotPoint::new(self.last_step, bytes as f64 / f64::from(1 << 20));
            // Several samples at one step (pause, resume, finish): the last one stands.
            match series.points.last_mut() {
                Some(last) if (last.x - point.x).abs() < 0.5 => *last = point,
                _ => series.points.push(point),
            }
            if series.points.len() > MAX_POINTS {
                series.points.remove(0);
            }
        }
    }

    /// The plots pane: loss, PSNR, splats, memory and (with appearance) each view's exposure.
    pub(super) fn ui(&self, ui: &mut egui::Ui) {
        // A fixed height: a plot sized from the panel's height would grow the resizable panel
        // a little every frame.
        let (height, history) = (PLOT_HEIGHT, self);
        let appearance = !history.appearance[0].is_empty();
        ui.columns(if appearance { 5 } else { 4 }, |columns| {
            plot_titled(&mut columns[0], "loss", height, false, |plot| {
                plot.line(Line::new("loss", PlotPoints::Borrowed(history.loss.points())));
            });
            plot_titled(&mut columns[1], "PSNR (dB)", height, true, |plot| {
                plot.line(Line::new("train", PlotPoints::Borrowed(history.train_psnr.points())));
                plot.line(Line::new("eval", PlotPoints::Borrowed(history.eval_psnr.points())));
            });
            plot_titled(&mut columns[2], "splats", height, false, |plot| {
                plot.line(Line::new("splats", PlotPoints::Borrowed(history.splats.points())));
            });
            plot_titled(&mut columns[3], "GPU memory (MiB)", height, true, |plot| {
                for (category, series) in &history.memory {
                    if series.points().iter().any(|p| p.y > 0.0) {
                        plot.line(Line::new(
                            category.name(),
                            PlotPoints::Borrowed(series.points()),
                        ));
                    }
                }
            });
            if appearance {
                plot_titled(&mut columns[4], "exposure by view (stops)", height, true, |plot| {
                    for (name, points) in
                        ["red", "green", "blue"].into_iter().zip(&history.appearance)
                    {
                        plot.points(
                            egui_plot::Points::new(name, PlotPoints::Borrowed(points)).radius(2.0),
                        );
                    }
                });
            }
        });
    }

    /// Points held in all series.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.loss.points.len()
            + self.train_psnr.points.len()
            + self.eval_psnr.points.len()
            + self.splats.points.len()
            + self.memory.values().map(|s| s.points.len()).sum::<usize>()
    }
}

/// A plot under a title; a legend when it has several lines.
fn plot_titled<'a>(
    ui: &mut egui::Ui,
    title: &str,
    height: f32,
    legend: bool,
    lines: impl FnOnce(&mut egui_plot::PlotUi<'a>) + 'a,
) {
    ui.small(title);
    let mut plot = Plot::new(title).height(height - 16.0).allow_scroll(false);
    if legend {
        plot = plot.legend(Legend::default().position(egui_plot::Corner::LeftTop));
    }
    plot.show(ui, lines);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_run_stays_bounded_and_evenly_spread() {
        let mut series = Series::default();
        for step in 1..=1_000_000 {
            series.push(step, f64::from(step));
        }
        let points = series.points();
        assert!(points.len() <= MAX_POINTS, "{} points", points.len());
        assert!(points.len() >= MAX_POINTS / 2, "{} points", points.len());
        // Evenly spread: consecutive steps differ by the same stride.
        let gaps: Vec<f64> = points.windows(2).map(|w| w[1].x - w[0].x).collect();
        assert!(gaps.iter().all(|&g| (g - gaps[0]).abs() < f64::EPSILON), "uneven gaps");
        assert!(points.last().expect("points").x > 990_000.0, "the newest steps are kept");
    }

    #[test]
    fn non_finite_values_are_skipped() {
        let mut series = Series::default();
        series.push(1, f64::NAN);
        series.push(2, 1.0);
        assert_eq!(series.points().len(), 1);
        assert!((series.points()[0].y - 1.0).abs() < f64::EPSILON);
    }

    #[test]
    fn memory_and_eval_series_are_bounded() {
        let mut history = History::default();
        let snapshot = LedgerSnapshot::default();
        for step in 0..3 * MAX_POINTS as u32 {
            history.step(&StepStats {
                step,
                splats: 10,
                intersections: 40,
                refine: None,
                image_size: [64, 48],
            });
            history.metrics(&StepMetrics { step, loss: 0.1, train_psnr: 20.0 });
            history.memory(&snapshot);
            history.eval(&EvalStats {
                step,
                psnr: 20.0,
                ssim: 0.5,
                views: 1,
                compensated_psnr: None,
            });
        }
        assert!(history.len() <= (4 + Category::ALL.len()) * MAX_POINTS);
    }
}
