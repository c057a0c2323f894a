//! The CPU half of densification: from the few values read back (opacities, log-scales and
//! the densification statistics), decide what every output splat is. The result is a
//! [`Plan`]: for each output splat, the index of the old splat it comes from, what to do with
//! it (flags) and any new values. The GPU half (gather.wgsl, split.wgsl) then moves the data.
//!
//! Everything here is deterministic for a seed: the only randomness is [`SplitMix64`], seeded
//! from the run's seed and the step.

use bytemuck::{Pod, Zeroable};

use splat_formats::random::SplitMix64;

use super::{DefaultConfig, McmcConfig, RefineStats, SplitRule};

/// Output flag: Adam's moments of this output start at zero (a new splat, or one whose
/// parameters were replaced). Keep in sync with plan.wgsl.
pub(crate) const FLAG_ZERO_MOMENTS: u32 = 1;
/// Output flag: the opacity logit is [`PlanEntry::opacity`], not the source's. Keep in sync
/// with plan.wgsl.
pub(crate) const FLAG_SET_OPACITY: u32 = 2;
/// Output flag: the log-scales are [`PlanEntry::log_scale`], not the source's. Keep in sync
/// with plan.wgsl.
pub(crate) const FLAG_SET_LOG_SCALE: u32 = 4;
/// Output flag: a 3DGS split child; its mean is the source's plus a sample of
/// N(0, source covariance) drawn from [`PlanEntry::seed`]. Keep in sync with plan.wgsl.
pub(crate) const FLAG_SPLIT: u32 = 8;
/// Output flag, with [`FLAG_SPLIT`]: a [`SplitRule::LongAxis`] child; its mean is the
/// source's plus ± [`LONG_AXIS_OFFSET`] times the source's scale along its axis `seed >> 1`,
/// + for an even `seed`, − for an odd one. Keep in sync with plan.wgsl.
pub(crate) const FLAG_LONG_AXIS: u32 = 16;

/// 3DGS splits a splat into this many children (`densify_and_split`, `N=2`).
pub const SPLIT_CHILDREN: usize = 2;
/// 3DGS divides a split child's scale by `0.8 · N` = 1.6 (`densify_and_split`).
pub const SPLIT_SCALE_DIVISOR: f32 = 1.6;
/// A [`SplitRule::LongAxis`] child lies this many of the parent's largest scale from the
/// parent's mean, along that axis. Measured (BENCHMARKS.md, "Splits that keep the picture"):
/// at 0.5 a split keeps more of the picture than at 0.78 (the offset at which the two
/// children have the parent's variance along the axis) and trains to a better one than at
/// 0.3. Keep in sync with split.wgsl.
pub const LONG_AXIS_OFFSET: f32 = 0.5;
/// Most copies the MCMC relocation formula distinguishes (gsplat's `n_max = 51`); more
/// copies of one splat are treated as this many.
pub const RELOCATION_MAX_COPIES: u32 = 51;

/// One output splat. Keep in sync with `PlanEntry` in plan.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub(crate) struct PlanEntry {
    /// Index of the old splat this one is gathered from.
    pub source: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// A sampled split child's random seed, or a long-axis child's axis and side
    /// ([`FLAG_LONG_AXIS`]).
    pub seed: u32,
    /// New opacity logit, with [`FLAG_SET_OPACITY`].
    pub opacity: f32,
    /// New log-scales, with [`FLAG_SET_LOG_SCALE`].
    pub log_scale: [f32; 3],
    pub _pad: u32,
}
const _: () = assert!(size_of::<PlanEntry>() == 32);

impl PlanEntry {
    /// Old splat `source`, unchanged, moments kept.
    fn keep(source: usize) -> Self {
        Self {
            source: source as u32,
            flags: 0,
            seed: 0,
            opacity: 0.0,
            log_scale: [0.0; 3],
            _pad: 0,
        }
    }
}

/// What a refinement does: the output splats in order, and the counts for the log.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    pub entries: Vec<PlanEntry>,
    pub stats: RefineStats,
}

impl Plan {
    /// True if the output is the input unchanged (only the statistics need clearing).
    pub fn is_identity(&self, old_count: usize) -> bool {
        self.entries.len() == old_count
            && self.entries.iter().enumerate().all(|(i, e)| e.source as usize == i && e.flags == 0)
    }

    /// Whether any output is a split child (the split kernel then runs).
    pub fn has_splits(&self) -> bool {
        self.entries.iter().any(|e| e.flags & FLAG_SPLIT != 0)
    }
}

