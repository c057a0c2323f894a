//! Predicting a training run's peak GPU memory before it starts, and capping the splat count
//! so that the prediction fits a budget.
//!
//! The peak of a run is at the splat cap: either a step (the train state beside the
//! rasterizer's [`FrameScratch`], grown for the cap and the most intersections) or a
//! refinement. Before a refinement the run lets the frame scratch go (train/), and the
//! refinement drops the gradients and densification statistics (rewritten every step; the
//! statistics were read back), then rebuilds one parameter buffer and its two Adam moments at
//! a time, dropping the old ones and waiting for the GPU before the next
//! (`Densifier::apply` in `densify/mod.rs`): at most one group's new buffers sit beside the
//! old parameters and moments, with the plan. Beside both is what a step keeps (the loss
//! scratch, the gradient image and the target images). With `C` the cap, `P` the pixels and
//! `T` the 16×16 tiles of the largest image, and `I` the most tile intersections of one frame:
//!
//! ```text
//! peak = margin · ( max(state(C) + frame(growth · C, growth · I),   a step; see the table
//!                       refinement(C))                              the scratch let go
//!                 + 62 B · P + 32 B · T                gradient image, targets, loss maps, sums
//!                 + a few KiB                          uniforms, scan/sort parameters, readback )
//! ```
//!
//! Every term is derived from the buffer layouts, minimum sizes included (`gpu_splats.rs`,
//! `renderer/` and `kernels/{scan,sort}.rs` of splat-render; `optim/adam.rs`,
//! `loss/mod.rs`, `densify/mod.rs` and `train/` here). Per splat of SH degree `d`, with
//! `K = (d + 1)²` coefficients, and with SH bands 1..=d stored in 16 bits
//! ([`ShPrecision::F16`]: `W` = 5, 13, 24 words for d = 1, 2, 3, each band's row of 9, 15,
//! 21 binary16 values padded to whole words):
//!
//! | what                                          | bytes a splat     | SH 0 | SH 3 | SH 3, f16 |
//! |-----------------------------------------------|-------------------|------|------|-----------|
//! | parameters (mean 3, scale 3, quat 4, opacity 1, SH 3K values) `P` | 4·(11 + 3K); f16: 4·(14 + W) | 56 | 236 | 152 |
//! | gradients (always f32)                        | 4·(11 + 3K)       | 56   | 236  | 236       |
//! | Adam moments m and v                          | 2·P               | 112  | 472  | 304       |
//! | densification statistics                      | 12                | 12   | 12   | 12        |
//! | **state**                                     | 3·P + 4·(11 + 3K) + 12 | 236 | 956 | 704   |
//! | largest parameter buffer G (quats at SH 0, the highest band above) | 4·max(4, 3·(2d+1)); f16: 4·max(4, ⌈3·(2d+1)/2⌉) | 16 | 84 | 44 |
//! | refinement plan                               | 32                | 32   | 32   | 32        |
//! | **refinement**: parameters and moments, one group's new ones, the plan | 3·(P + G) + 32 | 248 | 992 | 620 |
//! | rasterizer scratch, per splat of capacity: projected 48 (in depth order), six u32 arrays 24, depth sort 8.1, two scans 0.02 | 80.1 | | | |
//! | rasterizer scratch, per intersection of capacity: tile ids 4, intersection ids 4, their splats 4, dL/dprojected partials and the absolute growth statistic's share 40, tile sort 8.1 | 60.1 | | | |
//!
//! Per pixel: in the frame scratch image 16, final transmittance 4, last entry 4, last band 4; beside it
//! `v_image` 16, two streamed targets 10 (RGBA8 and an alpha plane), loss maps 36. Per tile:
//! ranges 8 in the frame scratch; loss sums 16 and their readback 16.
//!
//! So the peak is a step's: a splat at SH 3 takes 956 + 1.5 × 80.1 ≈ 1,076 bytes (824 with
//! 16-bit SH), plus 1.5 × 60.1 ≈ 90 bytes for each tile it touches (the backward pass's
//! per-intersection partials, 40 of them, are the price of a sum in fixed order); at SH 0,
//! 356 plus 90 a tile. A refinement (992 at SH 3, 620 with 16-bit SH, 248 at SH 0) stays
//! below it. Before the scratch was let go and refinements went group by group, a refinement
//! held two full states beside the scratch: 2,112 + 168 at SH 3, with a `v_projected` of 36
//! bytes a splat more.
//!
//! The factors no layout fixes were measured on real runs ([`measure_peak`], and the tests in
//! `trainer/tests/it/memory_prediction.rs`); see [`MemoryModel`] and
//! [`DEFAULT_INTERSECTIONS_PER_SPLAT`] for each number and where it came from.
//!
//! Not included: a viewer rendering the same splats keeps its own [`FrameScratch`] (about
//! 115 bytes a splat and 90 a tile intersection more), and what other runs hold.

use std::sync::Arc;

