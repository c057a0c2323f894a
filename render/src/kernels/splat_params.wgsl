// The splat parameter buffers (flat arrays, no vec3 padding) and how to read them.
// Included by the projection kernels after common.wgsl and binary16.wgsl. Bindings 0..=8 of
// group 0.

@group(0) @binding(0) var<storage, read> u: RenderUniform;
@group(0) @binding(1) var<storage, read> means: array<f32>;        // [N, 3]
@group(0) @binding(2) var<storage, read> log_scales: array<f32>;   // [N, 3]
@group(0) @binding(3) var<storage, read> quats: array<f32>;        // [N, 4] w, x, y, z raw
@group(0) @binding(4) var<storage, read> opacities: array<f32>;    // [N] logits
// SH split by band so that no binding exceeds 128 MiB at 1M splats. Bands 1..=3 hold f32
// bits, or with u.sh_half two binary16 values a word, each splat's row padded to whole words
// (gpu_splats.rs, `ShPrecision`):
@group(0) @binding(5) var<storage, read> sh0: array<f32>;          // [N, 1, 3]
@group(0) @binding(6) var<storage, read> sh1: array<u32>;          // [N, 3, 3]
@group(0) @binding(7) var<storage, read> sh2: array<u32>;          // [N, 5, 3]
@group(0) @binding(8) var<storage, read> sh3: array<u32>;          // [N, 7, 3]

fn load3(i: u32, which: u32) -> vec3<f32> {
    switch which {
        case 0u: { return vec3<f32>(means[3u * i], means[3u * i + 1u], means[3u * i + 2u]); }
        default: { return vec3<f32>(log_scales[3u * i], log_scales[3u * i + 1u], log_scales[3u * i + 2u]); }
    }
}

fn load_quat(i: u32) -> vec4<f32> {
    return vec4<f32>(quats[4u * i], quats[4u * i + 1u], quats[4u * i + 2u], quats[4u * i + 3u]);
}

fn band_word(band: u32, w: u32) -> u32 {
    switch band {
        case 1u: { return sh1[w]; }
        case 2u: { return sh2[w]; }
        default: { return sh3[w]; }
    }
}

// Value j (coefficient-major, three channels a coefficient) of splat i's row of SH band
// `band` (1..=3).
fn band_value(band: u32, i: u32, j: u32) -> f32 {
    let values = 6u * band + 3u;
    if u.sh_half == 0u {
        return bitcast<f32>(band_word(band, values * i + j));
    }
    let pair = unpack_halves(band_word(band, (values + 1u) / 2u * i + j / 2u));
    return select(pair.x, pair.y, (j & 1u) == 1u);
}

// SH coefficient k (all three channels) of splat i.
fn load_sh(i: u32, k: u32) -> vec3<f32> {
    if k == 0u {
        let b = 3u * i;
        return vec3<f32>(sh0[b], sh0[b + 1u], sh0[b + 2u]);
    }
    var band = 3u;
    if k < 4u {
        band = 1u;
    } else if k < 9u {
        band = 2u;
    }
    let j = 3u * (k - band * band);
    return vec3<f32>(band_value(band, i, j), band_value(band, i, j + 1u), band_value(band, i, j + 2u));
}

// Workgroup number of a 1D problem dispatched in 2D (x ≤ 65,535 groups, then rows of y).
fn flat_group(gid: vec3<u32>, num_groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * num_groups.x;
}

// Everything the projection computes about one splat, forward. A splat with any non-finite
// parameter (SH coefficients of the active degree included; higher bands are not read) is
// culled, and so is one whose opacity is below ALPHA_MIN, and one whose intermediate values
// leave the range the later kernels divide by or compare safely (a camera-space position or
// 2D covariance that overflows, a determinant or conic entry that is not a positive normal
// float). Every such test is on bits (float_bits.wgsl). Whether it touches a tile is the
// caller's `tiles_hit`.
struct Projection {
    visible: bool,
    p_cam: vec3<f32>,
    rot: mat3x3<f32>,       // of the unit quaternion
    scale: vec3<f32>,       // exp(log-scale)
    cov_cam: mat3x3<f32>,   // Σc
    tangent_clamped: vec2<bool>,
    t: vec2<f32>,           // clamped tx, ty
    cov2d: vec3<f32>,       // Σ2 before dilation: (a, b, c)
    det_dilated: f32,
    // det(Σ2) before dilation (antialiased only): what the backward pass divides by, where it
    // is a positive normal float (comp is 0 where it is not, and the splat culled).
    det_orig: f32,
    comp: f32,
    conic: vec3<f32>,
    mean2d: vec2<f32>,
    radius: f32,            // of the 3σ circle, for the densification statistics
    opacity: f32,           // sigmoid(logit) · comp
    cut: f32,               // sigma_cut(opacity)
    dir: vec3<f32>,         // unit view direction
    dir_norm: f32,
}

