// Positions of split children: the gather copied the parent's mean; this adds R · d with R the
// parent's rotation and d, in the parent's frame, either diag(parent scale) · z with z ~ N(0, I)
// drawn from the child's seed (3DGS's densify_and_split: a sample of N(parent mean, parent
// covariance)) or, for a long-axis child (FLAG_LONG_AXIS), ± LONG_AXIS_OFFSET times the parent's
// scale along axis seed >> 1 (+ for an even seed). One thread per output splat.

// Keep in sync with LONG_AXIS_OFFSET in plan.rs.
const LONG_AXIS_OFFSET: f32 = 0.5;

@group(0) @binding(2) var<storage, read> old_quats: array<f32>;
@group(0) @binding(3) var<storage, read> old_log_scales: array<f32>;
@group(0) @binding(4) var<storage, read_write> new_means: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = (gid.x + gid.y * groups.x) * 256u + lid;
    if i >= gu.out_count {
        return;
    }
    if (plan[i].flags & FLAG_SPLIT) == 0u {
        return;
    }
    let s = source_in_window(i, 0xffffffffu);
    if s == 0xffffffffu {
        return;
    }
    let q = vec4<f32>(old_quats[4u * s], old_quats[4u * s + 1u], old_quats[4u * s + 2u],
                      old_quats[4u * s + 3u]);
    let scale = exp(vec3<f32>(old_log_scales[3u * s], old_log_scales[3u * s + 1u],
                              old_log_scales[3u * s + 2u]));
    let seed = plan[i].seed;
    var local = vec3<f32>(0.0);
    if (plan[i].flags & FLAG_LONG_AXIS) != 0u {
        let axis = seed >> 1u;
        local[axis] = select(1.0, -1.0, (seed & 1u) != 0u) * LONG_AXIS_OFFSET * scale[axis];
    } else {
        local = scale * normal3(seed);
    }
    let offset = rotation(q) * local;
    new_means[3u * i] += offset.x;
    new_means[3u * i + 1u] += offset.y;
    new_means[3u * i + 2u] += offset.z;
}
