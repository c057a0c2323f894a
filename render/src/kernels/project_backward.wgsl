// Projection, backward: one thread per splat, one pass per depth band and window of splats
// (renderer.rs; the parameters, gradients, statistics and ranks are bound from the window's
// first splat, `u.num_splats` of them): a pass
// takes the visible splats whose depth rank lies in its band (`u.band_first .. band_end`;
// the first pass also zeroes the splats no band holds). From dL/d(projected) to the
// gradients of the raw parameters, recomputing the forward intermediates. A visible splat's
// dL/d(projected) is the sum of the partials the rasterizer's backward pass wrote for its
// intersections (`offsets[j]`.. `+ counts[j]` for its depth rank j, less the band's first
// intersection: the band's partials), added in their order: fixed, so the result is the
// same every run, however the frame is cut into bands; a splat's whole chunks of CHUNK entries
// come pre-added (intersect.wgsl, chunk_sums). Also accumulates the densification statistics:
// the growth statistic (`u.growth`: the norm of the summed NDC mean2d gradient, or the sum of
// the pixels' norms), the number of renders the splat was visible in and its largest radius
// in pixels. Gradients of SH bands above the active degree are not written (nothing reads them:
// Adam skips them too).

@group(0) @binding(9) var<storage, read> partials: array<f32>;          // [band's M, PARTIALS]
@group(0) @binding(10) var<storage, read_write> v_means: array<f32>;    // [N, 3]
@group(0) @binding(11) var<storage, read_write> v_log_scales: array<f32>; // [N, 3]
@group(0) @binding(12) var<storage, read_write> v_quats: array<f32>;    // [N, 4]
@group(0) @binding(13) var<storage, read_write> v_opacities: array<f32>; // [N]
@group(0) @binding(14) var<storage, read_write> v_sh0: array<f32>;      // [N, 1, 3]
@group(0) @binding(15) var<storage, read_write> v_sh1: array<f32>;      // [N, 3, 3]
@group(0) @binding(16) var<storage, read_write> v_sh2: array<f32>;      // [N, 5, 3]
@group(0) @binding(17) var<storage, read_write> v_sh3: array<f32>;      // [N, 7, 3]
@group(0) @binding(18) var<storage, read_write> densify: array<f32>;    // [N, 3]
@group(0) @binding(19) var<storage, read> ranks: array<u32>;            // [N] depth rank + 1, or 0
@group(0) @binding(20) var<storage, read> counts: array<u32>;           // [V] intersections by rank
@group(0) @binding(21) var<storage, read> offsets: array<u32>;          // [V] the first of them

const GROUP: u32 = 256u;

fn store_sh_grad(i: u32, k: u32, v: vec3<f32>) {
    if k == 0u {
        let b = 3u * i;
        v_sh0[b] = v.x; v_sh0[b + 1u] = v.y; v_sh0[b + 2u] = v.z;
    } else if k < 4u {
        let b = 3u * (3u * i + k - 1u);
        v_sh1[b] = v.x; v_sh1[b + 1u] = v.y; v_sh1[b + 2u] = v.z;
    } else if k < 9u {
        let b = 3u * (5u * i + k - 4u);
        v_sh2[b] = v.x; v_sh2[b + 1u] = v.y; v_sh2[b + 2u] = v.z;
    } else {
        let b = 3u * (7u * i + k - 9u);
        v_sh3[b] = v.x; v_sh3[b + 1u] = v.y; v_sh3[b + 2u] = v.z;
    }
}

