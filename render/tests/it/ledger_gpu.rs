//! The ledger against wgpu's own allocator report, on a real (software or hardware) device.
//!
//! The allocator report counts what the driver-side allocator really holds, so a buffer made
//! around the ledger, or a ledger entry that outlives its buffer, shows up as a difference.

use splat_render::wgpu::{self, BufferUsages};
use splat_render::{Category, GpuError, Owner};

use crate::helpers::context;

const USAGE: BufferUsages =
    BufferUsages::STORAGE.union(BufferUsages::COPY_DST).union(BufferUsages::COPY_SRC);

/// Sizes that are not round, so alignment padding is exercised too.
const SIZES: [u64; 4] = [4, 1000, 65_540, 3 << 20];

#[test]
fn every_category_returns_to_zero_and_to_the_allocator_baseline() {
    let ctx = context();
    ctx.wait_idle().unwrap();
    let baseline = ctx.allocator_bytes();
    assert_eq!(ctx.ledger().total_bytes(), 0);

    for round in 0..10 {
        let mut buffers = Vec::new();
        let mut expected = 0;
        for (i, category) in Category::ALL.into_iter().enumerate() {
            for size in SIZES {
                let owner = if i % 2 == 0 { Owner::Run(round) } else { Owner::Viewer };
                buffers.push(
                    ctx.create_buffer(&format!("{category} {size}"), size, USAGE, category, owner)
                        .unwrap(),
                );
                expected += size;
            }
        }
        let texture = ctx
            .create_texture(
                &wgpu::TextureDescriptor {
                    label: Some("test image"),
                    size: wgpu::Extent3d { width: 37, height: 21, depth_or_array_layers: 1 },
                    mip_level_count: 1,
                    sample_count: 1,
                    dimension: wgpu::TextureDimension::D2,
                    format: wgpu::TextureFormat::Rgba8Unorm,
                    usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
                    view_formats: &[],
                },
                Category::DatasetImages,
                Owner::Run(round),
            )
            .unwrap();
        expected += 37 * 21 * 4;

        let snap = ctx.ledger().snapshot();
        assert_eq!(snap.total_bytes, expected);
        for category in Category::ALL {
            let textures = if category == Category::DatasetImages { 37 * 21 * 4 } else { 0 };
            assert_eq!(
                snap.category_bytes(category),
                SIZES.iter().sum::<u64>() + textures,
                "{category}"
            );
        }
        assert_eq!(snap.owner_bytes(Owner::Run(round)) + snap.owner_bytes(Owner::Viewer), expected);

        if let (Some(base), Some(now)) = (baseline, ctx.allocator_bytes()) {
            let allocator_delta = now - base;
            // The allocator rounds each allocation up to its alignment (at most 64 KiB per
            // allocation on the drivers we know); anything beyond that is memory the ledger
            // does not know about.
            let slack = 65_536 * (buffers.len() as u64 + 1);
            assert!(allocator_delta >= expected, "allocator {allocator_delta} < ledger {expected}");
            assert!(
                allocator_delta <= expected + slack,
                "allocator {allocator_delta} ≫ ledger {expected}"
            );
        }

        drop(buffers);
        drop(texture);
        ctx.wait_idle().unwrap();
        let snap = ctx.ledger().snapshot();
        assert_eq!(snap.total_bytes, 0, "round {round}: {:?}", snap.allocations);
        assert_eq!(snap.owner_bytes(Owner::Run(round)), 0);
        assert_eq!(
            ctx.allocator_bytes(),
            baseline,
            "round {round}: allocator did not return to baseline"
        );
    }
}

#[test]
fn a_buffer_made_around_the_ledger_shows_in_the_allocator_report() {
    let ctx = context();
    let Some(baseline) = ctx.allocator_bytes() else {
        // Only the GL backend has no allocator report; CI runs Vulkan.
        eprintln!("allocator report not supported on {:?}; skipped", ctx.adapter_info.backend);
        return;
    };
    let rogue = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("not in the ledger"),
        size: 1 << 20,
        usage: USAGE,
        mapped_at_creation: false,
    });
    let delta = ctx.allocator_bytes().unwrap() - baseline;
    assert_eq!(ctx.ledger().total_bytes(), 0);
    assert!(delta >= 1 << 20, "the report must see the rogue buffer ({delta} bytes)");
    drop(rogue);
    ctx.wait_idle().unwrap();
    assert_eq!(ctx.allocator_bytes(), Some(baseline));
}

#[test]
fn impossible_sizes_are_errors_not_panics() {
    let ctx = context();
    let err =
        ctx.create_buffer("huge", u64::MAX / 2, USAGE, Category::Other, Owner::Shared).unwrap_err();
    assert!(matches!(err, GpuError::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("huge"));
    // Invalid usage combination: a validation error, caught by the error scope.
    let err = ctx
        .create_buffer(
            "bad usage",
            16,
            BufferUsages::MAP_READ | BufferUsages::MAP_WRITE,
            Category::Other,
            Owner::Shared,
        )
        .unwrap_err();
    assert!(matches!(err, GpuError::Validation { .. }), "{err}");
    assert_eq!(ctx.ledger().total_bytes(), 0);
    assert!(ctx.take_uncaptured_errors().is_empty());
}

#[test]
fn init_contents_are_padded_and_uploaded() {
    let ctx = context();
    let buffer = ctx
        .create_buffer_init(
            "seven bytes",
            &[1, 2, 3, 4, 5, 6, 7],
            USAGE,
            Category::Other,
            Owner::Shared,
        )
        .unwrap();
    assert_eq!(buffer.size(), 8);
    let staging = ctx
        .create_buffer(
            "readback",
            8,
            BufferUsages::MAP_READ | BufferUsages::COPY_DST,
            Category::Other,
            Owner::Shared,
        )
        .unwrap();
    let mut encoder =
        ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("copy") });
    encoder.copy_buffer_to_buffer(&buffer, 0, &staging, 0, 8);
    ctx.queue.submit([encoder.finish()]);
    staging.slice(..).map_async(wgpu::MapMode::Read, |r| r.unwrap());
    ctx.wait_idle().unwrap();
    assert_eq!(&*staging.slice(..).get_mapped_range().unwrap(), &[1, 2, 3, 4, 5, 6, 7, 0]);
}