/// What the decisions read back from the GPU, per old splat.
#[derive(Clone, Debug, Default)]
pub(crate) struct Readback {
    /// Opacity logits. `[N]`
    pub opacity_logits: Vec<f32>,
    /// Log-scales. `[N, 3]`
    pub log_scales: Vec<f32>,
    /// Densification statistics `[N, 3]` (NDC gradient norm sum, visible count, largest
    /// radius in pixels); empty for MCMC, which does not use them.
    pub densify: Vec<f32>,
}

impl Readback {
    fn len(&self) -> usize {
        self.opacity_logits.len()
    }

    fn log_scale(&self, i: usize) -> [f32; 3] {
        [self.log_scales[3 * i], self.log_scales[3 * i + 1], self.log_scales[3 * i + 2]]
    }
}

pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

pub(crate) fn logit(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

/// Largest of the three log-scales (the log of the largest scale).
fn max_log_scale(log_scale: [f32; 3]) -> f32 {
    log_scale[0].max(log_scale[1]).max(log_scale[2])
}

/// The axis of the largest log-scale (the first of equal ones).
fn longest_axis(log_scale: [f32; 3]) -> usize {
    (1..3).fold(0, |k, j| if log_scale[j] > log_scale[k] { j } else { k })
}

/// A split child's opacity logit and log-scales under `rule`, from its parent's.
fn split_child(rule: SplitRule, opacity_logit: f32, log_scale: [f32; 3]) -> (f32, [f32; 3]) {
    let ln_divisor = SPLIT_SCALE_DIVISOR.ln();
    match rule {
        SplitRule::Sampled => (opacity_logit, log_scale.map(|s| s - ln_divisor)),
        SplitRule::LongAxis => {
            let mut child = log_scale;
            child[longest_axis(log_scale)] -= ln_divisor;
            // 1 − √(1 − o) with 1 − o = sigmoid(−x): in logits, without the cancellation
            // of 1 − o near o = 1; kept above zero, so that a saturated parent (x past 88,
            // where sigmoid(−x) underflows) gets a finite logit.
            let transparency = sigmoid(-opacity_logit).sqrt().max(f32::MIN_POSITIVE);
            (logit_of_transparency(transparency), child)
        }
    }
}

/// The logit of the opacity `1 − t`, for a transparency `t` in (0, 1].
fn logit_of_transparency(t: f32) -> f32 {
    ((1.0 - t) / t).ln()
}

/// What the default strategy does to one old splat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Growth {
    None,
    Clone,
    Split,
}

/// A splat the default strategy would grow, and by how many splats the output grows if it
/// does.
struct Candidate {
    index: usize,
    grad: f32,
    growth: Growth,
    delta: usize,
}

