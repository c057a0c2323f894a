//! Compact refinement's settings ([`CompactConfig`]): the 3DGS rules with growth paced and
//! unneeded splats faded out.

use serde::{Deserialize, Serialize};

use super::{DefaultConfig, SplitRule};

/// Compact refinement: the 3DGS rules ([`DefaultConfig`]) with growth paced and useless
/// splats pushed out. A refinement leaves at most `grow_fraction` more splats than the most
/// the run has had (its peak, the initial splats included), the candidates with the highest
/// mean gradient first: what it prunes makes room, and a run pruned far below its peak (random
/// points in empty space, faded by the alpha supervision) grows back to it without waiting.
/// An opacity regulariser (the mean opacity in the loss, as in 3DGS-MCMC) lets splats that
/// nothing needs fade below `min_opacity`, where the prune takes them, while the run is at its
/// peak: there growth is held to the pace and fading makes room; below it (lego's random
/// points pruned) there is room already, and the regulariser would only dim the picture.
///
/// The regulariser does the opacity reset's work, so compact has none, nor 3DGS's prune of
/// splats large in the world: a reset clears Adam's opacity moments, after which the
/// regulariser's tiny gradient alone moves an unseen splat a full step a step, below the
/// visibility cut within ten steps and then to the prune; the world-size prune (a tenth of
/// the cameras' extent) deletes the background of a capture whose scene lies far beyond its
/// cameras. Either took several dB from every run that crossed step 3,000 (BENCHMARKS.md,
/// "The default schedule").
///
/// It splits along the longest axis ([`SplitRule::LongAxis`]): 3DGS's sampled split took
/// 10 dB from the picture at every early refinement (BENCHMARKS.md, "Splits that keep the
/// picture").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactConfig {
    /// Schedule, growth and prune thresholds (opacity resets and size prunes: off).
    pub refine: DefaultConfig,
    /// Most splats one refinement may leave above the run's peak, as a fraction of the peak.
    #[serde(with = "crate::exact")]
    pub grow_fraction: f64,
    /// Weight of the mean opacity (after the sigmoid) in the loss, while the run is at its
    /// peak.
    #[serde(with = "crate::exact")]
    pub opacity_reg: f32,
}

impl Default for CompactConfig {
    /// Measured on the shared captures (BENCHMARKS.md, "Compact refinement"): 4× the 3DGS
    /// gradient threshold keeps the splats that only chase noise from growing at 96–160 px
    /// (it falls with larger images, [`CompactConfig::grad_threshold_at`]), and 10% a
    /// refinement lets a run grow to about 4× its peak in its first 2,000 steps.
    fn default() -> Self {
        Self {
            refine: DefaultConfig {
                grad_threshold: 0.0008,
                opacity_reset_every: 0,
                max_world_scale: f32::INFINITY,
                split: SplitRule::LongAxis,
                ..DefaultConfig::default()
            },
            grow_fraction: 0.1,
            opacity_reg: 0.01,
        }
    }
}

/// The longest image side (pixels) up to which compact grows at its own gradient threshold
/// (`CompactConfig::refine.grad_threshold`, measured at 96–160 px); above it the threshold
/// falls as 1 / size to 3DGS's (0.0002, tuned for about 1,000 px) at 4× this size
/// ([`CompactConfig::grad_threshold_at`]).
pub const COMPACT_THRESHOLD_SIZE: u32 = 160;

impl CompactConfig {
    /// The gradient threshold for growth on images whose longest side is `image_size` pixels:
    /// `refine.grad_threshold` up to [`COMPACT_THRESHOLD_SIZE`], then scaled by
    /// `COMPACT_THRESHOLD_SIZE / image_size`, never below 3DGS's threshold.
    ///
    /// Why: the mean NDC gradient of a splat whose pixels disagree in sign (fine texture it is
    /// too large for, noise) falls as 1 / resolution, while a coherent error's does not. At
    /// 160 px the 4× threshold keeps splats that chase noise from growing; at full resolution
    /// it kept lego at its 20,000 initial splats (H200, 800 px: 29.63 dB at step 9,000, where
    /// 0.0004 reached 32.06 with 60k splats and 0.0002 33.75 with 187k, as 3dgs's 33.92 at
    /// 8,000; BENCHMARKS.md, "Compact's gradient threshold at full resolution").
    #[must_use]
    pub fn grad_threshold_at(&self, image_size: u32) -> f32 {
        let floor = DefaultConfig::default().grad_threshold.min(self.refine.grad_threshold);
        let scale = COMPACT_THRESHOLD_SIZE as f32 / image_size.max(1) as f32;
        (self.refine.grad_threshold * scale.min(1.0)).max(floor)
    }
}

/// The most splats a compact refinement may leave in a run whose peak is `count`: `count`
/// plus `ceil(count · fraction)`, so that even a handful of splats can grow.
pub(super) fn paced_growth(count: u64, fraction: f64) -> u64 {
    count.saturating_add((count as f64 * fraction).ceil() as u64)
}
