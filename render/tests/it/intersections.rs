//! Tile intersections a splat on real scenes, under the binning rule before issue (2 of 4) (the
//! 3σ circle's square of tiles, opacity ignored) and the current one (the ellipse cut where α
//! falls below 1/255, only the tiles it reaches; MATH.md step 8), with the GPU's count beside
//! the reference's. A measurement, not a check of a threshold: run with
//! `cargo test -p splat-render --test it intersections:: -- --ignored --nocapture`.
#![allow(clippy::unwrap_used, reason = "a measurement: any error should stop it")]

use glam::{DVec3, Mat4, Vec3};
use splat_formats::{Loaded, Splats, load_file};
use splat_render::reference::{self, NEAR, RefCamera, TILE, math};
use splat_render::{Camera, FrameScratch, GpuSplats, Owner, RenderSettings, Renderer};
use splat_test_support::data;

use crate::helpers::context;

fn scene(rel: &str) -> Splats {
    let path = data(rel);
    match load_file(&path).unwrap() {
        Loaded::Splats { splats, .. } => splats,
        Loaded::Points(_) => panic!("{rel} is not a scene"),
    }
}

/// A camera looking at the scene's median from its −z side, far enough to see most of it.
fn look_at(splats: &Splats, width: u32, height: u32, distance: f32) -> Camera {
    let median = |axis: usize| {
        let mut v: Vec<f32> = splats.means.iter().map(|m| m[axis]).collect();
        v.sort_by(f32::total_cmp);
        v[v.len() / 2]
    };
    let centre = Vec3::new(median(0), median(1), median(2));
    let mut extent: Vec<f32> =
        splats.means.iter().map(|m| (Vec3::from(*m) - centre).length()).collect();
    extent.sort_by(f32::total_cmp);
    let eye = centre - Vec3::Z * distance * extent[extent.len() * 8 / 10];
    let f = width as f32;
    Camera {
        width,
        height,
        fx: f,
        fy: f,
        cx: width as f32 / 2.0,
        cy: height as f32 / 2.0,
        world_from_camera: Mat4::from_translation(eye),
    }
}

/// Intersections under the former rule: every splat in front of the camera with a valid
/// covariance, on every tile of the square of side 2·ceil(3 sqrt(λ)) (λ the larger eigenvalue) around its mean.
fn former_rule(splats: &Splats, camera: &Camera) -> u64 {
    let cam = RefCamera::new(camera);
    let [tiles_x, tiles_y] = cam.tiles();
    let tile = f64::from(TILE);
    let mut total = 0;
    for i in 0..splats.len() {
        let mean = DVec3::from_array(splats.means[i].map(f64::from));
        let p = math::world_to_camera(mean, &cam);
        if !p.is_finite() || p.z < NEAR {
            continue;
        }
        let Some((q_hat, _)) = math::normalize_quat(splats.rotations[i].map(f64::from)) else {
            continue;
        };
        let rq = math::quat_to_rotmat(q_hat);
        let scale = DVec3::from_array(splats.log_scales[i].map(f64::from)).exp();
        let cov_cam = math::transform_cov(&cam.rotation, &math::covariance_3d(&rq, scale));
        let cov2d = math::project_cov(&math::perspective_jacobian(p, &cam), &cov_cam);
        let cov_dil = math::dilate(cov2d);
        if math::conic(cov_dil).is_none() {
            continue;
        }
        let Some(radius) = math::screen_radius(cov_dil) else { continue };
        let mean2d = math::project_mean(p, &cam);
        let r = f64::from(radius);
        let span = |axis: usize, n: u32| {
            let lo = ((mean2d[axis] - r) / tile).floor().clamp(0.0, f64::from(n));
            let hi = ((mean2d[axis] + r + tile - 1.0) / tile).floor().clamp(0.0, f64::from(n));
            (hi - lo) as u64
        };
        total += span(0, tiles_x) * span(1, tiles_y);
    }
    total
}

/// Intersections under MATH.md step 8, from the reference.
fn current_rule(splats: &Splats, camera: &Camera) -> (u64, u64) {
    let settings = reference::Settings { background: [0.0; 3], antialiased: false, sh_degree: 3 };
    let projected = reference::project_forward(splats, camera, &settings);
    let mut total = 0;
    let mut visible = 0;
    for pr in projected.iter().filter(|p| p.visible) {
        visible += 1;
        for ty in pr.tile_min[1]..pr.tile_max[1] {
            for tx in pr.tile_min[0]..pr.tile_max[0] {
                total += u64::from(pr.touches_tile(tx, ty, camera));
            }
        }
    }
    (total, visible)
}

#[test]
#[ignore = "a measurement for BENCHMARKS.md"]
fn measure_intersections_per_splat_on_real_scenes() {
    let ctx = context();
    let renderer = Renderer::new(&ctx).unwrap();
    println!(
        "{:<44} {:>9} {:>9} {:>10} {:>10} {:>10} {:>8}",
        "scene, view", "splats", "visible", "before", "after", "GPU after", "after/before"
    );
    for rel in [
        "splats/compressed-ply/biker.compressed.ply",
        "splats/inria-ply/lod2-tile-6831.ply",
        "splats/inria-ply/donut-sh0-no-normals.ply",
        "splats/splat/bob_10k.splat",
    ] {
        let splats = scene(rel);
        for (width, height, distance) in [(640, 480, 2.5), (1280, 720, 1.2)] {
            let camera = look_at(&splats, width, height, distance);
            let before = former_rule(&splats, &camera);
            let (after, visible) = current_rule(&splats, &camera);
            let gpu = GpuSplats::upload(&ctx, &splats, Owner::Viewer).unwrap();
            let mut scratch = FrameScratch::new(&ctx, &renderer, Owner::Viewer).unwrap();
            let stats = renderer
                .forward(&ctx, &gpu, &camera, &RenderSettings::default(), &mut scratch)
                .unwrap();
            let name = rel.rsplit('/').next().unwrap_or(rel);
            println!(
                "{:<44} {:>9} {:>9} {:>10} {:>10} {:>10} {:>8.3}",
                format!("{name}, {width}×{height} at {distance}×"),
                splats.len(),
                visible,
                before,
                after,
                stats.intersections,
                after as f64 / before.max(1) as f64
            );
        }
    }
}
