// k-means' assignment step: each point's nearest centroid (squared distance, the lowest
// index on a tie, as formats::sog::nearest). The centroids pass through workgroup memory a
// tile at a time; every invocation of a workgroup reads the same tile, so each centroid is
// loaded from storage once a workgroup instead of once a point.
//
// One dispatch compares a range of at most CENTROIDS_PER_PASS centroids (kmeans.rs) and
// keeps the best so far in `best` and `labels`: llvmpipe stops a loop nest after 65,535
// iterations in all, and a Windows driver resets a GPU whose dispatch runs for seconds.

// Keep in sync with kmeans.rs.
const WORKGROUP_SIZE: u32 = 128u;
const TILE: u32 = 32u;
const MAX_DIM: u32 = 45u;

struct Params {
    // Points in this dispatch's bindings.
    points: u32,
    // The centroids this dispatch compares: first .. first + count.
    first: u32,
    count: u32,
    dim: u32,
    // Workgroups along x (the grid is 2D when one dimension is not enough).
    groups_x: u32,
}

// Read-only storage, not a uniform (ARCHITECTURE.md): one slot a dispatch.
@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> points: array<f32>;
@group(0) @binding(2) var<storage, read> centroids: array<f32>;
@group(0) @binding(3) var<storage, read_write> labels: array<u32>;
// Each point's squared distance to its label, carried between dispatches.
@group(0) @binding(4) var<storage, read_write> best_distance: array<f32>;

var<workgroup> tile: array<f32, 1440>; // TILE * MAX_DIM

@compute @workgroup_size(128)
fn assign(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let i = (group.x + group.y * params.groups_x) * WORKGROUP_SIZE + lane;
    let in_range = i < params.points;
    let dim = min(params.dim, MAX_DIM);
    var point: array<f32, 45>;
    if in_range {
        for (var k = 0u; k < dim; k++) {
            point[k] = points[i * dim + k];
        }
    }
    // The first range starts from larger than any finite distance: a point whose distances
    // are all infinite or NaN keeps label 0, as on the CPU.
    var best = 3.4028235e38;
    var best_index = 0u;
    if in_range && params.first > 0u {
        best = best_distance[i];
        best_index = labels[i];
    }
    let end = params.first + params.count;
    // The loop bounds are uniform, so every invocation meets every barrier.
    for (var base = params.first; base < end; base += TILE) {
        let count = min(TILE, end - base);
        for (var j = lane; j < count * dim; j += WORKGROUP_SIZE) {
            tile[j] = centroids[base * dim + j];
        }
        workgroupBarrier();
        if in_range {
            for (var c = 0u; c < count; c++) {
                var distance = 0.0;
                for (var k = 0u; k < dim; k++) {
                    let e = point[k] - tile[c * dim + k];
                    distance += e * e;
                }
                if distance < best {
                    best = distance;
                    best_index = base + c;
                }
            }
        }
        workgroupBarrier();
    }
    if in_range {
        labels[i] = best_index;
        best_distance[i] = best;
    }
}