/// The 3DGS adaptive density control (Kerbl et al. 2023, section 5; `densify_and_prune` in
/// graphdeco-inria/gaussian-splatting), in one pass:
///
/// - grow where the mean NDC gradient (`sum / visible count`) is ≥ `grad_threshold`:
///   **clone** a splat whose largest scale is ≤ `percent_dense · scene_extent` (the copy is
///   identical, the original stays), **split** a larger one into [`SPLIT_CHILDREN`] children
///   placed and sized by `config.split` ([`SplitRule`]; same rotation and SH; the parent is
///   removed);
/// - then **prune** what has opacity < `min_opacity` and, once the first opacity reset has
///   passed (step > `opacity_reset_every`; from the start without resets), what is larger
///   than `max_world_scale · scene_extent` or whose largest screen radius exceeded
///   `max_screen_radius` pixels. The prune applies to clones and split children too, as in
///   3DGS where it runs after growth; split children have no measured radius, so only their
///   world size counts.
///
/// Growth is capped so the output has at most `cap` splats: when the candidates do
/// not all fit, the ones with the highest gradient go first (ties: lower index). A splat
/// with a non-finite opacity is pruned; a non-finite gradient counts as zero (3DGS zeroes
/// NaN gradients).
///
/// Outputs, in order: the surviving originals (index order, moments kept), the clones
/// (moments zero), the split children (moments zero) — the order of 3DGS's concatenation.
pub(crate) fn plan_default(
    config: &DefaultConfig,
    step: u32,
    scene_extent: f32,
    cap: usize,
    old: &Readback,
    rng: &mut SplitMix64,
) -> Plan {
    let n = old.len();
    let size_rules = step > config.opacity_reset_every;
    let max_world_scale = config.max_world_scale * scene_extent;
    let pruned = |logit: f32, max_scale: f32, radius: Option<f32>| {
        let opacity = sigmoid(logit);
        let faint = opacity.is_nan() || opacity < config.min_opacity;
        let big = size_rules
            && (max_scale > max_world_scale
                || radius.is_some_and(|r| r > config.max_screen_radius));
        faint || big
    };
    let dense_scale = config.percent_dense * scene_extent;

    let mut survives = vec![false; n];
    let children = |i: usize| split_child(config.split, old.opacity_logits[i], old.log_scale(i));
    let mut candidates = Vec::new();
    for (i, survivor) in survives.iter_mut().enumerate() {
        let logit = old.opacity_logits[i];
        let max_log = max_log_scale(old.log_scale(i));
        let max_scale = max_log.exp();
        let [grad_sum, visible, radius] =
            [old.densify[3 * i], old.densify[3 * i + 1], old.densify[3 * i + 2]];
        *survivor = !pruned(logit, max_scale, Some(radius));
        let grad = if visible > 0.0 { grad_sum / visible } else { 0.0 };
        let grad = if grad.is_finite() { grad } else { 0.0 };
        if grad < config.grad_threshold {
            continue;
        }
        if max_scale <= dense_scale {
            // The clone is identical, so it survives the prune exactly when the original does.
            if *survivor {
                candidates.push(Candidate { index: i, grad, growth: Growth::Clone, delta: 1 });
            }
        } else if let (child_logit, child_log_scale) = children(i)
            && !pruned(child_logit, max_log_scale(child_log_scale).exp(), None)
        {
            let delta = SPLIT_CHILDREN - usize::from(*survivor);
            candidates.push(Candidate { index: i, grad, growth: Growth::Split, delta });
        }
        // Children that would be pruned at once are not made (the parent would be pruned too:
        // same opacity, larger scale).
    }

    let base = survives.iter().filter(|&&s| s).count();
    let mut growth = vec![Growth::None; n];
    if base + candidates.iter().map(|c| c.delta).sum::<usize>() <= cap {
        for c in &candidates {
            growth[c.index] = c.growth;
        }
    } else {
        candidates.sort_by(|a, b| b.grad.total_cmp(&a.grad).then(a.index.cmp(&b.index)));
        let mut total = base;
        for c in &candidates {
            if total + c.delta <= cap {
                total += c.delta;
                growth[c.index] = c.growth;
            }
        }
    }

    let mut entries: Vec<PlanEntry> = (0..n)
        .filter(|&i| survives[i] && growth[i] != Growth::Split)
        .map(PlanEntry::keep)
        .collect();
    let kept = entries.len();
    for i in (0..n).filter(|&i| growth[i] == Growth::Clone) {
        entries.push(PlanEntry { flags: FLAG_ZERO_MOMENTS, ..PlanEntry::keep(i) });
    }
    for i in (0..n).filter(|&i| growth[i] == Growth::Split) {
        let (opacity, log_scale) = children(i);
        let axis = longest_axis(old.log_scale(i)) as u32;
        for child in 0..SPLIT_CHILDREN as u32 {
            let flags = FLAG_ZERO_MOMENTS | FLAG_SET_LOG_SCALE | FLAG_SPLIT;
            entries.push(match config.split {
                SplitRule::Sampled => {
                    PlanEntry { flags, seed: rng.next_u32(), log_scale, ..PlanEntry::keep(i) }
                }
                SplitRule::LongAxis => PlanEntry {
                    flags: flags | FLAG_LONG_AXIS | FLAG_SET_OPACITY,
                    seed: axis << 1 | child,
                    opacity,
                    log_scale,
                    ..PlanEntry::keep(i)
                },
            });
        }
    }
    let stats = RefineStats {
        added: (entries.len() - kept) as u32,
        removed: (n - kept) as u32,
        relocated: 0,
        count: entries.len() as u32,
        opacity_reset: false,
    };
    Plan { entries, stats }
}

/// Draws indices with probability proportional to non-negative weights (with replacement),
/// like `torch.multinomial(weights, n, replacement=True)`.
struct Sampler {
    cumulative: Vec<f64>,
}

impl Sampler {
    /// `None` if no weight is positive. Non-finite and negative weights count as zero.
    fn new(weights: impl Iterator<Item = f32>) -> Option<Self> {
        let mut total = 0.0;
        let cumulative: Vec<f64> = weights
            .map(|w| {
                if w.is_finite() && w > 0.0 {
                    total += f64::from(w);
                }
                total
            })
            .collect();
        (total > 0.0).then_some(Self { cumulative })
    }

