// Shared definitions of the splat kernels. Prepended to each kernel's source by
// `kernels::shader_source`. The math follows render/MATH.md; every function sits beside its
// vector-Jacobian product (`_vjp`), as in gsplat.

const TILE: u32 = 16u;
const NEAR: f32 = 0.01;
const DILATION: f32 = 0.3;
const ALPHA_MAX: f32 = 0.99;
const ALPHA_MIN: f32 = 0.003921569; // 1/255
const T_MIN: f32 = 0.0001;

// Keep in sync with `RenderUniform` in render/src/kernels/mod.rs (176 bytes).
struct RenderUniform {
    camera_from_world: mat4x4<f32>,
    camera_position: vec4<f32>,
    background: vec4<f32>,
    focal: vec2<f32>,
    principal: vec2<f32>,
    image_size: vec2<u32>,
    tiles: vec2<u32>,
    num_splats: u32,
    sh_degree: u32,
    antialiased: u32,
    sh_degree_stored: u32,
    // 1 when SH bands 1..=3 are stored as binary16 pairs (splat_params.wgsl).
    sh_half: u32,
    // The projection's backward pass, one depth band a pass: the band's ranks among the
    // visible splats [band_first, band_end) and its first intersection's number.
    band_first: u32,
    band_end: u32,
    band_base: u32,
    // The parameters, gradients and per-splat arrays are bound from this splat on, for
    // `num_splats` splats (a window: render/src/gpu_splats.rs `splat_window`); a kernel's
    // splat index is relative to it.
    window_first: u32,
    // What the projection's backward pass adds to a splat's densification statistic (its
    // first float): 0, the norm of its summed NDC mean2d gradient (3DGS's); 1, the sum of
    // each pixel's norm (the absolute statistic: `RenderSettings::growth`).
    growth: u32,
    // The splats drawn (RenderSettings::keep, a crop preview): centres within keep_min.xyz ..=
    // keep_max.xyz and opacity logits at least keep_min.w, when keep_max.w is 1.
    keep_min: vec4<f32>,
    keep_max: vec4<f32>,
    // Centres within sqrt(keep_sphere.w) of keep_sphere.xyz (no sphere when w < 0), and the
    // largest log-scale at most keep_size.x. keep_size.y is 1 when the box is turned about
    // its centre by the unit quaternion keep_turn (x, y, z, w); keep_size.z is the number of
    // selections and keep_size.w where the scene cells start, plus one (0: none), in the
    // filter's rules (project_forward.wgsl reads them from a buffer of their own).
    keep_sphere: vec4<f32>,
    keep_size: vec4<f32>,
    keep_turn: vec4<f32>,
}

// One projected splat. Keep in sync with `PROJECTED_BYTES` in kernels/mod.rs (48 bytes).
struct Projected {
    mean2d: vec2<f32>,
    opacity: f32,
    // A pixel is composited only where σ ≤ sigma_cut (MATH.md step 8).
    sigma_cut: f32,
    // (A, B, C): σ = ½(A dx² + C dy²) + B dx dy.
    conic: vec3<f32>,
    // Camera-space z (positive), whose bits are the depth sort's key.
    depth: f32,
    color: vec3<f32>,
}

// The rasterizers' parameters, for one depth band. Keep in sync with `RasterUniform` in
// kernels/mod.rs (48 bytes).
struct RasterUniform {
    image_size: vec2<u32>,
    tiles: vec2<u32>,
    background: vec4<f32>,
    // This band (0 = the front) and how many the frame has.
    band: u32,
    bands: u32,
    _pad: vec2<u32>,
}

// In `last_band`: the pixel saturated (its transmittance would have fallen below T_MIN), so
// the bands behind add nothing to it.
const SATURATED: u32 = 0x80000000u;

// One depth band of a frame (renderer.rs): consecutive visible splats in depth order and
// their intersections. Keep in sync with `BandUniform` in kernels/mod.rs (16 bytes).
struct BandUniform {
    // The band's first rank among the visible splats, and how many it holds.
    first: u32,
    count: u32,
    // The frame's number of the band's first intersection (its own are numbered from 0).
    base: u32,
    // How many intersections it holds.
    intersections: u32,
}

// Consecutive intersections of a band that `chunk_sums` (intersect.wgsl) adds into one, where
// they all belong to one splat: the projection's backward pass then adds a splat's partials
// in about count / CHUNK + 2 · CHUNK reads instead of count.
const CHUNK: u32 = 32u;

// Floats of a list entry's partial (rasterize_backward.wgsl): dL/d(mean2d x, y; conic A, B, C;
// colour r, g, b; opacity), then the norm of the pixels' NDC mean2d gradient summed pixel by
// pixel (the absolute growth statistic's share). Keep in sync with `PROJECTED_GRAD_FLOATS`
// in kernels/mod.rs.
const PARTIALS: u32 = 10u;

