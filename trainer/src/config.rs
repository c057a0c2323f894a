//! The settings of a training run ([`TrainConfig`]), in one home: each field's default, its
//! command-line option and help, and its form in checkpoints are written once, on the field.
//! The command line flattens these types into its commands (`clap::Args`), the window edits
//! them, checkpoints store them (serde, every float exact: [`crate::exact`]), and benchmarks,
//! the self-test and tests start from their `Default`, which is what the command line gives
//! when no option is given.
//!
//! A checkpoint written before a field existed reads that field as what such runs trained
//! with, which is not always today's default: those fields name their own `serde(default)`.

use clap::Parser;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use splat_render::ShPrecision;

use crate::appearance::Compensation;
use crate::densify::Strategy;
use crate::loss::LossWeights;
use crate::optim::ParamGroup;

/// Everything that decides a run.
#[derive(Clone, Debug, PartialEq, Parser, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Training")]
pub struct TrainConfig {
    /// Steps of the run (with --resume: in all).
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub steps: u32,
    /// Largest SH degree (0 to 3); the active degree rises by one every
    /// --sh-degree-interval steps.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=3))]
    pub sh_degree: u32,
    /// Steps between one SH degree and the next.
    #[arg(long, default_value_t = 1000)]
    pub sh_degree_interval: u32,
    /// How SH bands 1-3 and their optimizer state are stored on the GPU: f32, or f16 (252
    /// fewer bytes a splat at SH degree 3).
    #[arg(long, default_value_t = ShPrecision::F32, value_parser = parse_sh_precision)]
    #[serde(default, with = "sh_precision")]
    pub sh_precision: ShPrecision,
    /// How splats grow and go: compact (3DGS's rules, growth paced and unneeded splats faded
    /// out: a fraction of the splats for a picture as good on most captures), 3dgs (the
    /// original) or mcmc.
    #[arg(long, default_value_t = Strategy::default(), value_parser = Strategy::parse)]
    pub strategy: Strategy,
    /// Most splats the run may have (auto or a count): compact grows toward it, no strategy
    /// passes it. auto: for compact 7.5 × √(the train views' pixels), half the count Brush 1.0
    /// reached on a capture at full resolution, or 1.3 × the capture's sparse points where
    /// that is more; for 3dgs and mcmc 3,000,000. Never fewer than the initial points. Fixed
    /// when the run starts, and lowered where the memory budget cannot hold it.
    #[arg(long, default_value_t = SplatBudget::Auto, value_parser = SplatBudget::parse)]
    #[serde(with = "splat_budget")]
    pub max_splats: SplatBudget,
    /// Evaluate on the eval views every N steps (0: only at the end).
    #[arg(long, default_value_t = 1000)]
    pub eval_every: u32,
    /// Seed of every random choice of the run (the views' order, splits, backgrounds, noise):
    /// the same seed and settings train the same bits.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Linear RGB behind the splats: the colour the dataset's transparent pixels were
    /// composited over (`LoadOptions::background`), which the run takes from its dataset when
    /// it starts.
    #[arg(skip)]
    #[serde(with = "crate::exact")]
    pub background: [f32; 3],
    #[command(flatten)]
    pub learning_rates: LearningRates,
    #[command(flatten)]
    pub loss_weights: LossWeights,
    /// How transparent images (RGBA, alpha composited) are supervised: random-background
    /// (each step over a random colour), alpha-loss[=WEIGHT] (an L1 loss on the rendered
    /// alpha, weight 1 by default) or composite (not at all).
    #[arg(long, default_value_t = Transparency::default(), value_parser = Transparency::parse)]
    #[serde(default = "Transparency::before_it_was_kept")]
    pub transparency: Transparency,
    /// Coarse to fine (on or off): the first tenth of the steps on images shrunk 4 times, the
    /// second tenth shrunk twice, the rest at full size. Off by default: measured, it saved
    /// 5-9% of a 2,000-step run's time and cost 0.17-0.31 dB.
    #[arg(long, default_value_t = Progressive::Off, value_parser = Progressive::parse)]
    #[serde(default, with = "progressive_stages")]
    pub progressive: Progressive,
    /// Per-view appearance compensation (auto, on or off): each train view's render is seen
    /// through its own learned colour transform (exposure, white balance) before the loss,
    /// for captures whose exposure or colour changes from photo to photo; the splats, the
    /// exports and the evaluation stay untransformed. Each view's transform starts from its
    /// photo's EXIF exposure where every photo has one. auto: on where the train photos' EXIF
    /// exposures span a third of a stop or more, or else where the train views' colours
    /// drift against the sparse points' (a video's frames have no EXIF).
    #[arg(long, default_value_t = Compensation::Auto, value_parser = Compensation::parse)]
    #[serde(
        default = "Compensation::before_it_was_kept",
        skip_serializing_if = "Compensation::is_off",
        with = "compensation_on"
    )]
    pub appearance: Compensation,
}