use splat_formats::Splats;
use splat_render::gpu_splats::{
    DENSIFY_FLOATS, EMPTY_BUFFER_BYTES, PARAM_BUFFERS, VALUES_PER_SPLAT, words_per_splat,
};
use splat_render::kernels::{PROJECTED_BYTES, PROJECTED_GRAD_FLOATS, RenderUniform};
use splat_render::{
    Category, DeviceMemory, FrameScratch, GpuContext, GpuError, GpuSplats, Owner, RenderSettings,
    Renderer, ShPrecision, TILE_SIZE, device_memory, human_bytes, wgpu,
};

use crate::appearance::AppearanceState;
use crate::config::TrainConfig;
use crate::dataset::Dataset;
use crate::densify::{DefaultConfig, McmcConfig, Strategy};
use crate::init::splats_from_points;
use crate::train::{ImagePlacement, Trainer};

/// Tile intersections per splat that [`RunShape::new`] assumes: the most seen in any view of
/// a real training run (desk-statue-colmap at 128×84 pixels, from its 1,443 COLMAP points,
/// default densification up to 21k splats over 1,500 steps: 3.13 at the start, 3.64 at
/// most, 2.70 at the end), rounded up. Random initialisations and other resolutions differ a
/// lot (0.1 for a million random splats at 64 px, 12.7 for 5k at 256 px): measure a run's own
/// with [`measure_intersections_per_splat`] where the intersections matter (small SH degrees,
/// large images).
pub const DEFAULT_INTERSECTIONS_PER_SPLAT: f32 = 4.0;

/// Bytes of one densification plan entry (`PlanEntry` in densify/plan.rs).
const PLAN_ENTRY_BYTES: u64 = 32;
/// Smallest parameter, gradient or moment buffer (a binding may not be empty).
const MIN_PARAM_BUFFER: u64 = EMPTY_BUFFER_BYTES;
/// Smallest rasterizer scratch buffer (renderer/scratch.rs, `scratch_buffer`).
const MIN_SCRATCH_BUFFER: u64 = 64;
/// Smallest capacity the rasterizer scratch grows to (renderer/scratch.rs, `grown`).
const MIN_GROWN: u64 = 256;
/// Adam's uniform slots: 8 of 256 bytes (optim/adam.rs), one set per train state. These
/// uniforms, the refinement's and the frame's render uniforms are counted for one window of
/// splats (`gpu_splats::splat_window`); each further window adds 256 bytes a slot (a few KiB
/// at most, which the margin holds).
const ADAM_UNIFORM_BYTES: u64 = 8 * 256;
/// The refinement's gather/split uniform slots: 9 of 256 bytes (densify/mod.rs).
const DENSIFY_UNIFORM_BYTES: u64 = 9 * 256;
/// Small blocks of the frame scratch: the render uniform and its first band's copy; at their
/// 64-byte minimum the selections' placeholder (training draws none), the intersect uniform,
/// the scan total, the frame totals and their readback, the band bounds and their readback,
/// the backward carry's placeholder, the first band's band and raster uniforms (renderer/).
const FRAME_FIXED_BYTES: u64 = 2 * size_of::<RenderUniform>() as u64 + 10 * MIN_SCRATCH_BUFFER;
/// The loss's parameter block (loss/mod.rs, `LossParams`).
const LOSS_PARAMS_BYTES: u64 = 48;
/// Bytes per pixel of the loss's derivative maps (3 channels × 3 maps × f32).
const LOSS_MAPS_BYTES_PER_PIXEL: u64 = 36;
/// Elements per block of the prefix scan and the radix sort (kernels/{scan,sort}.rs).
const SCAN_BLOCK: u64 = 1024;
/// Digits of a radix sort pass (kernels/sort.rs).
const SORT_RADIX: u64 = 16;
/// Parameter slots of the scan and the sort are 256 bytes apart; the sort has 8 (32-bit keys).
const PARAM_STRIDE: u64 = 256;
const SORT_PARAM_SLOTS: u64 = 8;

/// The constants of the prediction that no buffer layout fixes, with where each came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryModel {
    /// Capacity of the rasterizer's per-splat and per-intersection scratch over what a frame
    /// needs. From the code (`grown` in `renderer/scratch.rs`: half again, at least 256), and
    /// measured: the ledger's scratch buffers held 1.5 × the splats and 1.5 × the
    /// intersections of the frame that grew them (20k splats: `projected` 1,440,000 bytes =
    /// 48 × 30,000). A run whose count rose since its scratch last grew holds between 1 and
    /// 1.5 × its count; the bound takes 1.5 × the cap.
    pub scratch_growth: f64,
    /// Factor on the whole prediction for what the model does not know: the small,
    /// short-lived uniform buffers of the MCMC kernels and the opacity reset, and code that
    /// changes after these measurements. Measured: without it the model was 0.01–0.28 %
    /// above every measured peak of the tests and of the 100k and 1M runs (the excess being
    /// the intersections, calibrated on all views while a 3-step run renders 3).
    pub margin: f64,
}

impl MemoryModel {
    /// The measured constants (see the fields).
    pub const MEASURED: Self = Self { scratch_growth: 1.5, margin: 1.01 };
}

impl Default for MemoryModel {
    fn default() -> Self {
        Self::MEASURED
    }
}

