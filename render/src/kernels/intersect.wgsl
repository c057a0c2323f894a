// Tile intersections, between the projection and the rasterizer, and the backward gather.
//
// compact: the visible splats' depth keys (depth bits − the least, so only the bits that vary
//   are sorted) and ids, each at its place among the visible splats (an exclusive scan of the
//   projection's 0/1 flags), so the order before the sort is the splat order.
// gather_counts: counts[j] = tiles touched by the j-th visible splat in depth order; that
//   splat's entry in `tiles_touched` becomes its rank j + 1 (0 stays 0: not visible), which
//   is how the projection's backward pass finds its intersections.
// band_bounds: the depth bands (renderer.rs): band k holds the ranks from the first whose
//   intersections start at or after k · band_target, so a band's intersections number at
//   most band_target plus one splat's tiles.
// emit, for one band (its ranks first .. first + count): for the k-th splat of the band, one
//   (tile id, intersection id) pair per tile it touches, at offsets[first + k] − base.. (an
//   exclusive scan of counts, made band-local); the intersection id is that position, and
//   `splat_of` maps it to k, the splat's place in the band's projected array. Pairs come out
//   in depth order, so a stable sort by tile id leaves each tile's list front to back.
// chunk_sums, for one band, after the rasterizer's backward pass: chunk c is the frame's
//   intersections c · CHUNK .. (c + 1) · CHUNK (numbered in the frame, so that how the frame
//   is cut into bands changes no sum); for each chunk inside the band whose intersections are
//   all one splat's (a splat's are consecutive: its first and last tell), their partials are
//   added in order into the chunk's first entry, which the projection's backward pass then
//   reads for the whole chunk. A fixed order: the same bits every run.
// tile_ranges, for one band: after the tile sort, [start, end) of each tile's run of pairs
//   among the band's intersections; entry `tiles` (one past the last tile) is the run of the
//   sentinel tile id, which `emit` gives the slots it could not fill (below): no tile's list
//   holds them, and the backward pass zeroes them.

struct IntersectUniform {
    num_splats: u32,
    num_visible: u32,
    num_intersections: u32,
    depth_min: u32,
    tiles: vec2<u32>,
    image_size: vec2<u32>,
    // Intersections a band starts at (multiples of), and how many bands.
    band_target: u32,
    num_bands: u32,
    _pad: vec2<u32>,
}

@group(0) @binding(0) var<storage, read> iu: IntersectUniform;
@group(0) @binding(1) var<storage, read> depths: array<u32>;              // [N] depth bits
@group(0) @binding(2) var<storage, read_write> tiles_touched: array<u32>; // [N], then ranks
@group(0) @binding(3) var<storage, read_write> splat_ids: array<u32>;     // [V] by depth
@group(0) @binding(4) var<storage, read_write> counts: array<u32>;        // [N] flags, then [V]
@group(0) @binding(5) var<storage, read> offsets: array<u32>;             // exclusive scan of counts
@group(0) @binding(6) var<storage, read_write> tile_ids: array<u32>;      // [band's M]
@group(0) @binding(7) var<storage, read_write> isect_ids: array<u32>;     // [band's M]
@group(0) @binding(8) var<storage, read_write> ranges: array<vec2<u32>>;  // [tiles + 1]
@group(0) @binding(9) var<storage, read_write> depth_keys: array<u32>;    // [V]
@group(0) @binding(10) var<storage, read_write> splat_of: array<u32>;     // [band's M]
@group(0) @binding(11) var<storage, read> projected: array<Projected>;    // [band's count]
@group(0) @binding(12) var<storage, read> band: BandUniform;
@group(0) @binding(13) var<storage, read_write> bounds: array<vec2<u32>>; // [bands + 1]
@group(0) @binding(14) var<storage, read_write> partials: array<f32>;     // [band's M, PARTIALS]

const GROUP: u32 = 256u;

fn flat(gid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (gid.x + gid.y * groups.x) * GROUP + lid;
}

