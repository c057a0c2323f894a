// Projection, forward: one thread per splat. Writes the projected splat, how many tiles it
// touches (0 when culled) and its depth as a sort key (culled splats sort last).

@group(0) @binding(9) var<storage, read_write> projected: array<Projected>;   // [N]
@group(0) @binding(10) var<storage, read_write> tiles_touched: array<u32>;   // [N]
@group(0) @binding(11) var<storage, read_write> depth_keys: array<u32>;      // [N]
@group(0) @binding(12) var<storage, read_write> splat_ids: array<u32>;       // [N]

const GROUP: u32 = 256u;
const CULLED_KEY: u32 = 0xffffffffu;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat_group(gid, groups) * GROUP + lid;
    if i >= u.num_splats {
        return;
    }
    splat_ids[i] = i;
    let pr = project(i);
    if !pr.visible {
        tiles_touched[i] = 0u;
        depth_keys[i] = CULLED_KEY;
        projected[i].opacity = 0.0;
        return;
    }
    let rect = tile_rect(pr.mean2d, pr.radius, u.tiles);
    tiles_touched[i] = (rect.z - rect.x) * (rect.w - rect.y);
    // Positive floats order like their bit patterns.
    depth_keys[i] = bitcast<u32>(pr.p_cam.z);
    var out: Projected;
    out.mean2d = pr.mean2d;
    out.depth = pr.p_cam.z;
    out.opacity = sigmoid(opacities[i]) * pr.comp;
    out.conic_radius = vec4<f32>(pr.conic, pr.radius);
    out.color = vec4<f32>(max(sh_color(i, pr.dir), vec3<f32>(0.0)), 0.0);
    projected[i] = out;
}
