//! The built-in sample scene (`assets/sample-scene.zip`): it loads cleanly, it is still what
//! its generator makes, and a short run learns it.
//!
//! Regenerate the asset after changing `splat_trainer::sample_scene`:
//! `UPDATE_SAMPLE_SCENE=1 cargo test -p splat-trainer --test it sample_scene::`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use splat_render::{FrameScratch, GpuSplats, Owner, RenderSettings, Renderer, TILE_SIZE};
use splat_test_support::TempDir;
use splat_trainer::config::TrainConfig;
use splat_trainer::dataset::{Dataset, DatasetFormat, LoadOptions, load_dataset};
use splat_trainer::densify::{DefaultConfig, Strategy};
use splat_trainer::init::splats_from_points;
use splat_trainer::sample_scene::{self, IMAGE_SIZE, INIT_POINT_COUNT, VIEW_COUNT};
use splat_trainer::train::Trainer;

use crate::helpers::{context, test_config};

fn committed_zip() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/sample-scene.zip")
}

fn load_committed() -> Dataset {
    load_dataset(&committed_zip(), &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// Every entry of a zip, by name, in archive order.
fn entries(path: &Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut archive = zip::ZipArchive::new(file).expect("a zip");
    (0..archive.len())
        .map(|i| {
            let mut entry = archive.by_index(i).expect("entry");
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).expect("read entry");
            (entry.name().expect("UTF-8 name").into_owned(), bytes)
        })
        .collect()
}

#[test]
fn committed_zip_loads_with_the_generators_cameras() {
    let dataset = load_committed();
    assert_eq!(dataset.format, DatasetFormat::Transforms);
    assert!(dataset.warnings.is_empty(), "{:?}", dataset.warnings);
    // 32 views, every 8th (starting with the first) held out for evaluation.
    assert_eq!(VIEW_COUNT, 32);
    assert_eq!((dataset.train.len(), dataset.eval.len()), (28, 4));
    assert_eq!(dataset.camera_count, 1);
    let points = dataset.init_points.as_ref().expect("init.ply");
    assert_eq!(points.len(), INIT_POINT_COUNT);
    assert!(points.has_color);

    let expected = sample_scene::cameras();
    for view in dataset.views() {
        assert_eq!(view.name, format!("images/view_{:02}.png", view.index));
        assert_eq!(view.image.dimensions(), (IMAGE_SIZE, IMAGE_SIZE));
        let (loaded, made) = (view.camera, expected[view.index]);
        assert_eq!((loaded.width, loaded.height, loaded.cx, loaded.cy), (128, 128, 64.0, 64.0));
        assert!((loaded.fx - made.fx).abs() < 1e-4 && (loaded.fy - made.fy).abs() < 1e-4);
        // Through transforms.json's OpenGL convention and back: the same OpenCV pose.
        assert!(
            loaded.world_from_camera.abs_diff_eq(made.world_from_camera, 1e-6),
            "{}: {} vs {}",
            view.name,
            loaded.world_from_camera,
            made.world_from_camera
        );
    }
}

/// Rendering the ground truth from each loaded camera gives the loaded image back: the pose
/// convention, the intrinsics and the straight-alpha PNGs composited over black all agree.
#[test]
fn committed_images_are_renders_of_the_ground_truth() {
    let dataset = load_committed();
    let ctx = context();
    let splats = GpuSplats::upload(&ctx, &sample_scene::ground_truth(), Owner::Shared).unwrap();
    let renderer = Renderer::new(&ctx).unwrap();
    let mut scratch = FrameScratch::new(&ctx, &renderer, Owner::Shared).unwrap();
    for view in dataset.views() {
        renderer
            .forward(&ctx, &splats, &view.camera, &RenderSettings::default(), &mut scratch)
            .unwrap();
        let rendered = scratch.read_image(&ctx).unwrap();
        let mut covered = 0;
        for (pixel, loaded) in rendered.iter().zip(view.image.pixels()) {
            covered += usize::from(pixel[3] > 0.5);
            for (&value, got) in pixel[..3].iter().zip(loaded.0) {
                let want = (value.clamp(0.0, 1.0) * 255.0).round();
                // The PNG stores round(255·rgb/α) and round(255·α); the loader multiplies them
                // back and rounds: half a level from each rounding and one from their product
                // make at most 2 levels.
                let diff = (want - f32::from(got)).abs();
                assert!(diff <= 2.0, "{}: {want} vs {got}", view.name);
            }
        }
        // The object fills a good part of every frame (about a third here): a pose mix-up
        // would show an empty or cut-off image.
        let fraction = covered as f32 / (IMAGE_SIZE * IMAGE_SIZE) as f32;
        assert!(fraction > 0.15, "{}: {:.0} % covered", view.name, 100.0 * fraction);
    }
    assert_eq!(IMAGE_SIZE % TILE_SIZE, 0, "whole tiles");
}

/// The committed zip is what the generator makes now, so it cannot drift from the code;
/// generating twice gives the same bytes. With `UPDATE_SAMPLE_SCENE=1` the committed zip is
/// replaced instead.
#[test]
fn committed_zip_is_what_the_generator_makes() {
    let ctx = context();
    if std::env::var_os("UPDATE_SAMPLE_SCENE").is_some_and(|v| v == "1") {
        // Atomic: the other tests of this file read it meanwhile.
        sample_scene::write_zip(&ctx, &committed_zip()).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("updated {}", committed_zip().display());
        return;
    }
    let temp = TempDir::new("sample-scene");
    let fresh = temp.path().join("sample-scene.zip");
    let start = Instant::now();
    sample_scene::write_zip(&ctx, &fresh).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("write_zip took {:.2} s", start.elapsed().as_secs_f64());

    let again = temp.path().join("again.zip");
    sample_scene::write_zip(&ctx, &again).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        std::fs::read(&fresh).unwrap() == std::fs::read(&again).unwrap(),
        "two runs on one machine give different archives"
    );

    let committed = entries(&committed_zip());
    let made = entries(&fresh);
    let names = |list: &[(String, Vec<u8>)]| list.iter().map(|e| e.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&committed), names(&made), "entries and their order");
    let made: BTreeMap<_, _> = made.into_iter().collect();
    for (name, bytes) in &committed {
        let fresh_bytes = &made[name];
        if Path::new(name).extension().is_none_or(|ext| ext != "png") {
            // CPU-made: exact.
            assert!(bytes == fresh_bytes, "{name} differs from what the generator makes");
            continue;
        }
        // GPU-made: float differences between adapters may move a value by one level.
        let decode = |b: &[u8]| image::load_from_memory(b).expect("PNG").into_rgba8();
        let (old, new) = (decode(bytes), decode(fresh_bytes));
        assert_eq!(old.dimensions(), new.dimensions(), "{name}");
        for (i, (a, b)) in old.as_raw().iter().zip(new.as_raw()).enumerate() {
            let (pixel, channel) = (i / 4, i % 4);
            assert!(a.abs_diff(*b) <= 1, "{name}: pixel {pixel} channel {channel}: {a} vs {b}");
        }
    }
    let size = std::fs::metadata(committed_zip()).unwrap().len();
    assert!(size < 1_500_000, "the sample scene grew to {size} bytes");
}