// σ at the 3σ ellipse: ½ · 3².
const SIGMA_3: f32 = 4.5;
// The pixel-centre rect of a tile is tested with this much slack on σ, so rounding never
// drops a tile that a pixel of it composites (MATH.md step 8).
const TILE_SLACK: f32 = 1e-4;

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// Where a splat can be composited: σ ≤ min(3σ's 4.5, ln(opacity / ALPHA_MIN)) (MATH.md step 8).
// Negative when the opacity is below ALPHA_MIN (the splat is culled).
fn sigma_cut(opacity: f32) -> f32 {
    return min(SIGMA_3, log(opacity / ALPHA_MIN));
}

// Half-extents in pixels of the ellipse σ ≤ cut: sqrt(2 cut Σ'₀₀), sqrt(2 cut Σ'₁₁), with Σ'
// the inverse of the conic. Not finite for a conic whose determinant rounds to 0 or below (a
// needle-thin splat): `extent_ok` tells, and such a splat touches no tile.
fn ellipse_extent(conic: vec3<f32>, cut: f32) -> vec2<f32> {
    let det = conic.x * conic.z - conic.y * conic.y;
    return sqrt(2.0 * cut * vec2<f32>(conic.z, conic.x) / det);
}

// Whether an extent is finite and at least 0, tested on its bits (float_bits.wgsl): a NaN
// turned into a loop bound hangs the GPU.
fn extent_ok(extent: vec2<f32>) -> bool {
    return is_nonnegative(extent.x) && is_nonnegative(extent.y);
}

// Tiles [min, max) per axis of the extent's bounding box.
fn tile_span(mean2d: vec2<f32>, extent: vec2<f32>, tiles: vec2<u32>) -> vec4<u32> {
    let t = vec2<f32>(tiles);
    let lo = clamp(floor((mean2d - extent) / f32(TILE)), vec2<f32>(0.0), t);
    let hi = clamp(floor((mean2d + extent) / f32(TILE)) + 1.0, vec2<f32>(0.0), t);
    return vec4<u32>(vec2<u32>(lo), vec2<u32>(hi));
}

// Tiles [min, max) per axis that a splat's ellipse σ ≤ cut may reach: its extent's bounding
// box, empty when the extent is not finite. The projection's count, `emit` and the visibility
// test all take their tiles from here.
fn splat_tile_span(mean2d: vec2<f32>, conic: vec3<f32>, cut: f32, tiles: vec2<u32>) -> vec4<u32> {
    let extent = ellipse_extent(conic, cut);
    if !extent_ok(extent) {
        return vec4<u32>(0u);
    }
    return tile_span(mean2d, extent, tiles);
}

fn conic_sigma(conic: vec3<f32>, d: vec2<f32>) -> f32 {
    return 0.5 * (conic.x * d.x * d.x + conic.z * d.y * d.y) + conic.y * d.x * d.y;
}

// Whether a pixel at σ composites a splat whose cut is `cut` (MATH.md step 8). Tested on
// σ's bits: a needle-thin splat's σ can overflow to ∞ − ∞ = NaN far along its box, and a NaN
// must not pass (the forward and backward rasterizers call this same test).
fn composited(sigma: f32, cut: f32) -> bool {
    return is_nonnegative(sigma) && sigma <= cut;
}

// Whether some pixel centre of tile `tile` (inside the image) can have σ ≤ cut: the least σ
// over the rect of those centres, which lies on its boundary when the mean is outside.
fn tile_touched(mean2d: vec2<f32>, conic: vec3<f32>, cut: f32, tile: vec2<u32>,
                image_size: vec2<u32>) -> bool {
    let lo = vec2<f32>(tile * TILE) + 0.5 - mean2d;
    let hi = vec2<f32>(min((tile + 1u) * TILE, image_size)) - 0.5 - mean2d;
    if all(lo <= vec2<f32>(0.0)) && all(hi >= vec2<f32>(0.0)) {
        return true;
    }
    var least = 3.4e38;
    for (var k = 0u; k < 2u; k++) {
        let dx = select(lo.x, hi.x, k == 1u);
        let dy = select(lo.y, hi.y, k == 1u);
        // Along the edge x = dx the least σ is at y = −B dx / C, clamped to the edge; likewise
        // along y = dy.
        least = min(least, conic_sigma(conic, vec2<f32>(dx, clamp(-conic.y * dx / conic.z, lo.y, hi.y))));
        least = min(least, conic_sigma(conic, vec2<f32>(clamp(-conic.y * dy / conic.x, lo.x, hi.x), dy)));
    }
    return least <= cut * (1.0 + TILE_SLACK) + TILE_SLACK;
}

