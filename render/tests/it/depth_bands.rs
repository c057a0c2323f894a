//! Depth bands (renderer.rs): a frame whose intersections outgrow one storage binding is cut
//! into bands of consecutive depth ranks, rasterized front to back and walked back to front
//! with each pixel's state carried between them. On a device whose buffers and bindings are
//! capped at 64 KiB (256 KiB for a 128 × 128 frame), frames of several bands give the same image and the same gradients, bit
//! for bit, as the default device gives in one band.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use glam::Mat4;
use splat_formats::{Loaded, Splats, load_file, sh_coeffs_for_degree};
use splat_render::{Camera, GpuContext, HeadlessOptions, Owner, RenderSettings, Renderer};
use splat_test_support::data;

const SMALL: u64 = 64 << 10;
/// Bindings of a 128 × 128 image: the frame of large splats.
const SMALL_128: u64 = 256 << 10;

fn context(limit: Option<u64>) -> GpuContext {
    let options = HeadlessOptions {
        max_buffer_size: limit,
        max_storage_buffer_binding_size: limit,
        ..HeadlessOptions::default()
    };
    pollster::block_on(GpuContext::new_headless_with(&options)).unwrap()
}

/// `n` splats of SH degree `degree` in front of a camera at the origin, large enough that
/// each touches several tiles of a small image.
fn scene(n: usize, degree: u32, seed: u64) -> Splats {
    let mut state = seed;
    let mut next = move || {
        state =
            state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 40) as f32 / (1_u64 << 24) as f32
    };
    let rest = 3 * (sh_coeffs_for_degree(degree) - 1);
    let mut s = Splats::with_capacity(n, degree);
    for _ in 0..n {
        let z = 2.0 + 4.0 * next();
        s.means.push([(next() - 0.5) * z, (next() - 0.5) * z * 0.8, z]);
        s.log_scales.push([-2.2 + next(), -2.2 + next(), -2.2 + next()]);
        s.rotations.push([next() - 0.5, next() - 0.5, next() - 0.5, next() - 0.5]);
        s.opacity_logits.push(next() * 3.0 - 2.0);
        s.sh_dc.push([next() - 0.5, next() - 0.5, next() - 0.5]);
        s.sh_rest.extend((0..rest).map(|_| (next() - 0.5) * 0.3));
    }
    s
}

/// 600 splats, one in four spanning most of the 64 tiles of a 128 × 128 image (whose image
/// buffer is the most the small device binds).
fn large_splats() -> Splats {
    let mut s = scene(600, 0, 11);
    for (i, log_scale) in s.log_scales.iter_mut().enumerate().step_by(4) {
        *log_scale = [-0.6, -0.8 - 0.001 * i as f32, -0.7];
    }
    s
}

fn camera(width: u32, height: u32) -> Camera {
    Camera {
        width,
        height,
        fx: width as f32 * 0.8,
        fy: width as f32 * 0.8,
        cx: width as f32 / 2.0,
        cy: height as f32 / 2.0,
        world_from_camera: Mat4::IDENTITY,
    }
}

/// The image, every gradient buffer (as bits) and the number of bands of one forward and
/// backward pass on `ctx`.
fn render(
    ctx: &GpuContext,
    splats: &Splats,
    cam: &Camera,
    settings: &RenderSettings,
) -> (Vec<u32>, Vec<Vec<u32>>, usize) {
    let renderer = Renderer::new(ctx).unwrap();
    let pixels = (cam.width * cam.height) as usize;
    let v_image: Vec<f32> =
        (0..pixels * 4).map(|i| ((i * 7919 % 997) as f32 / 498.5) - 1.0).collect();
    let pass =
        renderer.forward_backward(ctx, splats, (cam, settings), &v_image, Owner::Run(1)).unwrap();
    let image = pass.image.iter().flatten().map(|v| v.to_bits()).collect();
    let gradients =
        pass.gradients.iter().map(|g| g.iter().map(|v| v.to_bits()).collect()).collect();
    assert!(ctx.take_uncaptured_errors().is_empty());
    (image, gradients, pass.bands)
}

#[test]
fn a_frame_cut_into_depth_bands_gives_the_same_bits_as_one() {
    let default = context(None);
    let small = context(Some(SMALL));
    let small_128 = context(Some(SMALL_128));
    let real = match load_file(&data("splats/inria-ply/lod4-tile-489.ply")).unwrap() {
        Loaded::Splats { splats, .. } => splats,
        Loaded::Points(_) => panic!("not splats"),
    };
    let real_camera = {
        let mut c = camera(48, 40);
        // From the scene's -z side, looking at its middle.
        let mean =
            real.means.iter().fold([0.0_f32; 3], |a, m| [a[0] + m[0], a[1] + m[1], a[2] + m[2]]);
        let n = real.len() as f32;
        c.world_from_camera =
            Mat4::from_translation(glam::Vec3::new(mean[0] / n, mean[1] / n, mean[2] / n - 6.0));
        c
    };
    for (what, splats, cam, antialiased) in [
        ("random SH 0", scene(1_500, 0, 3), camera(48, 40), false),
        ("random SH 0, antialiased", scene(1_200, 0, 5), camera(40, 36), true),
        ("random SH 1", scene(700, 1, 7), camera(33, 21), false),
        // Splats across many tiles: whole chunks of their partials (intersect.wgsl,
        // chunk_sums), which a band's start must not shift.
        ("large splats", large_splats(), camera(128, 128), false),
        ("trained scene", real, real_camera, false),
    ] {
        let settings = RenderSettings {
            background: [0.2, 0.3, 0.4],
            antialiased,
            sh_degree: None,
            ..RenderSettings::default()
        };
        let (image, gradients, one) = render(&default, &splats, &cam, &settings);
        let device = if cam.width * cam.height > 64 * 64 { &small_128 } else { &small };
        let (banded_image, banded_gradients, bands) = render(device, &splats, &cam, &settings);
        eprintln!("{what}: {bands} bands on the small device");
        assert_eq!(one, 1, "{what}: the default device needs one band");
        assert!(bands >= 2, "{what}: the small device cuts the frame ({bands} bands)");
        assert!(image.iter().any(|b| *b != 0), "{what}: an image");
        let differ = image.iter().zip(&banded_image).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{what}: {differ} image values differ");
        for (k, (a, b)) in gradients.iter().zip(&banded_gradients).enumerate() {
            let differ = a.iter().zip(b).filter(|(x, y)| x != y).count();
            assert_eq!(differ, 0, "{what}: gradient buffer {k}: {differ} values differ");
        }
    }
}
