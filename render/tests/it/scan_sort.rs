//! The GPU prefix scan and radix sort against the CPU, on a real (software or hardware) device.
//!
//! Every output buffer starts full of garbage (0xDEADBEEF) and scratch is reused between
//! cases of different sizes, so no kernel can lean on zeroed memory; elements past `count`
//! must come back untouched.

use std::time::{Duration, Instant};

use splat_formats::random::SplitMix64;
use splat_render::kernels::scan::{DispatchLimits, EncodeError, PrefixScan, ScanScratch};
use splat_render::kernels::sort::{RadixSort, SortScratch};
use splat_render::wgpu::{self, BufferUsages, naga};
use splat_render::{Category, GpuBuffer, GpuContext, GpuError, Owner};

use crate::helpers::context;

const GARBAGE: u32 = 0xDEAD_BEEF;
/// Extra elements past `count` in every output buffer, checked to stay garbage.
const TAIL: u32 = 3;
const USAGE: BufferUsages =
    BufferUsages::STORAGE.union(BufferUsages::COPY_DST).union(BufferUsages::COPY_SRC);

/// The shared generator, and draws below a bound.
struct Rng(SplitMix64);

impl Rng {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }

    fn below(&mut self, n: u32) -> u32 {
        ((u64::from(self.0.next_u32()) * u64::from(n)) >> 32) as u32
    }
}

fn upload(ctx: &GpuContext, label: &str, data: &[u32]) -> GpuBuffer {
    let data = if data.is_empty() { &[GARBAGE][..] } else { data };
    ctx.create_buffer_init(label, bytemuck::cast_slice(data), USAGE, Category::Other, Owner::Shared)
        .expect("upload")
}

/// A buffer of `len` u32 (at least one), all garbage.
fn garbage(ctx: &GpuContext, label: &str, len: u32) -> GpuBuffer {
    upload(ctx, label, &vec![GARBAGE; len.max(1) as usize])
}

fn read_back(ctx: &GpuContext, buffer: &wgpu::Buffer, len: u32) -> Vec<u32> {
    if len == 0 {
        return Vec::new();
    }
    let bytes = u64::from(len) * 4;
    let staging = ctx
        .create_buffer(
            "readback",
            bytes,
            BufferUsages::MAP_READ | BufferUsages::COPY_DST,
            Category::Other,
            Owner::Shared,
        )
        .expect("staging buffer");
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, bytes);
    ctx.queue.submit([encoder.finish()]);
    staging.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    ctx.wait_idle().expect("wait");
    bytemuck::cast_slice(&staging.slice(..).get_mapped_range().expect("mapped")).to_vec()
}

fn submit(ctx: &GpuContext, encode: impl FnOnce(&mut wgpu::CommandEncoder)) {
    let mut encoder =
        ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("test") });
    encode(&mut encoder);
    ctx.queue.submit([encoder.finish()]);
}

fn assert_no_gpu_errors(ctx: &GpuContext) {
    ctx.wait_idle().expect("wait");
    let errors = ctx.take_uncaptured_errors();
    assert!(errors.is_empty(), "GPU errors: {errors:#?}");
}

// ---------------------------------------------------------------------------------------
// Scan

fn cpu_exclusive_scan(input: &[u32]) -> (Vec<u32>, u32) {
    let mut sum = 0_u32;
    let out = input
        .iter()
        .map(|&v| {
            let before = sum;
            sum = sum.wrapping_add(v);
            before
        })
        .collect();
    (out, sum)
}

/// Scans `input` on the GPU; returns (output including TAIL garbage, total).
fn gpu_scan(
    ctx: &GpuContext,
    scan: &PrefixScan,
    scratch: &ScanScratch,
    input: &[u32],
) -> (Vec<u32>, u32) {
    let count = input.len() as u32;
    let input_buf = upload(ctx, "scan input", input);
    let output = garbage(ctx, "scan output", count + TAIL);
    let total = garbage(ctx, "scan total", 1);
    submit(ctx, |encoder| {
        scan.encode_exclusive(ctx, encoder, &input_buf, &output, &total, count, scratch)
            .expect("encode scan");
    });
    (read_back(ctx, &output, count + TAIL), read_back(ctx, &total, 1)[0])
}

