//! Compact refinement's settings ([`CompactConfig`]): the 3DGS rules with growth paced and
//! unneeded splats faded out.

use serde::{Deserialize, Serialize};
use splat_render::Growth;

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
///
/// It scores candidates by the absolute statistic ([`Growth::Absolute`]), one threshold at
/// every image size: 3DGS's signed one cancels over a splat's pixels the more the finer the
/// image, so its threshold had to follow the size trained at (a ladder fitted on two
/// captures), and at full resolution compact grew like 3dgs.
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
    /// The statistic growth is scored by, over `refine.grad_threshold`. In checkpoints
    /// written only when absolute: absent, as in files written before it was kept, it is the
    /// signed statistic those runs grew by (over their own threshold at every size: the size
    /// ladder they followed above 160 px is gone), and such a file writes again to its own
    /// bytes.
    #[serde(default = "signed", skip_serializing_if = "is_signed")]
    pub growth: Growth,
}

fn signed() -> Growth {
    Growth::Signed
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's `skip_serializing_if` passes a reference"
)]
fn is_signed(growth: &Growth) -> bool {
    *growth == Growth::Signed
}

impl Default for CompactConfig {
    /// Measured on the shared captures (BENCHMARKS.md, "Compact refinement" and "One growth
    /// signal"): the absolute statistic over 0.0028 passes as many of desk-penguin's splats
    /// at 160 px as the signed one over 0.0008 (4× 3DGS's threshold, which kept the splats
    /// that only chase noise from growing at 96–160 px), and 10% a refinement lets a run grow
    /// to about 4× its peak in its first 2,000 steps.
    fn default() -> Self {
        Self {
            refine: DefaultConfig {
                grad_threshold: 0.0028,
                opacity_reset_every: 0,
                max_world_scale: f32::INFINITY,
                split: SplitRule::LongAxis,
                ..DefaultConfig::default()
            },
            grow_fraction: 0.1,
            opacity_reg: 0.01,
            growth: Growth::Absolute,
        }
    }
}

/// The most splats a compact refinement may leave in a run whose peak is `count`: `count`
/// plus `ceil(count · fraction)`, so that even a handful of splats can grow.
pub(super) fn paced_growth(count: u64, fraction: f64) -> u64 {
    count.saturating_add((count as f64 * fraction).ceil() as u64)
}
