// Projection, forward: one thread per splat of a window (`u.window_first`, `u.num_splats`; the
// per-splat arrays are bound from the window's first splat, renderer.rs). Writes the number of tiles each splat touches
// (0 when culled), whether it is visible (a 0/1 flag, scanned next into its place among the
// visible splats) and its camera-space depth's bits (the depth sort's key; positive floats
// order like their bit patterns). The frame's totals are added up with integer atomics, so
// they do not depend on the order threads run in: the tile intersections and the least and
// greatest depth bits, which bound the depth sort's keys. What the rasterizer reads of each
// visible splat is projected again after the depth sort, in depth order, band by band
// (project_rank.wgsl): no array here holds 48 bytes a splat for all splats.

@group(0) @binding(9) var<storage, read_write> depths: array<u32>;          // [N]
@group(0) @binding(10) var<storage, read_write> tiles_touched: array<u32>;  // [N]
@group(0) @binding(11) var<storage, read_write> visible: array<u32>;        // [N] 0 or 1
// [unused, intersections, least depth bits, greatest depth bits, times the intersections
// passed 2^32]; the caller resets it.
@group(0) @binding(12) var<storage, read_write> totals: array<atomic<u32>, 5>;
// The filter's selections and scene cells (renderer.rs, `filter_rules`), as words: floats
// are read through `rule` (as floats, the counts, indices and cells' bits would be subnormals
// and NaNs, which a GPU may flush or rewrite). u.keep_size.z selections, four vec4s each: the
// camera's rotation (world to camera, a quaternion x, y, z, w); its position (w: 1 keeps only
// what the shape holds, 0 hides it); the rectangle (x0, y0, x1, y1) on the image plane at
// depth 1 (a stroke's bounds); a stroke's first point (the index of the vec4 holding it), its
// number of points (0 for a rectangle) and its radius (a float). The strokes' points follow,
// two to a vec4. Then, from vec4 u.keep_size.w − 1 when that is above 0, the scene cells: the
// grid's origin and cells per unit (floats), its size, and its bits, four words to a vec4.
// Never empty (a placeholder when there is no rule).
@group(0) @binding(13) var<storage, read> rules: array<vec4<u32>>;

const GROUP: u32 = 256u;

var<workgroup> group_hits: atomic<u32>;
var<workgroup> group_min: atomic<u32>;
var<workgroup> group_max: atomic<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    if lid == 0u {
        atomicStore(&group_hits, 0u);
        atomicStore(&group_min, 0xffffffffu);
        atomicStore(&group_max, 0u);
    }
    workgroupBarrier();
    let i = flat_group(gid, groups) * GROUP + lid;
    if i < u.num_splats {
        let pr = project(i);
        var hits = 0u;
        if pr.visible && kept(i) {
            hits = tiles_hit(pr.mean2d, pr.conic, pr.cut, u.tiles, u.image_size);
        }
        tiles_touched[i] = hits;
        visible[i] = u32(hits > 0u);
        if hits > 0u {
            let key = bitcast<u32>(pr.p_cam.z);
            depths[i] = key;
            atomicAdd(&group_hits, hits);
            atomicMin(&group_min, key);
            atomicMax(&group_max, key);
        }
    }
    workgroupBarrier();
    if lid == 0u {
        let hits = atomicLoad(&group_hits);
        if hits > 0u {
            // The sum wraps past 2^32 splat-tile pairs (130k splats each covering a 4K
            // frame): the old value says when, the wraps are counted (as many whatever the
            // order), and the renderer refuses the frame (renderer.rs, `FrameScratch::counts`).
            let old = atomicAdd(&totals[1], hits);
            if old > 0xffffffffu - hits {
                atomicAdd(&totals[4], 1u);
            }
            atomicMin(&totals[2], atomicLoad(&group_min));
            atomicMax(&totals[3], atomicLoad(&group_max));
        }
    }
}

// Whether splat `i` passes the frame's filter (RenderSettings::keep): everything when it is
// off. The CPU's filter (formats/src/filter.rs) decides the sphere and the size in f64; these
// f32 tests can differ from it only for a splat within an ulp or so of the surface or limit.
fn kept(i: u32) -> bool {
    if u.keep_max.w == 0.0 {
        return true;
    }
    let m = load3(i, 0u);
    let d = m - u.keep_sphere.xyz;
    let s = load3(i, 1u);
    return in_box(m) && opacities[i] >= u.keep_min.w
        && (u.keep_sphere.w < 0.0 || dot(d, d) <= u.keep_sphere.w)
        && max(s.x, max(s.y, s.z)) <= u.keep_size.x && passes_selections(m) && in_scene_cells(m);
}

