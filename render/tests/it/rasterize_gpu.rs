//! The GPU rasterizer against the CPU reference (render/src/reference), on random scenes and
//! real trained scenes, forward and backward, plus the edge cases of the issue.
//!
//! Tolerances. The GPU works in f32, the reference in f64. Away from the thresholds of
//! MATH.md the difference is f32 rounding through ~100 operations (projection, exp,
//! compositing): ~1e-5 relative. At the thresholds (alpha at 1/255, transmittance at 1e-4,
//! the 0.99 cap) f32 and f64 can decide differently, which changes a pixel by at most one
//! splat's contribution at that threshold (≤ 1/255 · colour, or ≤ 1e-4). So per pixel channel
//! we allow 2e-3, and require the mean absolute error over the image to be below 1e-5
//! (measured on lavapipe, 2026-11-21: max 3.3e-6, mean ≤ 9e-8 on every scene here).
//! Gradients are sums over many pixels with atomics in arbitrary order: compared per
//! parameter group by relative L2 error, below 1e-4 (measured: ≤ 2e-6).

#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use glam::{Mat4, Quat, Vec3};
use splat_formats::random::SplitMix64;
use splat_formats::{Loaded, Splats, load_file, sh_coeffs_for_degree};
use splat_render::kernels::{DispatchLimits, Reduction};
use splat_render::reference;
use splat_render::wgpu;
use splat_render::{
    Camera, Category, FrameScratch, GpuContext, GpuSplats, Growth, Owner, RenderSettings, Renderer,
    ShPrecision, SplatGradients, gpu_splats::read_f32,
};
use splat_test_support::data;

use crate::helpers::context;

const PIXEL_TOLERANCE: f64 = 2e-3;
const MEAN_TOLERANCE: f64 = 1e-5;
const GRADIENT_TOLERANCE: f64 = 1e-4;

/// `n` splats in a box in front of a camera at the origin looking down +z.
fn random_scene(rng: &mut SplitMix64, n: usize, sh_degree: u32) -> Splats {
    let rest = 3 * (sh_coeffs_for_degree(sh_degree) - 1);
    let mut s = Splats::with_capacity(n, sh_degree);
    for _ in 0..n {
        s.means.push([rng.range(-1.5, 1.5), rng.range(-1.0, 1.0), rng.range(2.0, 6.0)]);
        s.log_scales.push([rng.range(-3.5, -1.5), rng.range(-3.5, -1.5), rng.range(-3.5, -1.5)]);
        s.rotations.push([
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
        ]);
        s.opacity_logits.push(rng.range(-2.0, 3.0));
        s.sh_dc.push([rng.range(-1.0, 1.5), rng.range(-1.0, 1.5), rng.range(-1.0, 1.5)]);
        s.sh_rest.extend((0..rest).map(|_| rng.range(-0.3, 0.3)));
    }
    s
}

fn camera(width: u32, height: u32, world_from_camera: Mat4) -> Camera {
    let f = width as f32 * 0.9;
    Camera {
        width,
        height,
        fx: f,
        fy: f * 1.05,
        cx: width as f32 * 0.52,
        cy: height as f32 * 0.47,
        world_from_camera,
    }
}

fn ref_settings(settings: &RenderSettings, splats: &Splats) -> reference::Settings {
    reference::Settings {
        background: settings.background.map(f64::from),
        antialiased: settings.antialiased,
        sh_degree: settings.sh_degree.unwrap_or(splats.sh_degree),
    }
}

struct Gpu {
    ctx: GpuContext,
    renderer: Renderer,
}

impl Gpu {
    fn new() -> Self {
        let ctx = context();
        let renderer = Renderer::new(&ctx).unwrap();
        Self { ctx, renderer }
    }

    fn render(&self, splats: &Splats, cam: &Camera, settings: &RenderSettings) -> Vec<[f32; 4]> {
        let mut scratch = FrameScratch::new(&self.ctx, &self.renderer, Owner::Run(1)).unwrap();
        self.render_in(&mut scratch, splats, cam, settings)
    }

    /// A frame in `scratch`, kept from frame to frame as a viewer keeps its own.
    fn render_in(
        &self,
        scratch: &mut FrameScratch,
        splats: &Splats,
        cam: &Camera,
        settings: &RenderSettings,
    ) -> Vec<[f32; 4]> {
        let gpu = GpuSplats::upload(&self.ctx, splats, Owner::Run(1)).unwrap();
        self.renderer.forward(&self.ctx, &gpu, cam, settings, scratch).unwrap();
        scratch.read_image(&self.ctx).unwrap()
    }
}

fn compare_images(what: &str, gpu: &[[f32; 4]], reference: &reference::Image) {
    assert_eq!(gpu.len(), reference.rgb.len(), "{what}");
    let mut worst: f64 = 0.0;
    let mut sum = 0.0;
    for (i, (g, (rgb, alpha))) in
        gpu.iter().zip(reference.rgb.iter().zip(&reference.alpha)).enumerate()
    {
        for (c, want) in rgb.iter().chain(std::iter::once(alpha)).enumerate() {
            let err = (f64::from(g[c]) - want).abs();
            assert!(
                err <= PIXEL_TOLERANCE,
                "{what}: pixel {i} channel {c}: gpu {} reference {want}",
                g[c]
            );
            worst = worst.max(err);
            sum += err;
        }
    }
    let mean = sum / (gpu.len() * 4) as f64;
    assert!(mean <= MEAN_TOLERANCE, "{what}: mean error {mean}");
    eprintln!("{what}: max {worst:.2e}, mean {mean:.2e}");
}

