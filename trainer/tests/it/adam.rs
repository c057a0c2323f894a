//! Adam on the GPU against a CPU Adam in f64, over several steps and every parameter group.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use splat_formats::{Splats, sh_coeffs_for_degree};
use splat_render::gpu_splats::read_f32;
use splat_render::{GpuContext, GpuSplats, Owner, ShPrecision, SplatGradients, wgpu};
use splat_trainer::optim::{Adam, AdamState, ParamGroup};

use crate::helpers::context;

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
    let ctx = context();
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
    let ctx = context();
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
    let module = naga::front::wgsl::parse_str(&source).unwrap();
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .unwrap();
}

/// A binary16 word pair as two f64 values (low half first).
fn halves(word: u32) -> [f64; 2] {
    [word as u16, (word >> 16) as u16].map(|h| f64::from(half::f16::from_bits(h).to_f32()))
}

/// The spacing of binary16 values around `x`: 2^-24 below the smallest normal, else one unit
/// in the last of its 11 significant bits.
fn f16_spacing(x: f64) -> f64 {
    let a = x.abs();
    if a < 2f64.powi(-14) { 2f64.powi(-24) } else { 2f64.powi(a.log2().floor() as i32 - 10) }
}

/// The raw words of a buffer.
fn words(ctx: &GpuContext, buffer: &wgpu::Buffer) -> Vec<u32> {
    let bytes = splat_render::gpu_splats::read_bytes(ctx, buffer, buffer.size()).unwrap();
    bytemuck::pod_collect_to_vec(&bytes)
}

/// A gradient too large for its square in f32 (above 1.8e19), or not finite at all, leaves
/// every moment and parameter finite, and the parameters go on moving at the next steps (a
/// second moment of +inf would have frozen them for good).
#[test]
fn huge_gradients_leave_adam_finite_and_moving() {
    let ctx = context();
    let adam = Adam::new(&ctx);
    for precision in [ShPrecision::F32, ShPrecision::F16] {
        let params = scene(64, 1, 3);
        let gpu = GpuSplats::upload_as(&ctx, &params, precision, Owner::Run(1)).unwrap();
        let grads = SplatGradients::new(&ctx, &gpu, Owner::Run(1)).unwrap();
        let state = AdamState::new(&ctx, &gpu, Owner::Run(1)).unwrap();
        let buffers = [&grads.v_means, &grads.v_sh[0], &grads.v_sh[1]];
        let mut before: Vec<Vec<u32>> = Vec::new();
        for t in 1..=3_u32 {
            // 1e30 and ±inf at the first step, an ordinary gradient after.
            for buffer in buffers {
                let n = buffer.size() as usize / 4;
                let values: Vec<f32> = (0..n)
                    .map(|i| match (t, i % 3) {
                        (1, 0) => 1e30,
                        (1, 1) => f32::INFINITY,
                        (1, _) => -3e19,
                        _ => 0.5,
                    })
                    .collect();
                ctx.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&values));
            }
            let mut encoder =
                ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            adam.encode(&ctx, &mut encoder, &gpu, &grads, &state, t, 1, lr);
            ctx.queue.submit([encoder.finish()]);
            let now: Vec<Vec<u32>> =
                [&*gpu.means, &*gpu.sh[0], &*gpu.sh[1]].map(|b| words(&ctx, b)).to_vec();
            // In the moments' order (means, scales, rotations, opacities, SH bands 0–3),
            // bands 1–3 are binary16 pairs in 16-bit SH.
            for (k, moments) in state.moments().into_iter().enumerate() {
                for word in words(&ctx, &moments.m).into_iter().chain(words(&ctx, &moments.v)) {
                    let finite = if precision == ShPrecision::F16 && k >= 5 {
                        halves(word).iter().all(|h| h.is_finite())
                    } else {
                        f32::from_bits(word).is_finite()
                    };
                    assert!(finite, "{precision:?} step {t}: a moment word {word:#x}");
                }
            }
            if t == 3 {
                for (buffer, (a, b)) in before.iter().zip(&now).enumerate() {
                    let moved = a.iter().zip(b).filter(|(x, y)| x != y).count();
                    assert!(moved > 0, "{precision:?}: buffer {buffer} froze");
                }
            }
            before = now;
        }
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}

