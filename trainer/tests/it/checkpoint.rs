//! The checkpoint file format: bit-exact round trips, refusal of damaged, truncated and
//! foreign files with clear errors, atomic saves, and the dataset identity.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use splat_formats::random::SplitMix64;
use splat_render::{Growth, ShPrecision};
use splat_test_support::{TempDir, copy_dir, data, dataset_path};
use splat_trainer::appearance;
use splat_trainer::checkpoint::{
    self, Checkpoint, CheckpointError, DatasetIdentity, dataset_identity,
};
use splat_trainer::config::{LearningRates, Progressive, TrainConfig, Transparency};
use splat_trainer::dataset::{LoadOptions, load_dataset};
use splat_trainer::densify::{CompactConfig, DefaultConfig, McmcConfig, SplitRule, Strategy};
use splat_trainer::formats::Splats;
use splat_trainer::loss::LossWeights;
use splat_trainer::train::{HostOptimizerState, RunSnapshot};

/// Arbitrary test data from the shared generator.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn u32(&mut self) -> u32 {
        self.next() as u32
    }

    /// Any bit pattern: NaNs with payloads, infinities, subnormals, −0.
    fn any_f32(&mut self) -> f32 {
        f32::from_bits(self.u32())
    }

    /// Any bit pattern but NaN (the metadata keeps every value but a NaN's payload).
    fn f32_not_nan(&mut self) -> f32 {
        loop {
            let value = self.any_f32();
            if !value.is_nan() {
                return value;
            }
        }
    }

    /// Any finite bit pattern (what a crop's selections and cells hold).
    fn f32_finite(&mut self) -> f32 {
        loop {
            let value = self.any_f32();
            if value.is_finite() {
                return value;
            }
        }
    }

    fn f64_not_nan(&mut self) -> f64 {
        loop {
            let value = f64::from_bits(self.next());
            if !value.is_nan() {
                return value;
            }
        }
    }

    fn floats(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.any_f32()).collect()
    }

    fn rows<const W: usize>(&mut self, n: usize) -> Vec<[f32; W]> {
        (0..n).map(|_| std::array::from_fn(|_| self.any_f32())).collect()
    }
}

fn random_config(rng: &mut Rng, mcmc: bool) -> TrainConfig {
    let strategy = if mcmc {
        Strategy::Mcmc(McmcConfig {
            cap: rng.u32(),
            refine_every: rng.u32(),
            start: rng.u32(),
            stop: rng.u32(),
            min_opacity: rng.f32_not_nan(),
            grow_fraction: rng.f64_not_nan(),
            noise_lr: rng.f32_not_nan(),
            opacity_reg: rng.f32_not_nan(),
            scale_reg: rng.f32_not_nan(),
        })
    } else {
        let refine = DefaultConfig {
            refine_every: rng.u32(),
            start: rng.u32(),
            stop: rng.u32(),
            grad_threshold: rng.f32_not_nan(),
            percent_dense: rng.f32_not_nan(),
            min_opacity: rng.f32_not_nan(),
            max_screen_radius: rng.f32_not_nan(),
            max_world_scale: rng.f32_not_nan(),
            opacity_reset_every: rng.u32(),
            opacity_reset_value: rng.f32_not_nan(),
            split: if rng.u32().is_multiple_of(2) {
                SplitRule::Sampled
            } else {
                SplitRule::LongAxis
            },
        };
        // The compact strategy is the 3DGS rules, two numbers and its growth statistic more.
        if rng.u32().is_multiple_of(2) {
            Strategy::Default(refine)
        } else {
            Strategy::Compact(CompactConfig {
                refine,
                grow_fraction: rng.f64_not_nan(),
                opacity_reg: rng.f32_not_nan(),
                growth: if rng.u32().is_multiple_of(2) { Growth::Signed } else { Growth::Absolute },
            })
        }
    };
    TrainConfig {
        steps: rng.u32(),
        sh_degree: rng.u32(),
        sh_degree_interval: rng.u32(),
        sh_precision: if rng.u32().is_multiple_of(2) { ShPrecision::F32 } else { ShPrecision::F16 },
        strategy,
        max_splats: splat_trainer::config::SplatBudget::Count(rng.u32()),
        eval_every: rng.u32(),
        seed: rng.next(),
        background: [rng.f32_not_nan(), rng.f32_not_nan(), rng.f32_not_nan()],
        learning_rates: LearningRates {
            means_initial: rng.f32_not_nan(),
            means_final: rng.f32_not_nan(),
            means_decay_steps: rng.u32(),
            sh_dc: rng.f32_not_nan(),
            sh_rest: rng.f32_not_nan(),
            opacities: rng.f32_not_nan(),
            log_scales: rng.f32_not_nan(),
            quats: rng.f32_not_nan(),
        },
        loss_weights: LossWeights { l1: rng.f32_not_nan(), ssim: rng.f32_not_nan() },
        transparency: match rng.next() % 3 {
            0 => Transparency::Composite,
            1 => Transparency::RandomBackground,
            _ => Transparency::AlphaLoss(rng.f32_not_nan()),
        },
        progressive: Progressive::Stages { half_from: rng.u32(), full_from: rng.u32() },
        appearance: splat_trainer::appearance::Compensation::Off,
    }
}

