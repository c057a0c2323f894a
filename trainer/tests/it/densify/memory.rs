//! What refinement leaves in the memory ledger, its cost on 100k splats (ignored: a timing),
//! and 16-bit SH bands gathered word for word.

use super::*;

/// After every refinement the ledger holds, for the run, exactly the buffers of the new state
/// (plus Adam's fixed uniforms): the old buffers and the plan are gone.
#[test]
fn the_ledger_holds_exactly_the_new_state_across_refinements() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    ctx.wait_idle().unwrap();
    let allocator_baseline = ctx.allocator_bytes();
    let mut rng = SplitMix64::new(11);
    let mut splats = scene(400, 1);
    for i in 0..400 {
        splats.opacity_logits[i] = rng.range(-6.0, 3.0);
        splats.log_scales[i] = [rng.range(-7.0, -2.0); 3];
    }
    for strategy in [default_strategy(), mcmc(2_000)] {
        let mut state = upload(&ctx, &splats);
        let overhead = ctx.ledger().owner_bytes(OWNER) - visible_bytes(&state);
        assert!(overhead > 0 && overhead < 4096, "Adam's uniforms: {overhead}");
        let mut counts = Vec::new();
        for k in 0..20_u32 {
            let n = state.splats.count as usize;
            let stats: Vec<[f32; 3]> =
                (0..n).map(|_| [rng.range(0.0, 0.0006), 1.0, rng.range(0.0, 30.0)]).collect();
            write_stats(&ctx, &state, &stats);
            let step = EARLY_STEP + 100 * k;
            let (next, result) = refine(&densifier, &ctx, &strategy, step, 1.0, 1_500, SEED, state);
            state = next;
            assert_eq!(result.unwrap().count, state.splats.count);
            counts.push(state.splats.count);
            ctx.wait_idle().unwrap();
            let snapshot = ctx.ledger().snapshot();
            assert_eq!(
                snapshot.owner_bytes(OWNER),
                visible_bytes(&state) + overhead,
                "refinement {k}: {:?}",
                snapshot.allocations
            );
            // 8 parameter buffers, 9 of gradients and statistics, 16 moments, Adam's uniforms.
            let buffers = snapshot.allocations.iter().filter(|a| a.owner == OWNER).count();
            assert_eq!(buffers, 8 + 9 + 16 + 1, "refinement {k}");
        }
        assert!(counts.windows(2).any(|w| w[0] != w[1]), "the count changed: {counts:?}");
        drop(state);
        assert_eq!(ctx.ledger().owner_bytes(OWNER), 0);
    }
    // And the driver's allocator agrees that nothing is left (wgpu's own small internal
    // allocations may come and go, so: not above where it started).
    assert_clean(&ctx);
    assert_eq!(ctx.ledger().total_bytes(), 0);
    if let (Some(baseline), Some(now)) = (allocator_baseline, ctx.allocator_bytes()) {
        assert!(now <= baseline, "allocator holds {now} bytes, {baseline} before");
    }
}

/// One refinement of 100k splats (SH degree 3), timed. `cargo test -p splat-trainer --test
/// densify -- --ignored --nocapture`.
#[test]
#[ignore = "timing, not a check"]
fn measure_one_refinement_of_100k_splats() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let n = 100_000;
    let mut rng = SplitMix64::new(1);
    let mut splats = scene(n, 3);
    for i in 0..n {
        splats.opacity_logits[i] = rng.range(-6.0, 3.0);
        splats.log_scales[i] =
            [rng.range(-7.0, -3.0), rng.range(-7.0, -3.0), rng.range(-7.0, -3.0)];
    }
    let stats: Vec<[f32; 3]> = (0..n).map(|_| [rng.range(0.0, 0.0005), 1.0, 3.0]).collect();
    for (name, strategy) in [("default", default_strategy()), ("mcmc", mcmc(1_000_000))] {
        for _ in 0..2 {
            let state = upload(&ctx, &splats);
            write_stats(&ctx, &state, &stats);
            ctx.wait_idle().unwrap();
            let started = Instant::now();
            let (state, result) =
                refine(&densifier, &ctx, &strategy, EARLY_STEP, 1.0, 10_000_000, SEED, state);
            ctx.wait_idle().unwrap();
            eprintln!("{name}: {:?} for {n} splats → {result:?}", started.elapsed());
            drop(state);
        }
    }
    assert_clean(&ctx);
}

/// The 32-bit words of a buffer.
fn words(ctx: &GpuContext, buffer: &wgpu::Buffer) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(&read_bytes(ctx, buffer, buffer.size()).unwrap())
}

/// SH bands stored in 16 bits move word for word: every output splat's band rows (parameters
/// and both moments, two binary16 values a word) are its source's bits, or zero moments where
/// the model starts them over. The moments hold every kind of bits, patterns that would be f32
/// subnormals or NaNs included, which a gather through floats could change.
#[test]
fn sixteen_bit_bands_are_gathered_word_for_word() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    let (n, extent, max_splats) = (600, 1.5, 10_000);
    let mut rng = SplitMix64::new(42);
    let (splats, stats) = random_situations(&mut rng, n);
    let gpu = GpuSplats::upload_as(&ctx, &splats, ShPrecision::F16, OWNER).unwrap();
    let state = TrainState::new(&ctx, gpu, OWNER).unwrap();
    for moments in state.adam.moments() {
        for buffer in [&moments.m, &moments.v] {
            let bits: Vec<u32> = (0..buffer.size() / 4).map(|_| rng.next_u64() as u32).collect();
            ctx.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&bits));
        }
    }
    write_stats(&ctx, &state, &stats);
    let bands = |state: &TrainState| -> Vec<[Vec<u32>; 3]> {
        (1..4)
            .map(|b| {
                let moments = &state.adam.sh[b];
                [&state.splats.sh[b], &moments.m, &moments.v].map(|buffer| words(&ctx, buffer))
            })
            .collect()
    };
    let before = bands(&state);
    let (state, result) =
        refine(&densifier, &ctx, &default_strategy(), 3_100, extent, max_splats, SEED, state);
    assert_eq!(state.splats.sh_precision, ShPrecision::F16);
    let model = model_default(
        &DefaultConfig::default(),
        3_100,
        extent,
        max_splats as usize,
        &splats,
        &stats,
    );
    assert_eq!(result.unwrap().count as usize, model.len());
    for kind in [|o: &Out| matches!(o, Out::Keep(_)), |o: &Out| matches!(o, Out::Child(_))] {
        assert!(model.iter().any(kind), "the refinement keeps, clones and splits");
    }
    assert!(model.iter().any(|o| matches!(o, Out::Clone(_))));
    let after = bands(&state);
    for (band, (old, new)) in before.iter().zip(&after).enumerate() {
        let row = words_per_splat(5 + band, 3, ShPrecision::F16) as usize;
        assert_eq!(new[0].len(), model.len() * row, "band {}", band + 1);
        for (o, out) in model.iter().enumerate() {
            let (Out::Keep(i) | Out::Clone(i) | Out::Child(i)) = *out;
            let rows = |words: &[u32], s: usize| words[s * row..(s + 1) * row].to_vec();
            assert_eq!(rows(&new[0], o), rows(&old[0], i), "band {} output {o}", band + 1);
            for k in 1..3 {
                let want =
                    if matches!(out, Out::Keep(_)) { rows(&old[k], i) } else { vec![0; row] };
                assert_eq!(rows(&new[k], o), want, "band {} moment {k} output {o}", band + 1);
            }
        }
    }
    assert_clean(&ctx);
}