    fn sample(&self, rng: &mut SplitMix64) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let u = rng.next_f64() * total;
        self.cumulative.partition_point(|&c| c <= u).min(self.cumulative.len() - 1)
    }
}

/// The MCMC relocation rule (Kheradmand et al. 2024, "3D Gaussian Splatting as Markov Chain
/// Monte Carlo", equation 9; gsplat's `compute_relocation`): a splat of opacity `opacity`
/// and scales `scales` replaced by `copies` identical splats, so that their sum renders
/// about like the one did, gets
///
/// - opacity `o' = 1 − (1 − o)^(1/n)`,
/// - scales `s · o / Σ_{i=1..n} Σ_{k=0..i−1} C(i−1, k) (−1)^k o'^(k+1) / √(k+1)`,
///
/// with `n = copies` clamped to `1..=`[`RELOCATION_MAX_COPIES`]. Computed in f64 (the
/// alternating sum cancels badly in f32 for many copies). The caller clamps the opacity.
#[must_use]
pub fn relocation(opacity: f32, scales: [f32; 3], copies: u32) -> (f32, [f32; 3]) {
    let n = copies.clamp(1, RELOCATION_MAX_COPIES);
    let o = f64::from(opacity);
    let new_o = 1.0 - (1.0 - o).powf(1.0 / f64::from(n));
    // Row i−1 of Pascal's triangle, built as i grows.
    let mut binomials = vec![1.0_f64];
    let mut denominator = 0.0;
    for i in 1..=n as usize {
        if i > 1 {
            let mut next = vec![1.0; i];
            for k in 1..i - 1 {
                next[k] = binomials[k - 1] + binomials[k];
            }
            binomials = next;
        }
        for (k, binomial) in binomials.iter().enumerate() {
            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
            denominator += binomial * sign * new_o.powi(k as i32 + 1) / ((k + 1) as f64).sqrt();
        }
    }
    let coefficient = o / denominator;
    (new_o as f32, scales.map(|s| (f64::from(s) * coefficient) as f32))
}

/// The current state of one output slot during MCMC planning.
#[derive(Clone, Copy, Debug)]
struct Slot {
    entry: PlanEntry,
    /// Opacity (after the sigmoid) and log-scales the slot holds now.
    opacity: f32,
    log_scale: [f32; 3],
}

/// Applies the relocation rule to every splat sampled at least once: its opacity and scale
/// become those of one of `1 + times sampled` copies, its moments restart at zero (3DGS-MCMC's
/// `replace_tensors_to_optimizer(inds=…)`). Returns the copies' slots, in `sampled` order.
fn relocate_onto(slots: &mut [Slot], sampled: &[usize], min_opacity: f32) -> Vec<Slot> {
    let mut times = vec![0_u32; slots.len()];
    for &j in sampled {
        times[j] += 1;
    }
    for (j, &t) in times.iter().enumerate().filter(|&(_, &t)| t > 0) {
        let slot = &mut slots[j];
        let (opacity, scales) = relocation(slot.opacity, slot.log_scale.map(f32::exp), t + 1);
        // gsplat and 3DGS-MCMC clamp the new opacity to [min_opacity, 1 − ε].
        let opacity = opacity.clamp(min_opacity, 1.0 - f32::EPSILON);
        slot.opacity = opacity;
        slot.log_scale = scales.map(f32::ln);
        slot.entry.opacity = logit(opacity);
        slot.entry.log_scale = slot.log_scale;
        slot.entry.flags |= FLAG_SET_OPACITY | FLAG_SET_LOG_SCALE | FLAG_ZERO_MOMENTS;
    }
    sampled.iter().map(|&j| slots[j]).collect()
}