fn random_splats(rng: &mut Rng, n: usize, sh_degree: u32) -> Splats {
    let rest = 3 * (splat_trainer::formats::sh_coeffs_for_degree(sh_degree) - 1);
    Splats {
        means: rng.rows(n),
        log_scales: rng.rows(n),
        rotations: rng.rows(n),
        opacity_logits: rng.floats(n),
        sh_dc: rng.rows(n),
        sh_rest: rng.floats(n * rest),
        sh_degree,
    }
}

/// The moments in the GPU layout: means, log-scales, quats, opacities, SH bands 0..=3
/// (bands above the degree empty).
fn gpu_moments(rng: &mut Rng, n: usize, sh_degree: u32) -> Vec<(Vec<f32>, Vec<f32>)> {
    let mut sizes = vec![3 * n, 3 * n, 4 * n, n];
    sizes.extend(
        (0..4).map(|band| if band <= sh_degree { (2 * band as usize + 1) * 3 * n } else { 0 }),
    );
    sizes.into_iter().map(|len| (rng.floats(len), rng.floats(len))).collect()
}

fn random_checkpoint(rng: &mut Rng, n: usize, sh_degree: u32, mcmc: bool) -> Checkpoint {
    let views = rng.below(50) as u32;
    let mut checkpoint = Checkpoint {
        snapshot: RunSnapshot {
            splats: random_splats(rng, n, sh_degree),
            optimizer: HostOptimizerState {
                moments: gpu_moments(rng, n, sh_degree),
                densify: rng.floats(3 * n),
                appearance: Vec::new(),
            },
            step: rng.u32(),
            rng: rng.next(),
            order: (0..views).map(|_| rng.u32()).collect(),
            // A third at the count (the peak the file leaves out), the others above it.
            peak_splats: n as u32 + if rng.below(3) == 0 { 0 } else { 1 + rng.u32() % 1000 },
            config: random_config(rng, mcmc),
        },
        dataset: DatasetIdentity {
            path: format!("/data/scène {}/\"quoted\"\n", rng.u32()),
            fingerprint: rng.next(),
            views,
            // Some, and None as in files written before the options were kept.
            options: (rng.below(4) > 0).then(|| LoadOptions {
                max_resolution: rng.u32(),
                background: [rng.f32_not_nan(), rng.f32_not_nan(), rng.f32_not_nan()],
                eval_every: rng.below(100) as usize,
                alpha_as_mask: rng.below(2) == 1,
            }),
        },
        crop: splat_formats::filter::Filter::default(),
    };
    // Half with per-view appearance: its section of transforms and their moments (of a few
    // views: the file does not tie its length to the dataset's views; resuming does). Drawn
    // last, so the rest is what these seeds drew before appearance existed.
    if rng.below(2) == 1 {
        let views = rng.below(4) as usize;
        let snapshot = &mut checkpoint.snapshot;
        snapshot.config.appearance = splat_trainer::appearance::Compensation::On;
        snapshot.optimizer.appearance =
            rng.floats(views * (appearance::PARAMS + appearance::MOMENTS));
    }
    // Half with a crop, each of its rules there or not (drawn after the rest, likewise).
    if rng.below(2) == 1 {
        use splat_formats::filter::{
            CropBox, CropSphere, MAX_SELECTIONS, MAX_STROKE_POINTS, SceneCells, Selection, Shape,
        };
        let mut three = || [rng.f32_not_nan(), rng.f32_not_nan(), rng.f32_not_nan()];
        let (min, max, center) = (three(), three(), three());
        checkpoint.crop = splat_formats::filter::Filter {
            crop_box: (rng.below(2) == 1).then_some(CropBox::aligned(min, max)),
            crop_sphere: (rng.below(2) == 1)
                .then(|| CropSphere { center, radius: rng.f32_not_nan() }),
            min_opacity: (rng.below(2) == 1).then(|| rng.f32_not_nan()),
            max_size: (rng.below(2) == 1).then(|| rng.f32_not_nan()),
            selections: Vec::new(),
            scene_cells: None,
        };
        // Half the boxes turned, and up to all the selections (drawn last, likewise).
        if let Some(crop_box) = checkpoint.crop.crop_box.as_mut()
            && rng.below(2) == 1
        {
            crop_box.turn = [rng.f32_not_nan(), rng.f32_not_nan(), rng.f32_not_nan()];
        }
        // Rectangles and strokes: a few, or a quarter of the time as many as a filter holds;
        // strokes of a few points, or a quarter of the time the most.
        let few_or = |rng: &mut Rng, most: usize| match rng.below(4) {
            0 => most,
            _ => 1 + rng.below(4) as usize,
        };
        let selections = few_or(rng, MAX_SELECTIONS);
        for _ in 0..selections {
            let mut four = || std::array::from_fn(|_| rng.f32_finite());
            let (camera_from_world, rect) = (four(), four());
            let position = [rng.f32_finite(), rng.f32_finite(), rng.f32_finite()];
            let keep = rng.below(2) == 1;
            let shape = if rng.below(2) == 1 {
                Shape::Rect(rect)
            } else {
                let points = few_or(rng, MAX_STROKE_POINTS);
                let points = (0..points).map(|_| [rng.f32_finite(), rng.f32_finite()]).collect();
                Shape::Stroke { radius: rng.f32_finite().abs(), points }
            };
            assert!(checkpoint.crop.add_selection(Selection {
                camera_from_world,
                position,
                shape,
                keep
            }));
        }
        // Half with scene cells (drawn last, likewise).
        if rng.below(2) == 1 {
            let dims: [u32; 3] = std::array::from_fn(|_| 1 + rng.below(40) as u32);
            let words = dims.iter().map(|&d| u64::from(d)).product::<u64>().div_ceil(32);
            checkpoint.crop.scene_cells = Some(SceneCells {
                origin: [rng.f32_finite(), rng.f32_finite(), rng.f32_finite()],
                scale: rng.f32_finite().abs().max(f32::MIN_POSITIVE),
                dims,
                bits: (0..words).map(|_| rng.u32()).collect(),
            });
        }
    }
    checkpoint
}

