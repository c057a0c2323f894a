//! Adam on the GPU against a CPU Adam in f64, over several steps and every parameter group.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use splat_formats::{Splats, sh_coeffs_for_degree};
use splat_render::gpu_splats::read_f32;
use splat_render::{GpuContext, GpuSplats, Owner, SplatGradients, wgpu};
use splat_trainer::optim::{Adam, AdamState, ParamGroup};

fn scene(n: usize, degree: u32, seed: u64) -> Splats {
    let mut state = seed;
    let mut next = move || {
        state =
            state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let rest = 3 * (sh_coeffs_for_degree(degree) - 1);
    Splats {
        means: (0..n).map(|_| [next(), next(), next()]).collect(),
        log_scales: (0..n).map(|_| [next(), next(), next()]).collect(),
        rotations: (0..n).map(|_| [next(), next(), next(), next()]).collect(),
        opacity_logits: (0..n).map(|_| next()).collect(),
        sh_dc: (0..n).map(|_| [next(), next(), next()]).collect(),
        sh_rest: (0..n * rest).map(|_| next()).collect(),
        sh_degree: degree,
    }
}

fn flat(s: &Splats) -> Vec<(ParamGroup, Vec<f32>)> {
    let bands = splat_render::gpu_splats::split_sh_bands(s);
    vec![
        (ParamGroup::Means, s.means.as_flattened().to_vec()),
        (ParamGroup::LogScales, s.log_scales.as_flattened().to_vec()),
        (ParamGroup::Quats, s.rotations.as_flattened().to_vec()),
        (ParamGroup::Opacities, s.opacity_logits.clone()),
        (ParamGroup::ShDc, bands[0].clone()),
        (ParamGroup::ShRest, bands[1].clone()),
        (ParamGroup::ShRest, bands[2].clone()),
        (ParamGroup::ShRest, bands[3].clone()),
    ]
}

fn lr(group: ParamGroup) -> f32 {
    match group {
        ParamGroup::Means | ParamGroup::Quats => 1e-3,
        ParamGroup::LogScales => 5e-3,
        ParamGroup::Opacities => 5e-2,
        ParamGroup::ShDc => 2.5e-3,
        ParamGroup::ShRest => 1.25e-4,
    }
}

/// Per buffer: group, parameters, first and second moments.
type CpuAdam = (ParamGroup, Vec<f64>, Vec<f64>, Vec<f64>);

#[test]
fn gpu_adam_matches_cpu_adam() {
    let ctx = pollster::block_on(GpuContext::new_headless()).unwrap();
    let adam = Adam::new(&ctx);
    let n = 300;
    let params = scene(n, 3, 1);
    let gpu = GpuSplats::upload(&ctx, &params, Owner::Run(1)).unwrap();
    let grads = SplatGradients::new(&ctx, &gpu, Owner::Run(1)).unwrap();
    let state = AdamState::new(&ctx, &gpu, Owner::Run(1)).unwrap();

    let mut cpu: Vec<CpuAdam> = flat(&params)
        .into_iter()
        .map(|(g, p)| {
            (g, p.iter().map(|v| f64::from(*v)).collect(), vec![0.0; p.len()], vec![0.0; p.len()])
        })
        .collect();
    let (b1, b2, eps) = (f64::from(adam.beta1), f64::from(adam.beta2), f64::from(adam.eps));
    for t in 1..=5_u32 {
        // Different gradients each step, written into the gradient buffers.
        let g = flat(&scene(n, 3, 100 + u64::from(t)));
        let buffers = [
            &grads.v_means,
            &grads.v_log_scales,
            &grads.v_quats,
            &grads.v_opacities,
            &grads.v_sh[0],
            &grads.v_sh[1],
            &grads.v_sh[2],
            &grads.v_sh[3],
        ];
        for (buffer, (_, values)) in buffers.iter().zip(&g) {
            ctx.queue.write_buffer(buffer, 0, bytemuck::cast_slice(values));
        }
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        adam.encode(&ctx, &mut encoder, &gpu, &grads, &state, t, 3, lr);
        ctx.queue.submit([encoder.finish()]);
        for ((group, p, m, v), (_, grad)) in cpu.iter_mut().zip(&g) {
            let rate = f64::from(lr(*group));
            for i in 0..p.len() {
                let gi = f64::from(grad[i]);
                m[i] = b1 * m[i] + (1.0 - b1) * gi;
                v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
                let m_hat = m[i] / (1.0 - b1.powi(t as i32));
                let v_hat = v[i] / (1.0 - b2.powi(t as i32));
                p[i] -= rate * m_hat / (v_hat.sqrt() + eps);
            }
        }
    }
    let buffers = [
        &gpu.means,
        &gpu.log_scales,
        &gpu.quats,
        &gpu.opacities,
        &gpu.sh[0],
        &gpu.sh[1],
        &gpu.sh[2],
        &gpu.sh[3],
    ];
    for (buffer, (group, want, _, _)) in buffers.iter().zip(&cpu) {
        let got = read_f32(&ctx, buffer, want.len()).unwrap();
        for (g, w) in got.iter().zip(want) {
            // f32 parameters moved by ~5 steps of ≤ lr each: agreement to f32 rounding of the
            // parameter (≤ 1e-6 relative) plus the step's own rounding (≤ 1e-6 · lr).
            assert!((f64::from(*g) - w).abs() <= 1e-6 * w.abs().max(1.0), "{group:?}: {g} vs {w}");
        }
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}

#[test]
fn bands_above_the_active_degree_are_left_alone() {
    // At active degree 1, Adam steps SH bands 0 and 1 and leaves 2 and 3 (and their moments)
    // exactly as they were, whatever their gradient buffers hold.
    let ctx = pollster::block_on(GpuContext::new_headless()).unwrap();
    let adam = Adam::new(&ctx);
    let params = scene(64, 3, 2);
    let gpu = GpuSplats::upload(&ctx, &params, Owner::Run(1)).unwrap();
    let grads = SplatGradients::new(&ctx, &gpu, Owner::Run(1)).unwrap();
    let state = AdamState::new(&ctx, &gpu, Owner::Run(1)).unwrap();
    for (band, (_, values)) in flat(&scene(64, 3, 3)).iter().skip(4).enumerate() {
        ctx.queue.write_buffer(&grads.v_sh[band], 0, bytemuck::cast_slice(values));
    }
    let mut encoder =
        ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    adam.encode(&ctx, &mut encoder, &gpu, &grads, &state, 1, 1, lr);
    ctx.queue.submit([encoder.finish()]);
    let before = flat(&params);
    for band in 0..4 {
        let len = before[4 + band].1.len();
        let now = read_f32(&ctx, &gpu.sh[band], len).unwrap();
        let moment = read_f32(&ctx, &state.sh[band].m, len).unwrap();
        if band <= 1 {
            assert_ne!(now, before[4 + band].1, "band {band} was stepped");
        } else {
            assert_eq!(now, before[4 + band].1, "band {band} untouched");
            assert!(moment.iter().all(|&m| m == 0.0), "band {band}'s moments untouched");
        }
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}

#[test]
fn adam_kernel_validates() {
    use splat_render::wgpu::naga;
    let source = Adam::source();
    let module = naga::front::wgsl::parse_str(source).unwrap();
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .unwrap();
}
