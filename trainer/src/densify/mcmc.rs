//! The MCMC strategy's settings ([`McmcConfig`]); its moves are [`super::plan`]'s relocation
//! and the position noise of [`super::Densifier::mcmc_noise`].

use serde::{Deserialize, Serialize};

/// The MCMC strategy (Kheradmand et al. 2024, "3D Gaussian Splatting as Markov Chain Monte
/// Carlo"; gsplat's `MCMCStrategy` and `simple_trainer`'s MCMC settings). Defaults are gsplat's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McmcConfig {
    /// Most splats (gsplat's `cap_max`); the run's `max_splats` caps it further. By default
    /// none of its own (`u32::MAX`): the run's `max_splats` is the cap.
    pub cap: u32,
    pub refine_every: u32,
    /// Refine only after this step.
    pub start: u32,
    /// Refine only before this step.
    pub stop: u32,
    /// Splats at or below this opacity (after the sigmoid) are dead and relocated.
    #[serde(with = "crate::exact")]
    pub min_opacity: f32,
    /// Each refinement grows the count to `floor(N · (1 + grow_fraction))` (at most the cap).
    #[serde(with = "crate::exact")]
    pub grow_fraction: f64,
    /// Position noise scale, multiplied by the means' learning rate.
    #[serde(with = "crate::exact")]
    pub noise_lr: f32,
    /// Weight of the mean opacity (after the sigmoid) in the loss.
    #[serde(with = "crate::exact")]
    pub opacity_reg: f32,
    /// Weight of the mean scale (after the exponential) in the loss.
    #[serde(with = "crate::exact")]
    pub scale_reg: f32,
}

impl Default for McmcConfig {
    fn default() -> Self {
        Self {
            cap: u32::MAX,
            refine_every: 100,
            start: 500,
            stop: 25_000,
            min_opacity: 0.005,
            grow_fraction: 0.05,
            noise_lr: 5e5,
            opacity_reg: 0.01,
            scale_reg: 0.01,
        }
    }
}

impl McmcConfig {
    /// Whether `step` refines (gsplat: `refine_start_iter < step < refine_stop_iter` and
    /// `step % refine_every == 0`).
    #[must_use]
    pub fn refines_at(&self, step: u32) -> bool {
        step > self.start
            && step < self.stop
            && self.refine_every > 0
            && step.is_multiple_of(self.refine_every)
    }
}

/// The noise gate's steepness `k` (gsplat's `op_sigmoid(x, k=100, x0=0.995)`).
pub const NOISE_GATE_SHARPNESS: f32 = 100.0;
/// The noise gate's centre `x0`, on `1 − opacity` (gsplat, 3DGS-MCMC: fixed, not tied to
/// `min_opacity`).
pub const NOISE_GATE_CENTER: f32 = 0.995;
