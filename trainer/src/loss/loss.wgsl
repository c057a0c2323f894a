// The 3DGS image loss, 0.8·L1 + 0.2·(1 − SSIM), and its gradient (see loss/mod.rs).
//
// Prepended by loss/mod.rs: TILE, RADIUS, WINDOW, C1, C2 and GAUSSIAN (the normalised 1D
// window). Keep the bindings and `LossParams` in sync with mod.rs.
//
// Both kernels work on TILE×TILE pixel tiles, one invocation per pixel. A tile and its halo of
// RADIUS pixels go into workgroup memory (zero outside the image: "same" padding), are blurred
// horizontally into (TILE + 2·RADIUS) rows × TILE columns, then vertically into TILE × TILE.
// Channels are done one after another so the workgroup memory stays under 16 KiB.
//
// SSIM per pixel and channel, with the blurred moments μx, μy, P = E[xy], Q = E[(x − y)²]:
//   a1 = 2μxμy + C1          b1 = a1 + d1,  d1 = (μx − μy)²          (= μx² + μy² + C1)
//   a2 = 2(P − μxμy) + C2    b2 = a2 + d2,  d2 = Q − d1              (= σx² + σy² + C2)
//   S  = a1·a2 / (b1·b2),    1 − S = (b1·d2 + a2·d1) / (b1·b2)
// which is the usual formula, arranged so that identical images give d1 = d2 = 0 and so
// 1 − S = 0 and a zero gradient exactly, whatever the compiler fuses into FMAs, and so that
// σx² + σy² − 2σxy (= d2) comes from (x − y)² directly, not from differences of large moments.
//
// Masks: the ground truth's alpha byte is the pixel's weight w (255: counts, 0: left out).
// Every per-pixel term (1 − S, |x − y|, (x − y)²) and its derivative is multiplied by w, and
// the tile sums carry Σw, by which the CPU divides the metrics. The gradient's scales stay
// 1/(3·W·H): a counted pixel weighs the same whatever its image's mask. A window's statistics
// are weighted means: each pixel enters the blur with its weight, the zero padding outside the
// image with weight 1 (3DGS's padding), and a window that holds a pixel of weight below 1 is
// divided by its total weight N = Σ g·w, so a pixel left out is in no statistics (it gets no
// SSIM gradient: the maps carry w/N and the backward multiplies by the pixel's own w). A
// window without such a pixel has N = 1 and is not divided, and w = 1 exactly for an opaque
// byte, so unmasked images give the same bits as before masks existed.
//
// Transparency: a target may carry an alpha plane after its H·W pixels (four pixels a word,
// pixel i in byte i % 4 of word H·W + i / 4), the image's own alpha α. Its colours were
// composited over one background at load; the render is over another (a random colour per
// step), so the target's colour is moved to that one: y = stored + shift·(1 − α), with shift
// the render's background minus the load's. The L1 loss on the rendered alpha adds
// alpha_scale·w·|α_render − α| a pixel, whose gradient goes to v_image's alpha.

struct LossParams {
    width: u32,
    height: u32,
    // 1: write the derivative maps for `ssim_backward`.
    write_maps: u32,
    // 1: `ground_truth` has an alpha plane after its pixels.
    alpha_plane: u32,
    // dL/d|x − y| per element: w_l1 / (3·W·H).
    l1_scale: f32,
    // dL/dS per element: −w_ssim / (3·W·H).
    ssim_scale: f32,
    // dL/d|α_render − α| per pixel: w_alpha / (W·H); 0 without the alpha loss.
    alpha_scale: f32,
    _pad0: u32,
    // xyz: the render's background minus the one the target was composited over.
    background_shift: vec4<f32>,
}