/// What a run will be: the inputs of the prediction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunShape {
    /// The most splats the run may reach (its cap, or its initial count if that is larger).
    pub splats: u64,
    pub sh_degree: u32,
    /// How SH bands 1..=3 and their moments are stored.
    pub sh_precision: ShPrecision,
    /// Size of the largest image the run renders (training or evaluation view).
    pub width: u32,
    pub height: u32,
    /// Tile intersections per splat in the frame that has the most (tiles a splat touches,
    /// averaged over the splats of that frame). [`DEFAULT_INTERSECTIONS_PER_SPLAT`] or
    /// [`measure_intersections_per_splat`].
    pub intersections_per_splat: f32,
    /// Bytes of the dataset's images when the run keeps them all on the GPU
    /// (`ImagePlacement::Resident`); 0 when it streams them through two image buffers.
    pub resident_images: u64,
    /// Train views with a per-view appearance transform (`TrainConfig::appearance`); 0 without.
    pub appearance_views: u32,
}

impl RunShape {
    /// A run of up to `splats` splats on images of up to `width`×`height`, f32 storage, with
    /// [`DEFAULT_INTERSECTIONS_PER_SPLAT`].
    #[must_use]
    pub fn new(splats: u64, sh_degree: u32, width: u32, height: u32) -> Self {
        Self {
            splats,
            sh_degree,
            sh_precision: ShPrecision::F32,
            width,
            height,
            intersections_per_splat: DEFAULT_INTERSECTIONS_PER_SPLAT,
            resident_images: 0,
            appearance_views: 0,
        }
    }

    /// A run of up to `splats` splats on `dataset` (its largest view), its images on the GPU.
    #[must_use]
    pub fn for_dataset(dataset: &Dataset, splats: u64, sh_degree: u32) -> Self {
        let (width, height) = dataset.largest_image();
        Self {
            resident_images: crate::train::resident_image_bytes(dataset),
            ..Self::new(splats, sh_degree, width, height)
        }
    }

    /// The same run streaming its images (two image buffers on the GPU).
    #[must_use]
    pub fn streamed(self) -> Self {
        Self { resident_images: 0, ..self }
    }

    /// The same run with another splat count.
    #[must_use]
    pub fn with_splats(self, splats: u64) -> Self {
        Self { splats, ..self }
    }

    /// The same run with per-view appearance for `views` train views (0: without).
    #[must_use]
    pub fn with_appearance(self, views: u32) -> Self {
        Self { appearance_views: views, ..self }
    }

    /// The same run storing SH bands 1..=3 with `sh_precision`.
    #[must_use]
    pub fn with_precision(self, sh_precision: ShPrecision) -> Self {
        Self { sh_precision, ..self }
    }
}

/// A run laid out under a memory budget ([`MemoryModel::plan_run`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunPlan {
    /// The run at its requested splat count.
    pub shape: RunShape,
    pub placement: ImagePlacement,
    /// The splat cap that fits.
    pub max_splats: u32,
    /// What set it.
    pub cap: Cap,
}

/// What limits a run's splat count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// The count asked for fits.
    Requested,
    /// A larger run's predicted peak passes the memory budget.
    Budget,
    /// A buffer (`buffer`, described for a person) passes what the device allows in one
    /// buffer or, for what kernels bind whole, one binding (`limit` bytes, `which` limit) at
    /// a larger count.
    Binding { buffer: &'static str, limit: u64, which: splat_render::Limit },
}

/// A predicted peak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prediction {
    /// Bytes in the ledger at the run's peak (margin included).
    pub peak_bytes: u64,
    /// The peak by category (without the margin), categories with bytes only, in
    /// [`Category::ALL`] order.
    pub by_category: Vec<(Category, u64)>,
}

impl Prediction {
    /// Bytes of `category` at the peak (without the margin).
    #[must_use]
    pub fn category_bytes(&self, category: Category) -> u64 {
        self.by_category.iter().find(|(c, _)| *c == category).map_or(0, |(_, bytes)| *bytes)
    }
}

/// Bytes by category, in [`Category::ALL`] order.
#[derive(Clone, Copy, Debug, Default)]
struct Tally([u64; Category::ALL.len()]);

impl Tally {
    fn add(&mut self, category: Category, bytes: u64) {
        let index = Category::ALL.iter().position(|c| *c == category).unwrap_or(0);
        self.0[index] = self.0[index].saturating_add(bytes);
    }

    fn total(&self) -> u64 {
        self.0.iter().fold(0, |sum, bytes| sum.saturating_add(*bytes))
    }
}

