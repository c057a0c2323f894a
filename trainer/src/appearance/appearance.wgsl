// Per-view appearance compensation (appearance/mod.rs): a train view's render seen through
// its own affine colour transform, c' = (I + D)·c + b, before the loss; the transform's
// backward; and one Adam step of the view's 12 parameters (D row-major, then b). Preceded by
// the render crate's float_bits.wgsl (`finite_or_zero`).
//
// Images are `array<vec4<f32>>` [pixels] (rgb + alpha, the rasterizer's layout); alpha passes
// through untouched. One thread a pixel for `apply` and `backward`; `update` is one workgroup.

struct AppearanceUniform {
    pixels: u32,
    // The view's row of `params` (12 floats) and of `moments` (ROW floats).
    view: u32,
    // Workgroups `backward` ran (each wrote 12 partial sums).
    groups: u32,
    // Train views (rows of `params`).
    views: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    // Pull of each parameter towards the identity transform (an L2 term's gradient).
    decay: f32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

// A view's moments row: m (12), v (12), the view's Adam step count (as f32), padding.
const ROW: u32 = 32u;
const PARAMS: u32 = 12u;
const WG: u32 = 256u;

@group(0) @binding(0) var<storage, read> u: AppearanceUniform;
// apply, backward
@group(0) @binding(1) var<storage, read> params: array<f32>;
@group(0) @binding(2) var<storage, read> rendered: array<vec4<f32>>;
// apply
@group(0) @binding(3) var<storage, read_write> corrected: array<vec4<f32>>;
// backward
@group(0) @binding(4) var<storage, read> v_corrected: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> v_rendered: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> partials: array<f32>;
// update
@group(0) @binding(7) var<storage, read> partials_in: array<f32>;
@group(0) @binding(8) var<storage, read_write> params_rw: array<f32>;
@group(0) @binding(9) var<storage, read_write> moments: array<f32>;

// The view's transform: rows of I + D, and b.
fn matrix_row(r: u32) -> vec3<f32> {
    let at = u.view * PARAMS + r * 3u;
    return vec3<f32>(params[at], params[at + 1u], params[at + 2u]) + vec3<f32>(
        select(0.0, 1.0, r == 0u), select(0.0, 1.0, r == 1u), select(0.0, 1.0, r == 2u));
}

fn offset() -> vec3<f32> {
    let at = u.view * PARAMS + 9u;
    return vec3<f32>(params[at], params[at + 1u], params[at + 2u]);
}

fn pixel_index(gid: vec3<u32>, lid: u32, groups: vec3<u32>) -> u32 {
    return (gid.x + gid.y * groups.x) * WG + lid;
}

@compute @workgroup_size(256)
fn apply(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
         @builtin(num_workgroups) groups: vec3<u32>) {
    let i = pixel_index(gid, lid, groups);
    if i >= u.pixels {
        return;
    }
    let c = rendered[i];
    let m0 = matrix_row(0u);
    let m1 = matrix_row(1u);
    let m2 = matrix_row(2u);
    corrected[i] = vec4<f32>(vec3<f32>(dot(m0, c.rgb), dot(m1, c.rgb), dot(m2, c.rgb)) + offset(), c.a);
}

// The workgroup's 12 sums, three vec4 a thread: g_r·c, g_g·c, g_b·c (as the rows of dL/dD, in
// .xyz) and g (in the .w of each).
var<workgroup> tree: array<array<vec4<f32>, 3>, 256>;

// dL/dc = (I + D)ᵀ·dL/dc' into `v_rendered` (alpha's gradient passed on), and this
// workgroup's sums over its pixels of dL/dD = dL/dc'·cᵀ and dL/db = dL/dc' into `partials`
// (a fixed-order tree: the same sums on every run).
@compute @workgroup_size(256)
fn backward(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
            @builtin(num_workgroups) groups: vec3<u32>) {
    let wg = gid.x + gid.y * groups.x;
    // Uniform across the workgroup (workgroup_id): the barriers below stay in uniform flow.
    if wg >= u.groups {
        return;
    }
    let i = wg * WG + lid;
    var g = vec4<f32>(0.0);
    var c = vec3<f32>(0.0);
    if i < u.pixels {
        g = v_corrected[i];
        c = rendered[i].rgb;
        let m0 = matrix_row(0u);
        let m1 = matrix_row(1u);
        let m2 = matrix_row(2u);
        v_rendered[i] = vec4<f32>(m0 * g.r + m1 * g.g + m2 * g.b, g.a);
    }
    tree[lid][0] = vec4<f32>(g.r * c, g.r);
    tree[lid][1] = vec4<f32>(g.g * c, g.g);
    tree[lid][2] = vec4<f32>(g.b * c, g.b);
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if lid < stride {
            for (var r = 0u; r < 3u; r++) {
                tree[lid][r] = tree[lid][r] + tree[lid + stride][r];
            }
        }
        workgroupBarrier();
    }
    if lid < 3u {
        let s = tree[0][lid];
        let at = wg * PARAMS;
        partials[at + lid * 3u] = s.x;
        partials[at + lid * 3u + 1u] = s.y;
        partials[at + lid * 3u + 2u] = s.z;
        partials[at + 9u + lid] = s.w;
    }
}