// The 4×4-pixel blocks of tile `tile` (bit 4·row + column) that the splat's extent box,
// widened for rounding, overlaps: a pixel outside them has σ > cut. The forward rasterizer
// skips a splat for pixels outside its blocks without evaluating σ (half its time for small
// splats on lavapipe; the backward pass measured no gain, its cost is in the sums).
const BLOCK: u32 = 4u;

fn block_mask(mean2d: vec2<f32>, conic: vec3<f32>, cut: f32, tile: vec2<u32>) -> u32 {
    let extent = ellipse_extent(conic, cut) * (1.0 + TILE_SLACK) + 0.01;
    let origin = vec2<f32>(tile * TILE);
    let lo = floor((mean2d - extent - origin) / f32(BLOCK));
    let hi = floor((mean2d + extent - origin) / f32(BLOCK));
    // Fixed trip counts and comparisons only: no float turned into a loop bound or a shift.
    var columns = 0u;
    var rows = 0u;
    for (var k = 0u; k < 4u; k++) {
        let at = f32(k);
        columns |= select(0u, 1u << k, at >= lo.x && at <= hi.x);
        rows |= select(0u, 1u << k, at >= lo.y && at <= hi.y);
    }
    var mask = 0u;
    for (var row = 0u; row < 4u; row++) {
        mask |= select(0u, columns << (4u * row), (rows & (1u << row)) != 0u);
    }
    return mask;
}

// The block bit of the pixel at `local` in its tile.
fn pixel_block_bit(local: vec2<u32>) -> u32 {
    return 1u << ((local.y / BLOCK) * 4u + local.x / BLOCK);
}

// The tiles of row `ty` of `span` a splat touches, [first, end): an ellipse meets a row of
// tiles in one run, so the run's ends are found by `tile_touched` walking in from both ends of
// the span, and every tile between them counts. A splat across the frame costs two tests a
// row, not one a tile; should rounding call a marginal tile in the middle of the run
// untouched, it is emitted anyway (empty for its pixels: their own σ decides).
fn row_run(mean2d: vec2<f32>, conic: vec3<f32>, cut: f32, ty: u32, span: vec4<u32>,
           image_size: vec2<u32>) -> vec2<u32> {
    var first = span.x;
    while first < span.z && !tile_touched(mean2d, conic, cut, vec2<u32>(first, ty), image_size) {
        first++;
    }
    var end = span.z;
    while end > first && !tile_touched(mean2d, conic, cut, vec2<u32>(end - 1u, ty), image_size) {
        end--;
    }
    return vec2<u32>(first, end);
}

// Number of tiles a projected splat touches (0 = none): the runs of its rows within the
// bounding box of its extent. The projection counts with it and `emit` walks the same runs in
// the same order, from the same stored values.
fn tiles_hit(mean2d: vec2<f32>, conic: vec3<f32>, cut: f32, tiles: vec2<u32>,
             image_size: vec2<u32>) -> u32 {
    let span = splat_tile_span(mean2d, conic, cut, tiles);
    var hits = 0u;
    for (var ty = span.y; ty < span.w; ty++) {
        let run = row_run(mean2d, conic, cut, ty, span, image_size);
        hits += run.y - run.x;
    }
    return hits;
}

// Rotation matrix of a unit quaternion (w, x, y, z). Columns as WGSL stores them.
fn quat_to_rotmat(q: vec4<f32>) -> mat3x3<f32> {
    let w = q.x;
    let x = q.y;
    let y = q.z;
    let z = q.w;
    return mat3x3<f32>(
        vec3<f32>(1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y + w * z), 2.0 * (x * z - w * y)),
        vec3<f32>(2.0 * (x * y - w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z + w * x)),
        vec3<f32>(2.0 * (x * z + w * y), 2.0 * (y * z - w * x), 1.0 - 2.0 * (x * x + y * y)),
    );
}

// dL/dq (unit quaternion) from dL/dR.
fn quat_to_rotmat_vjp(q: vec4<f32>, v_r: mat3x3<f32>) -> vec4<f32> {
    let w = q.x;
    let x = q.y;
    let y = q.z;
    let z = q.w;
    // v_r[c][r] is dL/dR[r][c].
    let g = v_r;
    let vw = 2.0 * (x * (g[1][2] - g[2][1]) + y * (g[2][0] - g[0][2]) + z * (g[0][1] - g[1][0]));
    let vx = 2.0 * (-2.0 * x * (g[1][1] + g[2][2]) + y * (g[0][1] + g[1][0]) + z * (g[0][2] + g[2][0])
        + w * (g[1][2] - g[2][1]));
    let vy = 2.0 * (x * (g[0][1] + g[1][0]) - 2.0 * y * (g[0][0] + g[2][2]) + z * (g[1][2] + g[2][1])
        + w * (g[2][0] - g[0][2]));
    let vz = 2.0 * (x * (g[0][2] + g[2][0]) + y * (g[1][2] + g[2][1]) - 2.0 * z * (g[0][0] + g[1][1])
        + w * (g[0][1] - g[1][0]));
    return vec4<f32>(vw, vx, vy, vz);
}

