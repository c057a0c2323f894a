//! Which refinement strategy a run uses ([`Strategy`]), with the settings of each.

use serde::{Deserialize, Serialize};
use splat_render::Growth;

use super::compact::paced_growth;
use super::{CompactConfig, DefaultConfig, McmcConfig};

/// How many of the steps `1..=steps` refine on a schedule of every `every` steps after
/// `start` and before `stop` (the `refines_at` of both configs).
fn refinements_up_to(steps: u32, start: u32, stop: u32, every: u32) -> u32 {
    let last = steps.min(stop.saturating_sub(1));
    if every == 0 || last <= start { 0 } else { last / every - start / every }
}

/// How a run densifies. In checkpoints: `{"default": {...}}`, `{"mcmc": {...}}` or
/// `{"compact": {...}}`, each with every setting of its config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Strategy {
    Default(DefaultConfig),
    Mcmc(McmcConfig),
    Compact(CompactConfig),
}

impl Strategy {
    /// Whether `step` refines (the state is then rebuilt: whoever keeps bind groups of its
    /// buffers lets them go first, so that the old buffers really go group by group).
    #[must_use]
    pub fn refines_at(&self, step: u32) -> bool {
        match self {
            Self::Default(config) => config.refines_at(step),
            Self::Mcmc(config) => config.refines_at(step),
            Self::Compact(config) => config.refine.refines_at(step),
        }
    }

    /// The 3DGS rules the strategy refines by (its schedule, thresholds and resets): the
    /// default's own, compact's `refine`; none for MCMC.
    #[must_use]
    pub fn rules_3dgs(&self) -> Option<&DefaultConfig> {
        match self {
            Self::Default(config) => Some(config),
            Self::Compact(config) => Some(&config.refine),
            Self::Mcmc(_) => None,
        }
    }

    /// The statistic a backward pass adds up for the strategy's growth: compact's own, 3DGS's
    /// signed one for 3dgs (MCMC reads none).
    #[must_use]
    pub fn growth(&self) -> Growth {
        match self {
            Self::Compact(config) => config.growth,
            Self::Default(_) | Self::Mcmc(_) => Growth::Signed,
        }
    }

    /// Its name on the command line and in checkpoints' logs: `compact`, `3dgs` or `mcmc`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Default(_) => "3dgs",
            Self::Mcmc(_) => "mcmc",
            Self::Compact(_) => "compact",
        }
    }

    /// The most splats a run of `steps` steps from `initial` splats can reach, where the
    /// strategy bounds it (compact: its paced growth, from a peak that grows no faster; MCMC:
    /// its cap), never more than `max_splats`. `None` for 3DGS, which grows as far as its
    /// gradients ask (up to `max_splats`).
    #[must_use]
    pub fn most_splats(&self, initial: u32, steps: u32, max_splats: u32) -> Option<u32> {
        let (grow, refinements, cap): (&dyn Fn(u64) -> u64, u32, u32) = match self {
            Self::Default(_) => return None,
            Self::Mcmc(config) => (
                &|n| (n as f64 * (1.0 + config.grow_fraction)).floor() as u64,
                refinements_up_to(steps, config.start, config.stop, config.refine_every),
                config.cap.min(max_splats),
            ),
            Self::Compact(config) => {
                let refine = &config.refine;
                (
                    &|n| paced_growth(n, config.grow_fraction),
                    refinements_up_to(steps, refine.start, refine.stop, refine.refine_every),
                    max_splats,
                )
            }
        };
        let cap = u64::from(cap);
        let mut count = u64::from(initial).min(cap);
        for _refinement in 0..refinements {
            if count >= cap {
                break;
            }
            count = grow(count).min(cap);
        }
        Some(count as u32)
    }

    /// Weights of the regularisers `opacity_reg · mean(sigmoid(o)) + scale_reg · mean(exp(s))`
    /// the strategy adds to the loss at `step` of a run of `splats` splats whose peak is
    /// `peak_splats` (capped at the run's `max_splats`), if any. MCMC's act all run long (as
    /// gsplat's). Compact's acts while refinements prune what it fades (after them it would
    /// only dim) and the run is at its peak ([`CompactConfig`] says why).
    #[must_use]
    pub fn regularisers(&self, step: u32, splats: u32, peak_splats: u32) -> Option<[f32; 2]> {
        let weights = match self {
            Self::Mcmc(config) => [config.opacity_reg, config.scale_reg],
            Self::Compact(config) if step < config.refine.stop && splats >= peak_splats => {
                [config.opacity_reg, 0.0]
            }
            Self::Default(_) | Self::Compact(_) => return None,
        };
        let [opacity, scale] = weights;
        (opacity != 0.0 || scale != 0.0).then_some(weights)
    }
}

impl Default for Strategy {
    /// Compact: the same picture with fewer splats on the captures measured
    /// (BENCHMARKS.md, "Compact refinement").
    fn default() -> Self {
        Self::Compact(CompactConfig::default())
    }
}

impl Strategy {
    /// The strategy named `compact`, `3dgs` or `mcmc`, with its default settings.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "compact" => Ok(Self::Compact(CompactConfig::default())),
            "3dgs" => Ok(Self::Default(DefaultConfig::default())),
            "mcmc" => Ok(Self::Mcmc(McmcConfig::default())),
            "default" => Err("'default' is now named 3dgs (compact is the default)".to_owned()),
            other => Err(format!("'{other}': compact, 3dgs or mcmc")),
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