fn to_bytes(checkpoint: &Checkpoint) -> Vec<u8> {
    let mut bytes = Vec::new();
    checkpoint::write(checkpoint, &mut bytes).unwrap_or_else(|e| panic!("{e}"));
    bytes
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

fn rows_bits<const W: usize>(rows: &[[f32; W]]) -> Vec<u32> {
    rows.iter().flatten().map(|v| v.to_bits()).collect()
}

/// Every value equal bit for bit. Config floats are compared through `Debug`, which prints
/// the shortest text that reads back to the same bits (−0.0 and 0.0 differ).
fn assert_bit_exact(read: &Checkpoint, written: &Checkpoint) {
    let (a, b) = (&read.snapshot, &written.snapshot);
    assert_eq!(a.splats.sh_degree, b.splats.sh_degree);
    assert_eq!(rows_bits(&a.splats.means), rows_bits(&b.splats.means));
    assert_eq!(rows_bits(&a.splats.log_scales), rows_bits(&b.splats.log_scales));
    assert_eq!(rows_bits(&a.splats.rotations), rows_bits(&b.splats.rotations));
    assert_eq!(bits(&a.splats.opacity_logits), bits(&b.splats.opacity_logits));
    assert_eq!(rows_bits(&a.splats.sh_dc), rows_bits(&b.splats.sh_dc));
    assert_eq!(bits(&a.splats.sh_rest), bits(&b.splats.sh_rest));
    assert_eq!(a.optimizer.moments.len(), b.optimizer.moments.len());
    for ((am, av), (bm, bv)) in a.optimizer.moments.iter().zip(&b.optimizer.moments) {
        assert_eq!(bits(am), bits(bm));
        assert_eq!(bits(av), bits(bv));
    }
    assert_eq!(bits(&a.optimizer.densify), bits(&b.optimizer.densify));
    assert_eq!(bits(&a.optimizer.appearance), bits(&b.optimizer.appearance));
    assert_eq!((a.step, a.rng, &a.order, a.peak_splats), (b.step, b.rng, &b.order, b.peak_splats));
    assert_eq!(format!("{:?}", a.config), format!("{:?}", b.config));
    assert_eq!(read.dataset, written.dataset);
    assert_eq!(format!("{:?}", read.crop), format!("{:?}", written.crop));
}

fn root(result: Result<Checkpoint, CheckpointError>) -> CheckpointError {
    match result {
        Ok(_) => panic!("a damaged checkpoint was read without an error"),
        Err(CheckpointError::File { error, .. }) => *error,
        Err(e) => e,
    }
}

fn assert_fast(start: Instant, what: &str) {
    // Generous for a loaded CI machine; the checks take microseconds. A reader that
    // allocated what the header claims (16 GB) would take seconds or abort.
    assert!(start.elapsed() < Duration::from_secs(1), "{what} took {:?}", start.elapsed());
}

#[test]
fn round_trip_is_bit_exact() {
    let mut rng = Rng(SplitMix64::new(1));
    for sh_degree in 0..=3 {
        for mcmc in [false, true] {
            for n in [0, 1, 7, 300] {
                let written = random_checkpoint(&mut rng, n, sh_degree, mcmc);
                let read = checkpoint::read(&to_bytes(&written)).unwrap_or_else(|e| panic!("{e}"));
                assert_bit_exact(&read, &written);
            }
        }
    }
}

#[test]
fn round_trip_of_a_fresh_run_and_of_defaults() {
    // A fresh run has no optimizer state; default configs have "nice" decimal values.
    for strategy in [
        Strategy::Default(DefaultConfig::default()),
        Strategy::Mcmc(McmcConfig::default()),
        Strategy::Compact(CompactConfig::default()),
    ] {
        let mut rng = Rng(SplitMix64::new(2));
        let mut written = random_checkpoint(&mut rng, 10, 3, false);
        written.snapshot.optimizer = HostOptimizerState::default();
        written.snapshot.order.clear();
        written.snapshot.peak_splats = 10;
        written.snapshot.config.strategy = strategy;
        written.snapshot.config.learning_rates = LearningRates::default();
        written.snapshot.config.loss_weights = LossWeights::default();
        let bytes = to_bytes(&written);
        // A peak at the count is left out, so that the file is as older versions wrote it.
        let json = String::from_utf8_lossy(&bytes);
        assert!(!json.contains("peak_splats"), "a fresh run's peak is written");
        let read = checkpoint::read(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_bit_exact(&read, &written);
        assert_eq!(read.snapshot.config, written.snapshot.config);
    }
}

#[test]
fn writing_is_deterministic() {
    let written = random_checkpoint(&mut Rng(SplitMix64::new(3)), 50, 2, true);
    assert_eq!(to_bytes(&written), to_bytes(&written));
}

#[test]
fn checksum_is_xxh64() {
    // Reference values of XXH64 with seed 0 (xxHash's own test vectors), covering inputs
    // below one 32-byte stripe, several stripes with 4-byte and single-byte tails, and a
    // long input.
    assert_eq!(checkpoint::checksum(b""), 0xef46_db37_51d8_e999);
    assert_eq!(checkpoint::checksum(b"a"), 0xd24e_c4f1_a98c_6e5b);
    assert_eq!(checkpoint::checksum(b"abc"), 0x44bc_2cf5_ad77_0999);
    assert_eq!(checkpoint::checksum(b"123456789ABCDEF1"), 0x2ff1_4a98_41f5_4cc3);
    assert_eq!(
        checkpoint::checksum(b"123456789ABCDEF123456789ABCDEF123456789"),
        0xc42d_1e34_8e67_1d65
    );
    assert_eq!(checkpoint::checksum(&vec![0xff; 100 * 1024]), 0x2f1b_b6aa_5d0c_abcc);
}

#[test]
fn every_truncation_is_refused_as_truncated() {
    let bytes = to_bytes(&random_checkpoint(&mut Rng(SplitMix64::new(4)), 200, 3, false));
    let cuts = (0..50).map(|k| bytes.len() * k / 50).chain([1, 7, 8, 12, 31, 39, bytes.len() - 1]);
    for cut in cuts {
        let error = root(checkpoint::read(&bytes[..cut]));
        assert!(
            matches!(error, CheckpointError::Truncated { have, .. } if have == cut as u64),
            "cut at {cut} of {}: {error}",
            bytes.len()
        );
        assert!(error.to_string().contains("cut short"), "{error}");
    }
}

#[test]
fn bit_flips_are_refused() {
    let bytes = to_bytes(&random_checkpoint(&mut Rng(SplitMix64::new(5)), 100, 1, true));
    let mut rng = Rng(SplitMix64::new(6));
    // Random positions, plus each byte of the header.
    let positions: Vec<usize> =
        (0..400).map(|_| rng.below(bytes.len() as u64) as usize).chain(0..40).collect();
    for position in positions {
        let mut damaged = bytes.clone();
        damaged[position] ^= 1 << rng.below(8);
        let error = root(checkpoint::read(&damaged));
        let expected = match position {
            0..8 => matches!(error, CheckpointError::NotACheckpoint),
            8..12 => matches!(error, CheckpointError::UnsupportedVersion { .. }),
            // The file length: larger than the file reads as a cut-short file.
            16..24 => matches!(
                error,
                CheckpointError::Truncated { .. } | CheckpointError::ChecksumMismatch { .. }
            ),
            _ => matches!(error, CheckpointError::ChecksumMismatch { .. }),
        };
        assert!(expected, "flip at byte {position}: {error}");
    }
}

#[test]
fn absurd_header_lengths_fail_fast() {
    // Without its crop (seed 7 draws strokes of hundreds of points): a small file.
    let mut checkpoint = random_checkpoint(&mut Rng(SplitMix64::new(7)), 10, 0, false);
    checkpoint.crop = splat_formats::filter::Filter::default();
    let bytes = to_bytes(&checkpoint);
    assert!(bytes.len() < 8192, "a small file: {} bytes", bytes.len());
    let patch = |offset: usize, value: &[u8], fix_checksum: bool| {
        let mut patched = bytes.clone();
        patched[offset..offset + value.len()].copy_from_slice(value);
        if fix_checksum {
            let body = patched.len() - 8;
            let sum = checkpoint::checksum(&patched[..body]);
            patched[body..].copy_from_slice(&sum.to_le_bytes());
        }
        patched
    };
    let four_billion = u64::from(u32::MAX).to_le_bytes();

    // The first section (means) claims 4 billion floats; as damage, then as a file whose
    // checksum matches (a writer bug): the lengths are checked against the bytes there.
    for fix_checksum in [false, true] {
        let start = Instant::now();
        let error = root(checkpoint::read(&patch(32, &four_billion, fix_checksum)));
        assert_fast(start, "a section of 4 billion floats");
        if fix_checksum {
            assert!(
                matches!(error, CheckpointError::Damaged(_))
                    && error.to_string().contains("means claims 4294967295 values"),
                "{error}"
            );
        } else {
            assert!(matches!(error, CheckpointError::ChecksumMismatch { .. }), "{error}");
        }
    }
    // Section count, metadata length and every section length at their largest.
    let cases: [(usize, &[u8], &str); 3] = [
        (12, &u32::MAX.to_le_bytes(), "4294967295 sections"),
        (24, &u64::MAX.to_le_bytes(), "bytes of metadata"),
        (40, &u64::MAX.to_le_bytes(), "log_scales claims 18446744073709551615 values"),
    ];
    for (offset, value, message) in cases {
        let start = Instant::now();
        let error = root(checkpoint::read(&patch(offset, value, true)));
        assert_fast(start, message);
        assert!(error.to_string().contains(message), "{error}");
    }
    // A file length of 16 EB.
    let start = Instant::now();
    let error = root(checkpoint::read(&patch(16, &u64::MAX.to_le_bytes(), false)));
    assert_fast(start, "a file length of u64::MAX");
    assert!(
        matches!(error, CheckpointError::Truncated { expected: Some(u64::MAX), .. }),
        "{error}"
    );
}

#[test]
fn unsupported_version_says_which_are_read() {
    let mut bytes = to_bytes(&random_checkpoint(&mut Rng(SplitMix64::new(8)), 3, 0, false));
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    let error = root(checkpoint::read(&bytes));
    assert!(matches!(error, CheckpointError::UnsupportedVersion { found: 2 }), "{error}");
    assert!(error.to_string().contains("reads version 1"), "{error}");
}

/// `bytes` with its metadata JSON edited by `edit`: the header's lengths, the padding and
/// the checksum made to agree again, as a build writing that metadata would have.
fn with_metadata(bytes: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let u64_at = |at: usize| u64::from_le_bytes(std::array::from_fn(|i| bytes[at + i]));
    let sections = u32::from_le_bytes(std::array::from_fn(|i| bytes[12 + i])) as usize;
    let json_start = 32 + 8 * sections;
    let json_end = json_start + u64_at(24) as usize;
    let mut metadata: serde_json::Value =
        serde_json::from_slice(&bytes[json_start..json_end]).unwrap_or_else(|e| panic!("{e}"));
    edit(&mut metadata);
    let json = serde_json::to_vec(&metadata).unwrap_or_else(|e| panic!("{e}"));
    let arrays = &bytes[json_end.next_multiple_of(8)..bytes.len() - 8];

    let mut out = bytes[..json_start].to_vec();
    out.extend_from_slice(&json);
    out.resize(out.len().next_multiple_of(8), 0);
    out.extend_from_slice(arrays);
    let file_len = out.len() as u64 + 8;
    out[16..24].copy_from_slice(&file_len.to_le_bytes());
    out[24..32].copy_from_slice(&(json.len() as u64).to_le_bytes());
    let sum = checkpoint::checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A field or a setting's choice this build does not know, at the top of the metadata or deep
/// in the config, is refused in words that say a newer build wrote the file (not a parser's
/// list of what it expected).
#[test]
fn metadata_from_a_newer_build_says_so() {
    let bytes = to_bytes(&random_checkpoint(&mut Rng(SplitMix64::new(9)), 3, 1, false));
    let same = with_metadata(&bytes, |_| {});
    let read = |file: &[u8]| checkpoint::read(file).unwrap_or_else(|e| panic!("{e}"));
    assert_bit_exact(&read(&same), &read(&bytes)); // The helper changes only what it is told.

    let newer = |doc: &mut serde_json::Value| {
        doc["writer"] = "splat-trainer 9.0.0".into();
    };
    let top = with_metadata(&bytes, |doc| {
        newer(doc);
        doc["future_counter"] = 7.into();
    });
    let nested = with_metadata(&bytes, |doc| {
        newer(doc);
        doc["config"]["future_setting"] = "on".into();
    });
    let choice = with_metadata(&bytes, |doc| {
        newer(doc);
        doc["config"]["transparency"] = "future_mode".into();
    });
    for (file, field) in
        [(top, "future_counter"), (nested, "future_setting"), (choice, "future_mode")]
    {
        let error = root(checkpoint::read(&file));
        assert!(matches!(&error, CheckpointError::NewerMetadata { .. }), "{error}");
        let text = error.to_string();
        assert!(text.contains(&format!("`{field}`")), "{text}");
        assert!(text.contains("written by splat-trainer 9.0.0"), "{text}");
        assert!(!text.contains("expected one of"), "no parser's field list: {text}");
    }

    // Anything else wrong with the metadata is still said as such.
    let broken = with_metadata(&bytes, |doc| doc["step"] = "many".into());
    let error = root(checkpoint::read(&broken));
    assert!(matches!(error, CheckpointError::Metadata(_)), "{error}");
}

/// A crop no filter holds (too many selections, a stroke of no points, a selection that is
/// both a rectangle and a stroke) is refused as damaged, in words naming what is wrong.
#[test]
fn a_crop_no_filter_holds_is_refused_in_words() {
    use splat_formats::filter::{MAX_SELECTIONS, Selection, Shape};
    let mut checkpoint = random_checkpoint(&mut Rng(SplitMix64::new(9)), 3, 1, false);
    checkpoint.crop = splat_formats::filter::Filter::default();
    let stroke = Shape::Stroke { radius: 0.1, points: vec![[0.0, 0.0], [0.5, 0.5]] };
    let selection = Selection {
        camera_from_world: [0.0, 0.0, 0.0, 1.0],
        position: [0.0; 3],
        shape: stroke,
        keep: false,
    };
    assert!(checkpoint.crop.add_selection(selection));
    let bytes = to_bytes(&checkpoint);
    let many = with_metadata(&bytes, |doc| {
        let one = doc["crop"]["selections"][0].clone();
        doc["crop"]["selections"] = vec![one; MAX_SELECTIONS + 1].into();
    });
    let empty = with_metadata(&bytes, |doc| {
        doc["crop"]["selections"][0]["stroke"]["points"] = Vec::<f32>::new().into();
    });
    let both = with_metadata(&bytes, |doc| {
        let four = doc["crop"]["selections"][0]["camera_from_world"].clone();
        doc["crop"]["selections"][0]["rect"] = four;
    });
    let negative = with_metadata(&bytes, |doc| {
        doc["crop"]["selections"][0]["stroke"]["radius"] = "-1".into();
    });
    let far = with_metadata(&bytes, |doc| {
        doc["crop"]["selections"][0]["position"][1] = "inf".into();
    });
    let cells = |dims: [u64; 3], words: usize| {
        with_metadata(&bytes, |doc| {
            doc["crop"]["scene_cells"] = serde_json::json!({
                "origin": ["0", "0", "0"], "scale": "1", "dims": dims, "bits": vec![0u32; words]
            });
        })
    };
    for (file, says) in [
        (many, "its crop holds 65 selections, more than 64"),
        (empty, "its crop's selection 1 is a stroke of 0 points"),
        (both, "its crop's selection 1 is not exactly one of a rectangle and a stroke"),
        (cells([4, 4, 4], 3), "scene cells (4 × 4 × 4) come with 3 words of bits, not 2"),
        (
            negative,
            "its crop's selection 1 is a stroke of 2 points (1 to 256 are drawn), finite, of a radius of at least 0",
        ),
        (far, "its crop's selection 1 has a camera of no finite pose"),
        (cells([1 << 20, 1 << 20, 1 << 20], 1), "(1048576 × 1048576 × 1048576) are more than"),
    ] {
        let error = root(checkpoint::read(&file));
        assert!(matches!(&error, CheckpointError::Damaged(_)), "{error}");
        assert!(error.to_string().contains(says), "{error}");
    }
}

#[test]
fn foreign_files_are_not_checkpoints() {
    let ply = data("splats/inria-ply/rtgs-16.ply");
    let error = checkpoint::load(&ply).map(|_| ()).expect_err("a PLY is not a checkpoint");
    let message = error.to_string();
    assert!(message.starts_with(&ply.display().to_string()), "names the file: {message}");
    assert!(message.contains("not a splatforge checkpoint"), "{message}");
    assert!(matches!(error.root(), CheckpointError::NotACheckpoint));

    let mut rng = Rng(SplitMix64::new(9));
    for len in [9, 100, 1000, 100_000] {
        let random: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let error = root(checkpoint::read(&random));
        assert!(error.to_string().contains("not a splatforge checkpoint"), "{error}");
    }
    // A file that only starts like one: a cut-short checkpoint, not a foreign file.
    assert!(matches!(root(checkpoint::read(b"SPLAT")), CheckpointError::Truncated { .. }));
    assert!(matches!(root(checkpoint::read(b"")), CheckpointError::Truncated { .. }));
}

#[test]
fn load_names_the_missing_file() {
    let dir = TempDir::new("checkpoint-missing");
    let path = dir.path().join("nothing.ckpt");
    let message = checkpoint::load(&path).map(|_| ()).expect_err("no file").to_string();
    assert!(message.starts_with(&path.display().to_string()), "{message}");
    assert!(message.contains("cannot read"), "{message}");
}

#[test]
fn load_refuses_what_read_refuses() {
    // `load` streams the file into its arrays and hands anything unexpected to `read`: the
    // same errors, with the file named.
    let dir = TempDir::new("checkpoint-load-damaged");
    let path = dir.path().join("damaged.ckpt");
    let bytes = to_bytes(&random_checkpoint(&mut Rng(SplitMix64::new(15)), 300, 2, true));
    let mut rng = Rng(SplitMix64::new(16));
    let mut cases: Vec<Vec<u8>> =
        (0..10).map(|k| bytes[..bytes.len() * k / 10 + 3].to_vec()).collect();
    for _ in 0..40 {
        let mut damaged = bytes.clone();
        damaged[rng.below(bytes.len() as u64) as usize] ^= 1 << rng.below(8);
        cases.push(damaged);
    }
    let mut extended = bytes.clone();
    extended.extend_from_slice(b"appended");
    cases.push(extended);
    for case in cases {
        let expected = root(checkpoint::read(&case)).to_string();
        std::fs::write(&path, &case).expect("write");
        let error = checkpoint::load(&path).map(|_| ()).expect_err("damaged");
        assert_eq!(error.root().to_string(), expected);
        assert_eq!(error.to_string(), format!("{}: {expected}", path.display()));
    }
}

fn partial_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "partial"))
        .collect()
}

