//! WGSL compute kernels, each beside its Rust wrapper, and the pieces they share.
//!
//! WGSL has no `#include`: each kernel's source is the concatenation of `float_bits.wgsl`
//! (NaN, infinity and sign tests on bits, which fast math cannot fold), `common.wgsl` (the
//! constants, structs and math of render/MATH.md), where needed `binary16.wgsl` and
//! `splat_params.wgsl` (the parameter bindings and the projection), and the kernel itself. [`shader_sources`] lists
//! every composition, so one test validates them all with naga.

pub mod compute;
pub mod kmeans;
pub mod present;
pub mod scan;
pub mod sort;

pub use scan::DispatchLimits;

use bytemuck::{Pod, Zeroable};

/// Tests of floats on their bits (finite, non-negative, safe to divide by), for kernels here
/// and in the trainer: fast math may fold float comparisons as if NaN did not exist.
pub const FLOAT_BITS: &str = include_str!("float_bits.wgsl");
const COMMON: &str = concat!(include_str!("float_bits.wgsl"), "\n", include_str!("common.wgsl"));
const SPLAT_PARAMS: &str = include_str!("splat_params.wgsl");
/// Conversions of binary16 values packed two to a word (SH bands stored in 16 bits), for
/// kernels here and in the trainer.
pub const BINARY16: &str = include_str!("binary16.wgsl");

/// How the backward rasterizer sums a list entry's gradient over the pixels of its tile. Every
/// variant makes the same fixed tree of additions (`rasterize_backward.wgsl`), so all give the
/// same bits: no float atomics, and nothing depends on the adapter's subgroup width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The tree's lower levels within the adapter's subgroups (adapter feature `SUBGROUP`),
    /// whatever width the driver picks; compiled for the adapter's one width where all its
    /// pipelines have the same ([`Kernel::constants`]).
    Subgroup,
    /// As `Subgroup`, the width always read at run time, as adapters whose pipelines differ
    /// in width (AMD, Intel) run it: for tests on adapters of one width.
    SubgroupAnyWidth,
    /// Workgroup memory only, in groups of `lanes` invocations (a power of two, 4..=64):
    /// works everywhere, slower. Other widths than 8 stand in for other adapters' subgroups
    /// in tests and the self-test.
    Portable { lanes: u32 },
}

impl Reduction {
    /// The portable reduction as the renderer uses it on adapters without subgroups.
    pub const PORTABLE: Self = Self::Portable { lanes: 8 };
}

/// Which kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    ProjectForward,
    ProjectRank,
    ProjectBackward,
    Intersect,
    RasterizeForward,
    RasterizeBackward(Reduction),
}

impl Kernel {
    pub const ALL: [Self; 7] = [
        Self::ProjectForward,
        Self::ProjectRank,
        Self::ProjectBackward,
        Self::Intersect,
        Self::RasterizeForward,
        Self::RasterizeBackward(Reduction::Subgroup),
        Self::RasterizeBackward(Reduction::PORTABLE),
    ];

    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::ProjectForward => "project_forward",
            Self::ProjectRank => "project_rank",
            Self::ProjectBackward => "project_backward",
            Self::Intersect => "intersect",
            Self::RasterizeForward => "rasterize_forward",
            Self::RasterizeBackward(Reduction::Subgroup) => "rasterize_backward (subgroups)",
            Self::RasterizeBackward(Reduction::SubgroupAnyWidth) => {
                "rasterize_backward (subgroups, any width)"
            }
            Self::RasterizeBackward(Reduction::Portable { .. }) => "rasterize_backward (portable)",
        }
    }

    /// The full WGSL source of the kernel.
    #[must_use]
    pub fn source(self) -> String {
        let parts: &[&str] = match self {
            Self::ProjectForward => {
                &[COMMON, BINARY16, SPLAT_PARAMS, include_str!("project_forward.wgsl")]
            }
            Self::ProjectRank => {
                &[COMMON, BINARY16, SPLAT_PARAMS, include_str!("project_rank.wgsl")]
            }
            Self::ProjectBackward => {
                &[COMMON, BINARY16, SPLAT_PARAMS, include_str!("project_backward.wgsl")]
            }
            Self::Intersect => &[COMMON, include_str!("intersect.wgsl")],
            Self::RasterizeForward => &[COMMON, include_str!("rasterize_forward.wgsl")],
            // Naga (wgpu 30) takes subgroup operations without `enable subgroups;` (it refuses
            // the directive); the device feature `SUBGROUP` is what allows them.
            Self::RasterizeBackward(Reduction::Subgroup | Reduction::SubgroupAnyWidth) => &[
                COMMON,
                include_str!("rasterize_backward.wgsl"),
                include_str!("reduce_subgroup.wgsl"),
            ],
            Self::RasterizeBackward(Reduction::Portable { .. }) => &[
                COMMON,
                include_str!("rasterize_backward.wgsl"),
                include_str!("reduce_portable.wgsl"),
            ],
        };
        parts.join("\n")
    }
}

