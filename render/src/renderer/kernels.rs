//! The rasterizer's kernels declared: each entry point and the bindings of its group 0, as its
//! WGSL declares them (`kernels/*.wgsl`; `splat_params.wgsl` holds bindings 0 to 8 of the
//! projection's three). The renderer binds each one's buffers in this order.

use crate::kernels::compute::Binding::{self, Read, ReadWrite};
use crate::kernels::compute::KernelDecl;

/// `splat_params.wgsl`'s bindings 0 to 8 (the render uniform and the splats' eight parameter
/// buffers, all read), then `rest`: the bindings of a projection kernel.
const fn after_splat_params<const N: usize, const ALL: usize>(
    rest: [(u32, Binding); N],
) -> [(u32, Binding); ALL] {
    assert!(ALL == N + 9, "nine bindings of splat_params.wgsl and the kernel's own");
    let mut all = [(0, Read); ALL];
    let mut i = 0;
    while i < ALL {
        all[i] = if i < 9 { (i as u32, Read) } else { rest[i - 9] };
        i += 1;
    }
    all
}

/// `project_forward.wgsl`: depths, tiles touched, visibility and the totals written, the
/// filter's rules read.
pub(super) const PROJECT_FORWARD: KernelDecl = KernelDecl {
    label: "project_forward",
    entry: "main",
    bindings: &after_splat_params::<5, 14>([
        (9, ReadWrite),
        (10, ReadWrite),
        (11, ReadWrite),
        (12, ReadWrite),
        (13, Read),
    ]),
};

/// `project_rank.wgsl`: the band and the splats by depth read, the band's projected splats
/// written.
pub(super) const PROJECT_RANK: KernelDecl = KernelDecl {
    label: "project_rank",
    entry: "main",
    bindings: &after_splat_params::<3, 12>([(9, Read), (10, Read), (11, ReadWrite)]),
};

/// `project_backward.wgsl`: the band's partials read, the nine gradient rows and the
/// densification statistics written, ranks, counts and offsets read.
pub(super) const PROJECT_BACKWARD: KernelDecl = KernelDecl {
    label: "project_backward",
    entry: "main",
    bindings: &after_splat_params::<13, 22>([
        (9, Read),
        (10, ReadWrite),
        (11, ReadWrite),
        (12, ReadWrite),
        (13, ReadWrite),
        (14, ReadWrite),
        (15, ReadWrite),
        (16, ReadWrite),
        (17, ReadWrite),
        (18, ReadWrite),
        (19, Read),
        (20, Read),
        (21, Read),
    ]),
};

/// `intersect.wgsl` `compact`: the visible splats gathered in depth order.
pub(super) const COMPACT: KernelDecl = KernelDecl {
    label: "compact",
    entry: "compact",
    bindings: &[(0, Read), (1, Read), (3, ReadWrite), (4, ReadWrite), (5, Read), (9, ReadWrite)],
};

/// `intersect.wgsl` `gather_counts`: each visible splat's intersections, by depth rank.
pub(super) const GATHER_COUNTS: KernelDecl = KernelDecl {
    label: "gather_counts",
    entry: "gather_counts",
    bindings: &[(0, Read), (2, ReadWrite), (3, ReadWrite), (4, ReadWrite)],
};

/// `intersect.wgsl` `band_bounds`: where each depth band starts.
pub(super) const BAND_BOUNDS: KernelDecl = KernelDecl {
    label: "band_bounds",
    entry: "band_bounds",
    bindings: &[(0, Read), (5, Read), (13, ReadWrite)],
};

/// `intersect.wgsl` `emit`: a band's (tile, intersection) pairs.
pub(super) const EMIT: KernelDecl = KernelDecl {
    label: "emit",
    entry: "emit",
    bindings: &[
        (0, Read),
        (4, ReadWrite),
        (5, Read),
        (6, ReadWrite),
        (7, ReadWrite),
        (10, ReadWrite),
        (11, Read),
        (12, Read),
    ],
};

/// `intersect.wgsl` `tile_ranges`: each tile's run of the sorted pairs.
pub(super) const TILE_RANGES: KernelDecl = KernelDecl {
    label: "tile_ranges",
    entry: "tile_ranges",
    bindings: &[(6, ReadWrite), (8, ReadWrite), (12, Read)],
};

/// `intersect.wgsl` `chunk_sums`: the whole chunks of a splat's partials, added once.
pub(super) const CHUNK_SUMS: KernelDecl = KernelDecl {
    label: "chunk_sums",
    entry: "chunk_sums",
    bindings: &[(10, ReadWrite), (12, Read), (14, ReadWrite)],
};

/// `rasterize_forward.wgsl`: the band's list read; the image, transmittance, last entry and
/// last band of each pixel written.
pub(super) const RASTERIZE_FORWARD: KernelDecl = KernelDecl {
    label: "rasterize_forward",
    entry: "main",
    bindings: &[
        (0, Read),
        (1, Read),
        (2, Read),
        (3, Read),
        (4, ReadWrite),
        (5, ReadWrite),
        (6, ReadWrite),
        (7, Read),
        (8, ReadWrite),
    ],
};

/// `rasterize_backward.wgsl` (either reduction): the band's list and the forward pass's
/// per-pixel state read, the partials and the carry between bands written.
pub(super) const RASTERIZE_BACKWARD: KernelDecl = KernelDecl {
    label: "rasterize_backward",
    entry: "main",
    bindings: &[
        (0, Read),
        (1, Read),
        (2, Read),
        (3, Read),
        (4, Read),
        (5, Read),
        (6, Read),
        (7, Read),
        (8, ReadWrite),
        (9, Read),
        (10, ReadWrite),
    ],
};