impl Default for TrainConfig {
    /// What the command line gives when no option is given.
    fn default() -> Self {
        Self::try_parse_from(["defaults"]).expect("the defaults parse")
    }
}

/// The 3DGS learning rates (gaussian-splatting's `OptimizationParams`).
#[derive(Clone, Copy, Debug, PartialEq, Parser, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearningRates {
    /// Position learning rate at step 0, times the scene extent; exponential from it to
    /// --lr-means-final at --lr-means-decay-steps, constant after.
    #[arg(long = "lr-means-initial", default_value_t = 1.6e-4)]
    #[serde(with = "crate::exact")]
    pub means_initial: f32,
    /// Position learning rate from --lr-means-decay-steps on, times the scene extent.
    #[arg(long = "lr-means-final", default_value_t = 1.6e-6)]
    #[serde(with = "crate::exact")]
    pub means_final: f32,
    /// Steps over which the position learning rate falls to its final value.
    #[arg(long = "lr-means-decay-steps", default_value_t = 30_000)]
    pub means_decay_steps: u32,
    /// Learning rate of the base colour (SH band 0).
    #[arg(long = "lr-sh-dc", default_value_t = 2.5e-3)]
    #[serde(with = "crate::exact")]
    pub sh_dc: f32,
    /// SH bands 1-3: a twentieth of band 0's.
    #[arg(long = "lr-sh-rest", default_value_t = 2.5e-3 / 20.0)]
    #[serde(with = "crate::exact")]
    pub sh_rest: f32,
    /// Learning rate of the opacities (before the sigmoid).
    #[arg(long = "lr-opacities", default_value_t = 2.5e-2)]
    #[serde(with = "crate::exact")]
    pub opacities: f32,
    /// Learning rate of the scales (their logarithms).
    #[arg(long = "lr-log-scales", default_value_t = 5e-3)]
    #[serde(with = "crate::exact")]
    pub log_scales: f32,
    /// Learning rate of the rotations (quaternions).
    #[arg(long = "lr-quats", default_value_t = 1e-3)]
    #[serde(with = "crate::exact")]
    pub quats: f32,
}

impl Default for LearningRates {
    fn default() -> Self {
        Self::try_parse_from(["defaults"]).expect("the defaults parse")
    }
}

impl LearningRates {
    /// The learning rate of `group` at `step` (0-based) for a scene of `extent`.
    #[must_use]
    pub fn at(&self, group: ParamGroup, step: u32, extent: f32) -> f32 {
        match group {
            ParamGroup::Means => {
                let t = (step as f32 / self.means_decay_steps.max(1) as f32).min(1.0);
                let log_lr = (1.0 - t) * self.means_initial.ln() + t * self.means_final.ln();
                log_lr.exp() * extent
            }
            ParamGroup::ShDc => self.sh_dc,
            ParamGroup::ShRest => self.sh_rest,
            ParamGroup::Opacities => self.opacities,
            ParamGroup::LogScales => self.log_scales,
            ParamGroup::Quats => self.quats,
        }
    }
}

/// How a run uses the transparency of RGBA images ([`crate::dataset::View::alpha`]: alpha
/// composited over the background at load). Runs on datasets without transparency ignore it.
///
/// Without supervision, a splat the colour of the background is as good as no splat in every
/// training view, and an object capture's empty space fills with a haze that shows in front
/// of the object from any other viewpoint.
///
/// In checkpoints: `"composite"`, `"random_background"` or `{"alpha_loss": "0.1"}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Transparency {
    /// Train on the images as composited at load; the alpha is not supervised.
    Composite,
    /// Each step renders over a random colour (from the seed and the step) and puts the
    /// image over the same colour, so only what is transparent in the image may show the
    /// background.
    RandomBackground,
    /// The images as composited at load, plus this weight times the mean absolute error of
    /// the rendered alpha against the image's.
    AlphaLoss(#[serde(with = "crate::exact")] f32),
}