impl Kernel {
    /// Values of the source's pipeline-overridable constants on `adapter`.
    #[must_use]
    pub fn constants(self, adapter: &wgpu::AdapterInfo) -> Vec<(&'static str, f64)> {
        match self {
            Self::RasterizeBackward(Reduction::Portable { lanes }) => {
                vec![("LANES", f64::from(lanes))]
            }
            // An adapter whose pipelines all run at one subgroup width (lavapipe, NVIDIA) gets
            // its reduction compiled for that width: the branches on the width are then gone
            // when the pipeline is built. A CPU driver runs every branch it cannot prove
            // uniform: lavapipe's backward runs about a quarter faster without them
            // (bench-render, BENCHMARKS.md). The tree, and so every bit, is the same.
            Self::RasterizeBackward(Reduction::Subgroup)
                if adapter.subgroup_min_size == adapter.subgroup_max_size =>
            {
                vec![("SUBGROUP_WIDTH", f64::from(adapter.subgroup_min_size))]
            }
            _ => Vec::new(),
        }
    }
}

/// Every WGSL composition the crate builds, with a label: for naga validation in tests.
#[must_use]
pub fn shader_sources() -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> =
        Kernel::ALL.iter().map(|k| (k.label().to_string(), k.source())).collect();
    all.extend(scan::shader_sources());
    all.extend(sort::shader_sources());
    all.push(("present".into(), include_str!("present.wgsl").into()));
    all.push(("k-means assign (kmeans.wgsl)".into(), kmeans::SHADER.into()));
    all
}

/// Camera and settings of one render. Keep in sync with `RenderUniform` in common.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RenderUniform {
    /// Column-major, as WGSL's mat4x4.
    pub camera_from_world: [[f32; 4]; 4],
    pub camera_position: [f32; 4],
    pub background: [f32; 4],
    pub focal: [f32; 2],
    pub principal: [f32; 2],
    pub image_size: [u32; 2],
    pub tiles: [u32; 2],
    pub num_splats: u32,
    /// Active SH degree (what the colour uses).
    pub sh_degree: u32,
    pub antialiased: u32,
    /// SH degree the parameter buffers hold.
    pub sh_degree_stored: u32,
    /// 1 when SH bands 1..=3 are stored as binary16 pairs (`ShPrecision::F16`).
    pub sh_half: u32,
    /// The projection's backward pass, one depth band a pass: the band's ranks among the
    /// visible splats and its first intersection's number.
    pub band_first: u32,
    pub band_end: u32,
    pub band_base: u32,
    /// The first splat of the window the parameters are bound from (`num_splats` of them;
    /// `gpu_splats::splat_window`).
    pub window_first: u32,
    /// What the projection's backward pass adds to the densification statistic: 0 the
    /// signed statistic, 1 the absolute one (`RenderSettings::growth`).
    pub growth: u32,
    pub(crate) _pad: [u32; 2],
    /// The splats drawn (`RenderSettings::keep`): centres within `keep_min.xyz ..=
    /// keep_max.xyz` and opacity logits at least `keep_min.w`, when `keep_max.w` is 1.
    pub keep_min: [f32; 4],
    pub keep_max: [f32; 4],
    /// Centres within `sqrt(keep_sphere.w)` of `keep_sphere.xyz` (no sphere when `w` < 0).
    pub keep_sphere: [f32; 4],
    /// Largest log-scale at most `keep_size[0]`; `keep_size[1]` is 1 when the box is turned
    /// (`keep_turn`), else 0; `keep_size[2]` the number of selections and `keep_size[3]`
    /// where the scene cells start, plus one (0: none), in the filter's rules (a buffer of
    /// their own: renderer/uniforms.rs, `filter_rules`).
    pub keep_size: [f32; 4],
    /// A turned box's rotation about its centre, a unit quaternion `[x, y, z, w]`: centres
    /// within `keep_min.xyz ..= keep_max.xyz` once turned back.
    pub keep_turn: [f32; 4],
}
const _: () = assert!(size_of::<RenderUniform>() == 256);

/// Uniform of the intersection kernels. Keep in sync with intersect.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct IntersectUniform {
    pub num_splats: u32,
    pub num_visible: u32,
    pub num_intersections: u32,
    /// The least visible depth's bits, subtracted from every depth key.
    pub depth_min: u32,
    pub tiles: [u32; 2],
    pub image_size: [u32; 2],
    /// Bands start at the first rank whose intersections start at or after a multiple of
    /// this (intersect.wgsl, `band_bounds`).
    pub band_target: u32,
    pub num_bands: u32,
    pub(crate) _pad: [u32; 2],
}
const _: () = assert!(size_of::<IntersectUniform>() == 48);

/// One depth band of a frame. Keep in sync with `BandUniform` in common.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BandUniform {
    /// The band's first rank among the visible splats, and how many it holds.
    pub first: u32,
    pub count: u32,
    /// The frame's number of the band's first intersection.
    pub base: u32,
    /// How many intersections it holds.
    pub intersections: u32,
}
const _: () = assert!(size_of::<BandUniform>() == 16);

/// Uniform of the rasterizers, for one depth band. Keep in sync with `RasterUniform` in common.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RasterUniform {
    pub image_size: [u32; 2],
    pub tiles: [u32; 2],
    pub background: [f32; 4],
    /// This band (0 = the front) and how many the frame has.
    pub band: u32,
    pub bands: u32,
    pub(crate) _pad: [u32; 2],
}
const _: () = assert!(size_of::<RasterUniform>() == 48);

/// Bytes of one `Projected` (common.wgsl).
pub const PROJECTED_BYTES: u64 = 48;
/// Floats of a partial per tile intersection: dL/d(projected) (mean2d 2, conic 3, colour 3,
/// opacity 1), then the absolute growth statistic's share (the pixels' NDC mean2d gradient
/// norms, summed). Keep in sync with `PARTIALS` in common.wgsl.
pub const PROJECTED_GRAD_FLOATS: u64 = 10;