// dL/dq_raw from dL/dq_unit through q_unit = q_raw / |q_raw|.
fn normalize_vjp(q_raw: vec4<f32>, v_unit: vec4<f32>) -> vec4<f32> {
    let inv_norm = inverseSqrt(dot(q_raw, q_raw));
    let unit = q_raw * inv_norm;
    return (v_unit - dot(v_unit, unit) * unit) * inv_norm;
}

// SH basis values Y_k(dir) for k < 16 (3DGS constants, MATH.md).
const SH_C0: f32 = 0.28209479177387814;
const SH_C1: f32 = 0.4886025119029199;
const SH_C2 = array<f32, 5>(1.0925484305920792, -1.0925484305920792, 0.31539156525252005,
    -1.0925484305920792, 0.5462742152960396);
const SH_C3 = array<f32, 7>(-0.5900435899266435, 2.890611442640554, -0.4570457994644658,
    0.3731763325901154, -0.4570457994644658, 1.445305721320277, -0.5900435899266435);

fn sh_basis(k: u32, d: vec3<f32>) -> f32 {
    let x = d.x;
    let y = d.y;
    let z = d.z;
    switch k {
        case 0u: { return SH_C0; }
        case 1u: { return -SH_C1 * y; }
        case 2u: { return SH_C1 * z; }
        case 3u: { return -SH_C1 * x; }
        case 4u: { return SH_C2[0] * x * y; }
        case 5u: { return SH_C2[1] * y * z; }
        case 6u: { return SH_C2[2] * (2.0 * z * z - x * x - y * y); }
        case 7u: { return SH_C2[3] * x * z; }
        case 8u: { return SH_C2[4] * (x * x - y * y); }
        case 9u: { return SH_C3[0] * y * (3.0 * x * x - y * y); }
        case 10u: { return SH_C3[1] * x * y * z; }
        case 11u: { return SH_C3[2] * y * (4.0 * z * z - x * x - y * y); }
        case 12u: { return SH_C3[3] * z * (2.0 * z * z - 3.0 * x * x - 3.0 * y * y); }
        case 13u: { return SH_C3[4] * x * (4.0 * z * z - x * x - y * y); }
        case 14u: { return SH_C3[5] * z * (x * x - y * y); }
        default: { return SH_C3[6] * x * (x * x - 3.0 * y * y); }
    }
}

// Gradient of Y_k with respect to the direction d.
fn sh_basis_vjp(k: u32, d: vec3<f32>) -> vec3<f32> {
    let x = d.x;
    let y = d.y;
    let z = d.z;
    switch k {
        case 0u: { return vec3<f32>(0.0); }
        case 1u: { return vec3<f32>(0.0, -SH_C1, 0.0); }
        case 2u: { return vec3<f32>(0.0, 0.0, SH_C1); }
        case 3u: { return vec3<f32>(-SH_C1, 0.0, 0.0); }
        case 4u: { return SH_C2[0] * vec3<f32>(y, x, 0.0); }
        case 5u: { return SH_C2[1] * vec3<f32>(0.0, z, y); }
        case 6u: { return SH_C2[2] * vec3<f32>(-2.0 * x, -2.0 * y, 4.0 * z); }
        case 7u: { return SH_C2[3] * vec3<f32>(z, 0.0, x); }
        case 8u: { return SH_C2[4] * vec3<f32>(2.0 * x, -2.0 * y, 0.0); }
        case 9u: { return SH_C3[0] * vec3<f32>(6.0 * x * y, 3.0 * x * x - 3.0 * y * y, 0.0); }
        case 10u: { return SH_C3[1] * vec3<f32>(y * z, x * z, x * y); }
        case 11u: { return SH_C3[2] * vec3<f32>(-2.0 * x * y, 4.0 * z * z - x * x - 3.0 * y * y, 8.0 * y * z); }
        case 12u: { return SH_C3[3] * vec3<f32>(-6.0 * x * z, -6.0 * y * z, 6.0 * z * z - 3.0 * x * x - 3.0 * y * y); }
        case 13u: { return SH_C3[4] * vec3<f32>(4.0 * z * z - 3.0 * x * x - y * y, -2.0 * x * y, 8.0 * x * z); }
        case 14u: { return SH_C3[5] * vec3<f32>(2.0 * x * z, -2.0 * y * z, x * x - y * y); }
        default: { return SH_C3[6] * vec3<f32>(3.0 * x * x - 3.0 * y * y, -6.0 * x * y, 0.0); }
    }
}
