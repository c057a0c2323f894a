// Rasterization, backward: one workgroup per tile, one thread per pixel, walking the tile's
// list back to front from each pixel's last composited entry (MATH.md, Backward). Per splat
// the gradients with respect to its projected values are summed with atomics into
// v_projected [N, 9]: mean2d x, y; conic A, B, C; colour r, g, b; opacity.
// (`add_grad` and binding 7 come from grad_atomic_{native,cas}.wgsl.)

struct RasterUniform {
    image_size: vec2<u32>,
    tiles: vec2<u32>,
    background: vec4<f32>,
}

@group(0) @binding(0) var<storage, read> ru: RasterUniform;
@group(0) @binding(1) var<storage, read> projected: array<Projected>;   // [N]
@group(0) @binding(2) var<storage, read> isect_splats: array<u32>;     // [M]
@group(0) @binding(3) var<storage, read> ranges: array<vec2<u32>>;     // [tiles]
@group(0) @binding(4) var<storage, read> final_t: array<f32>;          // [H, W]
@group(0) @binding(5) var<storage, read> last_entry: array<u32>;       // [H, W]
@group(0) @binding(6) var<storage, read> v_image: array<vec4<f32>>;    // [H, W] dL/d(rgb, alpha)

const BATCH: u32 = 256u;

var<workgroup> batch_id: array<u32, BATCH>;
var<workgroup> batch_mean: array<vec2<f32>, BATCH>;
var<workgroup> batch_conic: array<vec4<f32>, BATCH>;   // A, B, C, opacity
var<workgroup> batch_color: array<vec3<f32>, BATCH>;
var<workgroup> max_last: atomic<u32>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(num_workgroups) groups: vec3<u32>) {
    let tile = gid.x + gid.y * groups.x;
    if tile >= ru.tiles.x * ru.tiles.y {
        return;
    }
    let tile_xy = vec2<u32>(tile % ru.tiles.x, tile / ru.tiles.x);
    let pixel = tile_xy * TILE + lid3.xy;
    let inside = pixel.x < ru.image_size.x && pixel.y < ru.image_size.y;
    let centre = vec2<f32>(pixel) + 0.5;
    let range = ranges[tile];

    var t_final = 1.0;
    var last = 0u;
    var v_rgb = vec3<f32>(0.0);
    var v_alpha_out = 0.0;
    if inside {
        let at = pixel.y * ru.image_size.x + pixel.x;
        t_final = final_t[at];
        last = last_entry[at];
        v_rgb = v_image[at].xyz;
        v_alpha_out = v_image[at].w;
    }
    if lid == 0u {
        atomicStore(&max_last, 0u);
    }
    workgroupBarrier();
    atomicMax(&max_last, last);
    let tile_last = workgroupUniformLoad(&max_last);

    var t = t_final;
    var behind = vec3<f32>(0.0);   // S: colour of what lies behind, per unit transmittance
    let bg_dot = dot(ru.background.xyz, v_rgb);

    // Batches from the back of the list (only up to the furthest last entry of the tile).
    let end = range.x + tile_last;
    var batch_end = end;
    while batch_end > range.x {
        let batch_start = max(range.x, select(0u, batch_end - BATCH, batch_end >= BATCH));
        let fetch = batch_start + lid;
        if fetch < batch_end {
            let id = isect_splats[fetch];
            let p = projected[id];
            batch_id[lid] = id;
            batch_mean[lid] = p.mean2d;
            batch_conic[lid] = vec4<f32>(p.conic_radius.xyz, p.opacity);
            batch_color[lid] = p.color.xyz;
        }
        workgroupBarrier();
        for (var k = batch_end - batch_start; k > 0u; k--) {
            let entry = batch_start + k - 1u - range.x;   // position in the tile's list
            if entry >= last {
                continue;
            }
            let b = k - 1u;
            let con = batch_conic[b];
            let d = centre - batch_mean[b];
            let sigma = 0.5 * (con.x * d.x * d.x + con.z * d.y * d.y) + con.y * d.x * d.y;
            if sigma < 0.0 {
                continue;
            }
            let g = exp(-sigma);
            let raw_alpha = con.w * g;
            let alpha = min(ALPHA_MAX, raw_alpha);
            if alpha < ALPHA_MIN {
                continue;
            }
            t = t / (1.0 - alpha);          // transmittance in front of this splat
            let c = batch_color[b];
            let id = batch_id[b];

            let v_color = (alpha * t) * v_rgb;
            var v_alpha = t * dot(c - behind, v_rgb)
                + (v_alpha_out - bg_dot) * t_final / (1.0 - alpha);
            behind = c * alpha + (1.0 - alpha) * behind;

            add_grad(9u * id + 5u, v_color.x);
            add_grad(9u * id + 6u, v_color.y);
            add_grad(9u * id + 7u, v_color.z);
            if raw_alpha <= ALPHA_MAX {
                let v_sigma = -alpha * v_alpha;
                add_grad(9u * id + 8u, g * v_alpha);
                add_grad(9u * id + 2u, v_sigma * 0.5 * d.x * d.x);
                add_grad(9u * id + 3u, v_sigma * d.x * d.y);
                add_grad(9u * id + 4u, v_sigma * 0.5 * d.y * d.y);
                // d = centre − mean2d, so ∂σ/∂mean2d = −(A dx + B dy, B dx + C dy).
                add_grad(9u * id + 0u, -v_sigma * (con.x * d.x + con.y * d.y));
                add_grad(9u * id + 1u, -v_sigma * (con.y * d.x + con.z * d.y));
            }
        }
        workgroupBarrier();
        batch_end = batch_start;
    }
}