/// A short run from the zip's init.ply at the dataset's own resolution learns the scene.
#[test]
fn short_training_run_learns_the_scene() {
    let data = Arc::new(load_committed());
    let ctx = context();
    let init = splats_from_points(data.init_points.as_ref().expect("init.ply"), 0);
    let steps = 150;
    // No refinement this early with the paper's schedule (it starts at step 500).
    let strategy = Strategy::Default(DefaultConfig::default());
    let config = TrainConfig {
        sh_degree: 0,
        sh_degree_interval: 1000,
        seed: 5,
        ..test_config(steps, strategy)
    };
    let start = Instant::now();
    let mut trainer = Trainer::new(&ctx, Arc::clone(&data), &init, config, Owner::Run(11)).unwrap();
    let before = trainer.evaluate().unwrap();
    for _ in 0..steps {
        trainer.step().unwrap();
        while let Some(m) = trainer.next_metrics() {
            assert!(m.loss.is_finite(), "step {}: loss {}", m.step, m.loss);
        }
    }
    let after = trainer.evaluate().unwrap();
    eprintln!(
        "eval PSNR {:.2} → {:.2} dB, SSIM {:.3} → {:.3} after {steps} steps ({:.1} s)",
        before.psnr,
        after.psnr,
        before.ssim,
        after.ssim,
        start.elapsed().as_secs_f64()
    );
    // Measured on lavapipe (2026-11-21): 17.18 → 25.43 dB, SSIM 0.691 → 0.911, in ~15 s of a
    // dev build; since training supervises transparency (each step over a random colour,
    // 2026-11-24): 17.16 → 25.19 dB, SSIM 0.689 → 0.907. With the position, scale and rotation learning rates at zero (colour and
    // opacity only) the same run reaches 20.86 dB (+3.7) and SSIM 0.786; with every rate at
    // zero it stays at 17.18. Requiring +6 dB therefore needs the geometry gradients to work,
    // and leaves ~2 dB for other adapters (sums in another order) and schedules.
    assert!(after.psnr > before.psnr + 6.0, "PSNR {:.2} → {:.2}", before.psnr, after.psnr);
    assert!(after.ssim > before.ssim + 0.15, "SSIM {:.3} → {:.3}", before.ssim, after.ssim);
    drop(trainer);
    ctx.wait_idle().unwrap();
    assert_eq!(ctx.ledger().owner_bytes(Owner::Run(11)), 0);
    assert!(ctx.take_uncaptured_errors().is_empty());
}