@compute @workgroup_size(256)
fn compact(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
           @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups, lid);
    if i >= iu.num_splats || counts[i] == 0u {
        return;
    }
    let at = offsets[i];
    depth_keys[at] = depths[i] - iu.depth_min;
    splat_ids[at] = i;
}

@compute @workgroup_size(256)
fn gather_counts(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                 @builtin(num_workgroups) groups: vec3<u32>) {
    let j = flat(gid, groups, lid);
    if j >= iu.num_visible {
        return;
    }
    let splat = splat_ids[j];
    counts[j] = tiles_touched[splat];
    tiles_touched[splat] = j + 1u;
}

@compute @workgroup_size(256)
fn band_bounds(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
               @builtin(num_workgroups) groups: vec3<u32>) {
    let k = flat(gid, groups, lid);
    if k > iu.num_bands {
        return;
    }
    // The first rank whose intersections start at or after k · band_target (offsets rise
    // with the rank): a binary search, a fixed number of integer steps.
    let goal = k * iu.band_target;
    var lo = 0u;
    var hi = iu.num_visible;
    if k == iu.num_bands {
        lo = hi;
    }
    while lo < hi {
        let mid = (lo + hi) / 2u;
        if offsets[mid] < goal {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    bounds[k] = vec2<u32>(lo, select(iu.num_intersections, offsets[lo], lo < iu.num_visible));
}

@compute @workgroup_size(256)
fn emit(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let k = flat(gid, groups, lid);
    if k >= band.count {
        return;
    }
    let j = band.first + k;
    let p = projected[k];
    // The same tiles (each row's run), in the same order, as `tiles_hit` counted in the
    // projection, from the values projected again for the band. Should this shader's
    // arithmetic round a marginal tile differently (another fused multiply-add), it still
    // writes exactly its `counts[j]` slots: never past them, and any left over get the
    // sentinel tile id `tiles`, which sorts after every real tile and which no tile's list
    // holds: the splat then misses a marginal tile (a flaw in marginal pixels, never a fault),
    // but is never composited twice.
    let span = splat_tile_span(p.mean2d, p.conic, p.sigma_cut, iu.tiles);
    let start = offsets[j] - band.base;
    let end = start + counts[j];
    var at = start;
    for (var ty = span.y; ty < span.w; ty++) {
        let run = row_run(p.mean2d, p.conic, p.sigma_cut, ty, span, iu.image_size);
        for (var tx = run.x; tx < run.y && at < end; tx++) {
            tile_ids[at] = ty * iu.tiles.x + tx;
            isect_ids[at] = at;
            splat_of[at] = k;
            at++;
        }
    }
    let sentinel = iu.tiles.x * iu.tiles.y;
    for (; at < end; at++) {
        tile_ids[at] = sentinel;
        isect_ids[at] = at;
        splat_of[at] = k;
    }
}

@compute @workgroup_size(256)
fn tile_ranges(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
               @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups, lid);
    let m = band.intersections;
    if i >= m {
        return;
    }
    let tile = tile_ids[i];
    if i == 0u || tile_ids[i - 1u] != tile {
        ranges[tile].x = i;
    }
    if i + 1u == m || tile_ids[i + 1u] != tile {
        ranges[tile].y = i + 1u;
    }
}

@compute @workgroup_size(256)
fn chunk_sums(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
              @builtin(num_workgroups) groups: vec3<u32>) {
    // The band's first whole chunk, then this invocation's, in the band's numbering.
    let c = (band.base + CHUNK - 1u) / CHUNK + flat(gid, groups, lid);
    let first = c * CHUNK - band.base;
    if first + CHUNK > band.intersections || splat_of[first] != splat_of[first + CHUNK - 1u] {
        return;
    }
    var sum: array<f32, PARTIALS>;
    for (var e = first; e < first + CHUNK; e++) {
        for (var k = 0u; k < PARTIALS; k++) {
            sum[k] += partials[PARTIALS * e + k];
        }
    }
    for (var k = 0u; k < PARTIALS; k++) {
        partials[PARTIALS * first + k] = sum[k];
    }
}
