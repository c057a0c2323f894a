// Rasterization, forward, of one depth band (renderer.rs): one workgroup per 16×16 tile, one
// thread per pixel. The tile's splats of the band (front to back) are loaded in batches of 256
// into workgroup memory and composited with the thresholds of MATH.md (a pixel takes a splat
// where σ ≤ its sigma_cut). The bands go front to back; a pixel's colour, transmittance and
// whether it is saturated carry from one to the next in `image`, `final_t` and `last_band`,
// and the last band puts the result over the background. Per pixel, the final transmittance,
// the band of the last composited splat and its place in that band's tile list (+ 1) are
// kept for the backward pass. With one band this is the whole frame at once.

@group(0) @binding(0) var<storage, read> ru: RasterUniform;
@group(0) @binding(1) var<storage, read> projected: array<Projected>;   // [band's splats]
@group(0) @binding(2) var<storage, read> isect_ids: array<u32>;        // [band's M] tile-sorted
@group(0) @binding(3) var<storage, read> ranges: array<vec2<u32>>;     // [tiles + 1]
@group(0) @binding(4) var<storage, read_write> image: array<vec4<f32>>;      // [H, W] rgb + alpha
@group(0) @binding(5) var<storage, read_write> final_t: array<f32>;          // [H, W]
@group(0) @binding(6) var<storage, read_write> last_entry: array<u32>;       // [H, W]
@group(0) @binding(7) var<storage, read> splat_of: array<u32>;               // [band's M]
@group(0) @binding(8) var<storage, read_write> last_band: array<u32>;        // [H, W]

const BATCH: u32 = 256u;

var<workgroup> batch_mean: array<vec2<f32>, BATCH>;
var<workgroup> batch_conic: array<vec4<f32>, BATCH>;   // A, B, C, opacity
var<workgroup> batch_color: array<vec4<f32>, BATCH>;   // rgb, sigma_cut
var<workgroup> batch_blocks: array<u32, BATCH>;        // block_mask
var<workgroup> done_count: atomic<u32>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(num_workgroups) groups: vec3<u32>) {
    let tile = gid.x + gid.y * groups.x;
    let num_tiles = ru.tiles.x * ru.tiles.y;
    // Uniform control flow: the whole workgroup leaves together.
    if tile >= num_tiles {
        return;
    }
    let tile_xy = vec2<u32>(tile % ru.tiles.x, tile / ru.tiles.x);
    let pixel = tile_xy * TILE + lid3.xy;
    let inside = pixel.x < ru.image_size.x && pixel.y < ru.image_size.y;
    let centre = vec2<f32>(pixel) + 0.5;
    let block_bit = pixel_block_bit(lid3.xy);
    let range = ranges[tile];

    var t = 1.0;
    var color = vec3<f32>(0.0);
    var done = !inside;
    var last = 0u;
    if inside && ru.band > 0u {
        // What the bands in front left.
        let at = pixel.y * ru.image_size.x + pixel.x;
        t = final_t[at];
        color = image[at].xyz;
        done = (last_band[at] & SATURATED) != 0u;
    }
    if lid == 0u {
        atomicStore(&done_count, 0u);
    }
    workgroupBarrier();
    if done {
        atomicAdd(&done_count, 1u);
    }

    for (var start = range.x; start < range.y; start += BATCH) {
        // Stop when every pixel of the tile is saturated.
        if workgroupUniformLoad(&done_count) == BATCH {
            break;
        }
        let fetch = start + lid;
        if fetch < range.y {
            let p = projected[splat_of[isect_ids[fetch]]];
            batch_mean[lid] = p.mean2d;
            batch_conic[lid] = vec4<f32>(p.conic, p.opacity);
            batch_color[lid] = vec4<f32>(p.color, p.sigma_cut);
            batch_blocks[lid] = block_mask(p.mean2d, p.conic, p.sigma_cut, tile_xy);
        }
        workgroupBarrier();
        let n = min(BATCH, range.y - start);
        for (var k = 0u; k < n && !done; k++) {
            if (batch_blocks[k] & block_bit) == 0u {
                continue;
            }
            let con = batch_conic[k];
            let sigma = conic_sigma(con.xyz, centre - batch_mean[k]);
            if !composited(sigma, batch_color[k].w) {
                continue;
            }
            let alpha = min(ALPHA_MAX, con.w * exp(-sigma));
            let next_t = t * (1.0 - alpha);
            if next_t < T_MIN {
                done = true;
                atomicAdd(&done_count, 1u);
                break;
            }
            color += batch_color[k].xyz * (alpha * t);
            t = next_t;
            last = start + k - range.x + 1u;
        }
        workgroupBarrier();
    }

    if inside {
        let at = pixel.y * ru.image_size.x + pixel.x;
        if ru.band + 1u == ru.bands {
            image[at] = vec4<f32>(color + t * ru.background.xyz, 1.0 - t);
        } else {
            image[at] = vec4<f32>(color, 0.0);
        }
        final_t[at] = t;
        // The band of the last composited splat and its place in that band's list: this
        // band's when it composited one, else what the bands in front left (none: band 0,
        // place 0).
        var state = 0u;
        if ru.band > 0u {
            state = last_band[at];
        }
        if ru.band == 0u || last > 0u {
            last_entry[at] = last;
        }
        if last > 0u {
            state = (state & SATURATED) | ru.band;
        }
        last_band[at] = state | select(0u, SATURATED, done);
    }
}
