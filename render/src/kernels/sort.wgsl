// One pass of a stable LSD radix sort of (u32 key, u32 value) pairs, on the digit
// (key >> shift) & mask of at most BITS_PER_PASS bits. A pass is three dispatches:
//   `histogram` counts each block's digits into the digit-major table
//               histogram[digit * block_count + block];
//   (the table is exclusive-scanned by scan.wgsl, giving where each block's run of each
//    digit starts in the output);
//   `scatter`   writes every pair to offsets[digit * block_count + block] + its rank among the
//               block's pairs of the same digit that come before it, so the pass is stable.
//
// Portable baseline: no subgroup operations (correct for any subgroup size), 8.6 KiB of
// workgroup memory, 256 invocations. Blocks may be dispatched in 2D; the flat workgroup
// index is workgroup_id.x + workgroup_id.y * num_workgroups.x, workgroups past the end return.

// Keep in sync with sort.rs (WORKGROUP_SIZE, ITEMS_PER_THREAD, BLOCK_SIZE, BITS_PER_PASS).
const WORKGROUP_SIZE: u32 = 256u;
const ITEMS_PER_THREAD: u32 = 4u;
const BLOCK_SIZE: u32 = 1024u; // WORKGROUP_SIZE * ITEMS_PER_THREAD
const BITS_PER_PASS: u32 = 4u;
const RADIX: u32 = 16u; // 1 << BITS_PER_PASS

// Digit counts are packed two per u32 in 16-bit halves (a block holds at most 1,024 pairs, so
// no half can carry into the next): digit d lives in word d / 2, bits 16 * (d % 2).
const COUNT_WORDS: u32 = 8u; // RADIX / 2
// The per-invocation count vectors are scanned by raking: RAKE_SEGMENTS segments of
// RAKE_LENGTH invocations, one scanning invocation per (segment, word).
const RAKE_SEGMENTS: u32 = 16u;
const RAKE_LENGTH: u32 = 16u; // WORKGROUP_SIZE / RAKE_SEGMENTS

// Keep in sync with `SortParams` in sort.rs (16 bytes).
struct SortParams {
    // Pairs to sort.
    count: u32,
    // The pass's digit is (key >> shift) & mask.
    shift: u32,
    mask: u32,
    // Blocks (workgroups with work) of the pass; also the row length of the histogram table.
    block_count: u32,
}

@group(0) @binding(0) var<storage, read> params: SortParams;
@group(0) @binding(1) var<storage, read> keys_in: array<u32>;
@group(0) @binding(2) var<storage, read> values_in: array<u32>;
@group(0) @binding(3) var<storage, read_write> histogram: array<u32>;
@group(0) @binding(4) var<storage, read> offsets: array<u32>;
@group(0) @binding(5) var<storage, read_write> keys_out: array<u32>;
@group(0) @binding(6) var<storage, read_write> values_out: array<u32>;

var<workgroup> digit_counts: array<atomic<u32>, RADIX>;
// Per-invocation packed digit counts, then their exclusive scan (within the segment).
var<workgroup> thread_counts: array<u32, WORKGROUP_SIZE * COUNT_WORDS>;
var<workgroup> segment_counts: array<u32, RAKE_SEGMENTS * COUNT_WORDS>;

fn flat_workgroup_index(workgroup_id: vec3<u32>, num_workgroups: vec3<u32>) -> u32 {
    return workgroup_id.x + workgroup_id.y * num_workgroups.x;
}

fn digit_of(key: u32) -> u32 {
    return (key >> params.shift) & params.mask;
}