fn check_scan(ctx: &GpuContext, scan: &PrefixScan, scratch: &ScanScratch, input: &[u32]) {
    let count = input.len();
    let (expected, expected_total) = cpu_exclusive_scan(input);
    let (output, total) = gpu_scan(ctx, scan, scratch, input);
    if let Some(i) = (0..count).find(|&i| output[i] != expected[i]) {
        panic!("count {count}: output[{i}] = {} ≠ {}", output[i], expected[i]);
    }
    assert!(output[count..].iter().all(|&v| v == GARBAGE), "count {count}: wrote past the end");
    assert_eq!(total, expected_total, "count {count}: total");
}

#[test]
fn wgsl_parses_and_validates_with_naga() {
    let sources = splat_render::kernels::scan::shader_sources()
        .into_iter()
        .chain(splat_render::kernels::sort::shader_sources());
    for (label, source) in sources {
        let module = naga::front::wgsl::parse_str(&source)
            .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&source)));
        // No capabilities: the portable baseline (no subgroups, no float atomics).
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&source)));
    }
}

#[test]
fn scan_matches_the_cpu() {
    let ctx = context();
    let scan = PrefixScan::new(&ctx);
    let scratch = scan.scratch(&ctx, 1_000_003, Owner::Shared).expect("scratch");
    let mut rng = Rng(SplitMix64::new(1));
    // Largest first, so the smaller cases run over the leftovers of the larger.
    for count in [1_000_003, 65_537, 257, 256, 255, 1, 0] {
        let input: Vec<u32> = (0..count).map(|_| rng.next_u32()).collect();
        check_scan(&ctx, &scan, &scratch, &input);
    }
    // Small values: a total that does not wrap.
    let input: Vec<u32> = (0..300_000).map(|_| rng.below(100)).collect();
    check_scan(&ctx, &scan, &scratch, &input);
    assert_no_gpu_errors(&ctx);
}

/// Chunked bindings (a level longer than one binding) and 2D dispatch (more blocks than a
/// dimension allows), forced at small sizes by shrinking the limits the scan plans for.
#[test]
fn scan_chunks_and_folds_into_2d() {
    let ctx = context();
    let mut rng = Rng(SplitMix64::new(2));
    for limits in [
        // Chunks of 4 blocks, each dispatched as 3 × 2 workgroups.
        DispatchLimits { max_workgroups_per_dimension: 3, max_binding_elements: 4096 },
        // No chunks; 2,051 blocks dispatched as 2 × 1,026.
        DispatchLimits { max_workgroups_per_dimension: 2, max_binding_elements: 1 << 25 },
        // Chunks of one block, on every level (2,100,000 → 2,051 → 3).
        DispatchLimits { max_workgroups_per_dimension: 65_535, max_binding_elements: 1024 },
    ] {
        let scan = PrefixScan::with_limits(&ctx, limits);
        let scratch = scan.scratch(&ctx, 2_100_000, Owner::Shared).expect("scratch");
        for count in [2_100_000, 1_050_000, 70_000, 5000, 1025, 1024, 3, 0] {
            let input: Vec<u32> = (0..count).map(|_| rng.next_u32()).collect();
            check_scan(&ctx, &scan, &scratch, &input);
        }
    }
    assert_no_gpu_errors(&ctx);
}

/// 2^26 elements: more than one 128 MiB binding on lavapipe, so level 0 is chunked.
#[test]
fn scan_of_two_to_the_26() {
    let ctx = context();
    let scan = PrefixScan::new(&ctx);
    let count = 1_u32 << 26;
    let scratch = scan.scratch(&ctx, count, Owner::Shared).expect("scratch");
    let mut rng = Rng(SplitMix64::new(3));
    let input: Vec<u32> = (0..count).map(|_| rng.next_u32()).collect();
    let started = Instant::now();
    check_scan(&ctx, &scan, &scratch, &input);
    eprintln!("scan of 2^26 (upload, scan, read back, check): {:.2?}", started.elapsed());
    assert_no_gpu_errors(&ctx);
}

// ---------------------------------------------------------------------------------------
// Sort

