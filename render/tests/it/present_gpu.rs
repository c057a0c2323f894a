//! The present kernel against its CPU reference: values outside [0, 1], exact halves, an
//! image smaller than its texture, and sizes that are not multiples of the workgroup.

#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use splat_render::kernels::present::{Presenter, present_reference};
use splat_render::wgpu::{self, BufferUsages};
use splat_render::{Category, GpuContext, Owner};

use crate::helpers::context;

/// Reads a whole `Rgba8Unorm` texture back, row by row (rows padded to 256 bytes on the GPU).
fn read_texture(ctx: &GpuContext, texture: &wgpu::Texture) -> Vec<[u8; 4]> {
    let (w, h) = (texture.width(), texture.height());
    let row = (w * 4).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
    let buffer = ctx
        .create_buffer(
            "texture readback",
            u64::from(row * h),
            BufferUsages::COPY_DST | BufferUsages::COPY_SRC | BufferUsages::STORAGE,
            Category::Other,
            Owner::Shared,
        )
        .unwrap();
    let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    encoder.copy_texture_to_buffer(
        texture.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: &buffer,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(row),
                rows_per_image: Some(h),
            },
        },
        wgpu::Extent3d { width: w, height: h, depth_or_array_layers: 1 },
    );
    ctx.queue.submit([encoder.finish()]);
    let bytes = splat_render::gpu_splats::read_bytes(ctx, &buffer, u64::from(row * h)).unwrap();
    (0..h)
        .flat_map(|y| {
            let start = (y * row) as usize;
            bytes[start..start + (w * 4) as usize]
                .chunks_exact(4)
                .map(|c| [c[0], c[1], c[2], c[3]])
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn present_matches_the_reference() {
    let ctx = context();
    let presenter = Presenter::new(&ctx, Owner::Viewer).unwrap();
    // 37 × 21: neither is a multiple of the 16 × 16 workgroup; the texture is larger still.
    let (w, h) = (37_u32, 21_u32);
    let pixels: Vec<[f32; 4]> = (0..w * h)
        .map(|i| {
            let t = i as f32 / (w * h) as f32;
            // Spans below 0 and above 1, and hits exact halves of an 8-bit step.
            [t * 1.4 - 0.2, (i % 256) as f32 / 255.0 + 0.5 / 255.0, 1.0 - t, t]
        })
        .collect();
    let image = ctx
        .create_buffer_init(
            "image",
            bytemuck::cast_slice(&pixels),
            BufferUsages::STORAGE,
            Category::Other,
            Owner::Shared,
        )
        .unwrap();
    let target = Presenter::create_target(&ctx, w + 11, h + 5, Owner::Viewer).unwrap();
    presenter.present(&ctx, &image, w, h, &target).unwrap();
    let texels = read_texture(&ctx, &target);
    let mut worst = 0;
    for y in 0..h {
        for x in 0..w {
            let got = texels[(y * (w + 11) + x) as usize];
            let want = present_reference(pixels[(y * w + x) as usize]);
            for c in 0..4 {
                worst = worst.max(got[c].abs_diff(want[c]));
            }
        }
    }
    assert!(worst <= 1, "present differs from its reference by {worst} steps");
    // Pixels outside the image are untouched (zero).
    assert_eq!(texels[(w + 3) as usize], [0, 0, 0, 0]);
    assert!(
        presenter.present(&ctx, &image, w + 12, h, &target).is_err(),
        "too large for the texture"
    );
    assert!(ctx.ledger().owner_bytes(Owner::Viewer) > 0);
    drop((presenter, target));
    assert_eq!(ctx.ledger().owner_bytes(Owner::Viewer), 0);
}