@group(0) @binding(0) var<storage, read> params: LossParams;
// [H·W] rgb + alpha of the render, row-major.
@group(0) @binding(1) var<storage, read> rendered: array<vec4<f32>>;
// [H·W] ground truth, RGBA8 packed (r in the low byte); alpha is the pixel's weight. With
// `alpha_plane`, [⌈H·W / 4⌉] more words: the image's alpha, a byte a pixel.
@group(0) @binding(2) var<storage, read> ground_truth: array<u32>;
// [3 channels, 3 maps, H·W]: ∂S/∂μx, ∂S/∂P, ∂S/∂Q of channel c at (3c + k)·H·W + pixel.
@group(0) @binding(3) var<storage, read_write> maps: array<f32>;
// [tiles] per-tile sums: (Σw(1 − S), Σw|x − y|, Σw(x − y)² over pixels and channels, Σw over
// pixels).
@group(0) @binding(4) var<storage, read_write> partials: array<vec4<f32>>;
// [H·W] dL/d(rgb, alpha) of the render; alpha's is 0 without the alpha loss.
@group(0) @binding(5) var<storage, read_write> v_image: array<vec4<f32>>;

const SPAN: u32 = TILE + 2u * RADIUS;     // a tile and its halo, per side
const TILE_PIXELS: u32 = TILE * TILE;     // = invocations per workgroup
const SPAN_PIXELS: u32 = SPAN * SPAN;     // the tile with its halo
const ROW_PIXELS: u32 = SPAN * TILE;      // after the horizontal pass: SPAN rows × TILE columns

/// The image's alpha at pixel `i`, in 0..1 (1 without an alpha plane).
fn target_alpha(i: u32) -> f32 {
    if params.alpha_plane == 0u {
        return 1.0;
    }
    let word = ground_truth[params.width * params.height + i / 4u];
    return f32((word >> (8u * (i % 4u))) & 0xffu) / 255.0;
}

/// Channel `c` of ground-truth pixel `i`, in 0..1, over the render's background.
fn ground_truth_channel(i: u32, c: u32) -> f32 {
    let stored = f32((ground_truth[i] >> (8u * c)) & 0xffu) / 255.0;
    return stored + params.background_shift[c] * (1.0 - target_alpha(i));
}

/// Weight of ground-truth pixel `i`: its alpha, in 0..1.
fn weight(i: u32) -> f32 {
    return f32(ground_truth[i] >> 24u) / 255.0;
}

/// Image pixel of entry `k` of a SPAN×SPAN tile whose first pixel is `origin`, or -1 where
/// it falls outside the image.
fn halo_pixel(origin: vec2<u32>, k: u32) -> i32 {
    let x = i32(origin.x + k % SPAN) - i32(RADIUS);
    let y = i32(origin.y + k / SPAN) - i32(RADIUS);
    if x < 0 || y < 0 || x >= i32(params.width) || y >= i32(params.height) {
        return -1;
    }
    return y * i32(params.width) + x;
}

// ---- forward: SSIM, L1 and squared error per tile; derivative maps for the backward -------

var<workgroup> fwd_xy: array<vec2<f32>, SPAN_PIXELS>;   // (x, y) of one channel
var<workgroup> fwd_w: array<f32, SPAN_PIXELS>;          // weights (1 outside the image)
// Horizontal blur of (x, y, xy, (x − y)²); reused for the reduction at the end.
var<workgroup> fwd_rows: array<vec4<f32>, ROW_PIXELS>;

