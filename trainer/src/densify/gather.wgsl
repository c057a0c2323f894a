// Densification's data movement: builds one new parameter buffer and its two Adam moment
// buffers from the old ones, following the plan. One thread per output 32-bit word, so reads
// of one splat's words are contiguous. The words are moved as bits: f32 values, or a 16-bit SH
// band's pairs of binary16 values (each splat's row is whole words, gpu_splats.rs), so kept
// splats keep their parameters and moments exactly. Moments are copied, or zero where the plan
// says FLAG_ZERO_MOMENTS (new splats, replaced values). Overrides of the opacity and the
// log-scales (f32 buffers) come from the plan.

@group(0) @binding(2) var<storage, read> old_param: array<u32>;
@group(0) @binding(3) var<storage, read> old_m: array<u32>;
@group(0) @binding(4) var<storage, read> old_v: array<u32>;
@group(0) @binding(5) var<storage, read_write> new_param: array<u32>;
@group(0) @binding(6) var<storage, read_write> new_m: array<u32>;
@group(0) @binding(7) var<storage, read_write> new_v: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let e = (gid.x + gid.y * groups.x) * 256u + lid;
    if e >= gu.elements {
        return;
    }
    let i = e / gu.words_per_splat;
    let c = e - i * gu.words_per_splat;
    let s = source_in_window(i, 0xffffffffu);
    if s == 0xffffffffu {
        return;
    }
    let flags = plan[i].flags;
    let src = s * gu.words_per_splat + c;
    var value = old_param[src];
    if gu.role == ROLE_OPACITY && (flags & FLAG_SET_OPACITY) != 0u {
        value = bitcast<u32>(plan[i].opacity);
    }
    if gu.role == ROLE_LOG_SCALE && (flags & FLAG_SET_LOG_SCALE) != 0u {
        value = bitcast<u32>(plan[i].log_scale[c]);
    }
    new_param[e] = value;
    if (flags & FLAG_ZERO_MOMENTS) != 0u {
        new_m[e] = 0u;
        new_v[e] = 0u;
    } else {
        new_m[e] = old_m[src];
        new_v[e] = old_v[src];
    }
}
