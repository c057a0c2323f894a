// Projection in depth order: one thread per visible splat of one depth band (its ranks
// `first .. first + count` among the visible splats, front to back). Splat
// splat_ids[first + k] is projected again, as project_forward.wgsl did, into projected[k]:
// the band's emit and rasterizers read only this band-sized array, so no binding holds every
// splat's 48 bytes (render/src/renderer.rs, "depth bands"). One pass a window of splats
// (`u.window_first`, `u.num_splats`): a thread whose splat lies in another window leaves it
// to that window's pass.

@group(0) @binding(9) var<storage, read> band: BandUniform;
@group(0) @binding(10) var<storage, read> splat_ids: array<u32>;          // [V] by depth
@group(0) @binding(11) var<storage, read_write> projected: array<Projected>; // [band.count]

const GROUP: u32 = 256u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let k = flat_group(gid, groups) * GROUP + lid;
    if k >= band.count {
        return;
    }
    let i = splat_ids[band.first + k] - u.window_first;
    if i >= u.num_splats {
        return;
    }
    projected[k] = projected_of(i, project(i));
}