impl Default for Transparency {
    /// Measured on lego (BENCHMARKS.md, "Object captures").
    fn default() -> Self {
        Self::RandomBackground
    }
}

/// The weight of [`Transparency::AlphaLoss`] where none is given: the colour L1's order.
pub const DEFAULT_ALPHA_LOSS_WEIGHT: f32 = 1.0;

impl Transparency {
    /// `random-background`, `alpha-loss`, `alpha-loss=WEIGHT` or `composite`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.split_once('=') {
            None if text == "random-background" => Ok(Self::RandomBackground),
            None if text == "composite" => Ok(Self::Composite),
            None if text == "alpha-loss" => Ok(Self::AlphaLoss(DEFAULT_ALPHA_LOSS_WEIGHT)),
            Some(("alpha-loss", weight)) => match weight.parse::<f32>() {
                Ok(w) if w.is_finite() && w >= 0.0 => Ok(Self::AlphaLoss(w)),
                _ => Err(format!("'{weight}': the alpha loss's weight is a number ≥ 0")),
            },
            _ => Err(format!(
                "'{text}': random-background, alpha-loss, alpha-loss=WEIGHT or composite"
            )),
        }
    }

    /// What checkpoints written before the setting was kept trained with.
    fn before_it_was_kept() -> Self {
        Self::Composite
    }
}

impl std::fmt::Display for Transparency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Composite => f.write_str("composite"),
            Self::RandomBackground => f.write_str("random-background"),
            Self::AlphaLoss(weight) => write!(f, "alpha-loss={weight}"),
        }
    }
}

/// Coarse-to-fine training: the steps before `half_from` train on images shrunk four times
/// (each pixel the mean of 4 × 4), those before `full_from` on images shrunk twice, the rest at
/// full size. Evaluation is always at full size. A step on a sixteenth of the pixels costs a
/// fraction of one at full size, and the first steps only fit the coarse picture anyway
/// (splatfacto's and msplat's default, `DashGaussian`'s idea). Measured here it saved 5-9% of
/// a 2,000-step run and cost 0.17-0.31 dB (BENCHMARKS.md, "Progressive resolution"): off by
/// default.
///
/// `On` is fixed to step numbers when the run starts ([`Progressive::fixed`]), and kept so in
/// its checkpoints: a resumed run is in the stage it left, whatever its planned steps become.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Progressive {
    /// Every step at full size.
    #[default]
    Off,
    /// The stages of [`Progressive::for_steps`] for the run's planned steps.
    On,
    /// Stages at fixed steps.
    Stages { half_from: u32, full_from: u32 },
}

impl Progressive {
    /// The stages for a run of `steps` (`--progressive on`): its first tenth at a quarter of
    /// the size, its second tenth at half, as splatfacto's 3,000 steps a level of 30,000.
    #[must_use]
    pub fn for_steps(steps: u32) -> Self {
        Self::Stages { half_from: steps / 10, full_from: steps / 5 }
    }

    /// `On` fixed to the stages of a run of `steps`; the others as they are.
    #[must_use]
    pub fn fixed(self, steps: u32) -> Self {
        match self {
            Self::On => Self::for_steps(steps),
            other => other,
        }
    }

    /// By how much the images are shrunk at 0-based step `step`: 4, 2 or 1 (`On` is fixed
    /// when the run starts: until then, 1).
    #[must_use]
    pub fn divisor(&self, step: u32) -> u32 {
        match *self {
            Self::Stages { half_from, .. } if step < half_from => 4,
            Self::Stages { full_from, .. } if step < full_from => 2,
            _ => 1,
        }
    }

    /// `on` or `off`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            _ => Err(format!("'{text}': on or off")),
        }
    }
}

impl std::fmt::Display for Progressive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::On => f.write_str("on"),
            Self::Stages { half_from, full_from } => {
                write!(f, "at half size from step {half_from}, full size from {full_from}")
            }
        }
    }
}

/// The most splats a run may have ([`TrainConfig::max_splats`]): `auto`, fixed to a count when
/// the run starts ([`SplatBudget::fixed`]), or a count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplatBudget {
    /// [`SplatBudget::auto_count`] for the run's strategy and images.
    #[default]
    Auto,
    Count(u32),
}

/// Auto's splats per root pixel for compact: half of Brush 1.0's own count on desk-penguin at
/// 1,600 px (H200, 2026-11-27: 91,636 splats over 25 train views of 1,600 × 898, 15.3 a root
/// pixel). The square root: a finer image adds edges, whose length in pixels grows with the
/// image's side, not its area, and each view shows again much of what the others showed.
pub const AUTO_SPLATS_PER_ROOT_PIXEL: f64 = 7.5;

