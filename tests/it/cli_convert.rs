//! `splatforge convert IN OUT`: every format we read to every format we write; a written
//! `.spz` matches the one another tool (PlayCanvas) wrote of the same scene; a SOG we write
//! reads back in our reader and in PlayCanvas's splat-transform, and theirs in ours (where
//! splat-transform is installed: `SPLAT_TRANSFORM=path/to/splat-transform` or on the `PATH`;
//! TESTING.md).
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::path::Path;
use std::process::Command;

use splat_test_support::data;
use splat_trainer::formats::{Loaded, Splats, load_file, spz};

use crate::helpers::error_lines;

fn convert(input: &Path, output: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_splatforge"))
        .arg("convert")
        .args([input, output])
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn splats(path: &Path) -> Splats {
    match load_file(path).unwrap() {
        Loaded::Splats { splats, .. } => splats,
        Loaded::Points(_) => panic!("{}: points", path.display()),
    }
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// PlayCanvas ships the biker scene as a compressed PLY and as an SPZ it wrote from the
/// same splats. Ours, written from the compressed PLY, decodes to the same scene within the
/// format's quantisation.
#[test]
fn our_spz_of_a_scene_matches_another_writers() {
    let dir = std::env::temp_dir().join(format!("splatforge-convert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ours = dir.join("biker.spz");
    let (ok, stderr) = convert(&data("splats/compressed-ply/biker.compressed.ply"), &ours);
    assert!(ok, "{stderr}");
    let theirs = spz::read(&std::fs::read(data("splats/spz/biker.spz")).unwrap()).unwrap();
    let ours = splats(&ours);
    assert_eq!(ours.len(), theirs.len());
    assert_eq!(ours.sh_degree, theirs.sh_degree);
    // Positions to one step of SPZ's 12 fraction bits; every other value to the bit.
    assert!(
        largest_difference(ours.means.as_flattened(), theirs.means.as_flattened()) <= 1.0 / 4096.0
    );
    assert_eq!(ours.log_scales, theirs.log_scales);
    assert_eq!(ours.opacity_logits, theirs.opacity_logits);
    assert_eq!(ours.sh_dc, theirs.sh_dc);
    assert_eq!(ours.sh_rest, theirs.sh_rest);
    // A rotation and its negation are the same.
    for (a, b) in ours.rotations.iter().zip(&theirs.rotations) {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(dot.abs() > 0.999_99, "{a:?} {b:?}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Each format we read, to each we write: the same splats come back, within what the
/// written format keeps (SPZ quantises, `.splat` keeps 8-bit colour and no SH rest).
#[test]
fn every_format_we_read_converts_to_every_format_we_write() {
    let dir = std::env::temp_dir().join(format!("splatforge-convert-all-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for input in [
        "splats/inria-ply/rtgs-16.ply",
        "splats/compressed-ply/test-64-with-sh.compressed.ply",
        "splats/splat/bob_10k.splat",
        "splats/spz/biker.spz",
    ] {
        let input = data(input);
        let original = splats(&input);
        for extension in ["ply", "spz", "splat"] {
            let output = dir.join(format!("out.{extension}"));
            let (ok, stderr) = convert(&input, &output);
            assert!(ok, "{}: {stderr}", input.display());
            let written = splats(&output);
            assert_eq!(written.len(), original.len(), "{}", output.display());
            let degree = if extension == "splat" { 0 } else { original.sh_degree };
            assert_eq!(written.sh_degree, degree, "{}", output.display());
            // PLY and .splat store f32 positions; SPZ 24-bit fixed point with 12 fraction
            // bits, fewer for large scenes.
            let tolerance = if extension == "spz" {
                1e-3 * original.means.as_flattened().iter().fold(1.0, |m, v| v.abs().max(m))
            } else {
                0.0
            };
            let error =
                largest_difference(written.means.as_flattened(), original.means.as_flattened());
            assert!(
                error <= tolerance,
                "{} → {extension}: positions off by {error}",
                input.display()
            );
        }
    }
    // A format we do not write, and a point cloud, are one clear line each.
    let cloud = data("datasets/tiny-per-frame-intrinsics/init.ply");
    for (input, output, words) in [
        (
            data("splats/inria-ply/rtgs-16.ply"),
            dir.join("out.txt"),
            "write .ply, .spz, .splat, .sog",
        ),
        (cloud, dir.join("out.ply"), "a point cloud, not splats"),
    ] {
        let (ok, stderr) = convert(&input, &output);
        assert!(!ok);
        let lines = error_lines(&stderr);
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(words), "{stderr}");
    }
    std::fs::remove_dir_all(dir).ok();
}

fn convert_with(input: &Path, output: &Path, filters: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_splatforge"))
        .arg("convert")
        .args([input, output])
        .args(filters)
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `convert --crop-box … --min-opacity …` on a scene someone else trained: the file holds
/// exactly the splats whose centre is in the box and whose opacity reaches the floor, in their
/// order and bit for bit (checked here against the rule computed from the input); the same for
/// `--crop-sphere … --max-size …`; a filter that keeps nothing, and a malformed one, are one
/// line each and write nothing.
#[test]
fn convert_keeps_the_splats_in_the_crop_box_above_the_opacity_floor() {
    let dir = std::env::temp_dir().join(format!("splatforge-convert-crop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = data("splats/inria-ply/lod4-tile-489.ply");
    let original = splats(&input);
    // The middle half of the scene's extent on each axis, and its median opacity.
    let (lo, hi) = extent(&original);
    let (min, max, crop) = middle_half(&original);
    let opacity = |logit: f32| 1.0 / (1.0 + (-f64::from(logit)).exp());
    let mut opacities: Vec<f64> = original.opacity_logits.iter().map(|&l| opacity(l)).collect();
    opacities.sort_by(f64::total_cmp);
    let floor = opacities[opacities.len() / 2] as f32;
    let output = dir.join("cropped.ply");
    let (ok, stderr) =
        convert_with(&input, &output, &["--crop-box", &crop, "--min-opacity", &floor.to_string()]);
    assert!(ok, "{stderr}");

    let kept: Vec<usize> = (0..original.len())
        .filter(|&i| {
            let m = original.means[i];
            (0..3).all(|a| min[a] <= m[a] && m[a] <= max[a])
                && opacity(original.opacity_logits[i]) >= f64::from(floor)
        })
        .collect();
    assert!(!kept.is_empty() && kept.len() < original.len() / 2, "{} kept", kept.len());
    let rest = original.rest_per_splat();
    let mut expected = Splats::with_capacity(kept.len(), original.sh_degree);
    for &i in &kept {
        expected.means.push(original.means[i]);
        expected.log_scales.push(original.log_scales[i]);
        expected.rotations.push(original.rotations[i]);
        expected.opacity_logits.push(original.opacity_logits[i]);
        expected.sh_dc.push(original.sh_dc[i]);
        expected.sh_rest.extend_from_slice(&original.sh_rest[i * rest..(i + 1) * rest]);
    }
    assert!(splats(&output) == expected, "the written splats are not the kept ones, bit for bit");
    assert!(stderr.contains(&format!("kept {} of {} splats", kept.len(), original.len())));

    // A sphere around the box's centre and a size limit: what the rule keeps, in order.
    let center: Vec<f32> = (0..3).map(|a| 0.5 * (lo[a] + hi[a])).collect();
    let radius = 0.3 * (0..3).map(|a| hi[a] - lo[a]).fold(0.0, f32::max);
    let size = |i: usize| {
        let s = original.log_scales[i];
        f64::from(s[0].max(s[1]).max(s[2])).exp()
    };
    let mut sizes: Vec<f64> = (0..original.len()).map(size).collect();
    sizes.sort_by(f64::total_cmp);
    let limit = sizes[sizes.len() * 3 / 4] as f32;
    let sphere = format!("{},{},{},{radius}", center[0], center[1], center[2]);
    let output = dir.join("sphere.ply");
    let (ok, stderr) = convert_with(
        &input,
        &output,
        &["--crop-sphere", &sphere, "--max-size", &limit.to_string()],
    );
    assert!(ok, "{stderr}");
    let kept: Vec<[f32; 3]> = (0..original.len())
        .filter(|&i| {
            let m = original.means[i];
            let d2: f64 = (0..3).map(|a| (f64::from(m[a]) - f64::from(center[a])).powi(2)).sum();
            d2 <= f64::from(radius).powi(2) && size(i) <= f64::from(limit)
        })
        .map(|i| original.means[i])
        .collect();
    assert!(!kept.is_empty() && kept.len() < original.len() / 2, "{} kept", kept.len());
    assert_eq!(splats(&output).means, kept);
    assert!(stderr.contains("outside the sphere") && stderr.contains("larger than"), "{stderr}");

    // --drop-floaters: the splats in the dense scene's cells, most of them.
    let output = dir.join("dense.ply");
    let (ok, stderr) = convert_with(&input, &output, &["--drop-floaters"]);
    assert!(ok, "{stderr}");
    let cells = splat_trainer::formats::filter::scene_cells(&original).expect("the cells");
    let kept: Vec<[f32; 3]> =
        original.means.iter().copied().filter(|m| cells.contains(*m)).collect();
    assert!(kept.len() > original.len() * 9 / 10, "{} of {}", kept.len(), original.len());
    assert_eq!(splats(&output).means, kept);
    assert!(stderr.contains("likely floaters apart from the dense scene"), "{stderr}");

    let nothing = dir.join("nothing.ply");
    for (filters, words) in [
        (vec!["--crop-box", "1e6,1e6,1e6,2e6,2e6,2e6"], "no splat of"),
        (vec!["--crop-sphere", "0,0,0"], "four numbers"),
        (vec!["--crop-sphere", "0,0,0,-1"], "radius (-1) is not above 0"),
        (vec!["--max-size", "0"], "a number above 0"),
        (vec!["--crop-box", "0,0,0,1,1"], "six numbers"),
        (vec!["--crop-box", "0,0,1,1,1,0"], "zmin (1) is above its zmax (0)"),
        (vec!["--crop-box", "0,0,0,1,1,1", "--crop-box-turn", "0,1"], "three angles"),
        (vec!["--crop-box-turn", "0,0,1"], "--crop-box"),
        (vec!["--min-opacity", "1.5"], "a number from 0 to 1"),
    ] {
        let (ok, stderr) = convert_with(&input, &nothing, &filters);
        assert!(!ok, "{filters:?}");
        let lines = error_lines(&stderr);
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(words), "{stderr}");
        assert!(!nothing.exists(), "{filters:?} wrote a file");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// `convert --crop-box … --crop-box-turn x,y,z`: the box turned about its centre keeps what
/// the CPU rule (`CropBox::contains`, tested in f64) keeps, in order, and says the turn.
#[test]
fn convert_turns_the_crop_box_about_its_centre() {
    let dir = std::env::temp_dir().join(format!("splatforge-convert-turn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = data("splats/inria-ply/lod4-tile-489.ply");
    let original = splats(&input);
    let (min, max, crop) = middle_half(&original);
    let output = dir.join("turned.ply");
    let (ok, stderr) =
        convert_with(&input, &output, &["--crop-box", &crop, "--crop-box-turn", "25,-40,70"]);
    assert!(ok, "{stderr}");
    let turned = splat_trainer::formats::filter::CropBox {
        turn: [25.0, -40.0, 70.0],
        ..crop.parse().unwrap()
    };
    let kept: Vec<[f32; 3]> =
        original.means.iter().copied().filter(|m| turned.contains(*m)).collect();
    let aligned =
        original.means.iter().filter(|m| (0..3).all(|a| min[a] <= m[a] && m[a] <= max[a]));
    assert!(!kept.is_empty() && kept.len() != aligned.count(), "{} kept", kept.len());
    assert_eq!(splats(&output).means, kept);
    assert!(stderr.contains("turned 25°, -40°, 70°"), "{stderr}");
    std::fs::remove_dir_all(dir).ok();
}

/// The least and greatest centre of `splats` on each axis.
fn extent(splats: &Splats) -> ([f32; 3], [f32; 3]) {
    let (mut lo, mut hi) = ([f32::INFINITY; 3], [f32::NEG_INFINITY; 3]);
    for m in &splats.means {
        for axis in 0..3 {
            lo[axis] = lo[axis].min(m[axis]);
            hi[axis] = hi[axis].max(m[axis]);
        }
    }
    (lo, hi)
}

/// The middle half of the centres' extent on each axis: its corners, and as `--crop-box`
/// takes it.
fn middle_half(splats: &Splats) -> ([f32; 3], [f32; 3], String) {
    let (lo, hi) = extent(splats);
    let min: [f32; 3] = std::array::from_fn(|a| lo[a] + 0.25 * (hi[a] - lo[a]));
    let max: [f32; 3] = std::array::from_fn(|a| lo[a] + 0.75 * (hi[a] - lo[a]));
    let crop = format!("{},{},{},{},{},{}", min[0], min[1], min[2], max[0], max[1], max[2]);
    (min, max, crop)
}

/// The splat of `b` nearest each splat of `a` (by centre): SOG keeps its splats in Morton
/// order, not the order written.
fn nearest_in(a: &Splats, b: &Splats) -> Vec<usize> {
    a.means
        .iter()
        .map(|p| {
            let distance = |q: &[f32; 3]| (0..3).map(|k| (p[k] - q[k]).powi(2)).sum::<f32>();
            (0..b.len())
                .min_by(|&i, &j| distance(&b.means[i]).total_cmp(&distance(&b.means[j])))
                .unwrap()
        })
        .collect()
}

/// Every attribute of two decodes of the same SOG agree (f32 rounding of the same math).
fn assert_same_decode(ours: &Splats, theirs: &Splats, what: &str) {
    assert_eq!((ours.len(), ours.sh_degree), (theirs.len(), theirs.sh_degree), "{what}");
    let close = |a: &[f32], b: &[f32], name: &str| {
        let error =
            a.iter().zip(b).map(|(x, y)| (x - y).abs() / x.abs().max(1.0)).fold(0.0, f32::max);
        assert!(error < 1e-5, "{what}: {name} differ by {error}");
    };
    close(ours.means.as_flattened(), theirs.means.as_flattened(), "centres");
    close(ours.log_scales.as_flattened(), theirs.log_scales.as_flattened(), "scales");
    close(ours.rotations.as_flattened(), theirs.rotations.as_flattened(), "rotations");
    close(ours.sh_dc.as_flattened(), theirs.sh_dc.as_flattened(), "colours");
    close(&ours.sh_rest, &theirs.sh_rest, "SH");
    let opacity = |s: &Splats| {
        s.opacity_logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect::<Vec<f32>>()
    };
    close(&opacity(ours), &opacity(theirs), "opacities");
}

/// splat-transform's command, if installed.
fn splat_transform() -> Option<std::path::PathBuf> {
    let path =
        std::env::var_os("SPLAT_TRANSFORM").map_or_else(|| "splat-transform".into(), Into::into);
    Command::new(&path).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| path)
}

#[test]
fn a_sog_we_write_reads_back_here_and_in_splat_transform() {
    let dir = std::env::temp_dir().join(format!("splatforge-convert-sog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Someone else's trained scene with SH degree 3: the palette is exercised.
    let input = data("splats/inria-ply/fruit-drops-extra-prop.ply");
    let original = splats(&input);
    let bundle = dir.join("fruit.sog");
    let (ok, stderr) = convert(&input, &bundle);
    assert!(ok, "{stderr}");
    let ours = splats(&bundle);
    assert_eq!((ours.len(), ours.sh_degree), (original.len(), 3));
    // Every centre within SOG's 16 bits of the scene's (log-transformed) extent.
    let extent = original.means.as_flattened().iter().fold(1.0_f32, |m, v| v.abs().max(m));
    for (i, &j) in nearest_in(&original, &ours).iter().enumerate() {
        let error =
            (0..3).map(|k| (original.means[i][k] - ours.means[j][k]).abs()).fold(0.0, f32::max);
        assert!(error <= 1e-4 * extent, "splat {i}: centre off by {error}");
    }
    // The unbundled form: the same files beside meta.json, read as the bundle is (a small
    // scene: the palette's k-means is the slow part, and it is the same code).
    let small = data("splats/inria-ply/rtgs-16.ply");
    let meta = dir.join("unbundled").join("meta.json");
    for output in [&meta, &dir.join("small.sog")] {
        let (ok, stderr) = convert(&small, output);
        assert!(ok, "{stderr}");
    }
    assert_eq!(splats(&meta), splats(&dir.join("small.sog")));
    assert!(dir.join("unbundled/shN_labels.webp").is_file());
    // And back to a PLY.
    let (ok, stderr) = convert(&bundle, &dir.join("back.ply"));
    assert!(ok, "{stderr}");
    assert_eq!(splats(&dir.join("back.ply")), ours);

    let Some(tool) = splat_transform() else {
        eprintln!(
            "a_sog_we_write_reads_back_here_and_in_splat_transform: splat-transform is not installed: our reader only"
        );
        std::fs::remove_dir_all(dir).ok();
        return;
    };
    let run = |args: &[&Path]| {
        let out = Command::new(&tool).args(["-w", "-g", "cpu"]).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "splat-transform {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Ours, read by splat-transform: the same splats our reader gives.
    run(&[&bundle, &dir.join("ours-by-them.ply")]);
    assert_same_decode(&ours, &splats(&dir.join("ours-by-them.ply")), "our SOG");
    // Theirs, read by us: the same splats splat-transform gives.
    run(&[&input, &dir.join("theirs.sog")]);
    run(&[&dir.join("theirs.sog"), &dir.join("theirs-by-them.ply")]);
    assert_same_decode(
        &splats(&dir.join("theirs.sog")),
        &splats(&dir.join("theirs-by-them.ply")),
        "their SOG",
    );
    std::fs::remove_dir_all(dir).ok();
}

/// The up of a dataset's cameras, as `--level-from` finds it.
fn dataset_up(name: &str) -> glam::Vec3 {
    let options = splat_trainer::dataset::LoadOptions {
        max_resolution: 16,
        ..splat_trainer::dataset::LoadOptions::default()
    };
    let data =
        splat_trainer::dataset::load_dataset(&data(&format!("datasets/{name}")), &options).unwrap();
    let cameras: Vec<_> = data.views().map(|v| v.camera).collect();
    splat_trainer::render::view_controller::scene_up(&cameras)
}

#[test]
fn convert_levels_a_tilted_capture() {
    let dir = std::env::temp_dir().join(format!("splatforge-convert-level-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = data("splats/inria-ply/rtgs-16.ply");
    let original = splats(&input);
    let close = |a: &[f32; 3], b: [f32; 3]| {
        (0..3).all(|k| (a[k] - b[k]).abs() <= 1e-5 * a[k].abs().max(1.0))
    };

    // Stated: +z up (Blender's world) turns to −y: (x, y, z) → (x, −z, y).
    let (ok, stderr) = convert_with(&input, &dir.join("z-up.ply"), &["--up", "0,0,1"]);
    assert!(ok, "{stderr}");
    let turned = splats(&dir.join("z-up.ply"));
    for (a, b) in original.means.iter().zip(&turned.means) {
        assert!(close(b, [a[0], -a[2], a[1]]), "{a:?} → {b:?}");
    }

    // From the cameras: lego's (Blender, +z up) within 7° of +z; desk-statue's COLMAP model
    // tilted more than 45° from −y. Levelling by them turns every centre by the rotation taking
    // that up to −y.
    assert!(dataset_up("lego-blender").angle_between(glam::Vec3::Z).to_degrees() < 7.0);
    let up = dataset_up("desk-statue-colmap");
    assert!(up.angle_between(glam::Vec3::NEG_Y).to_degrees() > 45.0, "{up}");
    let (ok, stderr) = convert_with(
        &input,
        &dir.join("statue.ply"),
        &["--level-from", data("datasets/desk-statue-colmap").to_str().unwrap()],
    );
    assert!(ok && stderr.contains("levelled: up"), "{stderr}");
    let level = glam::Quat::from_rotation_arc(up.normalize(), glam::Vec3::NEG_Y);
    for (a, b) in original.means.iter().zip(&splats(&dir.join("statue.ply")).means) {
        let expected = (level * glam::Vec3::from(*a)).to_array();
        assert!(
            (0..3).all(|k| (b[k] - expected[k]).abs() < 1e-4 * a[k].abs().max(1.0)),
            "{a:?} → {b:?}, not {expected:?}"
        );
    }

    // A crop is in the scene's own frame, levelled after (as the window's exports): with
    // --up, the splats --crop-box keeps of the scene as it was, turned.
    let (ok, stderr) = convert_with(
        &input,
        &dir.join("cropped.ply"),
        &["--up", "0,0,1", "--crop-box=-100,-100,-100,100,100,0"],
    );
    assert!(ok, "{stderr}");
    let kept: Vec<[f32; 3]> = original.means.iter().filter(|m| m[2] <= 0.0).copied().collect();
    let cropped = splats(&dir.join("cropped.ply"));
    assert!(
        !kept.is_empty() && kept.len() < original.len(),
        "{} of {}",
        kept.len(),
        original.len()
    );
    assert_eq!(cropped.len(), kept.len());
    for (a, b) in kept.iter().zip(&cropped.means) {
        assert!(close(b, [a[0], -a[2], a[1]]), "{a:?} → {b:?}");
    }

    // A zero direction, or one that is not three numbers, is one line, and nothing is written.
    let (ok, stderr) = convert_with(&input, &dir.join("bad.ply"), &["--up", "0,-1,oops"]);
    assert!(!ok && error_lines(&stderr).len() == 1 && stderr.contains("three numbers"), "{stderr}");
    let (ok, stderr) = convert_with(&input, &dir.join("bad.ply"), &["--up", "0,0,0"]);
    assert!(!ok && error_lines(&stderr).len() == 1 && stderr.contains("not all zero"), "{stderr}");
    assert!(!dir.join("bad.ply").exists());
    std::fs::remove_dir_all(dir).ok();
}
