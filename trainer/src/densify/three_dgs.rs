//! The 3DGS adaptive density control's settings ([`DefaultConfig`], the `3dgs` strategy) and
//! how it splits a splat ([`SplitRule`]); its moves are [`super::plan`]'s.

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::{Densifier, LONG_AXIS_OFFSET, SPLIT_CHILDREN, SPLIT_SCALE_DIVISOR};

/// The 3DGS adaptive density control (Kerbl et al. 2023, section 5 and the reference code's
/// `OptimizationParams` / `densify_and_prune`; gsplat's `DefaultStrategy`). Defaults are the
/// paper's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultConfig {
    /// Refine every this many steps (`densification_interval`).
    pub refine_every: u32,
    /// Refine only after this step (`densify_from_iter`).
    pub start: u32,
    /// Refine and reset opacities only before this step (`densify_until_iter`).
    pub stop: u32,
    /// Grow splats whose mean NDC gradient norm (statistics sum / visible count) is at least
    /// this (`densify_grad_threshold`).
    #[serde(with = "crate::exact")]
    pub grad_threshold: f32,
    /// Clone when the largest scale is ≤ this × scene extent, split when larger
    /// (`percent_dense`).
    #[serde(with = "crate::exact")]
    pub percent_dense: f32,
    /// Prune below this opacity (after the sigmoid).
    #[serde(with = "crate::exact")]
    pub min_opacity: f32,
    /// After the first opacity reset (without resets: from the start), prune splats whose
    /// largest screen radius since the last refinement exceeded this many pixels of the
    /// training images (3DGS's `size_threshold`).
    /// Off (infinite) by default: in pixels it is 8 times as strict at 1,280 px as at 160 px,
    /// and at full resolution it deleted most of a run's splats at the refinement after each
    /// reset (BENCHMARKS.md, "The default schedule"). 3DGS's own code never applied it (its
    /// statistic was cleared before the prune), and gsplat leaves it off.
    #[serde(with = "crate::exact")]
    pub max_screen_radius: f32,
    /// After the first opacity reset (without resets: from the start), prune splats whose
    /// largest scale exceeds this × scene extent (3DGS's `big_points_ws`).
    #[serde(with = "crate::exact")]
    pub max_world_scale: f32,
    /// Reset opacities every this many steps (`opacity_reset_interval`; 0: never).
    pub opacity_reset_every: u32,
    /// The opacity (after the sigmoid) a reset clamps to.
    #[serde(with = "crate::exact")]
    pub opacity_reset_value: f32,
    /// Where a split puts its two children and what it gives them. Absent in checkpoints
    /// written before the long-axis split: 3DGS's sampled split, the rule those runs were
    /// trained with, so that they resume as they would have gone on.
    #[serde(default = "SplitRule::before_it_was_kept")]
    pub split: SplitRule,
}

/// How a refinement splits a large splat into [`SPLIT_CHILDREN`] children (the parent goes).
/// In checkpoints: `"sampled"` or `"long_axis"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitRule {
    /// 3DGS's `densify_and_split`: each child's mean drawn from N(parent mean, parent
    /// covariance), every scale divided by [`SPLIT_SCALE_DIVISOR`], the parent's opacity.
    /// Two children of the parent's opacity at random places, each thinner on every axis,
    /// are not the parent: a refinement that splits the large splats of a view takes
    /// several dB from it at once (desk-penguin at 96 px, step 600: 30.9 → 20.1 dB), and
    /// the run spends the next hundred steps winning it back.
    Sampled,
    /// Along the parent's longest axis (as in Deng et al. 2024, "Efficient Density Control
    /// for 3D Gaussian Splatting"): the children at ± [`LONG_AXIS_OFFSET`] times that
    /// scale from the parent's mean, that scale divided by [`SPLIT_SCALE_DIVISOR`] and the
    /// others kept, each of opacity 1 − √(1 − o), so that the two, where they overlap, are
    /// as opaque as the parent was. Deterministic: no sample to draw.
    LongAxis,
}

impl SplitRule {
    fn before_it_was_kept() -> Self {
        Self::Sampled
    }
}

impl Default for DefaultConfig {
    fn default() -> Self {
        Self {
            refine_every: 100,
            start: 500,
            stop: 15_000,
            grad_threshold: 0.0002,
            percent_dense: 0.01,
            min_opacity: 0.005,
            max_screen_radius: f32::INFINITY,
            max_world_scale: 0.1,
            opacity_reset_every: 3_000,
            opacity_reset_value: 0.01,
            split: SplitRule::Sampled,
        }
    }
}

impl DefaultConfig {
    /// Whether `step` (1-based) refines: 3DGS's `iteration > densify_from_iter and iteration %
    /// densification_interval == 0`, inside `iteration < densify_until_iter`.
    #[must_use]
    pub fn refines_at(&self, step: u32) -> bool {
        step > self.start
            && step < self.stop
            && self.refine_every > 0
            && step.is_multiple_of(self.refine_every)
    }

    /// Whether `step` resets opacities (after the refinement of that step, as in 3DGS; applied
    /// before the next step's forward, [`Densifier::reset_scheduled_by`]).
    #[must_use]
    pub fn resets_opacity_at(&self, step: u32) -> bool {
        step > 0
            && step < self.stop
            && self.opacity_reset_every > 0
            && step.is_multiple_of(self.opacity_reset_every)
    }
}