#[test]
fn save_and_load() {
    let dir = TempDir::new("checkpoint-save");
    let path = dir.path().join("run.ckpt");
    let written = random_checkpoint(&mut Rng(SplitMix64::new(10)), 500, 3, true);
    checkpoint::save(&path, &written).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(std::fs::read(&path).expect("read"), to_bytes(&written));
    assert!(partial_files(dir.path()).is_empty());
    let read = checkpoint::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_bit_exact(&read, &written);

    // Saving again replaces the file.
    let second = random_checkpoint(&mut Rng(SplitMix64::new(11)), 20, 0, false);
    checkpoint::save(&path, &second).unwrap_or_else(|e| panic!("{e}"));
    assert_bit_exact(&checkpoint::load(&path).unwrap_or_else(|e| panic!("{e}")), &second);
    assert!(partial_files(dir.path()).is_empty());
}

#[test]
fn a_failed_save_leaves_the_old_file_or_none() {
    let dir = TempDir::new("checkpoint-atomic");
    let path = dir.path().join("run.ckpt");
    let old = random_checkpoint(&mut Rng(SplitMix64::new(12)), 100, 1, false);
    let new = random_checkpoint(&mut Rng(SplitMix64::new(13)), 100, 1, false);
    let new_bytes = to_bytes(&new);
    // A writer that fails half-way (a full disk, a GPU readback error).
    let failing = |out: &mut std::io::BufWriter<std::fs::File>| {
        use std::io::Write;
        out.write_all(&new_bytes[..new_bytes.len() / 2])
            .map_err(|e| CheckpointError::Io { action: "test".into(), cause: e })?;
        Err(CheckpointError::Unwritable("the disk is full (simulated)".into()))
    };

    // No file before: still none after, and no temporary file left.
    let error = checkpoint::write_atomically(&path, failing).expect_err("fails");
    assert!(error.to_string().starts_with(&path.display().to_string()), "{error}");
    assert!(!path.exists());
    assert!(partial_files(dir.path()).is_empty());

    // An old checkpoint: still complete after a failed save.
    checkpoint::save(&path, &old).unwrap_or_else(|e| panic!("{e}"));
    checkpoint::write_atomically(&path, failing).expect_err("fails");
    assert_bit_exact(&checkpoint::load(&path).unwrap_or_else(|e| panic!("{e}")), &old);
    assert!(partial_files(dir.path()).is_empty());

    // A writer that panics.
    let panicked = std::panic::catch_unwind(|| {
        checkpoint::write_atomically(&path, |out| {
            use std::io::Write;
            out.write_all(b"SPLATCKP").expect("write");
            panic!("simulated bug");
        })
    });
    assert!(panicked.is_err());
    assert_bit_exact(&checkpoint::load(&path).unwrap_or_else(|e| panic!("{e}")), &old);
    assert!(partial_files(dir.path()).is_empty());

    // Values that cannot be written fail before the file is touched.
    let mut bad = new.clone();
    bad.snapshot.splats.sh_rest.pop();
    let error = checkpoint::save(&path, &bad).expect_err("inconsistent splats");
    assert!(matches!(error.root(), CheckpointError::Unwritable(_)), "{error}");
    assert_bit_exact(&checkpoint::load(&path).unwrap_or_else(|e| panic!("{e}")), &old);
    assert!(partial_files(dir.path()).is_empty());

    // A folder that does not exist.
    let nowhere = dir.path().join("missing/run.ckpt");
    let error = checkpoint::save(&nowhere, &new).expect_err("no folder");
    assert!(error.to_string().starts_with(&nowhere.display().to_string()), "{error}");
}