impl MemoryModel {
    /// The predicted peak of a run of `shape`.
    #[must_use]
    pub fn predict(&self, shape: &RunShape) -> Prediction {
        let n = shape.splats;
        let d = shape.sh_degree.min(3);
        let pixels = u64::from(shape.width.max(1)) * u64::from(shape.height.max(1));
        let tiles = u64::from(shape.width.max(1).div_ceil(TILE_SIZE))
            * u64::from(shape.height.max(1).div_ceil(TILE_SIZE));

        // What a step keeps besides the splats' state and the rasterizer's scratch (train/
        // `StepScratch`, loss/mod.rs `LossScratch`).
        let mut kept = Tally::default();
        kept.add(Category::RasterizerScratch, pixels * 16); // v_image
        // Every view's RGBA8 image, or the two a streamed run keeps (counted with an alpha
        // plane, which a dataset with transparency adds: a byte a pixel).
        let streamed = 2 * 4 * crate::loss::target_words(pixels, true);
        let images = if shape.resident_images > 0 { shape.resident_images } else { streamed };
        kept.add(Category::DatasetImages, images);
        kept.add(Category::RasterizerScratch, pixels * LOSS_MAPS_BYTES_PER_PIXEL);
        kept.add(Category::RasterizerScratch, tiles * 16); // per-tile sums
        kept.add(Category::Other, tiles * 16 + LOSS_PARAMS_BYTES); // their readback, params
        if shape.appearance_views > 0 {
            // appearance/mod.rs `AppearanceState`.
            let state = AppearanceState::bytes_by_category(shape.appearance_views, pixels);
            for (category, bytes) in state {
                kept.add(category, bytes);
            }
        }

        // A step at the cap: the train state and the rasterizer's scratch, grown for the cap
        // and for the most intersections.
        let params = param_bytes(n, d, shape.sh_precision);
        let densify = (n * DENSIFY_FLOATS * 4).max(MIN_PARAM_BUFFER);
        let mut step = kept;
        step.add(Category::SplatParameters, params);
        step.add(Category::Gradients, param_bytes(n, d, ShPrecision::F32));
        step.add(Category::OptimizerState, 2 * params);
        step.add(Category::DensificationStats, densify);
        step.add(Category::Other, ADAM_UNIFORM_BYTES);
        let intersections = (n as f64 * f64::from(shape.intersections_per_splat.max(0.0))).ceil();
        let splat_capacity = self.grown(n);
        let intersection_capacity = self.grown(intersections as u64);
        frame_scratch(&mut step, splat_capacity, intersection_capacity, pixels, tiles);

        // A refinement at the cap: the rasterizer's scratch let go (train/), the gradients
        // and statistics dropped, then one parameter buffer and its moments rebuilt at a time
        // (densify/mod.rs `apply`): at most one group's new buffers beside the old parameters
        // and moments, with the plan.
        let group = largest_param_buffer(n, d, shape.sh_precision);
        let plan = (n * PLAN_ENTRY_BYTES).max(4) + DENSIFY_UNIFORM_BYTES;
        let mut refine = kept;
        refine.add(Category::SplatParameters, params + group);
        refine.add(Category::OptimizerState, 2 * (params + group));
        refine.add(Category::Other, plan);
        frame_scratch(&mut refine, 1, 1, 1, 1);

        let tally = if refine.total() > step.total() { refine } else { step };
        let by_category: Vec<(Category, u64)> = Category::ALL
            .iter()
            .zip(tally.0)
            .filter(|(_, bytes)| *bytes > 0)
            .map(|(c, bytes)| (*c, bytes))
            .collect();
        let peak_bytes = (tally.total() as f64 * self.margin.max(1.0)).ceil() as u64;
        Prediction { peak_bytes, by_category }
    }

    /// How a run of up to `max_splats` splats on `dataset` (with per-view appearance or not,
    /// `TrainConfig::appearance`) fits a memory budget: its shape, where its images live and
    /// its splat cap (at most `max_splats`, at least 1 unless the device's binding limits,
    /// when given, cannot hold one splat's run at all), under the budget and the limits. The images stay on the
    /// GPU unless that would lower the cap: splats come first.
    #[must_use]
    pub fn plan_run(
        &self,
        dataset: &Dataset,
        max_splats: u32,
        (sh_degree, sh_precision, appearance): (u32, ShPrecision, bool),
        budget_bytes: u64,
        limits: Option<&wgpu::Limits>,
    ) -> RunPlan {
        let fit = |shape: &RunShape| {
            let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
            let by_budget = clamp(self.max_splats_for_budget(budget_bytes, shape));
            let mut fit = (max_splats, Cap::Requested);
            if by_budget < fit.0 {
                fit = (by_budget, Cap::Budget);
            }
            if let Some(limits) = limits {
                let (by_limits, buffer, (limit, which)) = self.binding_cap(limits, shape);
                if clamp(by_limits) < fit.0 {
                    fit = (clamp(by_limits), Cap::Binding { buffer, limit, which });
                }
            }
            // At least one splat, unless the device cannot hold even one (its images'
            // buffers pass a binding): 0 then, and the run cannot start.
            match fit {
                (0, Cap::Binding { .. }) => fit,
                (n, cap) => (n.max(1), cap),
            }
        };
        let views =
            if appearance { u32::try_from(dataset.train.len()).unwrap_or(u32::MAX) } else { 0 };
        let resident = RunShape::for_dataset(dataset, u64::from(max_splats), sh_degree)
            .with_precision(sh_precision)
            .with_appearance(views);
        let streamed = resident.streamed();
        match (fit(&resident), fit(&streamed)) {
            ((with_images, cap), (without, _)) if with_images >= without => RunPlan {
                shape: resident,
                placement: ImagePlacement::Resident,
                max_splats: with_images,
                cap,
            },
            (_, (without, cap)) => RunPlan {
                shape: streamed,
                placement: ImagePlacement::Streamed,
                max_splats: without,
                cap,
            },
        }
    }

