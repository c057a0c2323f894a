//! A frame of more splat-tile pairs than a u32 counts (2^32 − 1: 270,000 splats each covering
//! a 2,048-px frame) is refused in words, and the renderer draws the next frame as if it had
//! never been asked: the count's atomic sum says when it wraps (`project_forward.wgsl`).
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use glam::Mat4;
use splat_formats::Splats;
use splat_render::{Camera, FrameScratch, GpuError, GpuSplats, Owner, RenderSettings, Renderer};

use crate::helpers::context;

/// `n` opaque splats at the origin, each about 7 units across: from `camera(size)`, 4 units
/// away, every one covers the whole frame.
fn covering(n: usize) -> Splats {
    Splats {
        means: vec![[0.0; 3]; n],
        log_scales: vec![[2.0; 3]; n],
        rotations: vec![[1.0, 0.0, 0.0, 0.0]; n],
        opacity_logits: vec![5.0; n],
        sh_dc: vec![[0.5; 3]; n],
        sh_rest: Vec::new(),
        sh_degree: 0,
    }
}

fn camera(size: u32) -> Camera {
    let f = size as f32 / 2.0;
    Camera {
        width: size,
        height: size,
        fx: f,
        fy: f,
        cx: f,
        cy: f,
        world_from_camera: Mat4::from_translation(glam::Vec3::new(0.0, 0.0, -4.0)),
    }
}

#[test]
fn a_frame_past_u32_intersections_is_refused_and_the_next_frame_draws() {
    let ctx = context();
    let renderer = Renderer::new(&ctx).unwrap();
    let mut scratch = FrameScratch::new(&ctx, &renderer, Owner::Shared).unwrap();
    let settings = RenderSettings::default();

    // 128 × 128 tiles of 16 px, each covered by 270,000 splats: 4.42e9 pairs.
    let many = GpuSplats::upload(&ctx, &covering(270_000), Owner::Shared).unwrap();
    let error = renderer.forward(&ctx, &many, &camera(2048), &settings, &mut scratch).unwrap_err();
    assert!(
        matches!(&error, GpuError::TooMany { count, .. } if *count == 270_000 * 128 * 128),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "'the frame's splat-tile intersections': 4423680000 is more than 4,294,967,295, the most \
         a GPU index (u32) holds"
    );
    drop(many);

    let few = GpuSplats::upload(&ctx, &covering(3), Owner::Shared).unwrap();
    let stats = renderer.forward(&ctx, &few, &camera(64), &settings, &mut scratch).unwrap();
    assert_eq!(stats.intersections, 3 * 4 * 4);
    assert!(ctx.take_uncaptured_errors().is_empty());
}