fn project(i: u32) -> Projection {
    var out: Projection;
    out.visible = false;
    let mean = load3(i, 0u);
    let log_scale = load3(i, 1u);
    let q_raw = load_quat(i);
    let logit = opacities[i];
    if !all_finite3(mean) || !all_finite3(log_scale) || !all_finite3(q_raw.xyz)
        || !all_finite3(vec3<f32>(q_raw.w, logit, 0.0)) {
        return out;
    }
    let active_coeffs = (u.sh_degree + 1u) * (u.sh_degree + 1u);
    for (var k = 0u; k < active_coeffs; k++) {
        if !all_finite3(load_sh(i, k)) {
            return out;
        }
    }
    let view = u.camera_from_world;
    let w_rot = mat3x3<f32>(view[0].xyz, view[1].xyz, view[2].xyz);
    let p = w_rot * mean + view[3].xyz;
    out.p_cam = p;
    if !all_finite3(p) || p.z < NEAR {
        return out;
    }
    let qn2 = dot(q_raw, q_raw);
    if !is_positive_normal(qn2) {
        return out;
    }
    let q = q_raw * inverseSqrt(qn2);
    out.rot = quat_to_rotmat(q);
    out.scale = exp(log_scale);
    let m = out.rot * mat3x3<f32>(
        vec3<f32>(out.scale.x, 0.0, 0.0), vec3<f32>(0.0, out.scale.y, 0.0), vec3<f32>(0.0, 0.0, out.scale.z));
    let cov = m * transpose(m);
    out.cov_cam = w_rot * cov * transpose(w_rot);

    let size = vec2<f32>(u.image_size);
    let lim_pos = (size - u.principal) / u.focal + 0.3 * size / u.focal;
    let lim_neg = u.principal / u.focal + 0.3 * size / u.focal;
    let ratio = p.xy / p.z;
    out.tangent_clamped = (ratio < -lim_neg) | (ratio > lim_pos);
    out.t = p.z * clamp(ratio, -lim_neg, lim_pos);
    let rz = 1.0 / p.z;
    let rz2 = rz * rz;
    // J rows: (fx/z, 0, -fx tx/z²), (0, fy/z, -fy ty/z²)
    let j0 = vec3<f32>(u.focal.x * rz, 0.0, -u.focal.x * out.t.x * rz2);
    let j1 = vec3<f32>(0.0, u.focal.y * rz, -u.focal.y * out.t.y * rz2);
    let cj0 = out.cov_cam * j0;
    let cj1 = out.cov_cam * j1;
    out.cov2d = vec3<f32>(dot(j0, cj0), dot(j0, cj1), dot(j1, cj1));
    let a = out.cov2d.x + DILATION;
    let b = out.cov2d.y;
    let c = out.cov2d.z + DILATION;
    let det = a * c - b * b;
    out.det_dilated = det;
    if !is_positive_normal(det) || !all_finite3(vec3<f32>(a, b, c)) {
        return out;
    }
    out.comp = 1.0;
    if u.antialiased != 0u {
        // Computed once, here: the backward pass divides by this very value, not by another
        // rounding of it (a driver may contract either into a fused multiply-add).
        out.det_orig = out.cov2d.x * out.cov2d.z - out.cov2d.y * out.cov2d.y;
        out.comp = select(0.0, sqrt(out.det_orig / det), is_positive_normal(out.det_orig));
    }
    out.conic = vec3<f32>(c / det, -b / det, a / det);
    // tile_touched divides by the conic's diagonal.
    if !is_positive_normal(out.conic.x) || !is_positive_normal(out.conic.z)
        || !is_finite(out.conic.y) {
        return out;
    }
    out.mean2d = u.focal * p.xy * rz + u.principal;
    if !is_finite(out.mean2d.x) || !is_finite(out.mean2d.y) {
        return out;
    }
    let mid = 0.5 * (a + c);
    let lambda = mid + sqrt(max(0.1, mid * mid - det));
    out.radius = ceil(3.0 * sqrt(lambda));
    out.opacity = sigmoid(logit) * out.comp;
    out.cut = sigma_cut(out.opacity);
    if !is_nonnegative(out.cut) {
        return out;
    }
    let span = splat_tile_span(out.mean2d, out.conic, out.cut, u.tiles);
    if span.z <= span.x || span.w <= span.y {
        return out;
    }
    let to_splat = mean - u.camera_position.xyz;
    out.dir_norm = length(to_splat);
    if !is_positive_normal(out.dir_norm) {
        return out;
    }
    out.dir = to_splat / out.dir_norm;
    out.visible = true;
    return out;
}

// What the rasterizer reads of splat i: its projection, its colour clamped at zero. A splat
// the projection culled gets a negative cut (composited nowhere, touching no tile).
fn projected_of(i: u32, pr: Projection) -> Projected {
    var out: Projected;
    out.sigma_cut = -1.0;
    if pr.visible {
        out.mean2d = pr.mean2d;
        out.opacity = pr.opacity;
        out.sigma_cut = pr.cut;
        out.conic = pr.conic;
        out.depth = pr.p_cam.z;
        out.color = max(sh_color(i, pr.dir), vec3<f32>(0.0));
    }
    return out;
}

// SH colour before the clamp at zero (e + 0.5).
fn sh_color(i: u32, dir: vec3<f32>) -> vec3<f32> {
    let count = (u.sh_degree + 1u) * (u.sh_degree + 1u);
    var e = vec3<f32>(0.0);
    for (var k = 0u; k < count; k++) {
        e += sh_basis(k, dir) * load_sh(i, k);
    }
    return e + 0.5;
}
