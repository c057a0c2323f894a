//! Per-view appearance compensation on the GPU against its f64 reference
//! (`splat_trainer::appearance::reference`): the corrected image, the gradient handed to the
//! rasterizer, and three Adam steps of one view's transform with every view recentred after each.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use splat_render::gpu_splats::read_f32;
use splat_render::{Owner, wgpu};
use splat_trainer::appearance::{
    AppearanceKernels, AppearanceState, AppearanceStep, Compensation, MOMENTS, PARAMS,
    learning_rate, reference,
};

use splat_trainer::config::TrainConfig;
use splat_trainer::dataset::Dataset;

use crate::helpers::context;

fn noise(seed: u64) -> impl FnMut() -> f32 {
    let mut state = seed;
    move || {
        state =
            state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// 37 × 29 pixels: five workgroups, the last one part-full.
const PIXELS: u32 = 37 * 29;
const VIEWS: u32 = 3;

#[test]
fn appearance_kernels_match_the_reference() {
    let ctx = context();
    let kernels = AppearanceKernels::new(&ctx);
    let mut next = noise(7);
    let rendered: Vec<[f32; 4]> = (0..PIXELS).map(|_| [next(), next(), next(), next()]).collect();
    // Transforms away from the identity in every view; view 1 is the one trained.
    let mut host: Vec<f32> = (0..VIEWS as usize * PARAMS).map(|_| 0.6 * next() - 0.3).collect();
    host.extend(std::iter::repeat_n(0.0, VIEWS as usize * MOMENTS));
    let state = AppearanceState::new(&ctx, VIEWS, PIXELS, &host, Owner::Run(2)).unwrap();
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
    let image = |label, data: &[[f32; 4]]| {
        ctx.create_buffer_init(
            label,
            bytemuck::cast_slice(data),
            storage | wgpu::BufferUsages::COPY_DST,
            splat_render::Category::Other,
            Owner::Run(1),
        )
        .unwrap()
    };
    let rendered_buffer = image("rendered", &rendered);
    let v_rendered = image("v_rendered", &vec![[0.0; 4]; PIXELS as usize]);

    let view = 1_usize;
    let mut all: Vec<[f64; PARAMS]> = host[..VIEWS as usize * PARAMS]
        .chunks_exact(PARAMS)
        .map(|p| std::array::from_fn(|k| f64::from(p[k])))
        .collect();
    let mut moments = [0.0_f64; 25];
    let pixels: Vec<[f64; 4]> = rendered.iter().map(|c| c.map(f64::from)).collect();
    for step in 0..3 {
        let v_corrected: Vec<[f32; 4]> =
            (0..PIXELS).map(|_| [next() - 0.5, next() - 0.5, next() - 0.5, next() - 0.5]).collect();
        let lr = learning_rate(step, 10);
        let step_inputs = AppearanceStep {
            rendered: &rendered_buffer,
            v_rendered: &v_rendered,
            view: view as u32,
            pixels: PIXELS,
            lr,
        };
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        state.encode_apply(&ctx, &kernels, &mut encoder, &step_inputs).unwrap();
        ctx.queue.submit([encoder.finish()]);
        let corrected = read_f32(&ctx, state.corrected(), PIXELS as usize * 4).unwrap();
        let params = all[view];
        for (i, c) in pixels.iter().enumerate() {
            let expected = reference::apply(&params, *c);
            for k in 0..4 {
                let got = f64::from(corrected[i * 4 + k]);
                assert!(
                    (got - expected[k]).abs() < 1e-5,
                    "step {step} pixel {i}.{k}: {got} vs {}",
                    expected[k]
                );
            }
        }

        ctx.queue.write_buffer(state.v_corrected(), 0, bytemuck::cast_slice(&v_corrected));
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        state.encode_backward(&ctx, &kernels, &mut encoder, &step_inputs).unwrap();
        ctx.queue.submit([encoder.finish()]);
        let gradient: Vec<[f64; 4]> = v_corrected.iter().map(|g| g.map(f64::from)).collect();
        let (expected_v, grad) = reference::backward(&params, &pixels, &gradient);
        let got_v = read_f32(&ctx, &v_rendered, PIXELS as usize * 4).unwrap();
        for (i, expected) in expected_v.iter().enumerate() {
            for k in 0..4 {
                let got = f64::from(got_v[i * 4 + k]);
                assert!(
                    (got - expected[k]).abs() < 1e-5,
                    "step {step} gradient {i}.{k}: {got} vs {}",
                    expected[k]
                );
            }
        }
        reference::adam_step(&mut all[view], &mut moments, &grad, f64::from(lr));
        reference::recenter(&mut all);
        let values = pollster::block_on(state.download(&ctx)).unwrap();
        for (w, params) in all.iter().enumerate() {
            for k in 0..PARAMS {
                // The first steps move each parameter by about the learning rate; the sums
                // behind them differ from f64 by f32 rounding of ~1,000 terms, which moves the
                // update by far less than 1e-5.
                let got = f64::from(values[w * PARAMS + k]);
                assert!(
                    (got - params[k]).abs() < 1e-5,
                    "step {step} view {w} parameter {k}: {got} vs {}",
                    params[k]
                );
            }
        }
        let row = VIEWS as usize * PARAMS + view * MOMENTS;
        assert_eq!(values[row + 24].to_bits(), (moments[24] as f32).to_bits(), "its step count");
        // The other views' moments are untouched.
        for other in [0, 2] {
            let row = VIEWS as usize * PARAMS + other * MOMENTS;
            assert!(values[row..row + MOMENTS].iter().all(|&m| m == 0.0));
        }
    }
}

/// What the memory model counts for a state is what it holds, category by category.
#[test]
fn the_state_holds_what_the_memory_model_counts() {
    let ctx = context();
    let _state = AppearanceState::new(&ctx, VIEWS, PIXELS, &[], Owner::Run(2)).unwrap();
    let held = ctx.ledger().snapshot();
    for (category, bytes) in AppearanceState::bytes_by_category(VIEWS, u64::from(PIXELS)) {
        let owned: u64 = held
            .allocations
            .iter()
            .filter(|a| a.owner == Owner::Run(2) && a.category == category)
            .map(|a| a.bytes)
            .sum();
        assert_eq!(owned, bytes, "{category}");
    }
}

#[test]
fn a_state_of_the_wrong_shape_is_refused() {
    let ctx = context();
    let err = AppearanceState::new(&ctx, 4, 100, &[0.0; 10], Owner::Run(1)).unwrap_err();
    assert!(err.to_string().contains("4 train views"), "{err}");
    assert_eq!(ctx.ledger().total_bytes(), 0);
}

/// Gains of 0.5-2× (log-uniform) times 0.85-1.15 per channel for each train view of
/// desk-penguin (seed 42), its eval views untouched: with compensation the raw eval PSNR must
/// be 1.5 dB higher (without a transform the splats fit images that disagree by up to 4× and
/// the disagreement becomes haze). A step's cost follows the splats and the steps, hardly the
/// pixels (each splat covers much of so small an image), and the gap grows with the steps. On
/// one slow day of this machine (lavapipe, 2026-11-28, when CI took 3,316 s), alone, off / on:
/// from every fourth COLMAP point (1,891 splats; compact does not refine before step 600) at
/// 16 px, 400 steps: 23.20 / 25.11 dB in 95 s — what this test runs; every other point at
/// 32 px, 500 steps (this test until then, 53 s on a fast day): 23.40 / 25.74 in 263 s, past
/// CI's limit; every other point at 16 px: 500 steps 23.46 / 26.44 in 216 s, 300 steps
/// 22.13 / 24.00 in 133 s; at 24 px, 300 steps 22.22 / 23.79 in 120 s.
#[test]
#[ignore = "slow, about 95 s: compensation undoes per-view exposure changes, 1.5 dB over a run without"]
fn appearance_undoes_per_view_exposure() {
    use std::sync::Arc;

    use splat_formats::random::SplitMix64;
    use splat_test_support::dataset_path;
    use splat_trainer::dataset::{LoadOptions, load_dataset};
    use splat_trainer::densify::{CompactConfig, Strategy};
    use splat_trainer::init::splats_from_points;
    use splat_trainer::train::Trainer;

    let options = LoadOptions { max_resolution: 16, ..LoadOptions::default() };
    let mut data = load_dataset(&dataset_path("desk-penguin-opencv"), &options).unwrap();
    let mut rng = SplitMix64::new(42);
    let mut uniform = move || (rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32;
    for view in &mut data.train {
        let gain = (0.5_f32.ln() + uniform() * 4.0_f32.ln()).exp();
        let channel: [f32; 3] = std::array::from_fn(|_| gain * (0.85 + 0.3 * uniform()));
        for pixel in view.image.pixels_mut() {
            for (value, g) in pixel.0.iter_mut().zip(channel) {
                *value = (f32::from(*value) * g).round().min(255.0) as u8;
            }
        }
    }
    let data = Arc::new(data);
    let every_fourth = crate::helpers::every_nth_point(data.init_points.as_ref().unwrap(), 4);
    let init = splats_from_points(&every_fourth, 1);
    let ctx = context();
    let steps = 400;
    let eval = |appearance: Compensation, owner: u64| {
        let config = TrainConfig {
            seed: 3,
            sh_degree_interval: 100,
            appearance,
            ..crate::helpers::test_config(steps, Strategy::Compact(CompactConfig::default()))
        };
        let mut trainer =
            Trainer::new(&ctx, Arc::clone(&data), &init, config, Owner::Run(owner)).unwrap();
        for _ in 0..steps {
            trainer.step().unwrap();
            while trainer.next_metrics().is_some() {}
        }
        let stats = trainer.evaluate().unwrap();
        drop(trainer);
        ctx.wait_idle().unwrap();
        assert_eq!(ctx.ledger().owner_bytes(Owner::Run(owner)), 0, "the run left memory behind");
        stats.psnr
    };
    let off = eval(Compensation::Off, 1);
    let on = eval(Compensation::On, 2);
    eprintln!("eval PSNR: compensation off {off:.2} dB, on {on:.2} dB");
    assert!(on > off + 1.5, "compensation off {off:.2} dB, on {on:.2} dB");
    assert!(ctx.take_uncaptured_errors().is_empty());
}

/// Auto turns compensation on where the train photos' EXIF exposures span a third of a stop or
/// more, and each view's transform starts at its exposure's gain (the light's change through
/// sRGB's 1/2.2, scaled so the gains' mean is 1); below a third of a stop, or with one view
/// unknown, auto stays off; a run told off stays off.
#[test]
fn exif_exposure_turns_compensation_on_and_seeds_it() {
    use std::sync::Arc;

    use splat_trainer::appearance::{AUTO_SPREAD_STOPS, ENCODING_GAMMA, exif_spread_stops};
    use splat_trainer::dataset::Exposure;
    use splat_trainer::densify::{CompactConfig, Strategy};
    use splat_trainer::init::splats_from_points;
    use splat_trainer::train::Trainer;

    let ctx = context();
    let statue = crate::helpers::desk_statue(32);
    let init = splats_from_points(statue.init_points.as_ref().unwrap(), 1);
    // Exposure times of 1/100 s times 2^(k/4): view k is k/4 stops brighter than view 0.
    let with_times = |quarter_stops: f64, known: bool| {
        let mut data = (*statue).clone();
        for (k, view) in data.train.iter_mut().enumerate() {
            view.exposure = Exposure {
                time_s: (known || k > 0).then(|| 0.01 * (k as f64 * quarter_stops / 4.0).exp2()),
                f_number: Some(2.8),
                iso: Some(100.0),
            };
        }
        Arc::new(data)
    };
    let run = |data: &Arc<Dataset>, appearance: Compensation, owner: u64| {
        let config = TrainConfig {
            appearance,
            ..crate::helpers::test_config(10, Strategy::Compact(CompactConfig::default()))
        };
        let trainer =
            Trainer::new(&ctx, Arc::clone(data), &init, config, Owner::Run(owner)).unwrap();
        let decided = trainer.config().appearance;
        let views = pollster::block_on(trainer.appearance_async()).unwrap();
        drop(trainer);
        ctx.wait_idle().unwrap();
        assert_eq!(ctx.ledger().owner_bytes(Owner::Run(owner)), 0, "the run left memory behind");
        (decided, views)
    };
    let views = statue.train.len();
    let spread = with_times(1.0, true);
    assert!((exif_spread_stops(&spread.train).unwrap() - (views - 1) as f64 / 4.0).abs() < 1e-9);
    let (decided, transforms) = run(&spread, Compensation::Auto, 1);
    assert_eq!(decided, Compensation::On);
    let transforms = transforms.expect("on");
    let gains: Vec<f64> = (0..views).map(|k| (k as f64 / 4.0 / ENCODING_GAMMA).exp2()).collect();
    let mean = gains.iter().sum::<f64>() / views as f64;
    for (transform, gain) in transforms.iter().zip(&gains) {
        for (r, row) in transform.matrix.iter().enumerate() {
            for (c, &value) in row.iter().enumerate() {
                let want = if r == c { gain / mean } else { 0.0 };
                assert!((f64::from(value) - want).abs() < 1e-6, "{transform:?} against {want}");
            }
        }
        assert!(transform.offset.iter().all(|v| v.abs() < 1e-12), "{transform:?}");
    }
    assert_eq!(run(&spread, Compensation::Off, 2), (Compensation::Off, None));
    // Views 0.01 stops apart: far under a third of a stop in all.
    let close = with_times(0.04, true);
    assert!(exif_spread_stops(&close.train).unwrap() < AUTO_SPREAD_STOPS);
    assert_eq!(run(&close, Compensation::Auto, 3).0, Compensation::Off);
    // One view's time unknown: its aperture and ISO say nothing of the others' times.
    let unknown = with_times(1.0, false);
    assert!(exif_spread_stops(&unknown.train).unwrap() < 1e-9);
    assert_eq!(run(&unknown, Compensation::Auto, 4).0, Compensation::Off);
    // On by request with no EXIF: identities.
    let (decided, transforms) = run(&statue, Compensation::On, 5);
    assert_eq!(decided, Compensation::On);
    assert!(transforms.unwrap().iter().all(|t| t.stops().abs() < 1e-12));
    assert!(ctx.take_uncaptured_errors().is_empty());
}

/// Where EXIF says nothing, auto reads the drift from the pixels: desk-statue as taken stays off
/// (its own changes span about half a stop), the same with each train view's exposure and white
/// balance changed (0.5–2×, ±15% a channel) turns on, and says why in one line. It decides
/// before the first step: a run set to auto is configured as one set to on, so it is that run
/// (the same config, data and initial splats give the same bits: `reproducible.rs`).
#[test]
fn pixel_drift_decides_auto_where_exif_says_nothing() {
    use std::sync::Arc;

    use splat_trainer::appearance::{Evidence, PixelDrift};
    use splat_trainer::densify::{CompactConfig, Strategy};
    use splat_trainer::init::splats_from_points;
    use splat_trainer::train::Trainer;

    // 160 px: at 64 px and under, too few of desk-statue's views show enough flat patches.
    let statue = crate::helpers::desk_statue(160);
    let decided = Compensation::Auto.decide(&statue);
    assert_eq!(decided.compensation, Compensation::Off, "{decided}");
    assert!(matches!(decided.from, Evidence::Pixels(_)), "{decided}");

    let mut drifted = (*statue).clone();
    drift_train_views(&mut drifted, 2.0, 0.15, 42);
    let points = drifted.init_points.clone().unwrap();
    drifted.pixel_drift = PixelDrift::measure(&drifted.train, &points);
    let decided = Compensation::Auto.decide(&drifted);
    assert_eq!(decided.compensation, Compensation::On, "{decided}");
    let line = decided.to_string();
    assert!(
        line.starts_with("per-view appearance on: against 1443 sparse points' colours"),
        "{line}"
    );
    assert_eq!(decided.source(), "pixels");
    // A setting is what it says.
    let off = Compensation::Off.decide(&drifted);
    assert_eq!((off.compensation, off.from), (Compensation::Off, Evidence::Setting));
    // Nothing read from the pixels.
    drifted.pixel_drift = None;
    assert_eq!(Compensation::Auto.decide(&drifted).from, Evidence::Nothing { points: true });
    drifted.pixel_drift = PixelDrift::measure(&drifted.train, &points);

    let ctx = context();
    let drifted = Arc::new(drifted);
    let init = splats_from_points(&points, 1);
    let config = |appearance| TrainConfig {
        appearance,
        ..crate::helpers::test_config(10, Strategy::Compact(CompactConfig::default()))
    };
    let configured = |appearance, owner| {
        let trainer =
            Trainer::new(&ctx, Arc::clone(&drifted), &init, config(appearance), Owner::Run(owner))
                .unwrap();
        let config = trainer.config().clone();
        drop(trainer);
        ctx.wait_idle().unwrap();
        assert_eq!(ctx.ledger().owner_bytes(Owner::Run(owner)), 0, "the run left memory behind");
        config
    };
    assert_eq!(configured(Compensation::Auto, 1), configured(Compensation::On, 2));
}

/// Multiplies every train view's pixels by a gain drawn log-uniformly in [1/`range`, `range`],
/// each channel by a further factor in [1 − `tint`, 1 + `tint`] (seeded): a camera's
/// exposure and white balance wandering from photo to photo. The eval views keep theirs.
fn drift_train_views(data: &mut Dataset, range: f32, tint: f32, seed: u64) {
    use splat_formats::random::SplitMix64;
    use splat_trainer::appearance::drift::with_gains;
    let mut rng = SplitMix64::new(seed);
    for view in &mut data.train {
        let gain = (rng.next_f32() * 2.0 - 1.0).mul_add(range.ln(), 0.0).exp();
        let gains: [f32; 3] =
            std::array::from_fn(|_| gain * (1.0 + tint * (2.0 * rng.next_f32() - 1.0)));
        view.image = with_gains(&view.image, gains);
    }
}

/// The pixel drift `auto` reads (`PixelDrift::measure`) on the shared captures with a COLMAP
/// model, as loaded and with each train view's exposure and white balance changed: what the
/// threshold between the two is chosen from, and the sample scene (rendered with one exposure;
/// its points' colours carry noise of up to 0.04 a channel). `SIZES` (default 160), `SEEDS`
/// (default 5); `PER_VIEW` prints each view's gains as loaded.
#[test]
#[ignore = "a measurement: prints the drift of the shared captures, loaded and drifted"]
fn measure_pixel_drift_of_constant_and_drifted_captures() {
    use splat_test_support::dataset_path;
    use splat_trainer::appearance::drift::PixelDrift;
    use splat_trainer::dataset::{LoadOptions, load_dataset};

    let list = |name: &str, default: &str| -> Vec<u64> {
        std::env::var(name)
            .unwrap_or_else(|_| default.to_owned())
            .split(',')
            .map(|s| s.trim().parse().unwrap())
            .collect()
    };
    let sizes = list("SIZES", "160");
    let seeds = list("SEEDS", "5")[0];
    let sample =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/sample-scene.zip");
    let captures = ["desk-penguin-opencv", "desk-statue-colmap", "maupertuis-colmap-txt"]
        .map(|name| (name, dataset_path(name)));
    for (capture, path) in captures.into_iter().chain([("sample scene", sample)]) {
        for &size in &sizes {
            let options = LoadOptions { max_resolution: size as u32, ..LoadOptions::default() };
            let data = load_dataset(&path, &options).unwrap();
            let points = data.init_points.as_ref().unwrap();
            let started = std::time::Instant::now();
            let constant = PixelDrift::measure(&data.train, points);
            let took = started.elapsed();
            eprintln!(
                "{capture} {size} px, {} train views: as loaded {constant:?} ({took:?})",
                data.train.len()
            );
            if std::env::var_os("PER_VIEW").is_some() {
                let positions: Vec<glam::Vec3> =
                    points.positions.iter().map(|&p| glam::Vec3::from(p)).collect();
                for view in &data.train {
                    let g = splat_trainer::appearance::drift::view_gains(
                        view,
                        &positions,
                        &points.colors,
                    );
                    eprintln!(
                        "    {} {:?}",
                        view.name,
                        g.map(|g| (g.iter().sum::<f64>() / 3.0, g))
                    );
                }
            }
            for (range, tint) in [(2.0, 0.15), (1.26, 0.05), (1.12, 0.0)] {
                for seed in 0..seeds {
                    let mut drifted = data.clone();
                    drift_train_views(&mut drifted, range, tint, seed);
                    let drift = PixelDrift::measure(&drifted.train, points);
                    eprintln!(
                        "  gains within ×{range}, tint ±{tint}, seed {seed}: {}",
                        drift.map_or_else(
                            || "not measured".to_owned(),
                            |d| format!(
                                "exposure {:.3} colour {:.3} stops",
                                d.exposure_stops, d.colour_stops
                            )
                        )
                    );
                }
            }
        }
    }
}
