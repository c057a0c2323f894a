//! `PlayCanvas` compressed PLY: real files and malformed headers.

// Tests: unwrap on fixtures is fine, and exact float comparisons are deliberate.
#![allow(clippy::unwrap_used, clippy::float_cmp)]

use splat_formats::{SH_C0, compressed_ply};
use splat_test_support::data;

fn load(path: &str) -> Vec<u8> {
    std::fs::read(data(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn err(bytes: &[u8]) -> String {
    match compressed_ply::read(bytes) {
        Ok(s) => panic!("expected an error, read {} splats", s.len()),
        Err(e) => e.to_string(),
    }
}

/// Splits a file into its header text (up to and including `end_header\n`) and payload.
fn split(bytes: &[u8]) -> (String, Vec<u8>) {
    let marker = b"end_header\n";
    let at = bytes.windows(marker.len()).position(|w| w == marker).unwrap() + marker.len();
    (String::from_utf8(bytes[..at].to_vec()).unwrap(), bytes[at..].to_vec())
}

fn join(header: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = header.as_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

#[test]
fn biker_loads() {
    let s = compressed_ply::read(&load("splats/compressed-ply/biker.compressed.ply")).unwrap();
    assert_eq!(s.len(), 152_746);
    assert_eq!(s.sh_degree, 0);
    // Quaternions come out unit length; colours inside the chunk colour bounds.
    for q in &s.rotations {
        let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 2e-3, "{q:?}");
    }
    // A real scene: a few metres across.
    let extent = s.means.iter().flatten().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(extent > 0.5 && extent < 1000.0, "{extent}");
}

#[test]
fn sh_file_loads_with_degree_three() {
    let s = compressed_ply::read(&load("splats/compressed-ply/test-64-with-sh.compressed.ply"))
        .unwrap();
    assert_eq!(s.len(), 64);
    assert_eq!(s.sh_degree, 3);
    assert_eq!(s.sh_rest.len(), 64 * 45);
    // Each byte b reads as (b + 0.5)/256 · 8 − 4, or ±4 at the ends: all within −4..4 and
    // not all the same.
    assert!(s.sh_rest.iter().all(|v| (-4.0..=4.0).contains(v)));
    assert!(s.sh_rest.iter().any(|&v| v != s.sh_rest[0]));
}

/// A hand-made file with the properties in an unusual order, no chunk colours, an extra
/// vertex property and an extra trailing element: found by name, decoded as specified.
#[test]
fn properties_are_found_by_name() {
    let header = "ply\nformat binary_little_endian 1.0\n\
        element chunk 1\n\
        property float max_x\nproperty float max_y\nproperty float max_z\n\
        property float min_scale_x\nproperty float min_scale_y\nproperty float min_scale_z\n\
        property float max_scale_x\nproperty float max_scale_y\nproperty float max_scale_z\n\
        property float min_x\nproperty float min_y\nproperty float min_z\n\
        element vertex 1\n\
        property uint packed_color\nproperty uint packed_scale\nproperty ushort extra\n\
        property uint packed_rotation\nproperty uint packed_position\n\
        element note 1\nproperty uchar n\n\
        end_header\n";
    let mut payload = Vec::new();
    // chunk: max 2,4,6; scale min -5 x3, max -1 x3; min 0,0,0.
    for v in [2.0f32, 4.0, 6.0, -5.0, -5.0, -5.0, -1.0, -1.0, -1.0, 0.0, 0.0, 0.0] {
        payload.extend_from_slice(&v.to_le_bytes());
    }
    // colour r=255 g=0 b=51 a=255
    payload.extend_from_slice(&u32::from_be_bytes([255, 0, 51, 255]).to_le_bytes());
    // scale: x = max, y = min, z = max
    payload.extend_from_slice(&((2047u32 << 21) | 2047).to_le_bytes());
    payload.extend_from_slice(&7u16.to_le_bytes());
    // rotation: largest is rot_1 (x); the others at the 10-bit midpoint (≈ 0)
    payload.extend_from_slice(&((1u32 << 30) | (511 << 20) | (511 << 10) | 511).to_le_bytes());
    // position: x = max, y = half, z = min
    payload.extend_from_slice(&((2047u32 << 21) | (1023 / 2) << 11).to_le_bytes());
    payload.push(9);

    let s = compressed_ply::read(&join(header, &payload)).unwrap();
    assert_eq!(s.len(), 1);
    let [x, y, z] = s.means[0];
    assert!(
        (x - 2.0).abs() < 1e-6 && (y - 4.0 * 511.0 / 1023.0).abs() < 1e-5 && z.abs() < 1e-6,
        "{:?}",
        s.means[0]
    );
    assert_eq!(s.log_scales[0], [-1.0, -5.0, -1.0]);
    let q = s.rotations[0];
    assert!((q[1] - 1.0).abs() < 1e-3 && q[0].abs() < 1e-3, "{q:?}");
    let rendered = s.sh_dc[0].map(|dc| 0.5 + SH_C0 * dc);
    assert!(
        (rendered[0] - 1.0).abs() < 1e-5
            && rendered[1].abs() < 1e-5
            && (rendered[2] - 0.2).abs() < 1e-5
    );
    assert!(s.opacity_logits[0].is_finite() && s.opacity_logits[0] > 5.0);
}

#[test]
fn header_counts_larger_than_the_file_fail_fast() {
    let bytes = load("splats/compressed-ply/biker.compressed.ply");
    let (header, payload) = split(&bytes);
    let header = header
        .replace("element vertex 152746", "element vertex 4000000000")
        .replace("element chunk 597", "element chunk 15625000");
    let start = std::time::Instant::now();
    let msg = err(&join(&header, &payload[..1000]));
    assert!(msg.contains("truncated") && msg.contains("15625000 'chunk' rows"), "{msg}");
    assert!(start.elapsed().as_secs() < 2);
}

#[test]
fn chunk_count_must_match_vertices() {
    let bytes = load("splats/compressed-ply/biker.compressed.ply");
    let (header, payload) = split(&bytes);
    let msg = err(&join(&header.replace("element chunk 597", "element chunk 3"), &payload));
    assert!(msg.contains("152746 vertices need 597 chunks of 256, but the file has 3"), "{msg}");
}

#[test]
fn truncated_file_says_so() {
    let bytes = load("splats/compressed-ply/biker.compressed.ply");
    let msg = err(&bytes[..bytes.len() - 100]);
    assert!(msg.contains("truncated"), "{msg}");
    let msg = err(&bytes[..200]);
    assert!(!msg.is_empty());
}

#[test]
fn missing_or_mistyped_properties_are_named() {
    let bytes = load("splats/compressed-ply/biker.compressed.ply");
    let (header, payload) = split(&bytes);
    let msg = err(&join(
        &header.replace("property uint packed_rotation", "property uint packed_spin"),
        &payload,
    ));
    assert!(msg.contains("'vertex' has no 'packed_rotation' property"), "{msg}");
    let msg = err(&join(
        &header.replace("property uint packed_color", "property int packed_color"),
        &payload,
    ));
    assert!(msg.contains("'packed_color' of 'vertex' is int, expected uint"), "{msg}");
    let msg = err(&join(&header.replace("property float max_b\n", ""), &payload));
    assert!(msg.contains("5 of the 6 colour bounds"), "{msg}");
    let msg = err(&join(&header.replace("element chunk", "element block"), &payload));
    assert!(msg.contains("no 'chunk' element"), "{msg}");
}

#[test]
fn bad_sh_element_is_named() {
    let bytes = load("splats/compressed-ply/test-64-with-sh.compressed.ply");
    let (header, payload) = split(&bytes);
    let msg = err(&join(&header.replace("property uchar f_rest_44\n", ""), &payload));
    assert!(msg.contains("'sh' has 44 f_rest properties (a file has 9, 24 or 45)"), "{msg}");
    let msg = err(&join(&header.replace("element sh 64", "element sh 63"), &payload));
    assert!(msg.contains("'sh' has 63 rows but 'vertex' has 64"), "{msg}");
    let msg = err(&join(
        &header.replace("property uchar f_rest_3\n", "property float f_rest_3\n"),
        &payload,
    ));
    assert!(msg.contains("'f_rest_3' of 'sh' is float, expected uchar"), "{msg}");
}

#[test]
fn not_a_ply() {
    let msg = err(b"hello");
    assert!(msg.contains("not a PLY file"), "{msg}");
    let msg = err(b"ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\nend_header\n\0\0\0\0");
    assert!(msg.contains("no 'chunk' element"), "{msg}");
}

/// No panic on any prefix or single-byte change of the small SH file.
#[test]
fn no_panic_on_damaged_files() {
    let file = load("splats/compressed-ply/test-64-with-sh.compressed.ply");
    for len in 0..file.len() {
        let _ = compressed_ply::read(&file[..len]);
    }
    for i in (0..file.len()).step_by(3) {
        for value in [0u8, b'9', 0xff] {
            let mut damaged = file.clone();
            damaged[i] = value;
            let _ = compressed_ply::read(&damaged);
        }
    }
}
