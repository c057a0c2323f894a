//! Initial splats go to the GPU in chunks: the host never holds the whole scene as splats
//! next to the point cloud, and the result equals converting the cloud at once.
//! A counting global allocator measures the host peak, in a process of its own.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use splat_formats::PointCloud;
use splat_render::{Owner, ShPrecision};
use splat_test_support::{CountingAllocator, assert_own_process};
use splat_trainer::init::{UPLOAD_CHUNK, splats_from_points, upload_from_points};

use crate::helpers::context;

fn cloud(n: usize) -> PointCloud {
    let mut state = 9_u64;
    let mut next = move || {
        state =
            state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    PointCloud {
        positions: (0..n).map(|_| [next() * 10.0, next() * 10.0, next() * 10.0]).collect(),
        colors: (0..n).map(|_| [next(), next(), next()]).collect(),
        has_color: true,
    }
}

#[test]
fn chunked_upload_is_exact_and_bounded() {
    assert_own_process("init_upload::chunked_upload_is_exact_and_bounded");
    let ctx = context();

    // Exact: across chunk boundaries, the GPU holds what converting at once gives (the SH
    // rest of initial splats is zero, exact in 16 bits too).
    let small = cloud(UPLOAD_CHUNK * 2 + 123);
    for precision in [ShPrecision::F32, ShPrecision::F16] {
        let gpu = upload_from_points(&ctx, &small, 2, precision, Owner::Run(1)).unwrap();
        assert_eq!(gpu.download(&ctx).unwrap(), splats_from_points(&small, 2), "{precision:?}");
    }

    // Bounded: 600k points of SH 3 would be ~250 MB of splats and SH bands on the host if
    // converted whole; chunked, the host holds the cloud (24 B/point), the neighbour search
    // (~12 B/point) and about two chunks of splats.
    let n = 600_000;
    let big = cloud(n);
    ctx.wait_idle().unwrap();
    let before = CountingAllocator::start();
    let gpu = upload_from_points(&ctx, &big, 3, ShPrecision::F16, Owner::Run(2)).unwrap();
    let peak = CountingAllocator::peak() - before;
    let whole = n * (236 + 180);
    let bound = n * 40 + 2 * UPLOAD_CHUNK * (236 + 180) + (8 << 20);
    eprintln!(
        "host peak during upload: {:.1} MB (bound {:.1} MB; converting whole: {:.1} MB)",
        peak as f64 / 1e6,
        bound as f64 / 1e6,
        whole as f64 / 1e6
    );
    assert!(peak < bound, "host peak {peak} bytes ≥ bound {bound}");
    assert_eq!(gpu.count as usize, n);
    drop(gpu);
    assert!(ctx.take_uncaptured_errors().is_empty());
}
