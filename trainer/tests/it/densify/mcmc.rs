//! MCMC's relocation, growth, regularisers and noise, against CPU models of equation 9 and
//! after of the paper (Kheradmand et al. 2024).

use super::*;

/// Equation 9 of 3DGS-MCMC, written out independently: n copies of a splat of opacity o and
/// scales s get o' = 1 − (1 − o)^(1/n) and s · o / Σ_{i=1..n} Σ_{k=0..i−1} C(i−1,k) (−1)^k
/// o'^(k+1) / √(k+1).
fn reference_relocation(o: f64, s: [f64; 3], n: u32) -> (f64, [f64; 3]) {
    let binomial =
        |n: u64, k: u64| (0..k).fold(1.0, |acc, j| acc * (n - j) as f64 / (j + 1) as f64);
    let new_o = 1.0 - (1.0 - o).powf(1.0 / f64::from(n));
    let mut denominator = 0.0;
    for i in 1..=u64::from(n) {
        for k in 0..i {
            denominator +=
                binomial(i - 1, k) * (-1.0_f64).powi(k as i32) * new_o.powi(k as i32 + 1)
                    / ((k + 1) as f64).sqrt();
        }
    }
    (new_o, s.map(|s| s * o / denominator))
}

#[test]
fn relocation_matches_equation_9_for_one_to_four_copies() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let (opacity, scales) = (0.8_f32, [0.1_f32, 0.2, 0.3]);
    for n in 1..=4_u32 {
        // One live splat and n − 1 dead ones: every dead one is relocated onto it, so there
        // are n copies. The cap keeps growth out.
        let mut splats = scene(n as usize, 0);
        splats.opacity_logits = vec![logit(0.001); n as usize];
        splats.opacity_logits[0] = logit(opacity);
        splats.log_scales[0] = scales.map(f32::ln);
        let state = upload(&ctx, &splats);
        fill_moments(&ctx, &state);
        let (state, result) =
            refine(&densifier, &ctx, &mcmc(n), EARLY_STEP, 1.0, 1000, SEED, state);
        assert_eq!(
            result,
            Some(RefineStats {
                added: 0,
                removed: 0,
                relocated: n - 1,
                count: n,
                opacity_reset: false
            })
        );
        let got = state.splats.download(&ctx).unwrap();
        let (want_o, want_s) = reference_relocation(f64::from(opacity), scales.map(f64::from), n);
        let (lib_o, lib_s) = relocation(opacity, scales, n);
        for i in 0..n as usize {
            let o = f64::from(sigmoid(got.opacity_logits[i]));
            assert!((o - want_o).abs() < 1e-5, "n = {n}, copy {i}: opacity {o}, want {want_o}");
            assert!((f64::from(lib_o) - want_o).abs() < 1e-6);
            for c in 0..3 {
                let s = f64::from(got.log_scales[i][c].exp());
                assert!(
                    (s / want_s[c] - 1.0).abs() < 1e-5,
                    "n = {n}: scale {s}, want {}",
                    want_s[c]
                );
                assert!((f64::from(lib_s[c]) / want_s[c] - 1.0).abs() < 1e-6);
            }
            // Everything else is the live splat's.
            assert_eq!(got.means[i], splats.means[0]);
            assert_eq!(got.rotations[i], splats.rotations[0]);
            assert_eq!(got.sh_dc[i], splats.sh_dc[0]);
        }
        // With copies, all moments restart; alone, the splat keeps them.
        let moments = read_moments(&ctx, &state);
        let zero = moments.iter().all(|(m, v)| m.iter().chain(v).all(|&x| x == 0.0));
        assert_eq!(zero, n > 1, "n = {n}");
    }
    assert_clean(&ctx);
}

