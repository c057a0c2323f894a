// Exclusive prefix sum of u32 (wrapping), in the "reduce, then scan" scheme.
//
// The input is cut into blocks of BLOCK_SIZE elements, one workgroup per block:
//   `reduce`      writes the sum of each block into `block_sums` (one level up);
//   (the block sums are scanned recursively by the same two kernels, on the CPU's orders);
//   `scan_blocks` writes the exclusive scan of each block, plus the scanned sum of all the
//                 blocks before it (`block_offsets`), into `output`; the single-block top
//                 level also writes the grand total into `total`.
//
// Portable baseline: no subgroup operations, 5.1 KiB of workgroup memory, 256 invocations.
// Workgroups may be dispatched in 2D (x * y >= block_count); the flat workgroup index is
// workgroup_id.x + workgroup_id.y * num_workgroups.x and workgroups past the end return.

// Keep in sync with scan.rs (WORKGROUP_SIZE, ITEMS_PER_THREAD, BLOCK_SIZE).
const WORKGROUP_SIZE: u32 = 256u;
const ITEMS_PER_THREAD: u32 = 4u;
const BLOCK_SIZE: u32 = 1024u; // WORKGROUP_SIZE * ITEMS_PER_THREAD
// The 256 per-thread partial sums are scanned by RAKE_THREADS threads of RAKE_LENGTH each.
const RAKE_THREADS: u32 = 16u;
const RAKE_LENGTH: u32 = 16u; // WORKGROUP_SIZE / RAKE_THREADS

// `ScanParams.flags` bits. Keep in sync with scan.rs.
const FLAG_ADD_OFFSETS: u32 = 1u; // add block_offsets[block_base + block] to every output
const FLAG_WRITE_TOTAL: u32 = 2u; // write the block's sum into total[0] (single-block level)

// Keep in sync with `ScanParams` in scan.rs (16 bytes).
struct ScanParams {
    // Elements in this dispatch's `input` / `output` bindings.
    count: u32,
    // Index of this dispatch's first block among all blocks of the level (the bindings of a
    // level too big for one binding are cut into chunks).
    block_base: u32,
    // Workgroups that have work (the dispatch may have more, from rounding up in 2D).
    block_count: u32,
    flags: u32,
}

@group(0) @binding(0) var<storage, read> params: ScanParams;
@group(0) @binding(1) var<storage, read> input: array<u32>;
@group(0) @binding(2) var<storage, read_write> output: array<u32>;
@group(0) @binding(3) var<storage, read_write> block_sums: array<u32>;
@group(0) @binding(4) var<storage, read> block_offsets: array<u32>;
@group(0) @binding(5) var<storage, read_write> total: array<u32>;

var<workgroup> tile: array<u32, BLOCK_SIZE>;
var<workgroup> partials: array<u32, WORKGROUP_SIZE>;
var<workgroup> rake_sums: array<u32, RAKE_THREADS>;
var<workgroup> block_total: u32;

fn flat_workgroup_index(workgroup_id: vec3<u32>, num_workgroups: vec3<u32>) -> u32 {
    return workgroup_id.x + workgroup_id.y * num_workgroups.x;
}

// Loads this block into `tile` (zeros past `count`), with consecutive invocations reading
// consecutive addresses.
fn load_tile(base: u32, lid: u32) {
    for (var k = 0u; k < ITEMS_PER_THREAD; k++) {
        let local = k * WORKGROUP_SIZE + lid;
        let i = base + local;
        var value = 0u;
        if i < params.count {
            value = input[i];
        }
        tile[local] = value;
    }
}