fn store_zero(i: u32) {
    for (var c = 0u; c < 3u; c++) {
        v_means[3u * i + c] = 0.0;
        v_log_scales[3u * i + c] = 0.0;
    }
    for (var c = 0u; c < 4u; c++) {
        v_quats[4u * i + c] = 0.0;
    }
    v_opacities[i] = 0.0;
    let active_coeffs = (u.sh_degree + 1u) * (u.sh_degree + 1u);
    for (var k = 0u; k < active_coeffs; k++) {
        store_sh_grad(i, k, vec3<f32>(0.0));
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat_group(gid, groups) * GROUP + lid;
    if i >= u.num_splats {
        return;
    }
    // Visible = the forward pass composited it somewhere (intersect.wgsl gave it a rank).
    let rank = ranks[i];
    if rank == 0u {
        if u.band_first == 0u {
            store_zero(i);
        }
        return;
    }
    let depth_rank = rank - 1u;
    if depth_rank < u.band_first || depth_rank >= u.band_end {
        return;
    }
    let pr = project(i);
    if !pr.visible {
        store_zero(i);
        return;
    }
    // The splat's entries in order, numbered in the frame, read in the band's partials; where
    // a whole chunk of them starts, its first entry holds the chunk's sum (intersect.wgsl,
    // chunk_sums) and the walk steps over the chunk.
    var v: array<f32, PARTIALS>;
    let end = offsets[depth_rank] + counts[depth_rank];
    var entry = offsets[depth_rank];
    while entry < end {
        for (var c = 0u; c < PARTIALS; c++) {
            v[c] += partials[PARTIALS * (entry - u.band_base) + c];
        }
        let whole_chunk = entry % CHUNK == 0u && end - entry >= CHUNK;
        entry += select(1u, CHUNK, whole_chunk);
    }
    let v_mean2d = vec2<f32>(v[0], v[1]);
    let v_conic = vec3<f32>(v[2], v[3], v[4]);
    let v_color = vec3<f32>(v[5], v[6], v[7]);
    let v_opacity = v[8];
    let mean = load3(i, 0u);
    let q_raw = load_quat(i);
    let view = u.camera_from_world;
    let w_rot = mat3x3<f32>(view[0].xyz, view[1].xyz, view[2].xyz);

    // Opacity = sigmoid(logit) · comp.
    let s = sigmoid(opacities[i]);
    v_opacities[i] = v_opacity * pr.comp * s * (1.0 - s);
    let v_comp = v_opacity * s;

    // Colour = max(e + 0.5, 0): SH coefficients and the view direction.
    let e = sh_color(i, pr.dir);
    let v_e = select(vec3<f32>(0.0), v_color, e > vec3<f32>(0.0));
    let active_coeffs = (u.sh_degree + 1u) * (u.sh_degree + 1u);
    var v_dir = vec3<f32>(0.0);
    for (var k = 0u; k < active_coeffs; k++) {
        store_sh_grad(i, k, sh_basis(k, pr.dir) * v_e);
        v_dir += sh_basis_vjp(k, pr.dir) * dot(load_sh(i, k), v_e);
    }
    var v_mean = (v_dir - dot(v_dir, pr.dir) * pr.dir) / pr.dir_norm;

    // mean2d = f · p.xy / p.z + c.
    let p = pr.p_cam;
    let rz = 1.0 / p.z;
    let rz2 = rz * rz;
    var v_p = vec3<f32>(u.focal * v_mean2d * rz,
        -(u.focal.x * p.x * v_mean2d.x + u.focal.y * p.y * v_mean2d.y) * rz2);

    // Conic Q = Σ2'⁻¹: dL/dΣ2' = −Q G Q with G the symmetric matrix gradient of Q.
    let q_mat = mat2x2<f32>(vec2<f32>(pr.conic.x, pr.conic.y), vec2<f32>(pr.conic.y, pr.conic.z));
    let g_q = mat2x2<f32>(vec2<f32>(v_conic.x, 0.5 * v_conic.y), vec2<f32>(0.5 * v_conic.y, v_conic.z));
    var v_cov2d = (q_mat * g_q * q_mat) * -1.0;   // symmetric, entries ∂L/∂Σ_ij

    // Antialiasing: comp = sqrt(det(Σ2) / det(Σ2')).
    // Both determinants are positive normal floats here (the projection culled the splat or
    // made comp 0 otherwise): neither divisor can be a zero that a flushed subnormal left.
    if u.antialiased != 0u && is_positive_normal(pr.det_orig) {
        let a0 = pr.cov2d.x;
        let b0 = pr.cov2d.y;
        let c0 = pr.cov2d.z;
        let det0 = pr.det_orig;
        let det1 = pr.det_dilated;
        let h = 0.5 * pr.comp * v_comp;
        let va = h * (c0 / det0 - (c0 + DILATION) / det1);
        let vc = h * (a0 / det0 - (a0 + DILATION) / det1);
        let vb = h * (-2.0 * b0 / det0 + 2.0 * b0 / det1);   // for the shared off-diagonal
        v_cov2d += mat2x2<f32>(vec2<f32>(va, 0.5 * vb), vec2<f32>(0.5 * vb, vc));
    }

    // Σ2 = J Σc Jᵀ.
    let j = mat3x2<f32>(   // 2 rows × 3 columns, stored by column
        vec2<f32>(u.focal.x * rz, 0.0),
        vec2<f32>(0.0, u.focal.y * rz),
        vec2<f32>(-u.focal.x * pr.t.x * rz2, -u.focal.y * pr.t.y * rz2));
    let v_cov_cam = transpose(j) * v_cov2d * j;
    let v_j = 2.0 * v_cov2d * j * pr.cov_cam;   // 2×3
    // J's dependence on p (through the clamped tangent).
    v_p.z += -u.focal.x * rz2 * v_j[0][0] - u.focal.y * rz2 * v_j[1][1];
    if pr.tangent_clamped.x {
        v_p.z += u.focal.x * (pr.t.x * rz) * rz2 * v_j[2][0];
    } else {
        v_p.x += -u.focal.x * rz2 * v_j[2][0];
        v_p.z += 2.0 * u.focal.x * p.x * rz2 * rz * v_j[2][0];
    }
    if pr.tangent_clamped.y {
        v_p.z += u.focal.y * (pr.t.y * rz) * rz2 * v_j[2][1];
    } else {
        v_p.y += -u.focal.y * rz2 * v_j[2][1];
        v_p.z += 2.0 * u.focal.y * p.y * rz2 * rz * v_j[2][1];
    }

    // Σc = W Σ Wᵀ; Σ = M Mᵀ; M = R S.
    let v_cov = transpose(w_rot) * v_cov_cam * w_rot;
    let m = pr.rot * mat3x3<f32>(
        vec3<f32>(pr.scale.x, 0.0, 0.0), vec3<f32>(0.0, pr.scale.y, 0.0), vec3<f32>(0.0, 0.0, pr.scale.z));
    let v_m = 2.0 * v_cov * m;
    let v_rot = mat3x3<f32>(v_m[0] * pr.scale.x, v_m[1] * pr.scale.y, v_m[2] * pr.scale.z);
    let v_scale = vec3<f32>(dot(v_m[0], pr.rot[0]), dot(v_m[1], pr.rot[1]), dot(v_m[2], pr.rot[2]));
    let v_log_scale = v_scale * pr.scale;
    let q_unit = q_raw * inverseSqrt(dot(q_raw, q_raw));
    let v_q = normalize_vjp(q_raw, quat_to_rotmat_vjp(q_unit, v_rot));

    // p = W μ + t.
    v_mean += transpose(w_rot) * v_p;

    for (var c = 0u; c < 3u; c++) {
        v_means[3u * i + c] = v_mean[c];
        v_log_scales[3u * i + c] = v_log_scale[c];
    }
    for (var c = 0u; c < 4u; c++) {
        v_quats[4u * i + c] = v_q[c];
    }

    let half = 0.5 * vec2<f32>(u.image_size);
    densify[3u * i] += select(length(v_mean2d * half), v[9], u.growth == 1u);
    densify[3u * i + 1u] += 1.0;
    densify[3u * i + 2u] = max(densify[3u * i + 2u], pr.radius);
}
