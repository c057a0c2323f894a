//! Initial splats go to the GPU in chunks: the host never holds the whole scene as splats
//! next to the point cloud, and the result equals converting the cloud at once.
//! A counting global allocator measures the host peak; one test per file.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use splat_formats::PointCloud;
use splat_render::{GpuContext, Owner, ShPrecision};
use splat_trainer::init::{UPLOAD_CHUNK, splats_from_points, upload_from_points};

struct CountingAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

#[expect(unsafe_code, reason = "a global allocator is unsafe to implement by definition")]
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

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
    let ctx = pollster::block_on(GpuContext::new_headless()).unwrap();

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
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let gpu = upload_from_points(&ctx, &big, 3, ShPrecision::F16, Owner::Run(2)).unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - before;
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