var<workgroup> sums: array<array<f32, 12>, 256>;
var<workgroup> step_count: f32;
var<workgroup> means: array<f32, 12>;

// One workgroup: the 12 gradients summed over `backward`'s workgroups (thread k takes groups
// k, k + 256, … in order, then a fixed tree), the decay added, and one Adam step of the view's
// parameters with its own step count (a view is stepped once an epoch). Then every view's
// parameters less their mean over the views (thread k adds parameter k of each view in view
// order): the mean transform stays the identity, so the splats keep the views' mean
// appearance rather than drifting with a shift every transform could share.
@compute @workgroup_size(256)
fn update(@builtin(local_invocation_index) lid: u32) {
    var acc: array<f32, 12>;
    for (var k = 0u; k < PARAMS; k++) {
        acc[k] = 0.0;
    }
    for (var w = lid; w < u.groups; w += WG) {
        for (var k = 0u; k < PARAMS; k++) {
            acc[k] += partials_in[w * PARAMS + k];
        }
    }
    sums[lid] = acc;
    if lid == 0u {
        let t = moments[u.view * ROW + 24u] + 1.0;
        moments[u.view * ROW + 24u] = t;
        step_count = t;
    }
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if lid < stride {
            for (var k = 0u; k < PARAMS; k++) {
                sums[lid][k] = sums[lid][k] + sums[lid + stride][k];
            }
        }
        workgroupBarrier();
    }
    if lid < PARAMS {
        let at = u.view * PARAMS + lid;
        let row = u.view * ROW;
        let p = params_rw[at];
        let g = finite_or_zero(sums[0][lid]) + u.decay * p;
        let m = u.beta1 * moments[row + lid] + (1.0 - u.beta1) * g;
        let v = u.beta2 * moments[row + 12u + lid] + (1.0 - u.beta2) * g * g;
        moments[row + lid] = m;
        moments[row + 12u + lid] = v;
        let t = step_count;
        let m_hat = m / (1.0 - pow(u.beta1, t));
        let v_hat = v / (1.0 - pow(u.beta2, t));
        params_rw[at] = p - u.lr * m_hat / (sqrt(v_hat) + u.eps);
    }
    storageBarrier();
    if lid < PARAMS {
        var total = 0.0;
        for (var w = 0u; w < u.views; w++) {
            total += params_rw[w * PARAMS + lid];
        }
        means[lid] = total / f32(u.views);
    }
    storageBarrier();
    workgroupBarrier();
    for (var i = lid; i < u.views * PARAMS; i += WG) {
        params_rw[i] = params_rw[i] - means[i % PARAMS];
    }
}