// Exclusive scan of `partials` in place, by raking: RAKE_THREADS invocations each scan
// RAKE_LENGTH consecutive entries serially, then one scans the RAKE_THREADS segment sums.
// Call with every invocation of the workgroup. After it, partials[t] +
// rake_sums[t / RAKE_LENGTH] is the exclusive prefix of partial t and `block_total` the sum
// of all partials.
fn scan_partials(lid: u32) {
    workgroupBarrier();
    if lid < RAKE_THREADS {
        var sum = 0u;
        for (var j = 0u; j < RAKE_LENGTH; j++) {
            let idx = lid * RAKE_LENGTH + j;
            let value = partials[idx];
            partials[idx] = sum;
            sum += value;
        }
        rake_sums[lid] = sum;
    }
    workgroupBarrier();
    if lid == 0u {
        var sum = 0u;
        for (var j = 0u; j < RAKE_THREADS; j++) {
            let value = rake_sums[j];
            rake_sums[j] = sum;
            sum += value;
        }
        block_total = sum;
    }
    workgroupBarrier();
}

/// One workgroup per block: block_sums[block_base + block] = sum of the block.
@compute @workgroup_size(WORKGROUP_SIZE)
fn reduce(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) workgroup_id: vec3<u32>,
    @builtin(num_workgroups) num_workgroups: vec3<u32>,
) {
    let block = flat_workgroup_index(workgroup_id, num_workgroups);
    if block >= params.block_count {
        return;
    }
    let base = block * BLOCK_SIZE;
    // The order of a sum does not matter (wrapping u32): sum straight from memory.
    var sum = 0u;
    for (var k = 0u; k < ITEMS_PER_THREAD; k++) {
        let i = base + k * WORKGROUP_SIZE + lid;
        if i < params.count {
            sum += input[i];
        }
    }
    partials[lid] = sum;
    workgroupBarrier();
    if lid < RAKE_THREADS {
        var segment = 0u;
        for (var j = 0u; j < RAKE_LENGTH; j++) {
            segment += partials[lid * RAKE_LENGTH + j];
        }
        rake_sums[lid] = segment;
    }
    workgroupBarrier();
    if lid == 0u {
        var block_sum = 0u;
        for (var j = 0u; j < RAKE_THREADS; j++) {
            block_sum += rake_sums[j];
        }
        block_sums[params.block_base + block] = block_sum;
    }
}

/// One workgroup per block: output[i] = (sum of the block's elements before i)
/// + block_offsets[block_base + block] (when FLAG_ADD_OFFSETS); total[0] = sum of the block
/// (when FLAG_WRITE_TOTAL, used on a single-block level).
@compute @workgroup_size(WORKGROUP_SIZE)
fn scan_blocks(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) workgroup_id: vec3<u32>,
    @builtin(num_workgroups) num_workgroups: vec3<u32>,
) {
    let block = flat_workgroup_index(workgroup_id, num_workgroups);
    if block >= params.block_count {
        return;
    }
    let base = block * BLOCK_SIZE;
    load_tile(base, lid);
    workgroupBarrier();

    // Each invocation owns ITEMS_PER_THREAD consecutive elements of the tile.
    let first = lid * ITEMS_PER_THREAD;
    var sum = 0u;
    for (var k = 0u; k < ITEMS_PER_THREAD; k++) {
        sum += tile[first + k];
    }
    partials[lid] = sum;
    scan_partials(lid);

    var prefix = partials[lid] + rake_sums[lid / RAKE_LENGTH];
    if (params.flags & FLAG_ADD_OFFSETS) != 0u {
        prefix += block_offsets[params.block_base + block];
    }
    for (var k = 0u; k < ITEMS_PER_THREAD; k++) {
        let value = tile[first + k];
        tile[first + k] = prefix;
        prefix += value;
    }
    workgroupBarrier();

    for (var k = 0u; k < ITEMS_PER_THREAD; k++) {
        let local = k * WORKGROUP_SIZE + lid;
        let i = base + local;
        if i < params.count {
            output[i] = tile[local];
        }
    }
    if (params.flags & FLAG_WRITE_TOTAL) != 0u && lid == 0u {
        total[0] = block_total;
    }
}
