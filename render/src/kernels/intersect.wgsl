// Tile intersections, between the depth sort and the tile sort.
//
// gather_counts: counts[j] = tiles touched by the j-th splat in depth order.
// emit: for the j-th splat in depth order, one (tile id, splat id) pair per tile of its rect,
//   at offsets[j].. (an exclusive scan of counts). Pairs come out in depth order, so a
//   stable sort by tile id leaves each tile's list front to back.
// tile_ranges: after the tile sort, [start, end) of each tile's run of pairs.

struct IntersectUniform {
    num_splats: u32,
    num_intersections: u32,
    tiles_x: u32,
    tiles_y: u32,
}

@group(0) @binding(0) var<storage, read> iu: IntersectUniform;
@group(0) @binding(1) var<storage, read> projected: array<Projected>;     // [N]
@group(0) @binding(2) var<storage, read> tiles_touched: array<u32>;       // [N]
@group(0) @binding(3) var<storage, read> depth_order: array<u32>;         // [N] splat ids by depth
@group(0) @binding(4) var<storage, read_write> counts: array<u32>;        // [N] in depth order
@group(0) @binding(5) var<storage, read> offsets: array<u32>;             // [N] exclusive scan of counts
@group(0) @binding(6) var<storage, read_write> tile_ids: array<u32>;      // [M]
@group(0) @binding(7) var<storage, read_write> isect_splats: array<u32>;  // [M]
@group(0) @binding(8) var<storage, read_write> ranges: array<vec2<u32>>;  // [tiles]

const GROUP: u32 = 256u;

fn flat(gid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (gid.x + gid.y * groups.x) * GROUP + lid;
}

@compute @workgroup_size(256)
fn gather_counts(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                 @builtin(num_workgroups) groups: vec3<u32>) {
    let j = flat(gid, groups, lid);
    if j >= iu.num_splats {
        return;
    }
    counts[j] = tiles_touched[depth_order[j]];
}

@compute @workgroup_size(256)
fn emit(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let j = flat(gid, groups, lid);
    if j >= iu.num_splats {
        return;
    }
    let splat = depth_order[j];
    if tiles_touched[splat] == 0u {
        return;
    }
    let p = projected[splat];
    let rect = tile_rect(p.mean2d, p.conic_radius.w, vec2<u32>(iu.tiles_x, iu.tiles_y));
    var at = offsets[j];
    for (var ty = rect.y; ty < rect.w; ty++) {
        for (var tx = rect.x; tx < rect.z; tx++) {
            tile_ids[at] = ty * iu.tiles_x + tx;
            isect_splats[at] = splat;
            at++;
        }
    }
}

@compute @workgroup_size(256)
fn tile_ranges(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
               @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups, lid);
    let m = iu.num_intersections;
    if i >= m {
        return;
    }
    let tile = tile_ids[i];
    if i == 0u || tile_ids[i - 1u] != tile {
        ranges[tile].x = i;
    }
    if i + 1u == m || tile_ids[i + 1u] != tile {
        ranges[tile].y = i + 1u;
    }
}