fn cpu_sort(keys: &[u32], values: &[u32], key_bits: u32) -> (Vec<u32>, Vec<u32>) {
    let mask = if key_bits == 32 { u32::MAX } else { (1 << key_bits) - 1 };
    let mut pairs: Vec<(u32, u32)> = keys.iter().copied().zip(values.iter().copied()).collect();
    pairs.sort_by_key(|&(k, _)| k & mask); // stable
    pairs.into_iter().unzip()
}

/// Keys with many duplicates under the mask: drawn from a small pool of random words.
fn keys_with_duplicates(rng: &mut Rng, count: u32) -> Vec<u32> {
    let pool: Vec<u32> = (0..(count / 8).max(3)).map(|_| rng.next_u32()).collect();
    (0..count)
        .map(|_| {
            if rng.below(4) == 0 {
                rng.next_u32()
            } else {
                pool[rng.below(pool.len() as u32) as usize]
            }
        })
        .collect()
}

/// Sorts on the GPU; returns (keys, values) including the TAIL garbage.
fn gpu_sort(
    ctx: &GpuContext,
    sort: &RadixSort,
    scratch: &SortScratch,
    keys: &[u32],
    values: &[u32],
    key_bits: u32,
) -> (Vec<u32>, Vec<u32>) {
    let count = keys.len() as u32;
    let with_tail = |data: &[u32]| {
        let mut v = data.to_vec();
        v.extend(std::iter::repeat_n(GARBAGE, TAIL as usize));
        v
    };
    let keys_buf = upload(ctx, "sort keys", &with_tail(keys));
    let values_buf = upload(ctx, "sort values", &with_tail(values));
    submit(ctx, |encoder| {
        sort.encode(ctx, encoder, &keys_buf, &values_buf, count, key_bits, scratch)
            .expect("encode sort");
    });
    (read_back(ctx, &keys_buf, count + TAIL), read_back(ctx, &values_buf, count + TAIL))
}

fn check_sort(
    ctx: &GpuContext,
    sort: &RadixSort,
    scratch: &SortScratch,
    keys: &[u32],
    key_bits: u32,
    rng: &mut Rng,
) {
    let count = keys.len();
    // Values: the index in the high half (so stability is visible), noise in the low half.
    let values: Vec<u32> =
        (0..count as u32).map(|i| (i << 12) ^ (rng.next_u32() & 0xfff)).collect();
    let (expected_keys, expected_values) = cpu_sort(keys, &values, key_bits);
    let (got_keys, got_values) = gpu_sort(ctx, sort, scratch, keys, &values, key_bits);
    let case = format!("count {count}, key_bits {key_bits}");
    if let Some(i) =
        (0..count).find(|&i| got_keys[i] != expected_keys[i] || got_values[i] != expected_values[i])
    {
        panic!(
            "{case}: pair {i} is ({:#x}, {:#x}), expected ({:#x}, {:#x})",
            got_keys[i], got_values[i], expected_keys[i], expected_values[i]
        );
    }
    assert!(got_keys[count..].iter().all(|&v| v == GARBAGE), "{case}: keys past the end");
    assert!(got_values[count..].iter().all(|&v| v == GARBAGE), "{case}: values past the end");
}

#[test]
fn sort_is_stable_and_matches_the_cpu() {
    let ctx = context();
    let sort = RadixSort::new(&ctx);
    let scratch = sort.scratch(&ctx, 300_000, Owner::Shared).expect("scratch");
    let mut rng = Rng(SplitMix64::new(4));
    for count in [300_000, 10_000, 257, 256, 7, 1, 0] {
        for key_bits in [4, 12, 13, 32] {
            let keys = keys_with_duplicates(&mut rng, count);
            check_sort(&ctx, &sort, &scratch, &keys, key_bits, &mut rng);
        }
    }
    // Already sorted, reversed, all equal.
    for key_bits in [1, 5, 32] {
        let ascending: Vec<u32> = (0..5000).collect();
        let descending: Vec<u32> = (0..5000).rev().collect();
        for keys in [ascending, descending, vec![0xABCD_1234; 5000]] {
            check_sort(&ctx, &sort, &scratch, &keys, key_bits, &mut rng);
        }
    }
    assert_no_gpu_errors(&ctx);
}