    /// The largest splat count whose predicted peak fits `budget_bytes` (0 if not even one
    /// splat fits), everything else as in `shape`. At most `u32::MAX` (splat counts are u32
    /// on the GPU). Devices also limit the size of one buffer binding, which caps the count
    /// whatever the budget: see [`MemoryModel::max_splats_for_limits`].
    #[must_use]
    pub fn max_splats_for_budget(&self, budget_bytes: u64, shape: &RunShape) -> u64 {
        largest_fitting(|n| self.predict(&shape.with_splats(n)).peak_bytes <= budget_bytes)
    }

    /// The largest splat count whose buffers each fit one storage binding and one buffer of
    /// a device with `limits` (0 if not even one splat does, or the image's buffers do
    /// not fit): see [`MemoryModel::binding_cap`].
    #[must_use]
    pub fn max_splats_for_limits(&self, limits: &wgpu::Limits, shape: &RunShape) -> u64 {
        self.binding_cap(limits, shape).0
    }

    /// [`MemoryModel::max_splats_for_limits`], and the buffer that binds first. Kernels
    /// bind the rows of parameters, gradients, moments, statistics and the refinement's
    /// plan a window of splats at a time (`gpu_splats::splat_window`): those need only fit
    /// one buffer (the largest parameter buffer's gradient: 84 bytes a splat at SH degree
    /// 3, f32 whatever the parameters' precision; the plan, 32 bytes). What they bind whole
    /// must fit one storage binding and one buffer: the rasterizer's per-splat arrays (4
    /// bytes × the grown capacity), an image's loss maps and colours (by pixels). What grows
    /// with the intersections is cut into depth bands (renderer/), which only need one
    /// splat's tiles to fit a binding. On lavapipe (128 MiB bindings, 2 GiB buffers) the
    /// per-splat arrays bind first, at 22.4 million splats: past its memory budget.
    #[must_use]
    #[expect(clippy::type_complexity, reason = "a table: name, limit, bytes by splats")]
    pub fn binding_cap(
        &self,
        limits: &wgpu::Limits,
        shape: &RunShape,
    ) -> (u64, &'static str, (u64, splat_render::Limit)) {
        let binding = splat_render::Limit::whole_binding(limits);
        let buffer = (limits.max_buffer_size, splat_render::Limit::Buffer);
        let d = shape.sh_degree.min(3) as usize;
        let param_floats = u64::from(VALUES_PER_SPLAT[..=4 + d].iter().copied().max().unwrap_or(0));
        let pixels = u64::from(shape.width) * u64::from(shape.height);
        let tiles = u64::from(shape.width.div_ceil(TILE_SIZE) * shape.height.div_ceil(TILE_SIZE));
        let per_pixel = LOSS_MAPS_BYTES_PER_PIXEL.max(16);
        let buffers: [(&'static str, (u64, splat_render::Limit), &dyn Fn(u64) -> u64); 5] = [
            ("the largest parameter gradient buffer", buffer, &|n| n * param_floats * 4),
            ("a refinement's plan (32 B a splat)", buffer, &|n| n * PLAN_ENTRY_BYTES),
            ("the rasterizer's per-splat arrays (4 B a splat)", binding, &|n| self.grown(n) * 4),
            ("the loss maps of one image", binding, &|_| pixels * per_pixel),
            ("one depth band (a splat on every tile)", binding, &|_| {
                (tiles + 1) * PROJECTED_BYTES * 3 / 2
            }),
        ];
        buffers
            .iter()
            .map(|(name, limit, bytes)| (largest_fitting(|n| bytes(n) <= limit.0), *name, *limit))
            .min_by_key(|(n, _, _)| *n)
            .unwrap_or((0, "", binding))
    }

    /// Capacity the rasterizer scratch grows to for `needed` items.
    fn grown(&self, needed: u64) -> u64 {
        ((needed as f64 * self.scratch_growth.max(1.0)).ceil() as u64).max(MIN_GROWN)
    }
}

/// The largest `n` in `1..=u32::MAX` with `fits(n)`, for a `fits` that holds up to some count
/// and not after it; 0 if `fits(1)` fails.
fn largest_fitting(fits: impl Fn(u64) -> bool) -> u64 {
    if !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1_u64, u64::from(u32::MAX));
    if fits(hi) {
        return hi;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Bytes of one set of parameter buffers (and so of each Adam moment; the gradients are
/// those of f32 storage) for `n` splats of SH degree `d`: SH split by band, bands above `d`
/// 16-byte placeholders (`gpu_splats.rs`).
fn param_bytes(n: u64, d: u32, precision: ShPrecision) -> u64 {
    (0..PARAM_BUFFERS).map(|b| buffer_bytes(b, n, d, precision)).sum()
}

/// Bytes of parameter buffer `b` for `n` splats (`param_buffer_bytes` in `gpu_splats.rs`,
/// for counts past u32).
fn buffer_bytes(b: usize, n: u64, d: u32, precision: ShPrecision) -> u64 {
    let words = u64::from(words_per_splat(b, d, precision));
    n.saturating_mul(words * 4).max(MIN_PARAM_BUFFER)
}

/// Bytes of the largest parameter buffer for `n` splats of SH degree `d` (the highest band,
/// or the quats at degree 0 or in 16 bits at degree 1).
fn largest_param_buffer(n: u64, d: u32, precision: ShPrecision) -> u64 {
    (0..PARAM_BUFFERS).map(|b| buffer_bytes(b, n, d, precision)).max().unwrap_or(0)
}

/// The rasterizer's `FrameScratch` at the given capacities (renderer/).
fn frame_scratch(tally: &mut Tally, splats: u64, intersections: u64, pixels: u64, tiles: u64) {
    let scratch = |bytes: u64| bytes.max(MIN_SCRATCH_BUFFER);
    let mut raster = FRAME_FIXED_BYTES;
    // Per splat: projected (in depth order, room for every splat in one band), depths, tiles
    // touched, depth keys, splat ids, counts, offsets.
    raster += scratch(splats * PROJECTED_BYTES) + 6 * scratch(splats * 4);
    // Per intersection: tile ids, intersection ids, their splats, dL/dprojected partials.
    raster += 3 * scratch(intersections * 4) + scratch(intersections * PROJECTED_GRAD_FLOATS * 4);
    // Per tile: ranges (and the sentinel tile's); per pixel: image, final transmittance,
    // last entry, last band. (A frame of several depth bands adds each band's ranges and
    // small blocks, and the backward pass's carry, 16 bytes a pixel: only runs whose
    // intersections outgrow one storage binding have them.)
    raster += scratch((tiles + 1) * 8) + scratch(pixels * 16) + 3 * scratch(pixels * 4);
    tally.add(Category::RasterizerScratch, raster);
    // The visible-flag scan (all splats) and the tile-count scan (the visible ones).
    scan_scratch(tally, splats);
    scan_scratch(tally, splats);
    sort_scratch(tally, splats);
    sort_scratch(tally, intersections);
}

/// Lengths of a scan's levels above the input (kernels/scan.rs `level_lengths`).
fn scan_levels(count: u64) -> Vec<u64> {
    let mut levels = vec![count];
    let mut len = count;
    while len > SCAN_BLOCK {
        len = len.div_ceil(SCAN_BLOCK);
        levels.push(len);
    }
    levels
}

/// A `ScanScratch` for `capacity` elements (kernels/scan.rs), one binding chunk per level.
fn scan_scratch(tally: &mut Tally, capacity: u64) {
    let levels = scan_levels(capacity);
    let sums: u64 = levels.iter().skip(1).map(|len| 2 * len * 4).sum();
    tally.add(Category::RasterizerScratch, sums);
    tally.add(Category::Other, levels.len() as u64 * PARAM_STRIDE + 2 * 16);
}

/// A `SortScratch` for `capacity` pairs (kernels/sort.rs).
fn sort_scratch(tally: &mut Tally, capacity: u64) {
    let table_len = SORT_RADIX * capacity.div_ceil(SCAN_BLOCK).max(1);
    tally.add(Category::RasterizerScratch, 2 * capacity.max(1) * 4 + 2 * table_len * 4);
    tally.add(Category::Other, 4 + SORT_PARAM_SLOTS * PARAM_STRIDE);
    scan_scratch(tally, table_len);
}

/// The memory budget of the runs on a device: bytes, and where they came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryBudget {
    pub bytes: u64,
    pub source: BudgetSource,
}

/// Where a [`MemoryBudget`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetSource {
    /// A discrete GPU's driver: its device-local memory (what the driver says is free, else
    /// all of it) less `margin` for the desktop, other programs and the viewer's own
    /// textures, which the ledger does not count.
    Driver { memory: DeviceMemory, margin: u64 },
    /// A CPU adapter or an integrated GPU, which allocate from host memory: a share of what
    /// the host has available.
    Host { available: u64 },
    /// The driver does not say (GL): a guess.
    Assumed,
    /// Given by the user (`--memory-budget`, the window's setting).
    Given,
}

impl MemoryBudget {
    /// A budget the user gave.
    #[must_use]
    pub fn given(bytes: u64) -> Self {
        Self { bytes, source: BudgetSource::Given }
    }