/// Auto's room above a capture's own points for compact: at least this many splats a sparse
/// point (COLMAP's `points3D` or an `init.ply` beside the dataset). Where the points outnumber
/// what the pixels give, a budget at the points leaves a run nothing to refine them with, only
/// to keep them: desk-penguin at 160 px (7,562 points) held there was 34.85 dB at step 3,000,
/// under Brush 1.0's 35.16; with this room it reached 35.23 (BENCHMARKS.md, "Compact beside
/// Brush 1.0 and 3dgs").
pub const AUTO_ROOM_ABOVE_POINTS: f64 = 1.3;

/// Auto's count for 3dgs and mcmc: the cap every run had before the budget, which their own
/// rules grow under.
pub const AUTO_SPLATS_UNPACED: u32 = 3_000_000;

impl SplatBudget {
    /// The count, or for `Auto` (not yet fixed by a run) `u32::MAX`: no cap.
    #[must_use]
    pub fn count(self) -> u32 {
        match self {
            Self::Auto => u32::MAX,
            Self::Count(n) => n,
        }
    }

    /// What `Auto` gives a run of `strategy` on `dataset` (the train views at the size they
    /// were loaded), before the floor of its initial points: for compact the pixels' count
    /// ([`SplatBudget::for_pixels`]) or [`AUTO_ROOM_ABOVE_POINTS`] × the dataset's own points,
    /// whichever is more.
    #[must_use]
    pub fn auto_count(strategy: &Strategy, dataset: &crate::dataset::Dataset) -> u32 {
        match strategy {
            Strategy::Compact(_) => {
                let pixels = dataset
                    .train
                    .iter()
                    .map(|v| u64::from(v.camera.width) * u64::from(v.camera.height))
                    .sum();
                let points = dataset.init_points.as_ref().map_or(0, splat_formats::PointCloud::len);
                Self::for_pixels(pixels).max(Self::above_points(points))
            }
            Strategy::Default(_) | Strategy::Mcmc(_) => AUTO_SPLATS_UNPACED,
        }
    }

    /// Auto's count for compact on train views of `pixels` in all:
    /// [`AUTO_SPLATS_PER_ROOT_PIXEL`] × √pixels, at least 1.
    #[must_use]
    pub fn for_pixels(pixels: u64) -> u32 {
        let count = AUTO_SPLATS_PER_ROOT_PIXEL * (pixels as f64).sqrt();
        count.round().clamp(1.0, f64::from(u32::MAX)) as u32
    }

    /// Auto's room above `points` sparse points: [`AUTO_ROOM_ABOVE_POINTS`] × them, rounded up.
    #[must_use]
    pub fn above_points(points: usize) -> u32 {
        (AUTO_ROOM_ABOVE_POINTS * points as f64).ceil().min(f64::from(u32::MAX)) as u32
    }

    /// `Auto` fixed for a run of `strategy` on `dataset` from `initial` splats: its count,
    /// never fewer than the initial splats (a run keeps what it starts from); a count as it is.
    #[must_use]
    pub fn fixed(
        self,
        strategy: &Strategy,
        dataset: &crate::dataset::Dataset,
        initial: u32,
    ) -> Self {
        match self {
            Self::Auto => Self::Count(Self::auto_count(strategy, dataset).max(initial)),
            count @ Self::Count(_) => count,
        }
    }

    /// `auto` or a count of at least 1.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "auto" => Ok(Self::Auto),
            count => match count.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Self::Count(n)),
                _ => Err(format!("'{text}': auto or a count of splats (at least 1)")),
            },
        }
    }
}

impl std::fmt::Display for SplatBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Count(n) => write!(f, "{n}"),
        }
    }
}

/// `f32` or `f16`.
pub fn parse_sh_precision(text: &str) -> Result<ShPrecision, String> {
    ShPrecision::from_name(text.trim()).ok_or_else(|| format!("'{text}': f32 or f16"))
}

/// [`ShPrecision`] in checkpoints: `"f32"` or `"f16"`; absent in files written before 16-bit
/// SH storage existed (f32).
mod sh_precision {
    use super::{Deserialize, Deserializer, Serializer, ShPrecision, parse_sh_precision};