#[test]
fn relocates_dead_splats_onto_live_ones() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let n = 60;
    let mut rng = SplitMix64::new(9);
    let mut splats = scene(n, 2);
    let dead: Vec<usize> = (0..n).filter(|i| i % 6 == 1).collect();
    for i in 0..n {
        splats.opacity_logits[i] =
            if dead.contains(&i) { logit(0.004) } else { rng.range(-4.0, 4.0) };
    }
    let state = upload(&ctx, &splats);
    fill_moments(&ctx, &state);
    let before_moments = read_moments(&ctx, &state);
    let (state, result) =
        refine(&densifier, &ctx, &mcmc(n as u32), EARLY_STEP, 1.0, 1000, SEED, state);
    let result = result.unwrap();
    assert_eq!((result.count, result.relocated, result.added), (n as u32, dead.len() as u32, 0));
    let got = state.splats.download(&ctx).unwrap();
    let moments = read_moments(&ctx, &state);
    let min_opacity = McmcConfig::default().min_opacity;
    let mut sources = Vec::new();
    for i in 0..n {
        assert!(sigmoid(got.opacity_logits[i]) >= min_opacity * 0.999, "splat {i} is alive");
        // Where did splat i come from? The rotation names it (all distinct).
        let source = splats.rotations.iter().position(|r| *r == got.rotations[i]).unwrap();
        assert!(!dead.contains(&source), "splat {i} copies dead splat {source}");
        assert_eq!(got.means[i], splats.means[source]);
        if dead.contains(&i) {
            sources.push(source);
        } else {
            assert_eq!(source, i, "live splats stay in place");
        }
    }
    for i in 0..n {
        let copied = dead.contains(&i) || sources.contains(&i);
        let (m, v) = (&moments[0].0[3 * i..3 * i + 3], &moments[0].1[3 * i..3 * i + 3]);
        if copied {
            assert!(m.iter().chain(v).all(|&x| x == 0.0), "splat {i}: moments restart");
            // A relocated splat carries its source's new opacity and scale.
            let source = if dead.contains(&i) {
                sources[dead.iter().position(|&d| d == i).unwrap()]
            } else {
                i
            };
            assert_eq!(got.opacity_logits[i], got.opacity_logits[source]);
            assert_eq!(got.log_scales[i], got.log_scales[source]);
        } else {
            assert_eq!(m, &before_moments[0].0[3 * i..3 * i + 3]);
            assert_eq!(got.opacity_logits[i], splats.opacity_logits[i]);
            assert_eq!(got.log_scales[i], splats.log_scales[i]);
        }
    }
    // The opacities of a source and its copies follow equation 9 with n = copies.
    for &s in &sources {
        let copies = 1 + sources.iter().filter(|&&t| t == s).count() as u32;
        let (o, _) =
            reference_relocation(f64::from(sigmoid(splats.opacity_logits[s])), [1.0; 3], copies);
        let o = o.clamp(f64::from(min_opacity), 1.0);
        assert!((f64::from(sigmoid(got.opacity_logits[s])) - o).abs() < 1e-5);
    }
    assert_clean(&ctx);
}

#[test]
fn grows_five_percent_up_to_the_cap() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let splats = scene(100, 1);
    let mut state = upload(&ctx, &splats);
    fill_moments(&ctx, &state);
    let mut count = 100_u32;
    for (k, cap) in [1000_u32, 1000, 1000, 117, 117].into_iter().enumerate() {
        let step = EARLY_STEP + 100 * k as u32;
        let (next, result) = refine(&densifier, &ctx, &mcmc(cap), step, 1.0, 100_000, SEED, state);
        state = next;
        let want = (count + count / 20).min(cap);
        assert_eq!(result.unwrap().added, want - count);
        count = want;
        assert_eq!(state.splats.count, count);
    }
    assert_eq!(state.splats.count, 117);
    // max_splats caps as well as the config's cap; 19 splats grow by floor(0.95) = 0.
    let state = upload(&ctx, &splats);
    let (state, _) = refine(&densifier, &ctx, &mcmc(1000), EARLY_STEP, 1.0, 102, SEED, state);
    assert_eq!(state.splats.count, 102);
    let state = upload(&ctx, &scene(19, 0));
    let (state, result) = refine(&densifier, &ctx, &mcmc(1000), EARLY_STEP, 1.0, 1000, SEED, state);
    assert_eq!((state.splats.count, result.unwrap().added), (19, 0));

    // New splats are copies of old ones with zero moments; the old ones stay in place.
    let state = upload(&ctx, &splats);
    fill_moments(&ctx, &state);
    let before = read_moments(&ctx, &state);
    let (state, _) = refine(&densifier, &ctx, &mcmc(1000), EARLY_STEP, 1.0, 1000, SEED, state);
    let got = state.splats.download(&ctx).unwrap();
    let moments = read_moments(&ctx, &state);
    let mut sampled = vec![0_u32; 100];
    for i in 100..105 {
        let source = splats.means.iter().position(|m| *m == got.means[i]).unwrap();
        sampled[source] += 1;
        assert_eq!(got.opacity_logits[i], got.opacity_logits[source]);
        assert!(moments[0].0[3 * i..3 * i + 3].iter().all(|&x| x == 0.0));
    }
    for (i, &times) in sampled.iter().enumerate() {
        assert_eq!(got.means[i], splats.means[i]);
        let first_m = moments[1].0[3 * i];
        if times > 0 {
            let (o, _) = reference_relocation(0.5, [1.0; 3], times + 1);
            assert!((f64::from(sigmoid(got.opacity_logits[i])) - o).abs() < 1e-6);
            assert_eq!(first_m, 0.0);
        } else {
            assert_eq!(got.opacity_logits[i], 0.0);
            assert_eq!(first_m, before[1].0[3 * i]);
        }
    }
    assert_clean(&ctx);
}