#[test]
fn dataset_identity_follows_the_content() {
    let options = LoadOptions::default();
    let load = |path: &Path, options: &LoadOptions| {
        load_dataset(path, options).unwrap_or_else(|e| panic!("{e}"))
    };
    let tiny = dataset_path("tiny-per-frame-intrinsics");
    let first = dataset_identity(&load(&tiny, &options));
    let second = dataset_identity(&load(&tiny, &options));
    assert_eq!(first, second, "stable across loads");
    assert_eq!(first.views, 1);
    assert_eq!(first.path, tiny.display().to_string());

    // The same files elsewhere: same fingerprint, new path.
    let dir = TempDir::new("checkpoint-identity");
    let copy = dir.path().join("tiny");
    copy_dir(&tiny, &copy);
    let moved = dataset_identity(&load(&copy, &options));
    assert_eq!(moved.fingerprint, first.fingerprint);
    assert_ne!(moved.path, first.path);

    // Loaded at another resolution: other image sizes and intrinsics.
    let small = LoadOptions { max_resolution: 25, ..LoadOptions::default() };
    assert_ne!(dataset_identity(&load(&tiny, &small)).fingerprint, first.fingerprint);

    // Another dataset.
    let other = dataset_identity(&load(&dataset_path("maupertuis-colmap-txt"), &options));
    assert_ne!(other.fingerprint, first.fingerprint);
    assert_eq!(other.views, 4);
    // Another train / eval split of it.
    let split = LoadOptions { eval_every: 2, ..LoadOptions::default() };
    let resplit = dataset_identity(&load(&dataset_path("maupertuis-colmap-txt"), &split));
    assert_ne!(resplit.fingerprint, other.fingerprint);
}

