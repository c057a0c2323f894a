//! Tests of `sog.rs`.

#![allow(clippy::float_cmp, reason = "a decoded value is its codebook entry, bit for bit")]

use splat_test_support::data;

use super::*;
use crate::{Loaded, load_file};

fn scene(relative: &str) -> Splats {
    match load_file(&data(relative)).unwrap() {
        Loaded::Splats { splats, .. } => splats,
        Loaded::Points(_) => panic!("{relative}: not splats"),
    }
}

fn sigmoid(x: f32) -> f64 {
    1.0 / (1.0 + (-f64::from(x)).exp())
}

/// Every attribute comes back within its quantisation: centres within half a 16-bit step
/// (in the log-transformed space), rotations within the packing's rounding, scales and
/// colours as the codebook entry nearest the original, opacity within half of 1/255, SH as
/// the codebook entry nearest its palette centroid.
#[test]
fn a_scene_comes_back_within_its_quantisation() {
    for relative in ["splats/inria-ply/lod4-tile-489.ply", "splats/spz/minimal-v4.spz"] {
        let splats = scene(relative);
        let n = splats.len();
        let dim = 3 * (sh_coeffs_for_degree(splats.sh_degree) - 1);
        let palette = (dim > 0).then(|| kmeans(&splats.sh_rest, dim, palette_size(n), 4));
        let files = encode(&splats, palette.clone()).unwrap();
        let back = read_bundle(&bundle(&files).unwrap()).unwrap();
        assert_eq!((back.len(), back.sh_degree), (n, splats.sh_degree), "{relative}");
        let meta: Meta = serde_json::from_slice(&files.last().unwrap().1).unwrap();
        let order = morton_order(&splats.means);
        let scales = Codebook { centroids: meta.scales.codebook.clone() };
        let colours = Codebook { centroids: meta.sh0.codebook.clone() };
        for (j, &i) in order.iter().enumerate() {
            let i = i as usize;
            for axis in 0..3 {
                let step = (meta.means.maxs[axis] - meta.means.mins[axis]) / 65535.0;
                let (a, b) = (
                    log_transform(f64::from(splats.means[i][axis])),
                    log_transform(f64::from(back.means[j][axis])),
                );
                assert!((a - b).abs() <= 0.5 * step + 1e-6, "{relative} splat {i} axis {axis}");
                let scale = splats.log_scales[i][axis];
                assert_eq!(
                    back.log_scales[j][axis],
                    scales.centroids[usize::from(scales.label(scale))]
                );
                let colour = splats.sh_dc[i][axis];
                assert_eq!(
                    back.sh_dc[j][axis],
                    colours.centroids[usize::from(colours.label(colour))]
                );
            }
            let q = splats.rotations[i].map(f64::from);
            let length = q.iter().map(|v| v * v).sum::<f64>().sqrt();
            let dot: f64 =
                q.iter().zip(back.rotations[j]).map(|(a, b)| a / length * f64::from(b)).sum();
            // Each packed component is within 1/255 of √2: about 0.5° at most.
            assert!(dot.abs() > 0.9999, "{relative} splat {i}: {dot}");
            let opacity =
                (sigmoid(splats.opacity_logits[i]) - sigmoid(back.opacity_logits[j])).abs();
            assert!(opacity <= 0.5 / 255.0 + 1e-6, "{relative} splat {i}: {opacity}");
            if let Some(palette) = &palette {
                let codebook = Codebook { centroids: meta.sh_n.as_ref().unwrap().codebook.clone() };
                let label = palette.labels[i] as usize;
                for d in 0..dim {
                    let centroid = palette.centroids[label * dim + d];
                    assert_eq!(
                        back.sh_rest[j * dim + d],
                        codebook.centroids[usize::from(codebook.label(centroid))]
                    );
                }
            }
        }
    }
}

#[test]
fn the_unbundled_form_reads_as_the_bundle() {
    let splats = scene("splats/inria-ply/lod4-tile-489.ply");
    let files = encode(&splats, None).unwrap();
    let dir = splat_test_support::TempDir::new("sog-unbundled");
    for (name, bytes) in &files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let Loaded::Splats { splats: unbundled, format } = load_file(&dir.path().join(META)).unwrap()
    else {
        panic!("not splats")
    };
    assert_eq!(format, crate::SplatFormat::Sog);
    assert_eq!(unbundled, read_bundle(&bundle(&files).unwrap()).unwrap());
}

#[test]
fn the_palette_follows_splat_transforms_size_rule() {
    assert_eq!(palette_size(489), 256);
    assert_eq!(palette_size(6_831), 4_096);
    assert_eq!(palette_size(100_000), 65_536);
    assert_eq!(palette_size(5_000_000), 65_536);
    assert_eq!(palette_size(1), 1);
}