#[test]
fn is_deterministic_for_a_seed() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let mut rng = SplitMix64::new(3);
    let mut splats = scene(300, 1);
    for o in &mut splats.opacity_logits {
        *o = rng.range(-7.0, 3.0);
    }
    let run = |seed: u64| {
        let mut state = upload(&ctx, &splats);
        for step in [600, 700, 800] {
            state = refine(&densifier, &ctx, &mcmc(100_000), step, 1.0, 100_000, seed, state).0;
            let mut encoder = ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("noise") });
            let config = McmcConfig::default();
            densifier.mcmc_noise(&ctx, &mut encoder, &config, &state, 1.6e-4, step, seed).unwrap();
            ctx.queue.submit([encoder.finish()]);
        }
        state.splats.download(&ctx).unwrap()
    };
    let a = run(SEED);
    assert_eq!(a, run(SEED));
    assert_ne!(a, run(SEED + 1));
    assert_clean(&ctx);
}

#[test]
fn regularization_gradients_match_the_cpu() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let n = 257;
    let mut rng = SplitMix64::new(5);
    let mut splats = scene(n, 0);
    for i in 0..n {
        splats.opacity_logits[i] = rng.range(-5.0, 5.0);
        splats.log_scales[i] = [rng.range(-6.0, 0.0), rng.range(-6.0, 0.0), rng.range(-6.0, 0.0)];
    }
    let state = upload(&ctx, &splats);
    let v_o: Vec<f32> = (0..n).map(|i| i as f32 * 1e-3).collect();
    let v_s: Vec<f32> = (0..3 * n).map(|i| -(i as f32) * 1e-3).collect();
    ctx.queue.write_buffer(&state.grads.v_opacities, 0, bytemuck::cast_slice(&v_o));
    ctx.queue.write_buffer(&state.grads.v_log_scales, 0, bytemuck::cast_slice(&v_s));
    let config = McmcConfig { opacity_reg: 0.3, scale_reg: 0.7, ..McmcConfig::default() };
    let mut encoder =
        ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("reg") });
    densifier
        .regularize(&ctx, &mut encoder, [config.opacity_reg, config.scale_reg], &state)
        .unwrap();
    ctx.queue.submit([encoder.finish()]);
    let got_o = read_f32(&ctx, &state.grads.v_opacities, n).unwrap();
    let got_s = read_f32(&ctx, &state.grads.v_log_scales, 3 * n).unwrap();
    for i in 0..n {
        let s = sigmoid(splats.opacity_logits[i]);
        let want = v_o[i] + 0.3 / n as f32 * s * (1.0 - s);
        assert!((got_o[i] - want).abs() <= 1e-6 * want.abs().max(1e-3), "opacity {i}");
        for c in 0..3 {
            let want = v_s[3 * i + c] + 0.7 / (3 * n) as f32 * splats.log_scales[i][c].exp();
            assert!((got_s[3 * i + c] - want).abs() <= 1e-6 * want.abs().max(1e-3), "scale {i}");
        }
    }
    assert_clean(&ctx);
}

/// μ += Σ z · gate(o) · lr · `noise_lr`: visible splats stay, transparent ones move with the
/// spread the formula gives (isotropic scale σ: per-axis std σ² · gate · scaler).
#[test]
fn noise_moves_transparent_splats_by_their_covariance() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let n = 4000;
    let sigma = 0.05_f32;
    let mut splats = scene(n, 0);
    splats.log_scales = vec![[sigma.ln(); 3]; n];
    for i in 0..n {
        splats.opacity_logits[i] = if i % 2 == 0 { logit(0.9) } else { logit(0.001) };
    }
    let state = upload(&ctx, &splats);
    let config = McmcConfig::default();
    let lr = 1.6e-4;
    let mut encoder =
        ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("noise") });
    densifier.mcmc_noise(&ctx, &mut encoder, &config, &state, lr, 700, SEED).unwrap();
    ctx.queue.submit([encoder.finish()]);
    let got = state.splats.download(&ctx).unwrap();
    let gate = |o: f32| sigmoid(NOISE_GATE_SHARPNESS * ((1.0 - o) - NOISE_GATE_CENTER));
    let expected_std = f64::from(sigma * sigma * gate(0.001) * lr * config.noise_lr);
    let mut sum_sq = 0.0;
    for i in 0..n {
        for c in 0..3 {
            let d = f64::from(got.means[i][c] - splats.means[i][c]);
            if i % 2 == 0 {
                assert!(
                    d.abs() <= 1e-6 * f64::from(splats.means[i][c]).abs().max(1.0),
                    "visible splat {i} moved"
                );
            } else {
                sum_sq += d * d;
            }
        }
    }
    let std = (sum_sq / (3 * n / 2) as f64).sqrt();
    assert!((std / expected_std - 1.0).abs() < 0.05, "std {std}, want {expected_std}");
    assert_clean(&ctx);
}