#[test]
fn sort_folds_into_2d() {
    let ctx = context();
    let limits = DispatchLimits { max_workgroups_per_dimension: 3, max_binding_elements: 1 << 20 };
    let sort = RadixSort::with_limits(&ctx, limits);
    let scratch = sort.scratch(&ctx, 20_000, Owner::Shared).expect("scratch");
    let mut rng = Rng(SplitMix64::new(5));
    for (count, key_bits) in [(20_000, 32), (10_000, 13), (3000, 8)] {
        let keys = keys_with_duplicates(&mut rng, count);
        check_sort(&ctx, &sort, &scratch, &keys, key_bits, &mut rng);
    }
    assert_no_gpu_errors(&ctx);
}

// ---------------------------------------------------------------------------------------
// Memory, errors, timing

#[test]
fn repeated_encodes_allocate_nothing() {
    let ctx = context();
    let scan = PrefixScan::new(&ctx);
    let sort = RadixSort::new(&ctx);
    let count = 50_000;
    let scan_scratch = scan.scratch(&ctx, count, Owner::Run(7)).expect("scratch");
    let sort_scratch = sort.scratch(&ctx, count, Owner::Run(7)).expect("scratch");
    let mut rng = Rng(SplitMix64::new(6));
    let input: Vec<u32> = (0..count).map(|_| rng.below(1000)).collect();
    let input = upload(&ctx, "input", &input);
    let output = garbage(&ctx, "output", count);
    let total = garbage(&ctx, "total", 1);
    let keys = upload(&ctx, "keys", &keys_with_duplicates(&mut rng, count));
    let values = upload(&ctx, "values", &(0..count).collect::<Vec<_>>());

    let encode_both = || {
        submit(&ctx, |encoder| {
            scan.encode_exclusive(&ctx, encoder, &input, &output, &total, count, &scan_scratch)
                .expect("scan");
            sort.encode(&ctx, encoder, &keys, &values, count, 32, &sort_scratch).expect("sort");
        });
        ctx.wait_idle().expect("wait");
    };
    encode_both();
    let after_first = ctx.ledger().snapshot();
    let allocator_after_first = ctx.allocator_bytes();
    ctx.ledger().reset_peak();
    for _ in 1..50 {
        encode_both();
    }
    let after_fifty = ctx.ledger().snapshot();
    assert_eq!(after_fifty.total_bytes, after_first.total_bytes);
    assert_eq!(after_fifty.peak_bytes, after_first.total_bytes, "something allocated and freed");
    assert_eq!(after_fifty.allocations, after_first.allocations);
    assert_eq!(ctx.allocator_bytes(), allocator_after_first);

    // The scratch belongs to its owner and goes with it.
    let owned = ctx.ledger().owner_bytes(Owner::Run(7));
    assert!(owned >= u64::from(count) * 8, "sort scratch in the ledger: {owned} bytes");
    drop((scan_scratch, sort_scratch));
    assert_eq!(ctx.ledger().owner_bytes(Owner::Run(7)), 0);
    assert_no_gpu_errors(&ctx);
}