    /// A discrete GPU's budget from what its driver says ([`default_budget`]).
    #[must_use]
    pub fn from_driver(memory: DeviceMemory) -> Self {
        let margin = (memory.total / 16).max(512 << 20);
        let usable = memory.free.unwrap_or(memory.total);
        Self {
            bytes: usable.saturating_sub(margin),
            source: BudgetSource::Driver { memory, margin },
        }
    }
}

impl std::fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = human_bytes(self.bytes);
        match self.source {
            BudgetSource::Driver { memory, margin } => {
                write!(f, "{bytes} from the driver ({} device memory", human_bytes(memory.total))?;
                if let Some(free) = memory.free {
                    write!(f, ", {} free", human_bytes(free))?;
                }
                write!(f, ", less {} for the desktop and the viewer)", human_bytes(margin))
            }
            BudgetSource::Host { available } => {
                write!(f, "{bytes} from host memory ({} available)", human_bytes(available))
            }
            BudgetSource::Assumed => write!(
                f,
                "{bytes} assumed: the driver does not say how much memory this GPU has \
                 (pass --memory-budget)"
            ),
            BudgetSource::Given => write!(f, "{bytes}, as given"),
        }
    }
}

/// The default memory budget for training on `ctx`'s device.
///
/// - **Discrete GPUs**, and integrated ones where the host does not say (Windows, macOS): what
///   the driver says ([`device_memory`]): the device-local memory free now where it says
///   (Vulkan's `VK_EXT_memory_budget`, which counts other programs' use; DXGI's budget for the
///   process; Metal's recommended working set less what the process holds), else all of it,
///   less a margin of 1/16 of it (at least 512 MiB) for what the desktop and other programs
///   take later and the viewer's textures.
/// - **CPU adapters** (lavapipe, llvmpipe, WARP) and **integrated GPUs** allocate device
///   memory from host memory, and their drivers report host memory as device-local, which
///   the process also needs: the budget is a share of the host's available memory
///   (`MemAvailable` in /proc/meminfo): 3/4 on a CPU adapter (the rest is for the process's
///   own host memory: decoded images, readbacks and the checkpoint copies of the splats, a
///   third of a run's GPU bytes at most, and for the allocator's block rounding); 1/2 on an
///   integrated GPU, whose drivers commonly let the GPU have about half of the system memory.
/// - **Where neither says** (GL; CPU adapters without /proc/meminfo): twice the adapter's `max_buffer_size`, clamped to
///   1–4 GiB (about the smallest VRAM of a current discrete GPU), and the budget says it was
///   assumed.
#[must_use]
pub fn default_budget(ctx: &GpuContext) -> MemoryBudget {
    const GIB: u64 = 1 << 30;
    let host = host_available_bytes();
    let (bytes, source) = match (ctx.adapter_info.device_type, host) {
        (wgpu::DeviceType::Cpu, Some(available)) => {
            (available / 4 * 3, BudgetSource::Host { available })
        }
        (wgpu::DeviceType::IntegratedGpu, Some(available)) => {
            (available / 2, BudgetSource::Host { available })
        }
        _ => match device_memory(&ctx.device) {
            Some(memory) => return MemoryBudget::from_driver(memory),
            None => (
                ctx.device.limits().max_buffer_size.saturating_mul(2).clamp(GIB, 4 * GIB),
                BudgetSource::Assumed,
            ),
        },
    };
    MemoryBudget { bytes, source }
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn host_available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|line| line.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The most tile intersections per splat that `splats` make in any view of `dataset` (all
/// its views rendered once, at the splats' SH degree): what to put in
/// [`RunShape::intersections_per_splat`] for a run that starts from `splats`. Allocates the
/// splats and a frame's scratch on `ctx` for the duration (as [`Owner::Shared`]).
pub fn measure_intersections_per_splat(
    ctx: &GpuContext,
    dataset: &Dataset,
    splats: &Splats,
) -> Result<f32, GpuError> {
    if splats.is_empty() {
        return Ok(0.0);
    }
    let renderer = Renderer::new(ctx)?;
    let gpu = GpuSplats::upload(ctx, splats, Owner::Shared)?;
    let mut scratch = FrameScratch::new(ctx, &renderer, Owner::Shared)?;
    let settings = RenderSettings::default();
    let mut most = 0_u32;
    for view in dataset.views() {
        let stats = ctx.checked("measure intersections", || {
            renderer.forward(ctx, &gpu, &view.camera, &settings, &mut scratch)
        })?;
        most = most.max(stats.intersections);
    }
    Ok((f64::from(most) / splats.len() as f64) as f32)
}

/// Seed of the random initial points of [`measure_peak`].
pub const MEASURE_SEED: u64 = 0x3E3_0127;
/// Every this many splats of [`measure_peak`]'s initial scene start dead (opacity ≈ 5e-5),
/// so that its refinement relocates (MCMC) or prunes and regrows (3DGS) them.
const MEASURE_DEAD_EVERY: usize = 16;

/// The refinement of a [`MeasuredRun`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeasuredStrategy {
    /// MCMC: the dead splats are relocated onto live ones, the count stays at the cap.
    Mcmc,
    /// 3DGS: the dead splats are pruned and the count grows back towards the cap by clones
    /// and splits of the splats with the largest gradients.
    Default,
}

impl MeasuredStrategy {
    /// The command line's name: `mcmc` or `3dgs` (whose refinement compact's is, with a
    /// smaller cap).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Mcmc => "mcmc",
            Self::Default => "3dgs",
        }
    }
}