    #[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's `with` passes a reference")]
    pub fn serialize<S: Serializer>(value: &ShPrecision, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(value.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ShPrecision, D::Error> {
        let text = String::deserialize(d)?;
        parse_sh_precision(&text)
            .map_err(|_| serde::de::Error::unknown_variant(&text, &["f32", "f16"]))
    }
}

/// [`Progressive`] in checkpoints: its stages' steps `[half_from, full_from]`, `[0, 0]` for off
/// (the form of files written before the setting existed). A run fixes `On` when it starts, so
/// only a setting that has not started a run writes `"on"`.
mod progressive_stages {
    use super::{Deserialize, Deserializer, Progressive, Serialize, Serializer};

    pub fn serialize<S: Serializer>(value: &Progressive, s: S) -> Result<S::Ok, S::Error> {
        match *value {
            Progressive::Off => [0_u32, 0].serialize(s),
            Progressive::Stages { half_from, full_from } => [half_from, full_from].serialize(s),
            Progressive::On => s.serialize_str("on"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Progressive, D::Error> {
        Ok(match <[u32; 2]>::deserialize(d)? {
            [0, 0] => Progressive::Off,
            [half_from, full_from] => Progressive::Stages { half_from, full_from },
        })
    }
}

/// [`SplatBudget`] in checkpoints: the count, as every file written before `auto` has it. A run
/// fixes `Auto` when it starts, so only a setting that has not started a run writes `"auto"`.
mod splat_budget {
    use super::{Deserialize, Deserializer, Serialize, Serializer, SplatBudget};

    #[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's `with` passes a reference")]
    pub fn serialize<S: Serializer>(value: &SplatBudget, s: S) -> Result<S::Ok, S::Error> {
        match value {
            SplatBudget::Auto => s.serialize_str("auto"),
            SplatBudget::Count(n) => n.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SplatBudget, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Count(u32),
            Word(String),
        }
        match Written::deserialize(d)? {
            Written::Count(n) => Ok(SplatBudget::Count(n)),
            Written::Word(word) => SplatBudget::parse(&word).map_err(serde::de::Error::custom),
        }
    }
}

/// [`Compensation`] in checkpoints: `true`, written only when on (the file then ends with the
/// `appearance` section); absent reads as off, what files written before it trained with. A
/// run decides `Auto` when it starts, so only a setting that has not started a run writes
/// `"auto"`.
mod compensation_on {
    use super::{Compensation, Deserialize, Deserializer, Serializer};

    #[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's `with` passes a reference")]
    pub fn serialize<S: Serializer>(value: &Compensation, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Compensation::On => s.serialize_bool(true),
            Compensation::Off => s.serialize_bool(false),
            Compensation::Auto => s.serialize_str("auto"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Compensation, D::Error> {
        Ok(if bool::deserialize(d)? { Compensation::On } else { Compensation::Off })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progressive_stages_switch_at_their_steps() {
        let p = Progressive::for_steps(30_000);
        assert_eq!(p, Progressive::Stages { half_from: 3_000, full_from: 6_000 });
        let divisors: Vec<u32> =
            [0, 2_999, 3_000, 5_999, 6_000, 29_999].map(|s| p.divisor(s)).into();
        assert_eq!(divisors, [4, 4, 2, 2, 1, 1]);
        assert!((0..100).all(|s| Progressive::Off.divisor(s) == 1));
        assert_eq!(Progressive::On.fixed(30_000), p);
        assert_eq!(Progressive::Off.fixed(30_000), Progressive::Off);
    }

    /// The defaults are what the paper's code and our measurements chose (the values the
    /// hand-written defaults had before the command line held them).
    #[test]
    fn the_defaults_are_the_measured_ones() {
        let config = TrainConfig::default();
        assert_eq!(config.steps, 30_000);
        assert_eq!((config.sh_degree, config.sh_degree_interval), (3, 1000));
        assert_eq!(config.strategy, Strategy::default());
        assert_eq!(config.max_splats, SplatBudget::Auto);
        assert_eq!(config.transparency, Transparency::RandomBackground);
        assert_eq!(config.progressive, Progressive::Off);
        assert_eq!(config.appearance, Compensation::Auto);
        let rates = LearningRates::default();
        let bits = |values: [f32; 7]| values.map(f32::to_bits);
        assert_eq!(
            bits([
                rates.means_initial,
                rates.means_final,
                rates.sh_dc,
                rates.sh_rest,
                rates.opacities,
                rates.log_scales,
                rates.quats
            ]),
            bits([1.6e-4, 1.6e-6, 2.5e-3, 2.5e-3 / 20.0, 2.5e-2, 5e-3, 1e-3])
        );
        assert_eq!(rates.means_decay_steps, 30_000);
        let loss = config.loss_weights;
        assert_eq!([loss.l1, loss.ssim].map(f32::to_bits), [0.8_f32, 0.2].map(f32::to_bits));
    }

    /// Compact's auto budget on desk-penguin's 25 train views (16:9): 4,500 at 160 px, twice
    /// that at twice the side, 45,000 at 1,600 px; the others' is the old cap.
    #[test]
    fn an_auto_budget_follows_the_root_of_the_pixels() {
        let views = |w: u64, h: u64| 25 * w * h;
        assert_eq!(SplatBudget::for_pixels(views(160, 90)), 4_500);
        assert_eq!(SplatBudget::for_pixels(views(320, 180)), 9_000);
        assert_eq!(SplatBudget::for_pixels(views(1_600, 900)), 45_000);
        assert_eq!(SplatBudget::for_pixels(0), 1);
        // Its 7,562 sparse points outnumber 160 px's 4,500: room above them.
        assert_eq!(SplatBudget::above_points(7_562), 9_831);
        assert_eq!(SplatBudget::above_points(0), 0);
        assert_eq!(SplatBudget::Count(7).count(), 7);
        assert_eq!(SplatBudget::Auto.count(), u32::MAX, "not fixed: no cap");
    }

    #[test]
    fn a_splat_budget_is_auto_or_a_count() {
        assert_eq!(SplatBudget::parse("auto"), Ok(SplatBudget::Auto));
        assert_eq!(SplatBudget::parse("9000"), Ok(SplatBudget::Count(9_000)));
        for bad in ["0", "-3", "many", ""] {
            let error = SplatBudget::parse(bad).expect_err(bad);
            assert!(error.contains("auto or a count"), "{error}");
        }
        let parsed = |args: &[&str]| TrainConfig::try_parse_from(args).map(|c| c.max_splats);
        assert_eq!(parsed(&["train"]).ok(), Some(SplatBudget::Auto));
        assert_eq!(parsed(&["train", "--max-splats", "auto"]).ok(), Some(SplatBudget::Auto));
        assert_eq!(parsed(&["train", "--max-splats", "50"]).ok(), Some(SplatBudget::Count(50)));
        // In checkpoints a count is a number, as every earlier file has it.
        let written = |budget| {
            let config = TrainConfig { max_splats: budget, ..TrainConfig::default() };
            serde_json::to_value(&config).expect("serialise")["max_splats"].clone()
        };
        assert_eq!(written(SplatBudget::Count(50)), serde_json::json!(50));
        assert_eq!(written(SplatBudget::Auto), serde_json::json!("auto"));
        for budget in [SplatBudget::Count(50), SplatBudget::Auto] {
            let appearance = Compensation::Off;
            let config = TrainConfig { max_splats: budget, appearance, ..TrainConfig::default() };
            let json = serde_json::to_string(&config).expect("serialise");
            let back: TrainConfig = serde_json::from_str(&json).expect("read back");
            assert_eq!(back.max_splats, budget);
        }
    }

    #[test]
    fn options_reach_their_fields() {
        let config = TrainConfig::try_parse_from([
            "train",
            "--strategy",
            "mcmc",
            "--transparency",
            "alpha-loss=0.5",
            "--progressive",
            "on",
            "--appearance",
            "off",
            "--lr-means-initial",
            "0.0003",
            "--sh-precision",
            "f16",
            "--ssim-weight",
            "0.3",
        ])
        .expect("parses");
        assert_eq!(config.strategy.name(), "mcmc");
        assert_eq!(config.transparency, Transparency::AlphaLoss(0.5));
        assert_eq!(config.progressive, Progressive::On);
        assert_eq!(config.appearance, Compensation::Off);
        assert_eq!(config.learning_rates.means_initial.to_bits(), 0.0003_f32.to_bits());
        assert_eq!(config.sh_precision, ShPrecision::F16);
        assert_eq!(config.loss_weights.ssim.to_bits(), 0.3_f32.to_bits());
        let error =
            TrainConfig::try_parse_from(["train", "--strategy", "default"]).expect_err("renamed");
        assert!(error.to_string().contains("now named 3dgs"), "{error}");
        assert!(TrainConfig::try_parse_from(["train", "--max-splats", "0"]).is_err());
    }
}