#[test]
fn bad_arguments_are_refused() {
    let ctx = context();
    let scan = PrefixScan::new(&ctx);
    let sort = RadixSort::new(&ctx);
    let scan_scratch = scan.scratch(&ctx, 1000, Owner::Shared).expect("scratch");
    let sort_scratch = sort.scratch(&ctx, 1000, Owner::Shared).expect("scratch");
    let a = garbage(&ctx, "a", 2000);
    let b = garbage(&ctx, "b", 2000);
    let total = garbage(&ctx, "total", 1);
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("refused") });

    let scan_err = |encoder: &mut wgpu::CommandEncoder, input, output, total, count| {
        scan.encode_exclusive(&ctx, encoder, input, output, total, count, &scan_scratch)
            .expect_err("must be refused")
    };
    assert_eq!(
        scan_err(&mut encoder, &a, &b, &total, 1001),
        EncodeError::OverCapacity { count: 1001, capacity: 1000 }
    );
    assert!(scan_err(&mut encoder, &a, &b, &total, 1001).to_string().contains("1001"));
    assert_eq!(scan_err(&mut encoder, &a, &a, &total, 10), EncodeError::Aliased("input", "output"));
    let small = garbage(&ctx, "small", 10);
    assert!(matches!(
        scan_err(&mut encoder, &a, &small, &total, 11),
        EncodeError::BufferTooSmall { name: "output", .. }
    ));

    let sort_err = |encoder: &mut wgpu::CommandEncoder, keys, values, count, bits| {
        sort.encode(&ctx, encoder, keys, values, count, bits, &sort_scratch)
            .expect_err("must be refused")
    };
    assert_eq!(
        sort_err(&mut encoder, &a, &b, 1001, 32),
        EncodeError::OverCapacity { count: 1001, capacity: 1000 }
    );
    assert_eq!(sort_err(&mut encoder, &a, &b, 10, 0), EncodeError::KeyBits(0));
    assert_eq!(sort_err(&mut encoder, &a, &b, 10, 33), EncodeError::KeyBits(33));
    assert_eq!(sort_err(&mut encoder, &a, &a, 10, 8), EncodeError::Aliased("keys", "values"));
    let no_copy = ctx
        .create_buffer("no copy", 64, BufferUsages::STORAGE, Category::Other, Owner::Shared)
        .expect("buffer");
    assert!(matches!(
        sort_err(&mut encoder, &no_copy, &b, 10, 8),
        EncodeError::MissingUsage { name: "keys", .. }
    ));

    // A scratch made for other limits.
    let other = PrefixScan::with_limits(
        &ctx,
        DispatchLimits { max_workgroups_per_dimension: 5, max_binding_elements: 4096 },
    );
    let err = other
        .encode_exclusive(&ctx, &mut encoder, &a, &b, &total, 10, &scan_scratch)
        .expect_err("mismatch");
    assert_eq!(err, EncodeError::ScratchMismatch);
    // Callers that return GpuError can use `?`.
    let err: GpuError = err.into();
    assert!(err.to_string().contains("other dispatch limits"), "{err}");

    // Nothing was recorded: the encoder is still valid and empty.
    ctx.queue.submit([encoder.finish()]);
    assert_no_gpu_errors(&ctx);
}

/// Runs `f` once to warm up, then `runs` times; the fastest run (the machine is shared, so
/// the minimum is the steadiest figure). `f` must wait for the GPU.
fn best_of(runs: u32, mut f: impl FnMut()) -> Duration {
    f();
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// Not a pass/fail test: prints how long a sort and a scan take on this device (submit to
/// idle, so including the submission overhead). Run on demand (BENCHMARKS.md):
/// `cargo test -p splat-render --test it scan_sort:: -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn measure_scan_and_sort_timings() {
    let ctx = context();
    let sort = RadixSort::new(&ctx);
    let scratch = sort.scratch(&ctx, 300_000, Owner::Shared).expect("scratch");
    let mut rng = Rng(SplitMix64::new(8));
    let keys: Vec<u32> = (0..300_000).map(|_| rng.next_u32()).collect();
    let keys = upload(&ctx, "keys", &keys);
    let values = upload(&ctx, "values", &(0..300_000).collect::<Vec<_>>());
    for (count, key_bits) in [(300_000, 32), (300_000, 12), (3000, 32)] {
        let time = best_of(10, || {
            submit(&ctx, |encoder| {
                sort.encode(&ctx, encoder, &keys, &values, count, key_bits, &scratch)
                    .expect("sort");
            });
            ctx.wait_idle().expect("wait");
        });
        eprintln!(
            "radix sort of {count} pairs by {key_bits} bits ({} passes) on {}: {time:.2?}",
            key_bits.div_ceil(4),
            ctx.adapter_info.name
        );
    }

    let scan = PrefixScan::new(&ctx);
    let count = 1 << 20;
    let scan_scratch = scan.scratch(&ctx, count, Owner::Shared).expect("scratch");
    let input = garbage(&ctx, "input", count);
    let output = garbage(&ctx, "output", count);
    let total = garbage(&ctx, "total", 1);
    let time = best_of(10, || {
        submit(&ctx, |encoder| {
            scan.encode_exclusive(&ctx, encoder, &input, &output, &total, count, &scan_scratch)
                .expect("scan");
        });
        ctx.wait_idle().expect("wait");
    });
    eprintln!("exclusive scan of 2^20 u32 on {}: {time:.2?}", ctx.adapter_info.name);
    assert_no_gpu_errors(&ctx);
}