/// The MCMC strategy's refinement (Kheradmand et al. 2024, section 4; gsplat's
/// `MCMCStrategy._relocate_gs` then `_add_new_gs`):
///
/// 1. **relocate**: every dead splat (opacity ≤ `min_opacity`) becomes a copy of a live one
///    sampled ∝ opacity; each sampled splat and its copies share the [`relocation`] values.
///    Skipped when nothing is alive.
/// 2. **grow**: `floor(N · (1 + grow_fraction))`, at most `cap`, minus N new splats, copies of
///    splats sampled ∝ opacity (after step 1) from all of them, with the same rule.
///
/// Moments: sampled sources restart at zero (as 3DGS-MCMC does, for both steps), and so do
/// the new and relocated splats. (Both reference implementations leave a relocated slot with
/// the dead splat's stale moments; we zero them, as for any new splat.)
///
/// Outputs: the N old slots in place (relocated ones now copies), then the added splats.
pub(crate) fn plan_mcmc(
    config: &McmcConfig,
    cap: u32,
    old: &Readback,
    rng: &mut SplitMix64,
) -> Plan {
    let n = old.len();
    let mut slots: Vec<Slot> = (0..n)
        .map(|i| Slot {
            entry: PlanEntry::keep(i),
            opacity: sigmoid(old.opacity_logits[i]),
            log_scale: old.log_scale(i),
        })
        .collect();

    let (dead, alive): (Vec<usize>, Vec<usize>) =
        (0..n).partition(|&i| slots[i].opacity.is_nan() || slots[i].opacity <= config.min_opacity);
    let mut relocated = 0;
    if !dead.is_empty()
        && let Some(sampler) = Sampler::new(alive.iter().map(|&i| slots[i].opacity))
    {
        let sampled: Vec<usize> = dead.iter().map(|_| alive[sampler.sample(rng)]).collect();
        let copies = relocate_onto(&mut slots, &sampled, config.min_opacity);
        for (&d, copy) in dead.iter().zip(copies) {
            slots[d] = copy;
        }
        relocated = dead.len();
    }

    let target = ((n as f64 * (1.0 + config.grow_fraction)).floor() as usize).min(cap as usize);
    let add = target.saturating_sub(n);
    let mut added = Vec::new();
    if add > 0
        && let Some(sampler) = Sampler::new(slots.iter().map(|s| s.opacity))
    {
        let sampled: Vec<usize> = (0..add).map(|_| sampler.sample(rng)).collect();
        added = relocate_onto(&mut slots, &sampled, config.min_opacity);
    }

    let entries: Vec<PlanEntry> = slots
        .iter()
        .map(|s| s.entry)
        .chain(
            added.iter().map(|s| PlanEntry { flags: s.entry.flags | FLAG_ZERO_MOMENTS, ..s.entry }),
        )
        .collect();
    let stats = RefineStats {
        added: added.len() as u32,
        removed: 0,
        relocated: relocated as u32,
        count: entries.len() as u32,
        opacity_reset: false,
    };
    Plan { entries, stats }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_changes_nothing() {
        let (o, s) = relocation(0.7, [0.1, 0.2, 0.3], 1);
        assert!((o - 0.7).abs() < 1e-6);
        for (a, b) in s.iter().zip([0.1, 0.2, 0.3]) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    /// Each long-axis child's opacity is 1 − √(1 − o), so that the two together are as
    /// opaque as the parent; finite for any finite parent logit, however saturated.
    #[test]
    fn long_axis_children_composite_to_the_parents_opacity() {
        for o in [0.01_f32, 0.3, 0.9, 0.999] {
            let (child, _) = split_child(SplitRule::LongAxis, logit(o), [0.0; 3]);
            let c = sigmoid(child);
            assert!((1.0 - (1.0 - c) * (1.0 - c) - o).abs() < 1e-5, "o {o}: child {c}");
        }
        for x in [30.0_f32, 88.0, 200.0, f32::MAX] {
            let (child, _) = split_child(SplitRule::LongAxis, x, [0.0; 3]);
            assert!(child.is_finite() && child > 10.0, "logit {x}: child {child}");
        }
        // Only the first of the two longest axes is divided.
        let (_, scales) = split_child(SplitRule::LongAxis, 0.0, [-1.0, 0.5, 0.5]);
        let want = [-1.0, 0.5 - SPLIT_SCALE_DIVISOR.ln(), 0.5];
        assert!(scales.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{scales:?}");
    }

    #[test]
    fn sampler_never_picks_zero_weights() {
        let sampler = Sampler::new([0.0, 1.0, 0.0, 3.0, 0.0].into_iter()).expect("weights");
        let mut rng = SplitMix64::for_step(7, 100);
        let mut counts = [0; 5];
        for _ in 0..4000 {
            counts[sampler.sample(&mut rng)] += 1;
        }
        assert_eq!((counts[0], counts[2], counts[4]), (0, 0, 0));
        assert!((counts[3] as f32 / counts[1] as f32 - 3.0).abs() < 0.4, "{counts:?}");
    }
}