/// A run whose peak [`measure_peak`] measures: `splats` splats from the start, which is its
/// cap, refining with `strategy` at step 2 (and every second step after), so that a
/// refinement at the cap, old and new state side by side, is among its `steps` steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeasuredRun {
    pub splats: u32,
    pub sh_degree: u32,
    pub sh_precision: ShPrecision,
    pub strategy: MeasuredStrategy,
    /// At least 2: the first refinement is at step 2.
    pub steps: u32,
}

impl MeasuredRun {
    /// `splats` splats of SH degree `sh_degree` in f32, MCMC, 3 steps (the refinement at step
    /// 2, then a step of the refined scene).
    #[must_use]
    pub fn new(splats: u32, sh_degree: u32) -> Self {
        Self {
            splats,
            sh_degree,
            sh_precision: ShPrecision::F32,
            strategy: MeasuredStrategy::Mcmc,
            steps: 3,
        }
    }

    /// The splats the run starts from: random points in the dataset's camera bounds
    /// ([`Dataset::random_points`] with [`MEASURE_SEED`]), as [`splats_from_points`] makes
    /// them, every 16th with its opacity near zero.
    #[must_use]
    pub fn init(&self, dataset: &Dataset) -> Splats {
        let points = dataset.random_points(self.splats as usize, MEASURE_SEED);
        let mut init = splats_from_points(&points, self.sh_degree);
        for logit in init.opacity_logits.iter_mut().step_by(MEASURE_DEAD_EVERY) {
            *logit = -10.0;
        }
        init
    }

