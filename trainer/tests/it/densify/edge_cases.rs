//! What every strategy meets: empty scenes, nothing alive, and dispatches folded into 2D.

use super::*;

/// Empty scenes, a scene pruned to nothing, and an MCMC scene with nothing alive.
#[test]
fn edge_cases_empty_and_all_dead() {
    let ctx = context();
    let densifier = Densifier::new(&ctx);
    for strategy in [default_strategy(), mcmc(1000)] {
        let state = upload(&ctx, &scene(0, 1));
        let (state, result) =
            refine(&densifier, &ctx, &strategy, EARLY_STEP, 1.0, 1000, SEED, state);
        assert_eq!(result.unwrap().count, 0);
        assert_eq!(state.splats.count, 0);
    }
    // Default: everything faint is pruned, leaving an empty state that refines again.
    let mut splats = scene(40, 2);
    splats.opacity_logits = vec![logit(0.001); 40];
    let state = upload(&ctx, &splats);
    write_stats(&ctx, &state, &[[1.0, 1.0, 1.0]; 40]);
    let (state, result) =
        refine(&densifier, &ctx, &default_strategy(), EARLY_STEP, 1.0, 1000, SEED, state);
    assert_eq!(
        result.unwrap(),
        RefineStats { added: 0, removed: 40, relocated: 0, count: 0, opacity_reset: false }
    );
    let (state, _) = refine(&densifier, &ctx, &default_strategy(), 3_000, 1.0, 1000, SEED, state);
    assert_eq!((state.splats.count, state.grads.count), (0, 0));
    // MCMC: nothing alive, so nothing to relocate onto; growth still samples ∝ opacity.
    let state = upload(&ctx, &splats);
    let (state, result) = refine(&densifier, &ctx, &mcmc(1000), EARLY_STEP, 1.0, 1000, SEED, state);
    assert_eq!(
        result.unwrap(),
        RefineStats { added: 2, removed: 0, relocated: 0, count: 42, opacity_reset: false }
    );
    assert_eq!(state.splats.count, 42);
    assert_clean(&ctx);
}

/// Every kernel gives the same result when its dispatch is folded into 2D (as for scenes
/// with more workgroups than a dispatch dimension allows).
#[test]
fn dispatches_folded_into_2d_give_the_same_results() {
    let ctx = context();
    let limits =
        DispatchLimits { max_workgroups_per_dimension: 2, ..DispatchLimits::of(&ctx.device) };
    let folded = Densifier::with_limits(&ctx, limits);
    let plain = Densifier::new(&ctx);
    let n = 700; // SH degree 3: up to 21 floats a splat, 58 workgroups, folded to 2 × 29
    let mut rng = SplitMix64::new(77);
    let mut splats = scene(n, 3);
    for i in 0..n {
        splats.opacity_logits[i] = rng.range(-7.0, 3.0);
        splats.log_scales[i] =
            [rng.range(-6.0, -2.0), rng.range(-6.0, -2.0), rng.range(-6.0, -2.0)];
    }
    let stats: Vec<[f32; 3]> = (0..n).map(|_| [rng.range(0.0, 0.0006), 1.0, 1.0]).collect();
    let run = |densifier: &Densifier, strategy: &Strategy| {
        let state = upload(&ctx, &splats);
        fill_moments(&ctx, &state);
        write_stats(&ctx, &state, &stats);
        let (state, result) =
            refine(densifier, &ctx, strategy, EARLY_STEP, 1.0, 100_000, SEED, state);
        let config = McmcConfig::default();
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("mcmc") });
        densifier
            .regularize(&ctx, &mut encoder, [config.opacity_reg, config.scale_reg], &state)
            .unwrap();
        densifier.mcmc_noise(&ctx, &mut encoder, &config, &state, 1e-3, EARLY_STEP, SEED).unwrap();
        ctx.queue.submit([encoder.finish()]);
        (
            result,
            state.splats.download(&ctx).unwrap(),
            read_moments(&ctx, &state),
            read_grads(&ctx, &state),
        )
    };
    for strategy in [default_strategy(), mcmc(100_000)] {
        let a = run(&plain, &strategy);
        assert!(a.0.unwrap().added > 0);
        assert!(a == run(&folded, &strategy), "{strategy:?}");
    }
    assert_clean(&ctx);
}

// ---------------------------------------------------------------------------------------
