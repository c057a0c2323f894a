// Rasterization, backward, of one depth band (renderer.rs), without float atomics: one
// workgroup per tile, one thread per pixel, walking the tile's list back to front from each
// pixel's last composited entry (MATH.md, Backward). The bands go back to front; a pixel's
// walk (its transmittance and the colour behind) carries from one to the next in `carry`. Each list entry's gradient with respect to its projected values
// (mean2d x, y; conic A, B, C; colour r, g, b; opacity), and the norm of each pixel's NDC
// mean2d gradient (the absolute growth statistic, which does not cancel across the pixels as
// the sum of the gradients does), are summed over the tile's pixels in a
// fixed order and written once, to `partials` at the entry's intersection id; the projection's
// backward pass then adds each splat's entries in their order. No sum depends on which
// thread ran first, so the same scene and cotangent give the same bits every run.
//
// The sum over the tile is one fixed tree, whatever the adapter's subgroup width: the 256
// pixels in their slot order (slot = pixel index in the tile), added in pairs, the pairs'
// sums in pairs, and so on (a complete binary tree of depth 8). A group of `width` slots (a
// subgroup of the adapter, any power of two; or LANES slots through workgroup memory) makes
// the tree's lower levels in `lane_sum`, its first lane writes the group's sum to workgroup
// memory, one slot per list entry, and after every `slots` entries the workgroup makes the
// upper levels over the groups' sums (`tree_sum`). Since float addition is commutative and
// every level pairs the same values, the bits are the same for subgroups of 4 to 128 lanes
// and without subgroups: a driver's choice of width changes nothing. (`lane_sum`, `lane_any`
// and the entry point come from reduce_{subgroup,portable}.wgsl.)

@group(0) @binding(0) var<storage, read> ru: RasterUniform;
@group(0) @binding(1) var<storage, read> projected: array<Projected>;   // [band's splats]
@group(0) @binding(2) var<storage, read> isect_ids: array<u32>;        // [band's M] tile-sorted
@group(0) @binding(3) var<storage, read> ranges: array<vec2<u32>>;     // [tiles + 1]
@group(0) @binding(4) var<storage, read> final_t: array<f32>;          // [H, W]
@group(0) @binding(5) var<storage, read> last_entry: array<u32>;       // [H, W]
@group(0) @binding(6) var<storage, read> v_image: array<vec4<f32>>;    // [H, W] dL/d(rgb, alpha)
@group(0) @binding(7) var<storage, read> splat_of: array<u32>;         // [band's M]
@group(0) @binding(8) var<storage, read_write> partials: array<f32>;   // [band's M, PARTIALS]
@group(0) @binding(9) var<storage, read> last_band: array<u32>;        // [H, W]
// What the bands behind this one left of each pixel's walk: transmittance, and the colour
// behind per unit transmittance. Read and written only when the frame has several bands.
@group(0) @binding(10) var<storage, read_write> carry: array<vec4<f32>>; // [H, W]

const BATCH: u32 = 128u;
const THREADS: u32 = 256u;

var<workgroup> batch_isect: array<u32, BATCH>;
var<workgroup> batch_mean: array<vec2<f32>, BATCH>;
var<workgroup> batch_conic: array<vec4<f32>, BATCH>;   // A, B, C, opacity
var<workgroup> batch_color: array<vec4<f32>, BATCH>;   // rgb, sigma_cut
// Group sums: [slot][value][group], slots × PARTIALS × groups ≤ GROUP_SUMS (the reductions'
// own size: what the workgroup's 16 KiB leave them).
var<workgroup> group_sums: array<f32, GROUP_SUMS>;
var<workgroup> max_last: atomic<u32>;