// Whether centre `m` is in one of the scene's cells (everything when the filter has none):
// the cell floor((m − origin) · scale), a subtraction and a multiplication, each correctly
// rounded, as the CPU's `SceneCells::contains` does them in f32.
fn in_scene_cells(m: vec3<f32>) -> bool {
    if u.keep_size.w == 0.0 {
        return true;
    }
    let at = u32(u.keep_size.w) - 1u;
    let grid = rule(at);
    let dims = rules[at + 1u].xyz;
    let c = floor((m - grid.xyz) * grid.w);
    // A centre whose cell is not finite is outside (tested on its bits: fast math may take a
    // comparison with NaN either way), as is a cell off the grid.
    if !all_finite3(c) || any(c < vec3<f32>(0.0)) || any(c >= vec3<f32>(dims)) {
        return false;
    }
    let cell = vec3<u32>(c);
    let i = cell.x + dims.x * (cell.y + dims.y * cell.z);
    let word = rules[at + 2u + i / 128u][(i / 32u) % 4u];
    return ((word >> (i % 32u)) & 1u) == 1u;
}

// Whether centre `m` passes every selection: inside the ones that keep, outside the ones
// that hide. As the CPU's `Selection::contains` (in f64), up to an ulp or so at a shape's
// edge.
fn passes_selections(m: vec3<f32>) -> bool {
    let count = u32(u.keep_size.z);
    for (var k = 0u; k < count; k++) {
        let position = rule(4u * k + 1u);
        let c = rotate(rule(4u * k), m - position.xyz);
        if in_selection(4u * k, c) != (position.w == 1.0) {
            return false;
        }
    }
    return true;
}

// Whether camera-space point `c` is inside the shape of the selection at `base`: within its
// rectangle, and for a stroke within its radius of the path through its points.
fn in_selection(base: u32, c: vec3<f32>) -> bool {
    let r = rule(base + 2u);
    let in_rect = c.z > 0.0 && r.x * c.z <= c.x && c.x <= r.z * c.z && r.y * c.z <= c.y
        && c.y <= r.w * c.z;
    let stroke = rules[base + 3u];
    let first = stroke.x;
    let points = stroke.y;
    let radius = bitcast<f32>(stroke.z);
    if !in_rect || points == 0u {
        return in_rect;
    }
    let at = c.xy / c.z;
    // Each segment from point p to the next; one point is a segment of no length.
    for (var p = 0u; p < max(points, 2u) - 1u; p++) {
        let a = stroke_point(first, p);
        let b = stroke_point(first, min(p + 1u, points - 1u));
        let ab = b - a;
        let ap = at - a;
        let length2 = dot(ab, ab);
        var t = 0.0;
        if length2 > 0.0 {
            t = clamp(dot(ap, ab) / length2, 0.0, 1.0);
        }
        let d = ap - t * ab;
        if dot(d, d) <= radius * radius {
            return true;
        }
    }
    return false;
}

// The floats of vec4 `i` of the rules.
fn rule(i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(rules[i]);
}

// Point `p` of the stroke whose points start in vec4 `first`, two to a vec4.
fn stroke_point(first: u32, p: u32) -> vec2<f32> {
    let pair = rule(first + p / 2u);
    return select(pair.xy, pair.zw, p % 2u == 1u);
}

// Whether centre `m` is inside the frame's crop box. A turned box turns `m` back about the
// box's centre (by the conjugate of keep_turn) and tests it against the half extents; the CPU
// does this in f64 (formats/src/filter.rs), so the two can differ only within an ulp or so of
// a face.
fn in_box(m: vec3<f32>) -> bool {
    if u.keep_size.y == 0.0 {
        return all(m >= u.keep_min.xyz) && all(m <= u.keep_max.xyz);
    }
    let center = 0.5 * u.keep_min.xyz + 0.5 * u.keep_max.xyz;
    let half = 0.5 * u.keep_max.xyz - 0.5 * u.keep_min.xyz;
    let local = rotate(vec4<f32>(-u.keep_turn.xyz, u.keep_turn.w), m - center);
    return all(abs(local) <= half);
}

// `v` turned by the unit quaternion `q` (x, y, z, w).
fn rotate(q: vec4<f32>, v: vec3<f32>) -> vec3<f32> {
    let t = 2.0 * cross(q.xyz, v);
    return v + q.w * t + cross(q.xyz, t);
}