#[test]
fn kmeans_finds_separate_clusters() {
    // Three tight clumps in 9 dimensions: three centroids, one on each.
    let centres = [0.0_f32, 5.0, -5.0];
    let points: Vec<f32> = (0..300)
        .flat_map(|i| {
            let c = centres[i % 3];
            (0..9).map(move |d| c + 0.01 * ((i * 7 + d) % 5) as f32)
        })
        .collect();
    let palette = kmeans(&points, 9, 3, 10);
    for (i, &label) in palette.labels.iter().enumerate() {
        let centroid = &palette.centroids[label as usize * 9..label as usize * 9 + 9];
        assert!(centroid.iter().all(|c| (c - centres[i % 3]).abs() < 0.05), "{i}: {centroid:?}");
    }
}

#[test]
fn quaternions_pack_to_the_same_rotation() {
    for q in [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, -2.0], [0.3, -0.5, 0.7, 0.1], [0.0; 4]] {
        let back = unpack_quaternion(pack_quaternion(q));
        let length = q.iter().map(|v| v * v).sum::<f32>().sqrt();
        let q = if length > 0.0 { q.map(|v| v / length) } else { [1.0, 0.0, 0.0, 0.0] };
        let dot: f32 = q.iter().zip(back).map(|(a, b)| a * b).sum();
        assert!(dot.abs() > 0.9999, "{q:?} {back:?}");
    }
}

#[test]
fn mutated_bundles_read_or_fail_but_never_panic() {
    // A bundle of someone else's SH-3 scene, each mutant with a few bytes of one member
    // changed (meta.json or an image; the archive is rebuilt, as its checksums would
    // refuse any change before our code saw it) or of the archive itself: every one
    // reads or gives an error.
    let splats = scene("splats/inria-ply/fruit-drops-extra-prop.ply");
    let files = encode(&splats, Some(kmeans(&splats.sh_rest, 45, 64, 1))).unwrap();
    let mut state = 0x9e37_79b9_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state as usize
    };
    let (mut read, mut refused) = (0, 0);
    for round in 0..300 {
        let mut members = files.clone();
        let member = next() % (members.len() + 1);
        let bytes = if member < members.len() {
            let data = &mut members[member].1;
            for _ in 0..=(next() % 4) {
                let at = next() % data.len();
                // meta.json: a digit for a digit, so the JSON mostly stays JSON.
                data[at] = if member + 1 == files.len() && data[at].is_ascii_digit() {
                    b'0' + (next() % 10) as u8
                } else {
                    next() as u8
                };
            }
            bundle(&members).unwrap()
        } else {
            let mut archive = bundle(&members).unwrap();
            let at = next() % archive.len();
            archive[at] ^= 1 << (round % 8);
            archive
        };
        match read_bundle(&bytes) {
            Ok(s) => {
                assert_eq!(s.len(), splats.len());
                read += 1;
            }
            Err(_) => refused += 1,
        }
    }
    assert!(read > 0 && refused > 0, "{read} read, {refused} refused");
}

#[test]
fn damaged_files_are_refused_with_the_reason() {
    let splats = scene("splats/inria-ply/lod4-tile-489.ply");
    let files = encode(&splats, None).unwrap();
    let with = |name: &str, bytes: Vec<u8>| {
        let files: Vec<_> = files
            .iter()
            .map(|(n, b)| (n.clone(), if n == name { bytes.clone() } else { b.clone() }))
            .collect();
        read_bundle(&bundle(&files).unwrap()).unwrap_err().to_string()
    };
    let meta = String::from_utf8(files.last().unwrap().1.clone()).unwrap();
    assert!(with(META, b"{".to_vec()).contains("meta.json is not SOG's"));
    assert!(
        with(META, meta.replace("\"version\":2", "\"version\":1").into_bytes())
            .contains("version 1")
    );
    assert!(
        with(META, meta.replace("\"count\":489", "\"count\":100000").into_bytes())
            .contains("fewer texels")
    );
    assert!(
        with(META, meta.replace("means_l.webp", "../x.webp").into_bytes())
            .contains("not a file name")
    );
    assert!(with(QUATS, b"RIFF....WEBP".to_vec()).contains("quats.webp"));
    assert!(read_bundle(b"PK\x03\x04 not a zip").unwrap_err().to_string().contains("zip"));
    assert!(
        encode(&Splats::with_capacity(0, 0), None).unwrap_err().to_string().contains("no splats")
    );
}