// The complete binary tree over the `count` (a power of two, 1 to 64) group sums from
// `first`: neighbours added in pairs, then pairs of those sums, and so on. Written out without
// loops, as the lane sums below it are: llvmpipe (lavapipe, Mesa 22.3) silently ends a shader
// invocation's loops after 65,535 passes in all, and a loop here cost every list entry about
// four more passes (with loops in both, a training run's refined splats summed up to 25% off
// the reference; trainer/tests/trained_gradients.rs checks that state). Written out, the
// backward measured about 25% slower on lavapipe than with this loop (100k splats at 256²),
// but the loop alone, with the nine values below written out, still let a tile of 6,900
// unsaturated entries run past the cap.
fn group2(i: u32) -> f32 {
    return group_sums[i] + group_sums[i + 1u];
}
fn group4(i: u32) -> f32 {
    return group2(i) + group2(i + 2u);
}
fn group8(i: u32) -> f32 {
    return group4(i) + group4(i + 4u);
}
fn group16(i: u32) -> f32 {
    return group8(i) + group8(i + 8u);
}
fn group32(i: u32) -> f32 {
    return group16(i) + group16(i + 16u);
}
fn tree_sum(first: u32, count: u32) -> f32 {
    switch count {
        case 1u: { return group_sums[first]; }
        case 2u: { return group2(first); }
        case 4u: { return group4(first); }
        case 8u: { return group8(first); }
        case 16u: { return group16(first); }
        case 32u: { return group32(first); }
        default: { return group32(first) + group32(first + 32u); }
    }
}

// One value of a list entry's gradient summed over the group's lanes, its first lane writing
// the group's sum (`lane_sum` takes every invocation: `any` is uniform within the group).
fn group_value(value: f32, any: bool, slot: u32, first_lane: bool, at: u32) {
    var sum = 0.0;
    if any {
        sum = lane_sum(value, slot);
    }
    if first_lane {
        group_sums[at] = sum;
    }
}