#[test]
fn forward_matches_reference_on_random_scenes() {
    let gpu = Gpu::new();
    let mut rng = SplitMix64::new(7);
    for (degree, antialiased, (w, h)) in
        [(0, false, (64, 48)), (1, true, (37, 23)), (2, false, (80, 80)), (3, true, (100, 61))]
    {
        let splats = random_scene(&mut rng, 300, degree);
        let cam = camera(w, h, Mat4::IDENTITY);
        let settings = RenderSettings {
            background: [0.2, 0.1, 0.7],
            antialiased,
            sh_degree: None,
            ..RenderSettings::default()
        };
        let image = gpu.render(&splats, &cam, &settings);
        let (_, reference) = reference::render(&splats, &cam, &ref_settings(&settings, &splats));
        compare_images(&format!("degree {degree} aa {antialiased} {w}x{h}"), &image, &reference);
    }
}

fn real_scene(rel: &str) -> Splats {
    let path = data(rel);
    match load_file(&path).unwrap() {
        Loaded::Splats { splats, .. } => splats,
        Loaded::Points(_) => panic!("{rel} is not a scene"),
    }
}

/// A camera looking at the scene's median from its -z side.
fn look_at_scene(splats: &Splats, width: u32, height: u32) -> Camera {
    let median = |axis: usize| {
        let mut v: Vec<f32> = splats.means.iter().map(|m| m[axis]).collect();
        v.sort_by(f32::total_cmp);
        v[v.len() / 2]
    };
    let centre = Vec3::new(median(0), median(1), median(2));
    let mut extent: Vec<f32> =
        splats.means.iter().map(|m| (Vec3::from(*m) - centre).length()).collect();
    extent.sort_by(f32::total_cmp);
    let eye = centre - Vec3::Z * 2.5 * extent[extent.len() * 8 / 10];
    camera(width, height, Mat4::from_translation(eye))
}

#[test]
fn forward_matches_reference_on_real_scenes() {
    let gpu = Gpu::new();
    for rel in [
        "splats/inria-ply/lod4-tile-489.ply",
        "splats/inria-ply/rtgs-16.ply",
        "splats/spz/minimal-v4.spz",
    ] {
        let splats = real_scene(rel);
        let cam = look_at_scene(&splats, 96, 72);
        for antialiased in [false, true] {
            let settings = RenderSettings {
                background: [0.0; 3],
                antialiased,
                sh_degree: None,
                ..RenderSettings::default()
            };
            let image = gpu.render(&splats, &cam, &settings);
            let (_, reference) =
                reference::render(&splats, &cam, &ref_settings(&settings, &splats));
            let covered = reference.alpha.iter().filter(|a| **a > 0.01).count();
            assert!(covered > 20, "{rel}: the camera sees the scene ({covered} pixels)");
            compare_images(&format!("{rel} aa {antialiased}"), &image, &reference);
        }
    }
}

/// Scene cells in a checkerboard over the splats' bounds, 5 × 4 × 3 of them.
fn checkerboard_cells(splats: &Splats) -> splat_formats::filter::SceneCells {
    let lo: [f32; 3] =
        std::array::from_fn(|a| splats.means.iter().map(|m| m[a]).fold(f32::MAX, f32::min));
    let hi: [f32; 3] =
        std::array::from_fn(|a| splats.means.iter().map(|m| m[a]).fold(f32::MIN, f32::max));
    let dims = [5u32, 4, 3];
    let scale = (0..3).map(|a| dims[a] as f32 / (hi[a] - lo[a])).fold(f32::MAX, f32::min);
    let mut bits = vec![0u32; 2];
    for i in 0..60u32 {
        let (x, y, z) = (i % 5, i / 5 % 4, i / 20);
        bits[(i / 32) as usize] |= u32::from((x + y + z) % 2 == 0) << (i % 32);
    }
    splat_formats::filter::SceneCells { origin: lo, scale, dims, bits: bits.into() }
}