@compute @workgroup_size(TILE, TILE)
fn ssim_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let origin = wid.xy * TILE;
    let pixel = origin + local.xy;
    let inside = pixel.x < params.width && pixel.y < params.height;
    let i = pixel.y * params.width + pixel.x;
    let n = params.width * params.height;
    // (Σw(1 − S), Σw|x − y|, Σw(x − y)²) over this pixel's channels, and w.
    var sums = vec4<f32>(0.0);
    var w = 0.0;
    if inside {
        w = weight(i);
        sums.w = w;
    }

    // The weights of the tile and its halo, and this pixel's window: its total weight N and
    // Σ(1 − w), which is 0 exactly when no pixel of the window has a weight below 1.
    for (var k = lid; k < SPAN_PIXELS; k += TILE_PIXELS) {
        let j = halo_pixel(origin, k);
        var pixel_weight = 1.0;
        if j >= 0 {
            pixel_weight = weight(u32(j));
        }
        fwd_w[k] = pixel_weight;
    }
    workgroupBarrier();
    for (var k = lid; k < ROW_PIXELS; k += TILE_PIXELS) {
        let first = (k / TILE) * SPAN + k % TILE;
        var acc = vec2<f32>(0.0);
        for (var t = 0u; t < WINDOW; t++) {
            let pixel_weight = fwd_w[first + t];
            acc += vec2<f32>(GAUSSIAN[t] * pixel_weight, 1.0 - pixel_weight);
        }
        fwd_rows[k] = vec4<f32>(acc, 0.0, 0.0);
    }
    workgroupBarrier();
    var window = vec2<f32>(0.0);
    for (var t = 0u; t < WINDOW; t++) {
        let row = fwd_rows[(local.y + t) * TILE + local.x];
        window += vec2<f32>(GAUSSIAN[t] * row.x, row.y);
    }
    // Divide by N only where the window leaves something out, and never by 0 (a window of
    // pixels all left out belongs to a pixel left out, whose terms count for nothing).
    let normalise = window.y > 0.0 && window.x > 0.0;
    // This pixel's weight in the derivative maps: w, over N where the window is normalised.
    var map_weight = w;
    if normalise {
        map_weight = w / window.x;
    }

    for (var c = 0u; c < 3u; c++) {
        // The tile and its halo.
        for (var k = lid; k < SPAN_PIXELS; k += TILE_PIXELS) {
            let j = halo_pixel(origin, k);
            var xy = vec2<f32>(0.0);
            if j >= 0 {
                xy = vec2<f32>(rendered[j][c], ground_truth_channel(u32(j), c));
            }
            fwd_xy[k] = xy;
        }
        workgroupBarrier();
        // This pixel's own (x, y), read now: the next channel's load may overwrite `fwd_xy`
        // as soon as everyone is past the next barrier.
        let centre = fwd_xy[(local.y + RADIUS) * SPAN + local.x + RADIUS];

        // Horizontal pass: SPAN rows × TILE columns, each pixel by its weight (× 1 exactly
        // without a mask). The first channel's overwrites the window pass's rows, which
        // everyone has read before the barrier after the load above.
        for (var k = lid; k < ROW_PIXELS; k += TILE_PIXELS) {
            let first = (k / TILE) * SPAN + k % TILE;
            var acc = vec4<f32>(0.0);
            for (var t = 0u; t < WINDOW; t++) {
                let xy = fwd_xy[first + t];
                let d = xy.x - xy.y;
                acc += (GAUSSIAN[t] * fwd_w[first + t]) * vec4<f32>(xy.x, xy.y, xy.x * xy.y, d * d);
            }
            fwd_rows[k] = acc;
        }
        workgroupBarrier();

        // Vertical pass: this invocation's pixel. (The next channel's first barrier keeps
        // its horizontal pass from overwriting `fwd_rows` before everyone has read it.)
        var m = vec4<f32>(0.0);
        for (var t = 0u; t < WINDOW; t++) {
            m += GAUSSIAN[t] * fwd_rows[(local.y + t) * TILE + local.x];
        }
        if normalise {
            m /= window.x;
        }
        let mu_x = m.x;
        let mu_y = m.y;
        let d1 = (mu_x - mu_y) * (mu_x - mu_y);
        let d2 = m.w - d1;
        let a1 = 2.0 * mu_x * mu_y + C1;
        let a2 = 2.0 * (m.z - mu_x * mu_y) + C2;
        let b1 = a1 + d1;
        let b2 = a2 + d2;
        let denominator = b1 * b2;
        let dissimilarity = (b1 * d2 + a2 * d1) / denominator;   // 1 − S

        if inside {
            let d = centre.x - centre.y;
            sums += vec4<f32>(w * vec3<f32>(dissimilarity, abs(d), d * d), 0.0);
            if params.write_maps != 0u {
                // ∂S/∂μx = 2/(b1·b2)·[μy(a2 − a1) − μx·S·(b2 − b1)], with S = 1 − (1 − S) and
                // b2 − b1 = (a2 − a1) + (d2 − d1), so that every term is exactly 0 when x = y.
                let d_mu = 2.0 / denominator * ((mu_y - mu_x) * (a2 - a1) - mu_x * (d2 - d1)
                    + mu_x * dissimilarity * (b2 - b1));
                // ∂S/∂P = 2·a1·(b2 − a2)/(b1·b2²);  ∂S/∂Q = −S/b2 = −a1·a2/(b1·b2²).
                let d_p = 2.0 * a1 * d2 / (denominator * b2);
                let d_q = -a1 * a2 / (denominator * b2);
                let base = 3u * c * n + i;
                maps[base] = map_weight * d_mu;
                maps[base + n] = map_weight * d_p;
                maps[base + 2u * n] = map_weight * d_q;
            }
        }
    }

    // Sum the tile's pixels: a tree over workgroup memory (everyone is done with `fwd_rows`
    // after this barrier).
    workgroupBarrier();
    fwd_rows[lid] = sums;
    workgroupBarrier();
    for (var stride = TILE_PIXELS / 2u; stride > 0u; stride >>= 1u) {
        if lid < stride {
            fwd_rows[lid] += fwd_rows[lid + stride];
        }
        workgroupBarrier();
    }
    if lid == 0u {
        partials[wid.x + wid.y * groups.x] = fwd_rows[0];
    }
}

