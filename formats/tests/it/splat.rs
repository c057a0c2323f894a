//! antimatter15 `.splat`: real files, a round trip and malformed input.

// Tests: unwrap on fixtures is fine, and exact float comparisons are deliberate.
#![allow(clippy::unwrap_used, clippy::float_cmp)]

use splat_formats::{SH_C0, Splats, splat};
use splat_test_support::data;

fn load(path: &str) -> Vec<u8> {
    std::fs::read(data(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn real_files_load() {
    for (name, n) in [("minimal-4", 4), ("bob_10k", 10_000), ("cylinder_10k", 10_000)] {
        let s = splat::read(&load(&format!("splats/splat/{name}.splat")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.len(), n, "{name}");
        assert_eq!(s.sh_degree, 0);
        assert!(s.sh_rest.is_empty());
    }
}

/// minimal-4.splat: a 2×2 grid at y = 0, σ = 0.1, colour (r, g, 128, 230) with r, g ∈
/// {85, 170}, rotation bytes (128, 128, 128, 255).
#[test]
fn minimal_values_decode_as_specified() {
    let s = splat::read(&load("splats/splat/minimal-4.splat")).unwrap();
    assert_eq!(s.means[0], [-1.0, 0.0, -1.0]);
    assert_eq!(s.means[3], [0.0, 0.0, 0.0]);
    for v in s.log_scales.iter().flatten() {
        assert!((v - 0.1f32.ln()).abs() < 1e-6);
    }
    let rendered = s.sh_dc[0].map(|dc| 0.5 + SH_C0 * dc);
    assert!(
        (rendered[0] - 85.0 / 255.0).abs() < 1e-6 && (rendered[2] - 128.0 / 255.0).abs() < 1e-6
    );
    assert!((sigmoid(s.opacity_logits[0]) - 230.0 / 255.0).abs() < 1e-6);
    // Bytes are w, x, y, z as q · 128 + 128.
    assert_eq!(s.rotations[0], [0.0, 0.0, 0.0, 127.0 / 128.0]);
}

#[test]
fn write_then_read() {
    let mut s = Splats::with_capacity(3, 0);
    for i in 0..3 {
        let f = i as f32;
        s.means.push([f, -2.5 * f, 1e3 + f]);
        s.log_scales.push([-4.0 + f, -1.0, 0.5]);
        s.rotations.push([2.0, -0.4 * f, 0.2, 0.0]); // unnormalised
        s.opacity_logits.push(-3.0 + 2.0 * f);
        s.sh_dc.push([0.3 * f, -0.5, 1.2]);
    }
    let bytes = splat::write(&s);
    assert_eq!(bytes.len(), 3 * splat::BYTES_PER_SPLAT);
    let back = splat::read(&bytes).unwrap();
    assert_eq!(back.means, s.means); // f32, exact
    for i in 0..3 {
        for a in 0..3 {
            assert!((back.log_scales[i][a] - s.log_scales[i][a]).abs() < 1e-5);
            // 8-bit colour: half a step of 1/255, over SH_C0.
            assert!((back.sh_dc[i][a] - s.sh_dc[i][a]).abs() <= 0.5 / 255.0 / SH_C0 + 1e-5);
        }
        assert!(
            (sigmoid(back.opacity_logits[i]) - sigmoid(s.opacity_logits[i])).abs()
                <= 0.5 / 255.0 + 1e-6
        );
        // 8-bit quaternion components: within 1/256 each after normalising.
        let n = s.rotations[i].iter().map(|v| v * v).sum::<f32>().sqrt();
        for c in 0..4 {
            assert!((back.rotations[i][c] - s.rotations[i][c] / n).abs() <= 1.0 / 256.0 + 1e-6);
        }
    }
}

#[test]
fn real_file_round_trips_byte_for_byte() {
    let bytes = load("splats/splat/bob_10k.splat");
    let s = splat::read(&bytes).unwrap();
    let again = splat::write(&s);
    // Positions and colours are exact; scales go through ln/exp, quaternions through a
    // normalisation: each byte off by at most one.
    assert_eq!(again.len(), bytes.len());
    for (a, b) in bytes.chunks_exact(32).zip(again.chunks_exact(32)) {
        assert_eq!(a[..12], b[..12]);
        assert_eq!(a[24..28], b[24..28]);
        for i in 28..32 {
            assert!(a[i].abs_diff(b[i]) <= 2, "{:?} vs {:?}", &a[28..], &b[28..]);
        }
    }
}

#[test]
fn length_not_a_multiple_of_32_is_refused() {
    let bytes = load("splats/splat/minimal-4.splat");
    let msg = splat::read(&bytes[..100]).unwrap_err().to_string();
    assert!(
        msg.contains("100 bytes, not a multiple of 32")
            && msg.contains("3 whole splats and 4 bytes left over"),
        "{msg}"
    );
    let msg = splat::read(&[]).unwrap_err().to_string();
    assert!(msg.contains("empty"), "{msg}");
}

#[test]
fn non_finite_values_are_named() {
    let mut bytes = load("splats/splat/minimal-4.splat");
    bytes[32 + 4..32 + 8].copy_from_slice(&f32::NAN.to_le_bytes());
    let msg = splat::read(&bytes).unwrap_err().to_string();
    assert!(msg.contains("splat 1: position"), "{msg}");
    let mut bytes = load("splats/splat/minimal-4.splat");
    bytes[12..16].copy_from_slice(&f32::INFINITY.to_le_bytes());
    let msg = splat::read(&bytes).unwrap_err().to_string();
    assert!(msg.contains("splat 0: scale"), "{msg}");
}

#[test]
fn extreme_bytes_stay_finite() {
    // Alpha 0 and 255, zero and negative scales: all finite.
    let mut record = [0u8; 32];
    record[12..16].copy_from_slice(&0.0f32.to_le_bytes());
    record[16..20].copy_from_slice(&(-0.5f32).to_le_bytes());
    record[20..24].copy_from_slice(&1e-40f32.to_le_bytes());
    let mut bytes = record.to_vec();
    record[24..32].copy_from_slice(&[255; 8]);
    bytes.extend_from_slice(&record);
    let s = splat::read(&bytes).unwrap();
    assert!(s.opacity_logits.iter().all(|v| v.is_finite()));
    assert!(s.log_scales.iter().flatten().all(|v| v.is_finite()));
}