/// A frame drawn with `RenderSettings::keep` (the window's crop preview) is the frame of the
/// splats the same filter keeps on the CPU (what an export writes): the culled splats are
/// simply absent. Splats whose opacity, distance or size is within a float's rounding of the
/// floor, surface, face or limit may go either way; none of this scene's are.
#[test]
fn a_filtered_frame_draws_the_splats_the_filter_keeps() {
    use splat_formats::filter::{CropBox, CropSphere, Filter, Selection, Shape};
    let gpu = Gpu::new();
    let splats = real_scene("splats/inria-ply/lod4-tile-489.ply");
    let cam = look_at_scene(&splats, 96, 72);
    let median = |axis: usize| {
        let mut v: Vec<f32> = splats.means.iter().map(|m| m[axis]).collect();
        v.sort_by(f32::total_cmp);
        v[v.len() / 2]
    };
    let crop_box =
        CropBox::aligned([f32::MIN, median(1), f32::MIN], [median(0), f32::MAX, f32::MAX]);
    let center = [median(0), median(1), median(2)];
    let mut sizes: Vec<f32> =
        splats.log_scales.iter().map(|s| s[0].max(s[1]).max(s[2]).exp()).collect();
    sizes.sort_by(f32::total_cmp);
    // A sphere around the centres' median holding about half of them, and the median size.
    let mut distances: Vec<f32> = splats
        .means
        .iter()
        .map(|m| (0..3).map(|a| (m[a] - center[a]).powi(2)).sum::<f32>().sqrt())
        .collect();
    distances.sort_by(f32::total_cmp);
    // Limits halfway between two neighbours: no splat within rounding of either.
    let between = |sorted: &[f32]| 0.5 * (sorted[sorted.len() / 2] + sorted[sorted.len() / 2 + 1]);
    let radius = between(&distances);
    let turned = CropBox {
        turn: [30.0, -20.0, 10.0],
        ..CropBox::aligned(center.map(|c| c - radius), center.map(|c| c + radius))
    };
    let (_, rotation, position) = cam.world_from_camera.to_scale_rotation_translation();
    // Pixel (u, v) of the camera's image, as fractions of its size, on its image plane.
    let plane = |u: f32, v: f32| {
        [(u * cam.width as f32 - cam.cx) / cam.fx, (v * cam.height as f32 - cam.cy) / cam.fy]
    };
    let selection = |shape: Shape, keep: bool| Selection {
        camera_from_world: rotation.inverse().to_array(),
        position: position.to_array(),
        shape,
        keep,
    };
    let selected = |shapes: Vec<(Shape, bool)>| {
        let mut filter = Filter::default();
        for (shape, keep) in shapes {
            assert!(filter.add_selection(selection(shape, keep)));
        }
        filter
    };
    let ([x0, y0], [x1, y1]) = (plane(0.3, 0.25), plane(0.7, 0.6));
    let rect = Shape::Rect([x0, y0, x1, y1]);
    // A zigzag over the image (an odd number of points, so one vec4 holds one point) and a
    // dot, the brush a twelfth of the image wide.
    let brush = 0.04 * cam.width as f32 / cam.fx;
    let zigzag = Shape::Stroke {
        radius: brush,
        points: vec![
            plane(0.1, 0.3),
            plane(0.3, 0.7),
            plane(0.5, 0.3),
            plane(0.7, 0.7),
            plane(0.9, 0.3),
        ],
    };
    let dot = Shape::Stroke { radius: 2.0 * brush, points: vec![plane(0.5, 0.5)] };
    let checker = checkerboard_cells(&splats);
    let box_only = Filter { crop_box: Some(crop_box), ..Filter::default() };
    let mut scratch = FrameScratch::new(&gpu.ctx, &gpu.renderer, Owner::Run(1)).unwrap();
    for keep in [
        box_only.clone(),
        Filter { min_opacity: Some(0.5), ..Filter::default() },
        Filter { min_opacity: Some(0.3), ..box_only },
        Filter { crop_sphere: Some(CropSphere { center, radius }), ..Filter::default() },
        Filter { max_size: Some(between(&sizes)), ..Filter::default() },
        // A cube around the sphere, turned about each axis.
        Filter { crop_box: Some(turned), ..Filter::default() },
        // The middle of the camera's image hidden, then kept alone.
        selected(vec![(rect.clone(), false)]),
        selected(vec![(rect, true)]),
        // A brush stroke kept alone but for a dot hidden in it, then hidden.
        selected(vec![(zigzag.clone(), true), (dot, false)]),
        selected(vec![(zigzag, false)]),
        // Likely floaters hidden: here, every other cell.
        Filter { scene_cells: Some(checker), ..Filter::default() },
    ] {
        let mut kept = splats.clone();
        let counts = keep.apply(&mut kept);
        assert!(counts.kept > 20 && counts.kept < splats.len(), "{keep:?}: {counts:?}");
        let settings = RenderSettings { keep: keep.clone(), ..RenderSettings::default() };
        // One scratch for every filter, as the viewer's: each frame draws its own filter.
        let filtered = gpu.render_in(&mut scratch, &splats, &cam, &settings);
        let expected = gpu.render(&kept, &cam, &RenderSettings::default());
        let worst = filtered
            .iter()
            .zip(&expected)
            .flat_map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).abs()))
            .fold(0.0, f32::max);
        // The same splats composited in the same depth order: the same image.
        assert!(worst < 1e-6, "{keep:?}: pixels differ by {worst}");
        let everything = gpu.render(&splats, &cam, &RenderSettings::default());
        assert_ne!(filtered, everything, "{keep:?} changed nothing");
    }
    // The rule buffer the filters grew goes with the scratch.
    assert!(gpu.ctx.ledger().owner_bytes(Owner::Run(1)) > 0);
    drop(scratch);
    gpu.ctx.wait_idle().unwrap();
    assert_eq!(gpu.ctx.ledger().owner_bytes(Owner::Run(1)), 0, "the scratch left memory behind");
}