/// Write and read speed for 1M splats of SH degree 3 with their Adam moments (about 720 MB),
/// beside plain `fs::write` + sync and `fs::read` of the same bytes on the same machine.
/// `cargo test -p splat-trainer --test it checkpoint:: -- --ignored --nocapture`
#[test]
#[ignore = "a benchmark: allocates about 3 GB"]
fn measure_checkpoint_speed_of_a_million_splats() {
    fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    }
    let n = 1_000_000;
    let written = random_checkpoint(&mut Rng(SplitMix64::new(14)), n, 3, false);
    let dir = TempDir::new("checkpoint-speed");
    let path = dir.path().join("big.ckpt");
    let plain = dir.path().join("plain.bin");
    let bytes = to_bytes(&written);
    let size = bytes.len();
    let rate = |seconds: f64| format!("{seconds:.3} s  {:5.0} MB/s", size as f64 / 1e6 / seconds);
    let runs = 3;

    let hash = best_of(runs, || {
        std::hint::black_box(checkpoint::checksum(&bytes));
    });
    let serialise = best_of(runs, || {
        checkpoint::write(&written, &mut std::io::sink()).unwrap_or_else(|e| panic!("{e}"));
    });
    let parse = best_of(runs, || {
        drop(std::hint::black_box(checkpoint::read(&bytes).unwrap_or_else(|e| panic!("{e}"))));
    });
    let save = best_of(runs, || {
        checkpoint::save(&path, &written).unwrap_or_else(|e| panic!("{e}"));
    });
    let plain_write = best_of(runs, || {
        let mut file = std::fs::File::create(&plain).expect("create");
        std::io::Write::write_all(&mut file, &bytes).expect("write");
        file.sync_all().expect("sync");
    });
    drop(bytes);
    let load = best_of(runs, || {
        drop(std::hint::black_box(checkpoint::load(&path).unwrap_or_else(|e| panic!("{e}"))));
    });
    let plain_read = best_of(runs, || {
        drop(std::hint::black_box(std::fs::read(&plain).expect("read")));
    });
    assert_bit_exact(&checkpoint::load(&path).unwrap_or_else(|e| panic!("{e}")), &written);

    eprintln!(
        "checkpoint of {n} splats, SH 3, 8 moment pairs: {:.1} MB; best of {runs}",
        size as f64 / 1e6
    );
    eprintln!("  XXH64 of the bytes in memory:     {}", rate(hash));
    eprintln!("  write to io::sink (hash only):    {}", rate(serialise));
    eprintln!("  read from bytes in memory:        {}", rate(parse));
    eprintln!("  save (temp file, fsync, rename):  {}", rate(save));
    eprintln!("  plain File write_all + sync_all:  {}", rate(plain_write));
    eprintln!("  load (streamed into the arrays):  {}", rate(load));
    eprintln!("  plain fs::read of the same bytes: {}", rate(plain_read));
}

