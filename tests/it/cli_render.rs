//! `splatforge render`: real scenes from ../shared/data into PNGs; bad cameras and scenes
//! give one clear error line.

#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::path::{Path, PathBuf};
use std::process::Command;

use splat_test_support::data;
use splat_trainer::formats::{Loaded, load_file};

use crate::helpers::error_lines;

fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("splatforge-cli-render-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn render(args: &[&str]) -> (bool, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_splatforge")).arg("render").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A camera on the scene's -z side looking along +z at its median point, far enough back
/// to see most of it.
fn camera_json(scene: &Path, width: u32, height: u32) -> String {
    let Loaded::Splats { splats, .. } = load_file(scene).unwrap() else { panic!("not splats") };
    let median = |axis: usize| {
        let mut v: Vec<f32> = splats.means.iter().map(|m| m[axis]).collect();
        v.sort_by(f32::total_cmp);
        v[v.len() / 2]
    };
    let (mx, my) = (median(0), median(1));
    let spread = {
        let mut v: Vec<f32> =
            splats.means.iter().map(|m| (m[0] - mx).abs().max((m[1] - my).abs())).collect();
        v.sort_by(f32::total_cmp);
        v[v.len() * 9 / 10].max(1e-3)
    };
    let f = width as f32;
    let distance = 2.0 * spread;
    let (x, y, z) = (mx, my, median(2) - distance);
    format!(
        r#"{{"width":{width},"height":{height},"fx":{f},"fy":{f},"cx":{},"cy":{},"world_from_camera":[1,0,0,{x},0,1,0,{y},0,0,1,{z},0,0,0,1]}}"#,
        width as f32 / 2.0,
        height as f32 / 2.0
    )
}

#[test]
fn renders_real_scenes_to_png() {
    let dir = temp_dir("scenes");
    for rel in [
        "splats/inria-ply/lod4-tile-489.ply",
        "splats/spz/minimal-v4.spz",
        "splats/splat/bob_10k.splat",
        "splats/compressed-ply/test-64-with-sh.compressed.ply",
    ] {
        let scene = data(rel);
        let camera = dir.join("camera.json");
        std::fs::write(&camera, camera_json(&scene, 120, 90)).unwrap();
        let out = dir.join("out.png");
        let _ = std::fs::remove_file(&out);
        let (ok, stderr) = render(&[
            scene.to_str().unwrap(),
            "--camera",
            camera.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--background",
            "0,0,1",
        ]);
        assert!(ok, "{rel}: {stderr}");
        let image = image::open(&out).unwrap().to_rgb8();
        assert_eq!(image.dimensions(), (120, 90), "{rel}");
        let not_background = image.pixels().filter(|p| p.0 != [0, 0, 255]).count();
        assert!(not_background > 20, "{rel}: only {not_background} pixels show the scene");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn camera_from_a_dataset() {
    let dir = temp_dir("dataset");
    let out = dir.join("tiny.png");
    let (ok, stderr) = render(&[
        data("datasets/tiny-per-frame-intrinsics/init.ply").to_str().unwrap(),
        "--camera-from",
        data("datasets/tiny-per-frame-intrinsics").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    // init.ply is a point cloud, not a scene: refused with a clear line.
    assert!(!ok && stderr.contains("point cloud"), "{stderr}");
    let (ok, stderr) = render(&[
        data("splats/inria-ply/rtgs-16.ply").to_str().unwrap(),
        "--camera-from",
        data("datasets/tiny-per-frame-intrinsics").to_str().unwrap(),
        "--index",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!ok && stderr.contains("no camera 5"), "{stderr}");
    let (ok, stderr) = render(&[
        data("splats/inria-ply/rtgs-16.ply").to_str().unwrap(),
        "--camera-from",
        data("datasets/tiny-per-frame-intrinsics").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(image::open(&out).unwrap().to_rgb8().dimensions(), (50, 50));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_cameras_are_one_clear_line() {
    let dir = temp_dir("bad");
    let scene = data("splats/inria-ply/rtgs-16.ply");
    let out = dir.join("x.png");
    for (text, words) in [
        ("{", "not a camera file"),
        (
            r#"{"width":0,"height":10,"fx":1,"fy":1,"cx":0,"cy":0,"world_from_camera":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]}"#,
            "image size 0x10",
        ),
        (
            r#"{"width":10,"height":10,"fx":-1,"fy":1,"cx":0,"cy":0,"world_from_camera":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]}"#,
            "focal",
        ),
        (
            r#"{"width":10,"height":10,"fx":1,"fy":1,"cx":0,"cy":0,"world_from_camera":[1,0,0]}"#,
            "not a camera file",
        ),
        (
            r#"{"width":10,"height":10,"fx":1,"fy":1,"cx":0,"cy":0,"world_from_camera":[1,0,0,0,0,1,0,0,0,0,1,0,1,0,0,1]}"#,
            "last row",
        ),
    ] {
        let camera = dir.join("camera.json");
        std::fs::write(&camera, text).unwrap();
        let (ok, stderr) = render(&[
            scene.to_str().unwrap(),
            "--camera",
            camera.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!ok, "{text} should fail");
        let lines = error_lines(&stderr);
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(words) && lines[0].contains("camera.json"), "{text}: {stderr}");
    }
    let (ok, stderr) =
        render(&["/nonexistent.ply", "--camera", "x.json", "--out", out.to_str().unwrap()]);
    assert!(!ok && stderr.contains("x.json"), "{stderr}");
    std::fs::remove_dir_all(dir).ok();
}
