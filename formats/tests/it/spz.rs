//! SPZ reading and writing against real files, round trips, the PLY ↔ SPZ axis flip, and
//! malformed input.

// Tests: unwrap on fixtures is fine, and exact float comparisons are deliberate.
#![allow(clippy::unwrap_used, clippy::float_cmp)]

use std::io::{Read, Write};

use splat_formats::random::SplitMix64;
use splat_formats::{SH_C0, Splats, compressed_ply, sh_coeffs_for_degree, spz};
use splat_test_support::data;

fn load(path: &str) -> Vec<u8> {
    std::fs::read(data(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn err(bytes: &[u8]) -> String {
    match spz::read(bytes) {
        Ok(s) => panic!("expected an error, read {} splats", s.len()),
        Err(e) => e.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Quantisation steps of SPZ, from the format (see the module docs of `spz`).

/// Positions: 24-bit fixed point with 12 fraction bits, rounded: half of 2^-12.
const POSITION_TOL: f32 = 0.5 / 4096.0 + 1e-6;
/// Log-scales: steps of 1/16, rounded: 1/32.
const LOG_SCALE_TOL: f32 = 1.0 / 32.0 + 1e-5;
/// Alpha: sigmoid(opacity) in steps of 1/255, rounded.
const ALPHA_TOL: f32 = 0.5 / 255.0 + 1e-6;
/// `f_dc`: steps of 1/(0.15 · 255), rounded.
const DC_TOL: f32 = 0.5 / (0.15 * 255.0) + 1e-5;
/// SH degree 1: rounded to 1/128, then to buckets of 8/128 (5 bits): (0.5 + 4)/128.
const SH1_TOL: f32 = 4.5 / 128.0 + 1e-6;
/// SH degree 2 and 3: buckets of 16/128 (4 bits): (0.5 + 8)/128.
const SH_REST_TOL: f32 = 8.5 / 128.0 + 1e-6;
/// Rotations, v3+ ("smallest three"): each stored component within √½/511/2 ≈ 7e-4, so
/// the quaternions' 1 − |dot| is below 1e-5.
const ROTATION_TOL: f32 = 1e-5;
/// Rotations, v2: x, y, z within 1/255 each, and w = √(1 − |xyz|²) loses much more when w
/// is small (δw ≈ √(2δ) ≈ 0.09), so 1 − |dot| can reach about 0.005.
const ROTATION_V2_TOL: f32 = 0.01;

/// A random scene within the ranges SPZ stores without clamping.
fn random_scene(n: usize, sh_degree: u32, seed: u32) -> Splats {
    let mut rng = SplitMix64::new(u64::from(seed));
    let mut s = Splats::with_capacity(n, sh_degree);
    let rest = 3 * (sh_coeffs_for_degree(sh_degree) - 1);
    for _ in 0..n {
        s.means.push([(); 3].map(|()| rng.range(-100.0, 100.0)));
        s.log_scales.push([(); 3].map(|()| rng.range(-9.0, 5.0)));
        // Unnormalised on purpose; a few with a negative w.
        s.rotations.push([(); 4].map(|()| rng.range(-2.0, 2.0)));
        s.opacity_logits.push(rng.range(-6.0, 6.0));
        s.sh_dc.push([(); 3].map(|()| rng.range(-3.0, 3.0)));
        s.sh_rest.extend((0..rest).map(|_| rng.range(-0.95, 0.95)));
    }
    s
}

fn normalized(q: [f32; 4]) -> [f32; 4] {
    let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    q.map(|v| v / n)
}

/// 1 − |cos| of the angle between two quaternions (0 for the same rotation).
fn rotation_gap(a: [f32; 4], b: [f32; 4]) -> f32 {
    let (a, b) = (normalized(a), normalized(b));
    1.0 - a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>().abs()
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Checks `back` against `orig` within SPZ's quantisation; `rotation_tol` depends on the
/// version.
fn assert_close(orig: &Splats, back: &Splats, rotation_tol: f32) {
    assert_eq!(back.len(), orig.len());
    assert_eq!(back.sh_degree, orig.sh_degree);
    for i in 0..orig.len() {
        for a in 0..3 {
            assert!(
                (orig.means[i][a] - back.means[i][a]).abs() <= POSITION_TOL,
                "splat {i} position"
            );
            assert!(
                (orig.log_scales[i][a] - back.log_scales[i][a]).abs() <= LOG_SCALE_TOL,
                "splat {i} scale"
            );
            assert!((orig.sh_dc[i][a] - back.sh_dc[i][a]).abs() <= DC_TOL, "splat {i} colour");
        }
        let gap = rotation_gap(orig.rotations[i], back.rotations[i]);
        assert!(
            gap <= rotation_tol,
            "splat {i} rotation {:?} vs {:?}: {gap}",
            orig.rotations[i],
            back.rotations[i]
        );
        let alpha = (sigmoid(orig.opacity_logits[i]) - sigmoid(back.opacity_logits[i])).abs();
        assert!(alpha <= ALPHA_TOL, "splat {i} alpha off by {alpha}");
    }
    let per_channel = sh_coeffs_for_degree(orig.sh_degree) - 1;
    for (j, (a, b)) in orig.sh_rest.iter().zip(&back.sh_rest).enumerate() {
        let tol = if j % per_channel < 3 { SH1_TOL } else { SH_REST_TOL };
        assert!((a - b).abs() <= tol, "SH value {j}: {a} vs {b}");
    }
}

// ---------------------------------------------------------------------------------------------
// Real files.

#[test]
fn biker_v4_loads() {
    let s = spz::read(&load("splats/spz/biker.spz")).unwrap();
    assert_eq!(s.len(), 152_746);
    assert_eq!(s.sh_degree, 0);
}

#[test]
fn minimal_files_load() {
    for name in ["minimal-v2", "minimal-v3", "minimal-v4", "minimal-raw"] {
        let s = spz::read(&load(&format!("splats/spz/{name}.spz")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.len(), 4, "{name}");
        assert_eq!(s.sh_degree, 0, "{name}");
    }
}

/// The four minimal files describe the same 2×2 grid of splats (x, z ∈ {−1, 0}, y = 0,
/// σ = 0.1, alpha 0.9, identity rotation). v3 and v4 were written by the reference library
/// from PLY axes and agree exactly. `minimal-raw` is the hand-made, un-gzipped v2 stream that
/// `minimal-v2` gzips, so those two agree exactly too. Between the pairs, everything agrees
/// within the SPZ steps (scales: same byte; alpha: same byte; positions: 12 vs 8 fraction
/// bits, both exact on this grid; rotation: v2's 3-byte encoding puts 0 at 128/127.5 − 1 ≈
/// 0.004) *except* two things the hand-made generator did not do as the format says: it
/// wrote PLY-axis positions without the y/z flip to SPZ axes (so z comes back mirrored), and
/// it wrote colours as plain 8-bit rgb instead of `f_dc` · 0.15 · 255 + 127.5.
#[test]
fn minimal_files_agree() {
    let read = |name: &str| spz::read(&load(&format!("splats/spz/minimal-{name}.spz"))).unwrap();
    let (v2, v3, v4, raw) = (read("v2"), read("v3"), read("v4"), read("raw"));
    assert_eq!(v3, v4);
    assert_eq!(v2, raw);

    let grid = [[-1.0, 0.0, -1.0], [0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]];
    for (i, expected) in grid.iter().enumerate() {
        for (a, e) in expected.iter().enumerate() {
            assert!((v3.means[i][a] - e).abs() <= POSITION_TOL, "v3 splat {i}");
            assert!((v3.log_scales[i][a] - 0.1f32.ln()).abs() <= LOG_SCALE_TOL);
            assert_eq!(v2.log_scales[i][a], v3.log_scales[i][a]);
        }
        // The hand-made v2: x and y as in v3, z mirrored.
        assert_eq!(v2.means[i][0], v3.means[i][0]);
        assert_eq!(v2.means[i][1].abs(), 0.0);
        assert_eq!(v2.means[i][2], -v3.means[i][2]);
        assert!(rotation_gap(v3.rotations[i], [1.0, 0.0, 0.0, 0.0]) <= ROTATION_TOL);
        assert!(rotation_gap(v2.rotations[i], [1.0, 0.0, 0.0, 0.0]) <= ROTATION_V2_TOL);
        assert!((sigmoid(v3.opacity_logits[i]) - 0.9).abs() <= ALPHA_TOL);
        assert_eq!(v2.opacity_logits[i], v3.opacity_logits[i]);
    }
    // Colours: v3 holds rendered colours 1/3 and 2/3 (0.5 + SH_C0 · f_dc); the v2 bytes 85
    // and 170 decode by the spec to f_dc = (85/255 − 0.5)/0.15 = −1.111.
    let rendered = |dc: f32| 0.5 + SH_C0 * dc;
    assert!((rendered(v3.sh_dc[0][0]) - 1.0 / 3.0).abs() < 0.005);
    assert!((rendered(v3.sh_dc[3][1]) - 2.0 / 3.0).abs() < 0.005);
    assert!((v2.sh_dc[0][0] - (85.0 / 255.0 - 0.5) / 0.15).abs() < 1e-5);
}

/// Checks per-splat values of the compressed PLY against SPZ. The compressed PLY quantises
/// each value per chunk of 256 splats between the chunk's bounds, on `bits` steps per axis;
/// its writer takes the bounds from the data, so each chunk's decoded min and max *are* its
/// bounds, and a value is within (max − min) / (2 · steps) of the original. The SPZ value is
/// within `spz_tol` of the original clamped to `spz_range` (what SPZ can hold), so the two
/// agree within the sum of both once the PLY value is clamped the same way.
fn assert_within_both_steps(
    what: &str,
    ply: &[[f32; 3]],
    spz: &[[f32; 3]],
    steps: [f32; 3],
    spz_tol: f32,
    spz_range: (f32, f32),
) {
    let mut worst = 0.0f32;
    for (chunk, (ply, spz)) in ply.chunks(256).zip(spz.chunks(256)).enumerate() {
        for axis in 0..3 {
            let lo = ply.iter().map(|m| m[axis]).fold(f32::INFINITY, f32::min);
            let hi = ply.iter().map(|m| m[axis]).fold(f32::NEG_INFINITY, f32::max);
            let float_slack = 1e-5 * hi.abs().max(lo.abs()).max(1.0);
            let bound = (hi - lo) / (2.0 * steps[axis]) + spz_tol + float_slack;
            for (p, s) in ply.iter().zip(spz) {
                let d = (p[axis].clamp(spz_range.0, spz_range.1) - s[axis]).abs();
                worst = worst.max(d / bound);
                assert!(
                    d <= bound,
                    "{what}, chunk {chunk} axis {axis}: {} vs {} (bound {bound})",
                    p[axis],
                    s[axis]
                );
            }
        }
    }
    println!("worst {what} difference: {worst:.2} of its bound");
}

/// biker.spz (SPZ axes on disk) and biker.compressed.ply (PLY axes) hold the same scene in
/// the same splat order; read, they must coincide splat by splat within the quantisation of
/// both formats.
#[test]
fn biker_spz_and_compressed_ply_are_the_same_scene_in_the_same_place() {
    let spz = spz::read(&load("splats/spz/biker.spz")).unwrap();
    let ply = compressed_ply::read(&load("splats/compressed-ply/biker.compressed.ply")).unwrap();
    assert_eq!(spz.len(), ply.len());

    // Positions: 11/10/11 bits in the compressed PLY, 2^-13 in SPZ. Without the y/z flip
    // this fails by metres, not by a fraction of a millimetre.
    assert_within_both_steps(
        "position",
        &ply.means,
        &spz.means,
        [2047.0, 1023.0, 2047.0],
        POSITION_TOL,
        (f32::MIN, f32::MAX),
    );
    // Log-scales: 11/10/11 bits per chunk, and 1/32 in SPZ, which holds −10..5.9375.
    let scale_range = (-10.0, 255.0 / 16.0 - 10.0);
    assert_within_both_steps(
        "log-scale",
        &ply.log_scales,
        &spz.log_scales,
        [2047.0, 1023.0, 2047.0],
        LOG_SCALE_TOL,
        scale_range,
    );
    // Colours (compared as rendered colour 0.5 + SH_C0 · f_dc): 8 bits per chunk, and
    // 1/(0.15 · 255) of f_dc in SPZ.
    let rendered =
        |s: &Splats| s.sh_dc.iter().map(|c| c.map(|v| 0.5 + SH_C0 * v)).collect::<Vec<_>>();
    // SPZ holds f_dc within ±127.5 / (0.15 · 255).
    let dc_limit = 127.5 / 38.25 * SH_C0;
    let colour_range = (0.5 - dc_limit, 0.5 + dc_limit);
    assert_within_both_steps(
        "colour",
        &rendered(&ply),
        &rendered(&spz),
        [255.0; 3],
        DC_TOL * SH_C0,
        colour_range,
    );

    // Rotations: each format keeps the three smaller components to about 7e-4 (half of
    // √½/511 for SPZ, half of √2/1023 for compressed PLY), so 1 − |dot| stays below ~1e-5;
    // 1e-4 leaves room for float error.
    let worst_rotation = spz
        .rotations
        .iter()
        .zip(&ply.rotations)
        .map(|(a, b)| rotation_gap(*a, *b))
        .fold(0.0, f32::max);
    assert!(worst_rotation < 1e-4, "rotations differ by {worst_rotation}");

    // Aggregates: the centroid agrees to well under a millimetre.
    let centroid = |s: &Splats| {
        let mut c = [0.0f64; 3];
        for m in &s.means {
            for a in 0..3 {
                c[a] += f64::from(m[a]) / s.len() as f64;
            }
        }
        c
    };
    let (a, b) = (centroid(&spz), centroid(&ply));
    for axis in 0..3 {
        assert!((a[axis] - b[axis]).abs() < 1e-4, "centroid {a:?} vs {b:?}");
    }

    // Opacity: both store sigmoid(opacity) in 8 bits; these files hold the same bytes.
    let alpha = spz
        .opacity_logits
        .iter()
        .zip(&ply.opacity_logits)
        .map(|(a, b)| (sigmoid(*a) - sigmoid(*b)).abs())
        .fold(0.0, f32::max);
    assert!(alpha <= 1.0 / 255.0 + 1e-6, "alpha differs by {alpha}");
}

// ---------------------------------------------------------------------------------------------
// Round trips.

#[test]
fn random_scenes_round_trip_for_every_degree_and_version() {
    for degree in 0..=3 {
        let scene = random_scene(300, degree, 0x1234_5678 + degree);
        for version in [2, 3, 4] {
            let bytes = spz::write_version(&scene, version).unwrap();
            let expected_magic: &[u8] = if version == 4 { b"NGSP" } else { &[0x1f, 0x8b] };
            assert!(bytes.starts_with(expected_magic), "version {version}");
            let back =
                spz::read(&bytes).unwrap_or_else(|e| panic!("degree {degree} v{version}: {e}"));
            let tol = if version == 2 { ROTATION_V2_TOL } else { ROTATION_TOL };
            assert_close(&scene, &back, tol);
        }
        assert_eq!(spz::write(&scene).unwrap(), spz::write_version(&scene, 4).unwrap());
    }
}

/// A second trip through SPZ changes nothing: decoded values sit on the quantisation grid.
#[test]
fn real_scene_round_trips() {
    let original = load("splats/spz/biker.spz");
    let first = spz::read(&original).unwrap();
    let written = spz::write(&first).unwrap();
    let second = spz::read(&written).unwrap();
    assert_eq!(first.len(), second.len());
    assert_eq!(first.means, second.means);
    assert_eq!(first.log_scales, second.log_scales);
    assert!(max_diff(&first.opacity_logits, &second.opacity_logits) < 1e-5);
    let dc = |s: &Splats| s.sh_dc.iter().flatten().copied().collect::<Vec<_>>();
    assert!(max_diff(&dc(&first), &dc(&second)) < 1e-5);
    let worst = first
        .rotations
        .iter()
        .zip(&second.rotations)
        .map(|(a, b)| rotation_gap(*a, *b))
        .fold(0.0, f32::max);
    assert!(worst <= ROTATION_TOL, "rotation {worst}");
    // zstd at the reference's level: about the size of the original.
    assert!(written.len() < original.len() * 11 / 10, "{} vs {}", written.len(), original.len());
}

/// A real degree-3 scene (compressed PLY) through SPZ: SH beyond SPZ's −1..1 range clamps.
#[test]
fn real_scene_with_sh_round_trips() {
    let scene = compressed_ply::read(&load("splats/compressed-ply/test-64-with-sh.compressed.ply"))
        .unwrap();
    let back = spz::read(&spz::write(&scene).unwrap()).unwrap();
    // What SPZ can hold: log-scales 0..255 / 16 − 10, f_dc ±127.5 / (0.15 · 255), SH −1..127/128.
    let mut clamped = scene.clone();
    for v in clamped.log_scales.iter_mut().flatten() {
        *v = v.clamp(-10.0, 255.0 / 16.0 - 10.0);
    }
    for v in clamped.sh_dc.iter_mut().flatten() {
        *v = v.clamp(-127.5 / 38.25, 127.5 / 38.25);
    }
    for v in &mut clamped.sh_rest {
        *v = v.clamp(-1.0, 127.0 / 128.0);
    }
    let below = scene.log_scales.iter().flatten().filter(|&&v| v < -10.0).count();
    println!("{below} log-scales below -10 clamp");
    assert_close(&clamped, &back, ROTATION_TOL);
}

// ---------------------------------------------------------------------------------------------
// Axes: SPZ is PLY turned 180° about x.

/// Real SH basis of 3DGS (degrees 0..3) at unit direction `d`, for one channel's 16
/// coefficients (DC first).
fn eval_sh(c: &[f32; 16], d: [f32; 3]) -> f32 {
    let [x, y, z] = d;
    let (xx, yy, zz) = (x * x, y * y, z * z);
    let c1 = 0.488_602_5;
    let c2 = [1.092_548_4, -1.092_548_4, 0.315_391_57, -1.092_548_4, 0.546_274_2];
    let c3 = [
        -0.590_043_6,
        2.890_611_4,
        -0.457_045_8,
        0.373_176_33,
        -0.457_045_8,
        1.445_305_7,
        -0.590_043_6,
    ];
    let basis = [
        SH_C0,
        -c1 * y,
        c1 * z,
        -c1 * x,
        c2[0] * x * y,
        c2[1] * y * z,
        c2[2] * (2.0 * zz - xx - yy),
        c2[3] * x * z,
        c2[4] * (xx - yy),
        c3[0] * y * (3.0 * xx - yy),
        c3[1] * x * y * z,
        c3[2] * y * (4.0 * zz - xx - yy),
        c3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
        c3[4] * x * (4.0 * zz - xx - yy),
        c3[5] * z * (xx - yy),
        c3[6] * x * (xx - 3.0 * yy),
    ];
    basis.iter().zip(c).map(|(b, c)| b * c).sum()
}

/// Channel `ch` of splat `i` as 16 coefficients (DC first).
fn channel_coeffs(s: &Splats, i: usize, ch: usize) -> [f32; 16] {
    let mut c = [0.0; 16];
    c[0] = s.sh_dc[i][ch];
    let rest = &s.sh_rest[i * 45 + ch * 15..i * 45 + ch * 15 + 15];
    c[1..].copy_from_slice(rest);
    c
}

/// Rotates `v` by the unit quaternion `q` (w, x, y, z).
fn rotate(q: [f32; 4], v: [f32; 3]) -> [f32; 3] {
    let [w, x, y, z] = normalized(q);
    let u = [x, y, z];
    let cross = |a: [f32; 3], b: [f32; 3]| {
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    };
    let t = cross(u, v).map(|c| 2.0 * c);
    let ut = cross(u, t);
    [0, 1, 2].map(|i| v[i] + w * t[i] + ut[i])
}

fn flip([x, y, z]: [f32; 3]) -> [f32; 3] {
    [x, -y, -z]
}

/// The colour a splat shows from direction d in PLY axes is the colour the flipped splat
/// shows from the flipped direction, its rotated axes are the flipped ones, and its centre
/// is the flipped centre. The SH basis here is written out independently of the sign table
/// in `spz`.
#[test]
fn flip_keeps_view_dependent_colour_and_orientation() {
    let scene = random_scene(20, 3, 99);
    let mut flipped = scene.clone();
    spz::flip_y_z(&mut flipped);
    let mut rng = SplitMix64::new(7);
    for i in 0..scene.len() {
        assert_eq!(flipped.means[i], flip(scene.means[i]));
        for _ in 0..20 {
            let d = normalized_dir([(); 3].map(|()| rng.range(-1.0, 1.0)));
            for ch in 0..3 {
                let before = eval_sh(&channel_coeffs(&scene, i, ch), d);
                let after = eval_sh(&channel_coeffs(&flipped, i, ch), flip(d));
                assert!(
                    (before - after).abs() < 1e-4,
                    "splat {i} channel {ch} at {d:?}: {before} vs {after}"
                );
            }
            let v = d;
            let before = flip(rotate(scene.rotations[i], v));
            let after = rotate(flipped.rotations[i], flip(v));
            for a in 0..3 {
                assert!((before[a] - after[a]).abs() < 1e-5, "splat {i} rotation");
            }
        }
    }
    // Its own inverse.
    spz::flip_y_z(&mut flipped);
    assert_eq!(flipped, scene);
}

fn normalized_dir(v: [f32; 3]) -> [f32; 3] {
    let n = v.iter().map(|c| c * c).sum::<f32>().sqrt().max(1e-6);
    v.map(|c| c / n)
}

/// What lands in the file is in SPZ axes: a splat at +y in PLY is stored at −y.
#[test]
fn written_positions_are_in_spz_axes() {
    let mut scene = random_scene(1, 0, 5);
    scene.means[0] = [1.0, 2.0, 3.0];
    let bytes = spz::write_version(&scene, 3).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut raw).unwrap();
    let fixed = |o: usize| i32::from_le_bytes([0, raw[16 + o], raw[17 + o], raw[18 + o]]) >> 8;
    assert_eq!([fixed(0), fixed(3), fixed(6)], [4096, -2 * 4096, -3 * 4096]);
}

// ---------------------------------------------------------------------------------------------
// Writing edge cases.

#[test]
fn far_positions_use_fewer_fraction_bits() {
    let mut scene = random_scene(2, 0, 3);
    scene.means[0] = [5000.0, -0.25, 0.0]; // past ±2048, the 12-bit limit
    let back = spz::read(&spz::write(&scene).unwrap()).unwrap();
    assert!((back.means[0][0] - 5000.0).abs() <= 1.0 / 1024.0, "{:?}", back.means[0]);
    assert!((back.means[0][1] + 0.25).abs() <= 1.0 / 1024.0);

    scene.means[0][0] = 1.0e8;
    let msg = spz::write(&scene).unwrap_err().to_string();
    assert!(msg.contains("too far from the origin"), "{msg}");
}

#[test]
fn write_refuses_bad_scenes() {
    let msg = spz::write(&Splats::default()).unwrap_err().to_string();
    assert!(msg.contains("empty scene"), "{msg}");
    let mut scene = random_scene(2, 1, 4);
    scene.opacity_logits[1] = f32::NAN;
    let msg = spz::write(&scene).unwrap_err().to_string();
    assert!(msg.contains("splat 1: opacity"), "{msg}");
    let msg = spz::write_version(&random_scene(1, 0, 1), 5).unwrap_err().to_string();
    assert!(msg.contains("version 5 cannot be written"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// Malformed input.

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap();
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn garbage_is_not_spz() {
    let msg = err(b"hello, this is not a splat file");
    assert!(msg.contains("not an SPZ file"), "{msg}");
    let msg = err(&[]);
    assert!(msg.contains("not an SPZ file"), "{msg}");
    // Gzip around something else.
    let msg = err(&gzip(b"just some text, long enough for a header"));
    assert!(msg.contains("does not start with 'NGSP'"), "{msg}");
}

#[test]
fn unsupported_versions_are_named() {
    for (name, version) in [("minimal-raw", 7u32), ("minimal-raw", 1), ("minimal-v4", 9)] {
        let mut bytes = load(&format!("splats/spz/{name}.spz"));
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        let msg = err(&bytes);
        assert!(
            msg.contains(&format!("version {version} is not supported (2, 3 and 4 are)")),
            "{msg}"
        );
    }
    // Inside gzip too.
    let mut raw = gunzip(&load("splats/spz/minimal-v3.spz"));
    raw[4..8].copy_from_slice(&7u32.to_le_bytes());
    let msg = err(&gzip(&raw));
    assert!(msg.contains("version 7 is not supported"), "{msg}");
    // A v4 header is never gzipped.
    raw[4..8].copy_from_slice(&4u32.to_le_bytes());
    let msg = err(&gzip(&raw));
    assert!(msg.contains("version 4 files are not gzipped"), "{msg}");
}

#[test]
fn counts_larger_than_the_data_fail_fast() {
    // Raw v2: header says 1000 points, data holds 4.
    let mut raw = load("splats/spz/minimal-raw.spz");
    raw[8..12].copy_from_slice(&1000u32.to_le_bytes());
    let msg = err(&raw);
    assert!(msg.contains("header says 1000 points but the data holds 4"), "{msg}");

    // Gzipped v3 claiming 4 billion points: refused before inflating.
    let mut inner = gunzip(&load("splats/spz/minimal-v3.spz"));
    inner[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    let start = std::time::Instant::now();
    let msg = err(&gzip(&inner));
    assert!(msg.contains("header says 4294967295 points"), "{msg}");
    // Gzipped v3 claiming 1000 points: inflates, then says what is there.
    inner[8..12].copy_from_slice(&1000u32.to_le_bytes());
    let msg = err(&gzip(&inner));
    assert!(msg.contains("header says 1000 points but the data holds 4"), "{msg}");

    // v4 claiming 4 billion points: its table of contents cannot match.
    let mut v4 = load("splats/spz/minimal-v4.spz");
    v4[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    let msg = err(&v4);
    assert!(msg.contains("positions stream holds 36 bytes, but 4294967295 points need"), "{msg}");
    assert!(start.elapsed().as_secs() < 5);

    // v4 whose table of contents agrees with a large count but whose stream is small.
    let mut v4 = load("splats/spz/minimal-v4.spz");
    v4[8..12].copy_from_slice(&1000u32.to_le_bytes());
    v4[40..48].copy_from_slice(&9000u64.to_le_bytes());
    let msg = err(&v4);
    assert!(msg.contains("header says 1000 points but the positions stream holds 4"), "{msg}");
}

#[test]
fn truncated_files_say_so() {
    let v4 = load("splats/spz/biker.spz");
    let msg = err(&v4[..v4.len() / 2]);
    assert!(msg.contains("truncated") && msg.contains("stream is"), "{msg}");
    let msg = err(&v4[..20]);
    assert!(msg.contains("header needs 32 bytes"), "{msg}");
    let msg = err(&v4[..40]);
    assert!(msg.contains("table of contents"), "{msg}");

    let raw = load("splats/spz/minimal-raw.spz");
    let msg = err(&raw[..10]);
    assert!(msg.contains("header needs 16 bytes"), "{msg}");
    let msg = err(&raw[..raw.len() - 1]);
    assert!(msg.contains("header says 4 points but the data holds 3"), "{msg}");

    // Gzip: cut inside the data, cut inside the checksum, one byte changed.
    let v3 = load("splats/spz/minimal-v3.spz");
    let msg = err(&v3[..40]);
    assert!(msg.contains("header says 4 points but the data holds 2"), "{msg}");
    let msg = err(&v3[..v3.len() - 4]);
    assert!(msg.contains("cut short after the data (its checksum is missing)"), "{msg}");
    let mut damaged = v3.clone();
    damaged[30] ^= 0xff;
    let msg = err(&damaged);
    assert!(msg.contains("gzip stream is damaged"), "{msg}");

    // A longer gzip stream cut short: it either holds too little or is reported damaged.
    let big = spz::write_version(&random_scene(2000, 1, 11), 3).unwrap();
    let msg = err(&big[..big.len() / 2]);
    assert!(
        msg.contains("header says 2000 points but the data holds") || msg.contains("damaged"),
        "{msg}"
    );
}

#[test]
fn bad_stream_tables_are_named() {
    let mut v4 = load("splats/spz/minimal-v4.spz");
    v4[15] = 6;
    let msg = err(&v4);
    assert!(msg.contains("lists 6 streams, but 4 points of SH degree 0 need 5"), "{msg}");
    let mut v4 = load("splats/spz/minimal-v4.spz");
    v4[16..20].copy_from_slice(&8u32.to_le_bytes());
    let msg = err(&v4);
    assert!(msg.contains("inside the 32-byte header"), "{msg}");
    let mut v4 = load("splats/spz/minimal-v4.spz");
    v4[12] = 9;
    let msg = err(&v4);
    assert!(msg.contains("SH degree 9 is not valid"), "{msg}");
    // Damaged zstd data.
    let mut v4 = load("splats/spz/minimal-v4.spz");
    let first_stream = 32 + 5 * 16;
    v4[first_stream..first_stream + 4].copy_from_slice(b"oops");
    let msg = err(&v4);
    assert!(
        msg.contains("positions stream is damaged") || msg.contains("cannot start zstd"),
        "{msg}"
    );
}

/// No input makes the reader panic: every prefix and every single-byte change of the small
/// files, in all three containers.
#[test]
fn no_panic_on_damaged_files() {
    let mut files: Vec<Vec<u8>> = ["minimal-v2", "minimal-v3", "minimal-v4", "minimal-raw"]
        .iter()
        .map(|n| load(&format!("splats/spz/{n}.spz")))
        .collect();
    files.push(spz::write(&random_scene(3, 3, 21)).unwrap());
    files.push(spz::write_version(&random_scene(3, 2, 22), 3).unwrap());
    for file in &files {
        for len in 0..file.len() {
            let _ = spz::read(&file[..len]);
        }
        for i in 0..file.len() {
            for value in [0u8, 0x7f, 0xff] {
                let mut damaged = file.clone();
                damaged[i] = value;
                let _ = spz::read(&damaged);
            }
        }
    }
}