// ---- backward: dL/d(render) ---------------------------------------------------------------
//
// Each map is S's derivative with respect to a blurred quantity at the pixel q; a render
// value x_p enters μx, P and Q of every q within the window with weight w(q − p), through
// ∂μx/∂x = 1, ∂P/∂x = y, ∂Q/∂x = 2(x − y). The window is symmetric and zero-padded, so its
// adjoint is the same blur:
//   Σ_q ∂S_q/∂x_p = blur(∂S/∂μx) + y·blur(∂S/∂P) + 2(x − y)·blur(∂S/∂Q).

// The three maps of one channel over the tile and its halo; the horizontal pass then writes
// its SPAN rows × TILE columns over the first ROW_PIXELS entries.
var<workgroup> bwd_maps: array<vec4<f32>, SPAN_PIXELS>;

@compute @workgroup_size(TILE, TILE)
fn ssim_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let origin = wid.xy * TILE;
    let pixel = origin + local.xy;
    let inside = pixel.x < params.width && pixel.y < params.height;
    let i = pixel.y * params.width + pixel.x;
    let n = params.width * params.height;
    var grad = vec4<f32>(0.0);

    for (var c = 0u; c < 3u; c++) {
        for (var k = lid; k < SPAN_PIXELS; k += TILE_PIXELS) {
            let j = halo_pixel(origin, k);
            var v = vec4<f32>(0.0);
            if j >= 0 {
                let base = 3u * c * n + u32(j);
                v = vec4<f32>(maps[base], maps[base + n], maps[base + 2u * n], 0.0);
            }
            bwd_maps[k] = v;
        }
        workgroupBarrier();

        // Horizontal pass into registers (at most two entries per invocation: ROW_PIXELS is
        // less than 2·TILE_PIXELS), then, once everyone has read, over the same memory.
        var rows: array<vec4<f32>, 2>;
        for (var r = 0u; r < 2u; r++) {
            let k = lid + r * TILE_PIXELS;
            if k < ROW_PIXELS {
                let first = (k / TILE) * SPAN + k % TILE;
                var acc = vec4<f32>(0.0);
                for (var t = 0u; t < WINDOW; t++) {
                    acc += GAUSSIAN[t] * bwd_maps[first + t];
                }
                rows[r] = acc;
            }
        }
        workgroupBarrier();
        for (var r = 0u; r < 2u; r++) {
            let k = lid + r * TILE_PIXELS;
            if k < ROW_PIXELS {
                bwd_maps[k] = rows[r];
            }
        }
        workgroupBarrier();

        var blurred = vec4<f32>(0.0);
        for (var t = 0u; t < WINDOW; t++) {
            blurred += GAUSSIAN[t] * bwd_maps[(local.y + t) * TILE + local.x];
        }
        if inside {
            let x = rendered[i][c];
            let y = ground_truth_channel(i, c);
            // This pixel enters its neighbours' statistics with its weight.
            let w = weight(i);
            let d_ssim = w * (blurred.x + y * blurred.y + 2.0 * (x - y) * blurred.z);
            grad[c] = params.l1_scale * w * sign(x - y) + params.ssim_scale * d_ssim;
        }
        // Everyone has read the vertical pass's input before the next channel loads.
        workgroupBarrier();
    }
    if inside {
        if params.alpha_scale != 0.0 {
            grad.w = params.alpha_scale * weight(i) * sign(rendered[i].w - target_alpha(i));
        }
        v_image[i] = grad;
    }
}
