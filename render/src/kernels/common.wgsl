// Shared definitions of the splat kernels. Prepended to each kernel's source by
// `kernels::shader_source`. The math follows render/MATH.md; every function sits beside its
// vector-Jacobian product (`_vjp`), as in gsplat.

const TILE: u32 = 16u;
const NEAR: f32 = 0.01;
const DILATION: f32 = 0.3;
const ALPHA_MAX: f32 = 0.99;
const ALPHA_MIN: f32 = 0.003921569; // 1/255
const T_MIN: f32 = 0.0001;

// Keep in sync with `RenderUniform` in render/src/kernels/mod.rs (144 bytes).
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
}

// One projected splat. Keep in sync with `PROJECTED_BYTES` in kernels/mod.rs (48 bytes).
struct Projected {
    mean2d: vec2<f32>,
    depth: f32,
    opacity: f32,
    // conic A, B, C and the radius in pixels (as f32).
    conic_radius: vec4<f32>,
    color: vec4<f32>,
}

fn all_finite3(v: vec3<f32>) -> bool {
    // NaN fails every comparison; infinities fail the bound.
    return all(abs(v) <= vec3<f32>(3.4e38));
}

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// Tile rect of a splat: [min, max) per axis, as 3DGS's getRect.
fn tile_rect(mean2d: vec2<f32>, radius: f32, tiles: vec2<u32>) -> vec4<u32> {
    let t = vec2<f32>(tiles);
    let lo = clamp(floor((mean2d - radius) / f32(TILE)), vec2<f32>(0.0), t);
    let hi = clamp(floor((mean2d + radius + f32(TILE) - 1.0) / f32(TILE)), vec2<f32>(0.0), t);
    return vec4<u32>(vec2<u32>(lo), vec2<u32>(hi));
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