/// SH bands stored in 16 bits: every new parameter and moment (m · 2^14, sqrt(v) · 2^14) is
/// one of the two binary16 values around what Adam computes, in f64, from the stored state
/// before the step; the rounding goes either way (stochastic, not nearest) without bias; the
/// rows' padding stays zero; and the same step gives the same bits again.
#[test]
#[expect(clippy::float_cmp, reason = "binary16 values and zero are exact")]
fn sixteen_bit_bands_round_adam_stochastically() {
    let ctx = context();
    let adam = Adam::new(&ctx);
    let n = 3000;
    let params = scene(n, 3, 4);
    let upload = || {
        let gpu = GpuSplats::upload_as(&ctx, &params, ShPrecision::F16, Owner::Run(1)).unwrap();
        let grads = SplatGradients::new(&ctx, &gpu, Owner::Run(1)).unwrap();
        let state = AdamState::new(&ctx, &gpu, Owner::Run(1)).unwrap();
        (gpu, grads, state)
    };
    let (gpu, grads, state) = upload();
    let (b1, b2, eps) = (f64::from(adam.beta1), f64::from(adam.beta2), f64::from(adam.eps));
    let rate = f64::from(lr(ParamGroup::ShRest));
    let scale = 16384.0;
    // Gradients from 1e-7 to 1e-2 in magnitude, either sign, a few exactly zero.
    let gradient = |t: u32, i: usize| -> f32 {
        let mut z = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(t) << 40;
        z = (z ^ (z >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let u = (z >> 40) as f32 / (1u64 << 24) as f32;
        if i.is_multiple_of(97) {
            0.0
        } else {
            (if z & 1 == 0 { 1.0 } else { -1.0 }) * 10f32.powf(-7.0 + 5.0 * u)
        }
    };
    let (mut offsets, mut not_nearest, mut checked) = (Vec::new(), 0_usize, 0_usize);
    for t in 1..=3_u32 {
        let gradients: Vec<Vec<f32>> = (1..4)
            .map(|band| (0..n * [3, 5, 7][band - 1] * 3).map(|i| gradient(t, i)).collect())
            .collect();
        for (band, g) in gradients.iter().enumerate() {
            ctx.queue.write_buffer(&grads.v_sh[band + 1], 0, bytemuck::cast_slice(g));
        }
        let before: Vec<[Vec<u32>; 3]> = (1..4)
            .map(|b| [&gpu.sh[b], &state.sh[b].m, &state.sh[b].v].map(|buf| words(&ctx, buf)))
            .collect();
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        adam.encode(&ctx, &mut encoder, &gpu, &grads, &state, t, 3, lr);
        ctx.queue.submit([encoder.finish()]);
        let correction1 = 1.0 - b1.powi(t as i32);
        let correction2 = (1.0 - b2.powi(t as i32)).sqrt();
        let (step_size, eps_hat) = (rate * correction2 / correction1, eps * correction2);
        for (band, g) in (1..4).zip(&gradients) {
            let row: usize = [3, 5, 7][band - 1] * 3;
            let after =
                [&gpu.sh[band], &state.sh[band].m, &state.sh[band].v].map(|buf| words(&ctx, buf));
            for (w, _) in after[0].iter().enumerate() {
                let (splat, first) = (w / row.div_ceil(2), (w % row.div_ceil(2)) * 2);
                let [p0, m0, s0] = [0, 1, 2].map(|k| halves(before[band - 1][k][w]));
                let [p1, m1, s1] = [0, 1, 2].map(|k| halves(after[k][w]));
                for h in 0..2 {
                    if first + h >= row {
                        assert_eq!([p1[h], m1[h], s1[h]], [0.0; 3], "padding of band {band}");
                        continue;
                    }
                    let g = f64::from(g[splat * row + first + h]);
                    let m = b1 * m0[h] / scale + (1.0 - b1) * g;
                    let v = b2 * (s0[h] / scale).powi(2) + (1.0 - b2) * g * g;
                    let p = p0[h] - step_size * m / (v.sqrt() + eps_hat);
                    for (got, want) in [(p1[h], p), (m1[h], m * scale), (s1[h], v.sqrt() * scale)] {
                        let spacing = f16_spacing(want);
                        let offset = (got - want) / spacing;
                        assert!(
                            offset.abs() < 1.0 + 1e-3,
                            "t {t} band {band} word {w}: {got} for {want} (spacing {spacing})"
                        );
                        if half::f16::from_f64(want).to_f64() != got {
                            not_nearest += 1;
                        }
                        offsets.push(offset);
                        checked += 1;
                    }
                }
            }
        }
    }
    let mean = offsets.iter().sum::<f64>() / offsets.len() as f64;
    println!(
        "{checked} values: mean rounding offset {mean:+.4} spacings, {:.1}% not to the nearest",
        100.0 * not_nearest as f64 / checked as f64
    );
    // Unbiased: each offset lies within ±1 spacing, so the mean of ~400k has a standard
    // deviation under 0.002 if the rounding is unbiased.
    assert!(mean.abs() < 0.01, "rounding is biased: mean offset {mean}");
    assert!(not_nearest * 10 > checked, "rounding looks nearest, not stochastic");

    // The same state and gradients give the same bits: the random bits come from the step
    // and the word, not from anything that varies.
    let (again, again_grads, again_state) = upload();
    for t in 1..=3_u32 {
        for band in 1..4 {
            let g: Vec<f32> = (0..n * [3, 5, 7][band - 1] * 3).map(|i| gradient(t, i)).collect();
            ctx.queue.write_buffer(&again_grads.v_sh[band], 0, bytemuck::cast_slice(&g));
        }
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        adam.encode(&ctx, &mut encoder, &again, &again_grads, &again_state, t, 3, lr);
        ctx.queue.submit([encoder.finish()]);
    }
    for band in 1..4 {
        assert_eq!(words(&ctx, &again.sh[band]), words(&ctx, &gpu.sh[band]), "band {band}");
        assert_eq!(words(&ctx, &again_state.sh[band].v), words(&ctx, &state.sh[band].v));
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}