/// One workgroup per block: histogram[digit * block_count + block] = pairs of the block with
/// that digit.
@compute @workgroup_size(WORKGROUP_SIZE)
fn count_digits(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) workgroup_id: vec3<u32>,
    @builtin(num_workgroups) num_workgroups: vec3<u32>,
) {
    let block = flat_workgroup_index(workgroup_id, num_workgroups);
    if block >= params.block_count {
        return;
    }
    if lid < RADIX {
        atomicStore(&digit_counts[lid], 0u);
    }
    workgroupBarrier();
    let base = block * BLOCK_SIZE;
    for (var k = 0u; k < ITEMS_PER_THREAD; k++) {
        let i = base + k * WORKGROUP_SIZE + lid;
        if i < params.count {
            atomicAdd(&digit_counts[digit_of(keys_in[i])], 1u);
        }
    }
    workgroupBarrier();
    if lid < RADIX {
        histogram[lid * params.block_count + block] = atomicLoad(&digit_counts[lid]);
    }
}

/// One workgroup per block: moves every pair of the block to its place in the output.
/// Invocation t owns the block's pairs t * ITEMS_PER_THREAD .. + ITEMS_PER_THREAD, so
/// "before" in the input order is (invocation, item) order.
@compute @workgroup_size(WORKGROUP_SIZE)
fn scatter(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) workgroup_id: vec3<u32>,
    @builtin(num_workgroups) num_workgroups: vec3<u32>,
) {
    let block = flat_workgroup_index(workgroup_id, num_workgroups);
    if block >= params.block_count {
        return;
    }
    let first = block * BLOCK_SIZE + lid * ITEMS_PER_THREAD;

    // Count this invocation's digits; each item's rank among the invocation's earlier items
    // of the same digit is the count just before it is added.
    var counts: array<u32, COUNT_WORDS>;
    var keys: array<u32, ITEMS_PER_THREAD>;
    var values: array<u32, ITEMS_PER_THREAD>;
    var ranks: array<u32, ITEMS_PER_THREAD>;
    for (var k = 0u; k < ITEMS_PER_THREAD; k++) {
        let i = first + k;
        if i < params.count {
            let key = keys_in[i];
            keys[k] = key;
            values[k] = values_in[i];
            let digit = digit_of(key);
            let word = digit >> 1u;
            let half = (digit & 1u) * 16u;
            ranks[k] = (counts[word] >> half) & 0xffffu;
            counts[word] += 1u << half;
        }
    }
    for (var w = 0u; w < COUNT_WORDS; w++) {
        thread_counts[lid * COUNT_WORDS + w] = counts[w];
    }
    workgroupBarrier();

    // Exclusive scan of the count vectors over invocations, by raking. First each
    // (segment, word) serially over the segment's invocations ...
    if lid < RAKE_SEGMENTS * COUNT_WORDS {
        let segment = lid / COUNT_WORDS;
        let word = lid % COUNT_WORDS;
        var sum = 0u;
        for (var j = 0u; j < RAKE_LENGTH; j++) {
            let idx = (segment * RAKE_LENGTH + j) * COUNT_WORDS + word;
            let value = thread_counts[idx];
            thread_counts[idx] = sum;
            sum += value;
        }
        segment_counts[lid] = sum;
    }
    workgroupBarrier();
    // ... then each word over the segments.
    if lid < COUNT_WORDS {
        var sum = 0u;
        for (var s = 0u; s < RAKE_SEGMENTS; s++) {
            let idx = s * COUNT_WORDS + lid;
            let value = segment_counts[idx];
            segment_counts[idx] = sum;
            sum += value;
        }
    }
    workgroupBarrier();

    let segment = lid / RAKE_LENGTH;
    for (var k = 0u; k < ITEMS_PER_THREAD; k++) {
        let i = first + k;
        if i < params.count {
            let digit = digit_of(keys[k]);
            let word = digit >> 1u;
            let half = (digit & 1u) * 16u;
            let before = thread_counts[lid * COUNT_WORDS + word]
                + segment_counts[segment * COUNT_WORDS + word];
            let rank = ((before >> half) & 0xffffu) + ranks[k];
            let destination = offsets[digit * params.block_count + block] + rank;
            keys_out[destination] = keys[k];
            values_out[destination] = values[k];
        }
    }
}