/// Checkpoints written by the build before the settings had one home (commit d9c9691; the
/// commands are in `trainer/tests/fixtures/checkpoints/README.md`) load with the settings
/// they were written with, and write again to the same bytes: the settings' own serde is the
/// format those files are in.
#[test]
fn checkpoints_of_earlier_builds_load_and_rewrite_to_the_same_bytes() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checkpoints");
    let load = |name: &str| {
        let bytes = std::fs::read(fixtures.join(name)).expect("the fixture is in the repository");
        let checkpoint = checkpoint::read(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(to_bytes(&checkpoint) == bytes, "{name} writes again to other bytes");
        let options = checkpoint.dataset.options.clone().expect("kept since before d9c9691");
        (checkpoint.snapshot.config, options)
    };

    let (config, options) = load("compact-f16-progressive-appearance.ckpt");
    // Compact as it was then: the signed statistic over 0.0008.
    let then = CompactConfig::default();
    let refine = DefaultConfig { grad_threshold: 0.0008, ..then.refine.clone() };
    let then = CompactConfig { refine, growth: Growth::Signed, ..then };
    assert_eq!(config.strategy, Strategy::Compact(then));
    assert_eq!(config.sh_precision, ShPrecision::F16);
    assert_eq!(config.progressive, Progressive::Stages { half_from: 0, full_from: 1 });
    assert_eq!(config.transparency, Transparency::AlphaLoss(0.5));
    assert_eq!(config.appearance, appearance::Compensation::On);
    assert_eq!((config.steps, config.sh_degree, config.seed, config.eval_every), (6, 1, 3, 0));
    assert_eq!(config.learning_rates, LearningRates::default());
    assert_eq!(config.background.map(f32::to_bits), [1.0_f32, 0.5, 0.0].map(f32::to_bits));
    assert_eq!(
        options,
        LoadOptions { max_resolution: 40, background: [1.0, 0.5, 0.0], ..LoadOptions::default() }
    );

    let (config, options) = load("mcmc-alpha-as-mask.ckpt");
    assert_eq!(config.strategy, Strategy::Mcmc(McmcConfig { cap: 500, ..McmcConfig::default() }));
    assert_eq!(
        (config.max_splats, config.sh_precision),
        (splat_trainer::config::SplatBudget::Count(500), ShPrecision::F32)
    );
    assert_eq!(config.transparency, Transparency::RandomBackground);
    assert_eq!(config.appearance, appearance::Compensation::Off);
    assert_eq!(
        options,
        LoadOptions { max_resolution: 24, alpha_as_mask: true, ..LoadOptions::default() }
    );

    let (config, options) = load("3dgs-composite.ckpt");
    assert_eq!(config.strategy, Strategy::Default(DefaultConfig::default()));
    assert_eq!((config.sh_degree, config.transparency), (0, Transparency::Composite));
    assert_eq!(config.progressive, Progressive::Off);
    assert_eq!(options.max_resolution, 32);
}