fn relative_error(what: &str, gpu: &[f32], reference: &[f64]) {
    assert_eq!(gpu.len(), reference.len(), "{what}");
    let diff: f64 =
        gpu.iter().zip(reference).map(|(g, r)| (f64::from(*g) - r).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = reference.iter().map(|r| r * r).sum::<f64>().sqrt();
    let rel = diff / norm.max(1e-12);
    eprintln!("{what}: |ref| {norm:.3e}, relative error {rel:.2e}");
    assert!(
        rel <= GRADIENT_TOLERANCE || diff < 1e-9,
        "{what}: relative error {rel} (|diff| {diff}, |ref| {norm})"
    );
}

#[expect(clippy::float_cmp, reason = "counts and radii are small integers, exact in f32")]
fn check_gradients(gpu: &Gpu, splats: &Splats, cam: &Camera, settings: &RenderSettings, seed: u64) {
    let ctx = &gpu.ctx;
    let params = GpuSplats::upload(ctx, splats, Owner::Run(2)).unwrap();
    let grads = SplatGradients::new(ctx, &params, Owner::Run(2)).unwrap();
    let mut scratch = FrameScratch::new(ctx, &gpu.renderer, Owner::Run(2)).unwrap();
    gpu.renderer.forward(ctx, &params, cam, settings, &mut scratch).unwrap();
    let pixels = (cam.width * cam.height) as usize;
    let mut rng = SplitMix64::new(seed);
    let v_image: Vec<[f32; 4]> = (0..pixels)
        .map(|_| {
            [rng.range(-1.0, 1.0), rng.range(-1.0, 1.0), rng.range(-1.0, 1.0), rng.range(-1.0, 1.0)]
        })
        .collect();
    let v_buffer = ctx
        .create_buffer_init(
            "v_image",
            bytemuck::cast_slice(&v_image),
            wgpu::BufferUsages::STORAGE,
            Category::Other,
            Owner::Run(2),
        )
        .unwrap();
    ctx.queue.write_buffer(&grads.densify, 0, &vec![0u8; splats.len() * 12]);
    gpu.renderer.backward(ctx, &params, &mut scratch, &v_buffer, &grads).unwrap();

    let v_rgb: Vec<[f64; 3]> = v_image.iter().map(|v| [v[0], v[1], v[2]].map(f64::from)).collect();
    let v_alpha: Vec<f64> = v_image.iter().map(|v| f64::from(v[3])).collect();
    let want =
        reference::render_backward(splats, cam, &ref_settings(settings, splats), &v_rgb, &v_alpha);
    let n = splats.len();
    let read = |b: &wgpu::Buffer, k: usize| read_f32(ctx, b, k).unwrap();
    relative_error("v_means", &read(&grads.v_means, n * 3), want.v_means.as_flattened());
    relative_error(
        "v_log_scales",
        &read(&grads.v_log_scales, n * 3),
        want.v_log_scales.as_flattened(),
    );
    relative_error("v_quats", &read(&grads.v_quats, n * 4), want.v_rotations.as_flattened());
    relative_error("v_opacities", &read(&grads.v_opacities, n), &want.v_opacity_logits);
    // SH gradients come back per band; compare through the same layout as Splats.
    let mut bands: [Vec<f32>; 4] = Default::default();
    for (band, out) in bands.iter_mut().enumerate() {
        let floats = if band as u32 <= splats.sh_degree { n * [1, 3, 5, 7][band] * 3 } else { 0 };
        *out = read(&grads.v_sh[band], floats);
    }
    let as_splats = splat_render::gpu_splats::merge_sh_bands(
        Splats { sh_dc: vec![], sh_rest: vec![], ..splats.clone() },
        &bands,
    );
    relative_error("v_sh_dc", as_splats.sh_dc.as_flattened(), want.v_sh_dc.as_flattened());
    if splats.sh_degree > 0 {
        relative_error("v_sh_rest", &as_splats.sh_rest, &want.v_sh_rest);
    }
    let densify = read(&grads.densify, n * 3);
    let statistic: Vec<f32> = densify.chunks_exact(3).map(|c| c[0]).collect();
    match settings.growth {
        Growth::Signed => relative_error("grad2d", &statistic, &want.grad2d),
        Growth::Absolute => relative_error("abs_grad2d", &statistic, &want.abs_grad2d),
    }
    for i in 0..n {
        assert_eq!(densify[3 * i + 1] == 1.0, want.visible[i], "visible {i}");
        if want.visible[i] {
            assert_eq!(densify[3 * i + 2], want.radius[i] as f32, "radius {i}");
        }
    }
}

#[test]
fn gradients_match_reference() {
    let gpu = Gpu::new();
    let mut rng = SplitMix64::new(11);
    for (degree, antialiased, (w, h)) in
        [(0, false, (48, 40)), (3, true, (37, 29)), (2, false, (64, 32))]
    {
        let splats = random_scene(&mut rng, 120, degree);
        let cam = camera(
            w,
            h,
            Mat4::from_rotation_translation(Quat::from_rotation_y(0.1), Vec3::new(0.1, -0.1, 0.0)),
        );
        // The absolute growth statistic in one of the three.
        let growth = if degree == 3 { Growth::Absolute } else { Growth::Signed };
        let settings = RenderSettings {
            background: [0.3, 0.6, 0.1],
            antialiased,
            sh_degree: None,
            growth,
            ..RenderSettings::default()
        };
        eprintln!("degree {degree} aa {antialiased} {growth:?}:");
        check_gradients(&gpu, &splats, &cam, &settings, 5 + u64::from(degree));
    }
}

/// Splats that touch a hundred tiles or more: the projection's backward pass adds their
/// partials a chunk of 32 intersections at a time (intersect.wgsl, `chunk_sums`), which must
/// give the reference's gradients like the entry-by-entry sum of the small splats beside them.
#[test]
fn gradients_match_for_splats_across_many_tiles() {
    let gpu = Gpu::new();
    let mut rng = SplitMix64::new(17);
    let mut splats = random_scene(&mut rng, 60, 1);
    for i in 0..12 {
        splats.log_scales[i] =
            [rng.range(-0.7, -0.3), rng.range(-0.7, -0.3), rng.range(-1.0, -0.5)];
        splats.opacity_logits[i] = rng.range(-2.5, 0.0);
    }
    let cam = camera(192, 144, Mat4::IDENTITY);
    let settings = RenderSettings { growth: Growth::Absolute, ..RenderSettings::default() };
    let projected = reference::project_forward(&splats, &cam, &ref_settings(&settings, &splats));
    let tiles = |p: &reference::Projected| {
        let [x0, y0] = p.tile_min;
        let [x1, y1] = p.tile_max;
        (y0..y1)
            .flat_map(|y| (x0..x1).map(move |x| (x, y)))
            .filter(|&(x, y)| p.touches_tile(x, y, &cam))
            .count()
    };
    let most = projected.iter().map(tiles).max().unwrap();
    let chunked = projected.iter().filter(|p| tiles(p) >= 64).count();
    eprintln!("{chunked} splats touch 64 tiles or more (at most {most})");
    assert!(chunked >= 3, "{chunked} splats whose partials hold a whole chunk");
    check_gradients(&gpu, &splats, &cam, &settings, 23);
}

/// Tiles whose lists hold more than a thousand faint splats each, as a full-resolution
/// frame's do: the backward pass walks many batches (128 entries) and runs of them, and a
/// pixel composites hundreds of splats before its transmittance runs out.
/// Splats in the list of the least full of a 32×32 view's four tiles.
fn least_full_tile(splats: &Splats, cam: &Camera, settings: &RenderSettings) -> usize {
    let projected = reference::project_forward(splats, cam, &ref_settings(settings, splats));
    (0..2)
        .flat_map(|ty| (0..2).map(move |tx| (tx, ty)))
        .map(|(tx, ty)| projected.iter().filter(|p| p.touches_tile(tx, ty, cam)).count())
        .min()
        .unwrap()
}

#[test]
fn gradients_match_with_a_thousand_splats_a_tile() {
    let gpu = Gpu::new();
    let mut rng = SplitMix64::new(29);
    let mut splats = random_scene(&mut rng, 4_000, 1);
    for logit in &mut splats.opacity_logits {
        *logit = rng.range(-4.5, -2.0);
    }
    let cam = camera(32, 32, Mat4::IDENTITY);
    let settings = RenderSettings::default();
    let per_tile = least_full_tile(&splats, &cam, &settings);
    eprintln!("at least {per_tile} splats in every tile's list");
    assert!(per_tile > 1_000, "{per_tile} splats in the least full tile");
    check_gradients(&gpu, &splats, &cam, &settings, 31);
}

#[test]
fn gradients_match_with_the_portable_reduction() {
    let ctx = context();
    let gpu = Gpu { renderer: Renderer::with_reduction(&ctx, Reduction::PORTABLE).unwrap(), ctx };
    let mut rng = SplitMix64::new(3);
    let splats = random_scene(&mut rng, 100, 1);
    let cam = camera(40, 40, Mat4::IDENTITY);
    // Its runs hold 7 entries, not 8: the tenth value takes the room (reduce_portable.wgsl).
    let settings = RenderSettings { growth: Growth::Absolute, ..RenderSettings::default() };
    check_gradients(&gpu, &splats, &cam, &settings, 9);
}

/// Every gradient buffer's bits after one backward pass with `reduction`.
fn gradient_bits(
    ctx: &GpuContext,
    reduction: Reduction,
    splats: &Splats,
    cam: &Camera,
    seed: u64,
) -> Vec<Vec<u32>> {
    let renderer = Renderer::with_reduction(ctx, reduction).unwrap();
    let params = GpuSplats::upload(ctx, splats, Owner::Run(3)).unwrap();
    let grads = SplatGradients::new(ctx, &params, Owner::Run(3)).unwrap();
    let mut scratch = FrameScratch::new(ctx, &renderer, Owner::Run(3)).unwrap();
    let settings = RenderSettings::default();
    renderer.forward(ctx, &params, cam, &settings, &mut scratch).unwrap();
    let mut rng = SplitMix64::new(seed);
    let v_image: Vec<f32> = (0..cam.width * cam.height * 4).map(|_| rng.range(-1.0, 1.0)).collect();
    let v_buffer = ctx
        .create_buffer_init(
            "v_image",
            bytemuck::cast_slice(&v_image),
            wgpu::BufferUsages::STORAGE,
            Category::Other,
            Owner::Run(3),
        )
        .unwrap();
    ctx.queue.write_buffer(&grads.densify, 0, &vec![0u8; splats.len() * 12]);
    renderer.backward(ctx, &params, &mut scratch, &v_buffer, &grads).unwrap();
    let groups = grads.read_all(ctx, splats.sh_degree).unwrap();
    groups.iter().map(|g| g.iter().map(|v| v.to_bits()).collect()).collect()
}

#[test]
fn every_reduction_width_gives_the_same_bits() {
    // The tile sums are one fixed tree whatever the width of the groups that make its lower
    // levels (rasterize_backward.wgsl): the adapter's subgroups (compiled for the adapter's
    // one width, and read at run time as on adapters of several) and the portable path in
    // groups of 4 to 64 lanes (standing in for the subgroups of other adapters: 4 to 64 on
    // real GPUs) agree bit for bit. A sequential sum per group, as before, differs as soon as
    // the width does. Dense, translucent scenes, so that most pixels of a tile add to most
    // entries' sums.
    let ctx = context();
    let real = real_scene("splats/inria-ply/lod4-tile-489.ply");
    let mut rng = SplitMix64::new(17);
    let mut random = random_scene(&mut rng, 400, 3);
    for (s, o) in random.log_scales.iter_mut().zip(&mut random.opacity_logits) {
        *s = s.map(|v| v + 1.5);
        *o -= 2.5;
    }
    // Like a training run's 16-px views after a refinement: one tile, two thousand entries,
    // clones (the same splat twice); its subgroup gradients are checked against the reference
    // too.
    let mut crowd = random_scene(&mut rng, 1_500, 2);
    for s in &mut crowd.log_scales {
        *s = s.map(|v| v + 1.0);
    }
    let rest = crowd.rest_per_splat();
    for i in 0..500 {
        crowd.means.push(crowd.means[i]);
        crowd.log_scales.push(crowd.log_scales[i]);
        crowd.rotations.push(crowd.rotations[i]);
        crowd.opacity_logits.push(crowd.opacity_logits[i]);
        crowd.sh_dc.push(crowd.sh_dc[i]);
        crowd.sh_rest.extend_from_within(i * rest..(i + 1) * rest);
    }
    let small = camera(16, 10, Mat4::IDENTITY);
    let mut reductions: Vec<Reduction> =
        [4, 8, 16, 32, 64].map(|lanes| Reduction::Portable { lanes }).to_vec();
    if ctx.device.features().contains(wgpu::Features::SUBGROUP) {
        reductions.extend([Reduction::Subgroup, Reduction::SubgroupAnyWidth]);
    }
    for (what, splats, cam) in [
        ("real scene", &real, look_at_scene(&real, 96, 72)),
        ("random scene", &random, camera(80, 64, Mat4::IDENTITY)),
        ("crowded small view", &crowd, small),
    ] {
        if what == "crowded small view" {
            // Against the reference, with the adapter's own reduction.
            let gpu = Gpu { renderer: Renderer::new(&ctx).unwrap(), ctx: ctx.clone() };
            check_gradients(&gpu, splats, &cam, &RenderSettings::default(), 8);
        }
        let want = gradient_bits(&ctx, Reduction::PORTABLE, splats, &cam, 31);
        assert!(want.iter().flatten().any(|b| *b != 0), "{what}: no gradient at all");
        for &reduction in &reductions {
            let got = gradient_bits(&ctx, reduction, splats, &cam, 31);
            for (k, (a, b)) in want.iter().zip(&got).enumerate() {
                let differ = a.iter().zip(b).filter(|(x, y)| x != y).count();
                assert_eq!(
                    differ, 0,
                    "{what}, {reduction:?}: gradient buffer {k}: {differ} values differ"
                );
            }
        }
    }
}

#[test]
fn gradients_match_on_a_real_scene() {
    let gpu = Gpu::new();
    let splats = real_scene("splats/inria-ply/lod4-tile-489.ply");
    let cam = look_at_scene(&splats, 64, 48);
    check_gradients(&gpu, &splats, &cam, &RenderSettings::default(), 21);
}

#[test]
#[expect(clippy::float_cmp, reason = "an empty tile is exactly the background")]
fn edge_cases() {
    let gpu = Gpu::new();
    let settings = RenderSettings {
        background: [0.25, 0.5, 0.75],
        antialiased: false,
        sh_degree: None,
        ..RenderSettings::default()
    };
    let background = [0.25, 0.5, 0.75, 0.0];

    // No splats: the background.
    let empty = Splats::default();
    let image = gpu.render(&empty, &camera(33, 17, Mat4::IDENTITY), &settings);
    assert!(image.iter().all(|p| *p == background), "{:?}", &image[..4]);

    // All splats behind the camera: the background.
    let mut rng = SplitMix64::new(1);
    let mut behind = random_scene(&mut rng, 50, 0);
    for m in &mut behind.means {
        m[2] = -m[2];
    }
    let image = gpu.render(&behind, &camera(33, 17, Mat4::IDENTITY), &settings);
    assert!(image.iter().all(|p| *p == background));

    // One splat covering every tile of an image that is not a multiple of 16.
    let mut big = random_scene(&mut rng, 1, 0);
    big.means[0] = [0.0, 0.0, 3.0];
    big.log_scales[0] = [1.0, 1.0, 1.0];
    let cam = camera(70, 45, Mat4::IDENTITY);
    let image = gpu.render(&big, &cam, &settings);
    assert!(image.iter().all(|p| p[3] > 0.1), "every pixel is covered");
    let (_, reference) = reference::render(&big, &cam, &ref_settings(&settings, &big));
    compare_images("one big splat", &image, &reference);

    // NaN and infinite parameters: no crash, those splats are skipped.
    let mut bad = random_scene(&mut rng, 40, 1);
    let clean = bad.clone();
    bad.means[3][1] = f32::NAN;
    bad.log_scales[7][0] = f32::INFINITY;
    bad.rotations[9] = [0.0; 4];
    bad.opacity_logits[11] = f32::NEG_INFINITY;
    let rest = bad.rest_per_splat();
    bad.sh_rest[13 * rest + 2] = f32::NAN;
    let cam = camera(48, 32, Mat4::IDENTITY);
    let image = gpu.render(&bad, &cam, &settings);
    assert!(image.iter().flatten().all(|v| v.is_finite()));
    let mut without = clean;
    for i in [13, 11, 9, 7, 3] {
        without.means.remove(i);
        without.log_scales.remove(i);
        without.rotations.remove(i);
        without.opacity_logits.remove(i);
        without.sh_dc.remove(i);
        let rest = without.rest_per_splat();
        without.sh_rest.drain(i * rest..(i + 1) * rest);
    }
    let (_, reference) = reference::render(&without, &cam, &ref_settings(&settings, &without));
    compare_images("non-finite splats skipped", &image, &reference);
}

#[test]
fn a_thousand_frames_leave_the_ledger_where_the_second_left_it() {
    let gpu = Gpu::new();
    let ctx = &gpu.ctx;
    let mut rng = SplitMix64::new(99);
    let splats = random_scene(&mut rng, 200, 1);
    let params = GpuSplats::upload(ctx, &splats, Owner::Run(3)).unwrap();
    let mut scratch = FrameScratch::new(ctx, &gpu.renderer, Owner::Run(3)).unwrap();
    let cam = camera(64, 64, Mat4::IDENTITY);
    let mut after_second = None;
    for frame in 0..1000 {
        gpu.renderer.forward(ctx, &params, &cam, &RenderSettings::default(), &mut scratch).unwrap();
        if frame == 1 {
            after_second = Some(ctx.ledger().total_bytes());
        }
    }
    ctx.wait_idle().unwrap();
    assert_eq!(Some(ctx.ledger().total_bytes()), after_second);
    drop((scratch, params));
    ctx.wait_idle().unwrap();
    assert_eq!(ctx.ledger().owner_bytes(Owner::Run(3)), 0);
    assert!(ctx.take_uncaptured_errors().is_empty());
}

#[test]
fn two_dimensional_dispatch_gives_the_same_result() {
    // Real scenes pass 65,535 workgroups only at ~17M splats or ~17M pixels, which do not fit
    // lavapipe; shrinking the limit to 3 workgroups a dimension folds every dispatch here.
    let ctx = context();
    let limits =
        DispatchLimits { max_workgroups_per_dimension: 3, ..DispatchLimits::of(&ctx.device) };
    let gpu =
        Gpu { renderer: Renderer::with_limits(&ctx, Reduction::PORTABLE, limits).unwrap(), ctx };
    let mut rng = SplitMix64::new(17);
    let splats = random_scene(&mut rng, 2000, 1);
    let cam = camera(100, 90, Mat4::IDENTITY);
    let settings = RenderSettings::default();
    let image = gpu.render(&splats, &cam, &settings);
    let (_, reference) = reference::render(&splats, &cam, &ref_settings(&settings, &splats));
    compare_images("2D dispatch", &image, &reference);
    check_gradients(&gpu, &splats, &cam, &settings, 4);
}

/// A scratch keeps its bind groups while the same buffers come back, makes new ones when the
/// splats change (the image is the new scene's), and lets the old splats' memory go once told.
#[test]
fn kept_bind_groups_follow_the_splats_and_let_them_go() {
    let gpu = Gpu::new();
    let ctx = &gpu.ctx;
    let mut rng = SplitMix64::new(7);
    let scenes = [random_scene(&mut rng, 300, 1), random_scene(&mut rng, 300, 1)];
    let cam = camera(64, 64, Mat4::IDENTITY);
    let settings = RenderSettings::default();
    let mut scratch = FrameScratch::new(ctx, &gpu.renderer, Owner::Run(4)).unwrap();
    for scene in [&scenes[0], &scenes[1], &scenes[0]] {
        let params = GpuSplats::upload(ctx, scene, Owner::Run(5)).unwrap();
        for _ in 0..2 {
            gpu.renderer.forward(ctx, &params, &cam, &settings, &mut scratch).unwrap();
            // The forward pass has no atomics: the same inputs give the same bits.
            assert_eq!(scratch.read_image(ctx).unwrap(), gpu.render(scene, &cam, &settings));
        }
        ctx.wait_idle().unwrap();
        let held = ctx.allocator_bytes();
        drop(params);
        ctx.wait_idle().unwrap();
        // The ledger lets go at once; the buffers themselves go when the scratch forgets.
        assert_eq!(ctx.ledger().owner_bytes(Owner::Run(5)), 0);
        assert_eq!(ctx.allocator_bytes(), held, "the kept bind group still holds the splats");
        scratch.forget_bindings();
        ctx.wait_idle().unwrap();
        if let (Some(held), Some(now)) = (held, ctx.allocator_bytes()) {
            assert!(now < held, "forgetting the bind groups frees the splats ({now} vs {held})");
        }
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}

/// SH bands stored in 16 bits (`ShPrecision::F16`) render and differentiate exactly as f32
/// splats holding the same rounded values: the kernels read each binary16 as its f32 value
/// and compute the same thing after that, so images and gradients are the same bits.
#[test]
fn sixteen_bit_sh_renders_and_differentiates_as_its_rounded_values() {
    let gpu = Gpu::new();
    let ctx = &gpu.ctx;
    // A trained scene whose SH rest is not zero (the tiles' are).
    let splats = real_scene("splats/inria-ply/fruit-drops-extra-prop.ply");
    assert_eq!(splats.sh_degree, 3);
    let rounded = Splats {
        sh_rest: splats
            .sh_rest
            .iter()
            .map(|&v| splat_render::gpu_splats::round_to_f16(v))
            .collect(),
        ..splats.clone()
    };
    assert!(rounded.sh_rest != splats.sh_rest, "the scene's SH are not all binary16 values");
    let cam = look_at_scene(&splats, 64, 48);
    let settings = RenderSettings::default();
    let pixels = (cam.width * cam.height) as usize;
    let mut rng = SplitMix64::new(5);
    let v_image: Vec<f32> = (0..pixels * 4).map(|_| rng.range(-1.0, 1.0)).collect();
    let v_buffer = ctx
        .create_buffer_init(
            "v_image",
            bytemuck::cast_slice(&v_image),
            wgpu::BufferUsages::STORAGE,
            Category::Other,
            Owner::Run(3),
        )
        .unwrap();
    let run = |scene: &Splats, precision: ShPrecision| {
        let params = GpuSplats::upload_as(ctx, scene, precision, Owner::Run(3)).unwrap();
        assert!(params.download(ctx).unwrap() == rounded, "{precision:?} holds the rounded SH");
        let grads = SplatGradients::new(ctx, &params, Owner::Run(3)).unwrap();
        let mut scratch = FrameScratch::new(ctx, &gpu.renderer, Owner::Run(3)).unwrap();
        gpu.renderer.forward(ctx, &params, &cam, &settings, &mut scratch).unwrap();
        let image = scratch.read_image(ctx).unwrap();
        gpu.renderer.backward(ctx, &params, &mut scratch, &v_buffer, &grads).unwrap();
        let gradients: Vec<Vec<u32>> = grads
            .buffers()
            .into_iter()
            .chain([&*grads.densify])
            .map(|b| {
                let bytes = splat_render::gpu_splats::read_bytes(ctx, b, b.size()).unwrap();
                bytemuck::pod_collect_to_vec(&bytes)
            })
            .collect();
        (image.as_flattened().iter().map(|v| v.to_bits()).collect::<Vec<_>>(), gradients)
    };
    let (half_image, half_gradients) = run(&splats, ShPrecision::F16);
    let (full_image, full_gradients) = run(&rounded, ShPrecision::F32);
    assert!(half_image == full_image, "the images differ");
    assert!(half_gradients == full_gradients, "the gradients differ");
    assert!(half_gradients[7].iter().any(|&g| g != 0), "band 3 received gradients");
    assert!(ctx.take_uncaptured_errors().is_empty());
}

/// lavapipe (Mesa 22.3) silently ends a shader invocation's loops after 65,535 passes in all
/// (TESTING.md): a tile whose list holds thousands of entries that no pixel saturates walks
/// past it unless the walk costs about one pass an entry. Small faint splats, ≥ 6,800 entries
/// in every tile of a 32×32 view: the gradients and the absolute statistic still match the
/// reference (with a loop over each entry's nine values and another in the group sums, they
/// were 32% off).
#[test]
fn gradients_match_with_thousands_of_unsaturated_entries_a_tile() {
    let gpu = Gpu::new();
    let mut rng = SplitMix64::new(29);
    let mut splats = random_scene(&mut rng, 28_000, 1);
    for logit in &mut splats.opacity_logits {
        *logit = rng.range(-2.5, -2.0);
    }
    for s in &mut splats.log_scales {
        *s = [rng.range(-5.5, -4.5), rng.range(-5.5, -4.5), rng.range(-5.5, -4.5)];
    }
    let cam = camera(32, 32, Mat4::IDENTITY);
    let settings = RenderSettings { growth: Growth::Absolute, ..RenderSettings::default() };
    let per_tile = least_full_tile(&splats, &cam, &settings);
    assert!(per_tile > 6_500, "{per_tile} splats in the least full tile");
    check_gradients(&gpu, &splats, &cam, &settings, 31);
}
