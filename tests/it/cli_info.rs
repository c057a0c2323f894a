//! `splatforge info` on every file and dataset in ../shared/data: one JSON object for what
//! loads, one clear error line and a non-zero exit for what does not.

use std::process::Command;

use serde_json::{Value, json};
use splat_test_support::data;

use crate::helpers::error_lines;

fn info(path: &std::path::Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_splatforge"))
        .arg("info")
        .arg(path)
        .output()
        .expect("run splatforge");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn info_ok(rel: &str) -> Value {
    let (ok, stdout, stderr) = info(&data(rel));
    assert!(ok, "{rel}: {stderr}");
    assert_eq!(stdout.lines().count(), 1, "{rel}: one JSON line: {stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{rel}: {e}: {stdout}"))
}

fn info_err(rel: &str) -> String {
    let (ok, stdout, stderr) = info(&data(rel));
    assert!(!ok, "{rel} should fail but printed {stdout}");
    assert!(stdout.is_empty(), "{rel}: nothing on stdout on failure");
    let lines = error_lines(&stderr);
    assert_eq!(lines.len(), 1, "{rel}: one error line: {stderr}");
    lines[0].to_string()
}

#[test]
fn splat_files() {
    for (rel, format, count, sh) in [
        ("splats/inria-ply/rtgs-16.ply", "ply", 16, 3),
        ("splats/inria-ply/lod4-tile-489.ply", "ply", 489, 3),
        ("splats/inria-ply/lod2-tile-6831.ply", "ply", 6831, 3),
        ("splats/inria-ply/fruit-drops-extra-prop.ply", "ply", 4721, 3),
        ("splats/inria-ply/donut-sh0-no-normals.ply", "ply", 45_624, 0),
        ("splats/compressed-ply/biker.compressed.ply", "compressed-ply", 152_746, 0),
        ("splats/compressed-ply/test-64-with-sh.compressed.ply", "compressed-ply", 64, 3),
        ("splats/spz/biker.spz", "spz", 152_746, 0),
        ("splats/spz/minimal-v2.spz", "spz", 4, 0),
        ("splats/spz/minimal-v3.spz", "spz", 4, 0),
        ("splats/spz/minimal-v4.spz", "spz", 4, 0),
        ("splats/splat/minimal-4.splat", "splat", 4, 0),
        ("splats/splat/bob_10k.splat", "splat", 10_000, 0),
        ("splats/splat/cylinder_10k.splat", "splat", 10_000, 0),
    ] {
        let v = info_ok(rel);
        assert_eq!(
            v,
            json!({"kind": "splats", "format": format, "count": count, "sh_degree": sh}),
            "{rel}"
        );
    }
}

#[test]
fn point_clouds() {
    for (rel, count, has_color) in [
        ("pointclouds/donut-xyz-rgb-45624.ply", 45_624, true),
        ("pointclouds/trimesh/fuze.ply", 502, true),
        ("pointclouds/trimesh/fuze_ascii.ply", 502, true),
        ("pointclouds/trimesh/bunny.ply", 8171, false),
        ("pointclouds/pyntcloud/diamond_ascii.ply", 6, true),
        ("pointclouds/plyfile/tet.ply", 4, false),
        ("datasets/tiny-per-frame-intrinsics/init.ply", 100, true),
    ] {
        assert_eq!(
            info_ok(rel),
            json!({"kind": "points", "count": count, "has_color": has_color}),
            "{rel}"
        );
    }
}

#[test]
fn datasets() {
    let v = info_ok("datasets/desk-statue-colmap");
    assert_eq!(
        v,
        json!({"kind": "dataset", "format": "colmap", "images": 23, "train": 20, "eval": 3, "cameras": 23, "points": 1443, "width": v["width"], "height": v["height"]})
    );
    let (w, h) = (v["width"].as_u64().unwrap(), v["height"].as_u64().unwrap());
    assert!((990..=1010).contains(&w) && (600..=700).contains(&h), "{w}x{h}");

    let v = info_ok("datasets/maupertuis-colmap-txt");
    assert_eq!(
        (v["images"].clone(), v["points"].clone(), v["width"].clone()),
        (json!(4), json!(1039), json!(1600))
    );

    let v = info_ok("datasets/lego-blender");
    assert_eq!(
        (v["format"].clone(), v["images"].clone(), v["points"].clone()),
        (json!("transforms"), json!(50), json!(0))
    );
    assert_eq!((v["width"].clone(), v["height"].clone()), (json!(800), json!(800)));

    let v = info_ok("datasets/fox-transforms");
    assert_eq!(
        (v["images"].clone(), v["width"].clone(), v["height"].clone()),
        (json!(12), json!(900), json!(1600))
    );

    let v = info_ok("datasets/tiny-per-frame-intrinsics");
    assert_eq!(
        (v["images"].clone(), v["points"].clone(), v["width"].clone()),
        (json!(1), json!(100), json!(50))
    );
}

#[test]
fn bad_input_is_one_clear_line() {
    let err = info_err("splats/splat/minimal-4.ksplat");
    assert!(err.contains("minimal-4.ksplat") && err.contains("ksplat"), "{err}");
    let err = info_err("pointclouds/ply-rs/example_plys/single_elements_err_ascii.ply");
    assert!(err.contains("truncated"), "{err}");
    let err = info_err("does/not/exist.ply");
    assert!(err.contains("exist.ply"), "{err}");
    let err = info_err("README.md");
    assert!(err.contains("unknown file type"), "{err}");
}