    /// The configuration the run trains with.
    #[must_use]
    pub fn config(&self) -> TrainConfig {
        let cap = self.splats;
        let strategy = match self.strategy {
            MeasuredStrategy::Mcmc => Strategy::Mcmc(McmcConfig {
                cap,
                refine_every: 2,
                start: 0,
                stop: u32::MAX,
                ..McmcConfig::default()
            }),
            MeasuredStrategy::Default => Strategy::Default(DefaultConfig {
                refine_every: 2,
                start: 0,
                stop: u32::MAX,
                ..DefaultConfig::default()
            }),
        };
        TrainConfig {
            steps: self.steps,
            sh_degree: self.sh_degree,
            sh_degree_interval: 1,
            sh_precision: self.sh_precision,
            strategy,
            max_splats: crate::config::SplatBudget::Count(cap),
            eval_every: 0,
            seed: MEASURE_SEED,
            appearance: crate::appearance::Compensation::Off,
            ..TrainConfig::default()
        }
    }

    /// The shape [`MemoryModel::predict`] takes for this run on `dataset`, with
    /// `intersections_per_splat`.
    #[must_use]
    pub fn shape(&self, dataset: &Dataset, intersections_per_splat: f32) -> RunShape {
        RunShape {
            intersections_per_splat,
            ..RunShape::for_dataset(dataset, u64::from(self.splats), self.sh_degree)
                .with_precision(self.sh_precision)
        }
    }
}

/// The measured peak of a real training run at its splat cap: bytes in `ctx`'s ledger at
/// the peak of `run` on `dataset` ([`measure_run_peak`] of its initial splats and config).
pub fn measure_peak(
    ctx: &GpuContext,
    dataset: &Arc<Dataset>,
    run: &MeasuredRun,
) -> Result<u64, GpuError> {
    measure_run_peak(ctx, dataset, &run.init(dataset), run.config(), run.steps)
}

/// Bytes in `ctx`'s ledger at the peak of `steps` training steps of a [`Trainer`] on
/// `dataset` from `init` with `config` (the trainer made after the peak was reset, so its
/// allocation counts), less what the ledger held before. Use a context with nothing else
/// allocating on it meanwhile.
pub fn measure_run_peak(
    ctx: &GpuContext,
    dataset: &Arc<Dataset>,
    init: &Splats,
    config: TrainConfig,
    steps: u32,
) -> Result<u64, GpuError> {
    if steps < 2 {
        return Err(GpuError::Validation {
            label: "measure peak".into(),
            message: "measure at least 2 steps (the first refinement is at step 2)".into(),
        });
    }
    ctx.wait_idle()?;
    let ledger = ctx.ledger();
    let base = ledger.total_bytes();
    ledger.reset_peak();
    let mut trainer = Trainer::new(ctx, Arc::clone(dataset), init, config, Owner::Run(u64::MAX))?;
    for _ in 0..steps {
        trainer.step()?;
    }
    let peak = ledger.snapshot().peak_bytes;
    // The losses' read-backs land before the run goes (dropped in flight, they fail noisily).
    trainer.flush_metrics()?;
    drop(trainer);
    ctx.wait_idle()?;
    Ok(peak.saturating_sub(base))
}

/// A prediction next to the peak measured on the run it predicts.
#[derive(Clone, Debug, PartialEq)]
pub struct PeakCheck {
    /// The run, with the intersections per splat measured on its initial splats.
    pub shape: RunShape,
    pub predicted: Prediction,
    pub measured: u64,
}

impl PeakCheck {
    /// (predicted − measured) / measured.
    #[must_use]
    pub fn relative_error(&self) -> f64 {
        self.predicted.peak_bytes as f64 / self.measured.max(1) as f64 - 1.0
    }
}

/// Predicts the peak of `run` with `model` ([`MeasuredRun::shape`], the intersections per
/// splat from [`measure_intersections_per_splat`] on its initial splats), then measures it.
pub fn check_peak(
    ctx: &GpuContext,
    model: &MemoryModel,
    dataset: &Arc<Dataset>,
    run: &MeasuredRun,
) -> Result<PeakCheck, GpuError> {
    let init = run.init(dataset);
    let shape = run.shape(dataset, measure_intersections_per_splat(ctx, dataset, &init)?);
    let predicted = model.predict(&shape);
    let measured = measure_run_peak(ctx, dataset, &init, run.config(), run.steps)?;
    Ok(PeakCheck { shape, predicted, measured })
}