// `slot` (0..256, a permutation of the invocations: the reduction's order) runs along the
// tile's rows: pixel (slot % 16, slot / 16) of the tile; `group` is slot / num_groups' width.
// (A 1D workgroup: subgroup builtins need one.)
fn backward(gid: vec3<u32>, lid: u32, slot: u32, groups: vec3<u32>, num_groups: u32,
            group: u32, first_lane: bool) {
    // One workgroup more than tiles: the last one's "tile" is the sentinel id of the entries
    // `emit` could not place (intersect.wgsl). No pixel of it is inside the image, so it only
    // zeroes their partials, which the projection's backward pass then adds as nothing.
    let tile = gid.x + gid.y * groups.x;
    if tile > ru.tiles.x * ru.tiles.y {
        return;
    }
    let tile_xy = vec2<u32>(tile % ru.tiles.x, tile / ru.tiles.x);
    let pixel = tile_xy * TILE + vec2<u32>(slot % TILE, slot / TILE);
    let inside = pixel.x < ru.image_size.x && pixel.y < ru.image_size.y;
    let centre = vec2<f32>(pixel) + 0.5;
    let range = ranges[tile];

    var t_final = 1.0;
    // The entries of this band's list the pixel composited: all of them in a band in front of
    // the band of its last composited splat, up to that one in its band, none behind it.
    var last = 0u;
    var v_rgb = vec3<f32>(0.0);
    var v_alpha_out = 0.0;
    var t = 1.0;
    var behind = vec3<f32>(0.0);   // S: colour of what lies behind, per unit transmittance
    let px = pixel.y * ru.image_size.x + pixel.x;
    if inside {
        t_final = final_t[px];
        let band_of_last = last_band[px] & ~SATURATED;
        if ru.band == band_of_last {
            last = last_entry[px];
        } else if ru.band < band_of_last {
            last = range.y - range.x;
        }
        v_rgb = v_image[px].xyz;
        v_alpha_out = v_image[px].w;
        t = t_final;
        if ru.band + 1u < ru.bands {
            let carried = carry[px];
            t = carried.x;
            behind = carried.yzw;
        }
    }
    if lid == 0u {
        atomicStore(&max_last, 0u);
    }
    workgroupBarrier();
    atomicMax(&max_last, last);
    let tile_last = workgroupUniformLoad(&max_last);

    // Entries no pixel of the tile composited have no gradient.
    for (var e = range.x + tile_last + lid; e < range.y; e += THREADS) {
        let id = isect_ids[e];
        for (var c = 0u; c < PARTIALS; c++) {
            partials[PARTIALS * id + c] = 0.0;
        }
    }

    let bg_dot = dot(ru.background.xyz, v_rgb);
    // List entries a run sums at once: one a slot, as many as the group sums hold.
    let slots = min(THREADS / num_groups, GROUP_SUMS / (PARTIALS * num_groups));
    let half = 0.5 * vec2<f32>(ru.image_size);

    // Batches from the back of the list (only up to the furthest last entry of the tile).
    var batch_end = range.x + tile_last;
    while batch_end > range.x {
        let batch_start = max(range.x, select(0u, batch_end - BATCH, batch_end >= BATCH));
        if lid < batch_end - batch_start {
            let id = isect_ids[batch_start + lid];
            let p = projected[splat_of[id]];
            batch_isect[lid] = id;
            batch_mean[lid] = p.mean2d;
            batch_conic[lid] = vec4<f32>(p.conic, p.opacity);
            batch_color[lid] = vec4<f32>(p.color, p.sigma_cut);
        }
        workgroupBarrier();
        // Runs of `slots` entries, back to front.
        var run_end = batch_end - batch_start;
        while run_end > 0u {
            let run_start = select(0u, run_end - slots, run_end > slots);
            for (var k = run_end; k > run_start; k--) {
                let b = k - 1u;
                let entry = batch_start + b - range.x;   // position in the tile's list
                let con = batch_conic[b];
                let d = centre - batch_mean[b];
                let sigma = conic_sigma(con.xyz, d);
                var grad: array<f32, PARTIALS>;
                let contributes = entry < last && composited(sigma, batch_color[b].w);
                if contributes {
                    let g = exp(-sigma);
                    let raw_alpha = con.w * g;
                    let alpha = min(ALPHA_MAX, raw_alpha);
                    t = t / (1.0 - alpha);          // transmittance in front of this splat
                    let c = batch_color[b].xyz;
                    let v_color = (alpha * t) * v_rgb;
                    let v_alpha = t * dot(c - behind, v_rgb)
                        + (v_alpha_out - bg_dot) * t_final / (1.0 - alpha);
                    behind = c * alpha + (1.0 - alpha) * behind;
                    grad[5] = v_color.x;
                    grad[6] = v_color.y;
                    grad[7] = v_color.z;
                    if raw_alpha <= ALPHA_MAX {
                        let v_sigma = -alpha * v_alpha;
                        grad[8] = g * v_alpha;
                        grad[2] = v_sigma * 0.5 * d.x * d.x;
                        grad[3] = v_sigma * d.x * d.y;
                        grad[4] = v_sigma * 0.5 * d.y * d.y;
                        // d = centre − mean2d, so ∂σ/∂mean2d = −(A dx + B dy, B dx + C dy).
                        grad[0] = -v_sigma * (con.x * d.x + con.y * d.y);
                        grad[1] = -v_sigma * (con.y * d.x + con.z * d.y);
                        grad[9] = length(vec2<f32>(grad[0], grad[1]) * half);
                    }
                }
                let at = (b - run_start) * PARTIALS * num_groups + group;
                // Groups with no contribution skip the sums (uniform within the group). The ten
                // values written out, not looped over: see `tree_sum`.
                let any = lane_any(contributes);
                group_value(grad[0], any, slot, first_lane, at);
                group_value(grad[1], any, slot, first_lane, at + num_groups);
                group_value(grad[2], any, slot, first_lane, at + 2u * num_groups);
                group_value(grad[3], any, slot, first_lane, at + 3u * num_groups);
                group_value(grad[4], any, slot, first_lane, at + 4u * num_groups);
                group_value(grad[5], any, slot, first_lane, at + 5u * num_groups);
                group_value(grad[6], any, slot, first_lane, at + 6u * num_groups);
                group_value(grad[7], any, slot, first_lane, at + 7u * num_groups);
                group_value(grad[8], any, slot, first_lane, at + 8u * num_groups);
                group_value(grad[9], any, slot, first_lane, at + 9u * num_groups);
            }
            workgroupBarrier();
            // Each (entry, value) of the run: the tree over its groups' sums.
            for (var q = lid; q < (run_end - run_start) * PARTIALS; q += THREADS) {
                let sum = tree_sum(q * num_groups, num_groups);
                partials[PARTIALS * batch_isect[run_start + q / PARTIALS] + q % PARTIALS] = sum;
            }
            workgroupBarrier();
            run_end = run_start;
        }
        batch_end = batch_start;
    }
    // The walk goes on in the band in front.
    if inside && ru.bands > 1u && ru.band > 0u {
        carry[px] = vec4<f32>(t, behind);
    }
}
