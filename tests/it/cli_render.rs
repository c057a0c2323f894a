//! `splatforge render`: real scenes from ../shared/data into PNGs and videos (turntable and
//! camera path; the videos need ffmpeg, as `cli_poses` does); bad cameras, paths and
//! settings give one clear error line and write nothing.

#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::path::{Path, PathBuf};
use std::process::Command;

use splat_test_support::data;
use splat_trainer::formats::{Loaded, load_file};

use crate::helpers::{engines_present, error_lines};

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

/// ffprobe's count of the frames it decodes, and their size.
fn probe_video(path: &Path) -> (u64, u32, u32) {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_read_frames,width,height", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<u64> = text.trim().split(',').map(|v| v.parse().unwrap()).collect();
    let [width, height, frames] = fields[..] else { panic!("ffprobe said {text:?}") };
    (frames, width as u32, height as u32)
}

#[test]
fn a_turntable_becomes_a_video_whose_frames_ffprobe_counts() {
    if !engines_present(
        "a_turntable_becomes_a_video_whose_frames_ffprobe_counts",
        &[("ffmpeg", "-version"), ("ffprobe", "-version")],
    ) {
        return;
    }
    let dir = temp_dir("turntable");
    // A small scene for the 90 frames of the video, a person for the frames that must show
    // the camera going round.
    let scene = data("splats/inria-ply/lod4-tile-489.ply");
    let video = dir.join("tile.mp4");
    let (ok, stderr) = render(&[
        scene.to_str().unwrap(),
        "--turntable",
        "3",
        "--size",
        "96x64",
        "--out",
        video.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(probe_video(&video), (90, 96, 64));
    // The frames it was made from are gone; only the video is left.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["tile.mp4"]);

    // To a folder: the PNG frames themselves, no ffmpeg needed. Once round: the last frame is
    // a step before the first, and the view half way round sees the scene from behind.
    let scene = data("splats/spz/biker.spz");
    let frames = dir.join("frames");
    let (ok, stderr) = render(&[
        scene.to_str().unwrap(),
        "--turntable",
        "1",
        "--fps",
        "8",
        "--size",
        "96x64",
        "--out",
        frames.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let frame = |i: usize| image::open(frames.join(format!("frame_{i:05}.png"))).unwrap().to_rgb8();
    assert_eq!(std::fs::read_dir(&frames).unwrap().count(), 8);
    let difference = |a: &image::RgbImage, b: &image::RgbImage| {
        a.pixels()
            .zip(b.pixels())
            .map(|(p, q)| p.0.iter().zip(q.0).map(|(x, y)| u64::from(x.abs_diff(y))).sum::<u64>())
            .sum::<u64>()
    };
    let (first, next, half) = (frame(0), frame(1), frame(4));
    assert_eq!(first.dimensions(), (96, 64));
    assert!(first.pixels().filter(|p| p.0 != [0, 0, 0]).count() > 200, "the scene is in view");
    assert!(difference(&first, &next) > 0, "the camera moves");
    assert!(difference(&first, &half) > difference(&first, &next), "half way round differs most");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_camera_path_video_passes_its_keyframes() {
    if !engines_present(
        "a_camera_path_video_passes_its_keyframes",
        &[("ffmpeg", "-version"), ("ffprobe", "-version")],
    ) {
        return;
    }
    let dir = temp_dir("path");
    let scene = data("splats/inria-ply/lod4-tile-489.ply");
    // The test camera: its pose is the path's first keyframe, its intrinsics a 50° view.
    let (width, height) = (96_u32, 64_u32);
    let camera: serde_json::Value =
        serde_json::from_str(&camera_json(&scene, width, height)).unwrap();
    let pose = camera["world_from_camera"].clone();
    let position =
        [pose[3].as_f64().unwrap(), pose[7].as_f64().unwrap(), pose[11].as_f64().unwrap()];
    let fy = 0.5 * f64::from(height) / (25_f64.to_radians()).tan();
    let mut camera = camera;
    camera["fx"] = fy.into();
    camera["fy"] = fy.into();
    std::fs::write(dir.join("camera.json"), camera.to_string()).unwrap();
    let path = serde_json::json!({ "fov_y_degrees": 50, "keyframes": [
        { "time": 0, "world_from_camera": pose },
        { "time": 0.5, "position": [position[0] + 2.0, position[1], position[2]], "look_at": [position[0], position[1], position[2] + 2.0] },
        { "time": 1, "position": [position[0], position[1] - 1.0, position[2]], "look_at": [position[0], position[1], position[2] + 2.0], "fov_y_degrees": 30 },
    ]});
    std::fs::write(dir.join("path.json"), path.to_string()).unwrap();
    let size = format!("{width}x{height}");
    let path_file = dir.join("path.json");
    let along_path = |out: &Path| {
        let (scene, file) = (scene.to_str().unwrap(), path_file.to_str().unwrap());
        render(&[
            scene,
            "--path",
            file,
            "--fps",
            "10",
            "--size",
            &size,
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let video = dir.join("path.webm");
    let (ok, stderr) = along_path(&video);
    assert!(ok, "{stderr}");
    // One second at 10 frames a second, both ends included.
    assert_eq!(probe_video(&video), (11, width, height));

    // The first frame is the first keyframe's view: the same picture as `render --camera`.
    let frames = dir.join("frames");
    let (ok, stderr) = along_path(&frames);
    assert!(ok, "{stderr}");
    let still = dir.join("still.png");
    let (ok, stderr) = render(&[
        scene.to_str().unwrap(),
        "--camera",
        dir.join("camera.json").to_str().unwrap(),
        "--out",
        still.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let first = image::open(frames.join("frame_00000.png")).unwrap().to_rgb8();
    let still = image::open(&still).unwrap().to_rgb8();
    let mean_difference = first
        .pixels()
        .zip(still.pixels())
        .map(|(p, q)| p.0.iter().zip(q.0).map(|(x, y)| f64::from(x.abs_diff(y))).sum::<f64>())
        .sum::<f64>()
        / (3.0 * f64::from(width * height));
    // The two cameras agree up to rounding of the focal length (f32 beside f64).
    assert!(mean_difference < 0.5, "{mean_difference}");
    assert!(still.pixels().filter(|p| p.0 != [0, 0, 0]).count() > 100);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_video_settings_are_one_clear_line_and_write_nothing() {
    let dir = temp_dir("bad-video");
    let scene = data("splats/inria-ply/rtgs-16.ply");
    let scene = scene.to_str().unwrap();
    let video = dir.join("x.mp4");
    let out = video.to_str().unwrap();
    let path_file = |name: &str, text: &str| {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        file.to_str().unwrap().to_owned()
    };
    let one_keyframe =
        path_file("one.json", r#"{"keyframes":[{"time":0,"position":[0,0,0],"look_at":[0,0,1]}]}"#);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--turntable".into(), "3".into(), "--size".into(), "97x64".into()], "must be even"),
        (vec!["--turntable".into(), "0".into()], "a number above 0"),
        (vec!["--turntable".into(), "3".into(), "--size".into(), "big".into()], "WIDTHxHEIGHT"),
        (
            vec!["--turntable".into(), "3".into(), "--ffmpeg".into(), "/nonexistent/ffmpeg".into()],
            "ffmpeg",
        ),
        (vec!["--path".into(), one_keyframe.clone()], "at least two keyframes"),
        (vec!["--path".into(), path_file("broken.json", "{")], "not a camera path file"),
        (
            vec![
                "--path".into(),
                path_file(
                    "order.json",
                    r#"{"keyframes":[{"time":1,"position":[0,0,0],"look_at":[0,0,1]},{"time":0,"position":[0,0,0],"look_at":[0,0,1]}]}"#,
                ),
            ],
            "keyframe 1",
        ),
        (
            vec!["--turntable".into(), "3".into(), "--camera".into(), "x.json".into()],
            "cannot be used with",
        ),
    ];
    for (args, words) in cases {
        let mut all = vec![scene.to_owned()];
        all.extend(args.iter().cloned());
        all.extend(["--out".to_owned(), out.to_owned()]);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let (ok, stderr) = render(&all);
        assert!(!ok, "{args:?} should fail");
        let lines = error_lines(&stderr);
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        assert!(lines[0].contains(words), "{args:?}: {stderr}");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| Path::new(name).extension().is_none_or(|e| e != "json"))
            .collect();
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
    // A folder for the frames that already holds something is refused, and kept.
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let (ok, stderr) = render(&[scene, "--turntable", "1", "--out", dir.to_str().unwrap()]);
    assert!(!ok && error_lines(&stderr)[0].contains("new or empty folder"), "{stderr}");
    assert_eq!(std::fs::read_to_string(dir.join("keep.txt")).unwrap(), "mine");
    std::fs::remove_dir_all(dir).ok();
}

/// An ffmpeg that lacks the codec is refused before anything is rendered; one that fails to
/// encode leaves no video (not even a partial one) and keeps the frames, saying where.
#[cfg(unix)]
#[test]
fn an_ffmpeg_that_cannot_encode_leaves_no_video_and_keeps_the_frames() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = temp_dir("failing-ffmpeg");
    let scene = data("splats/inria-ply/rtgs-16.ply");
    let fake = |name: &str, encoders: &str| {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\ncase \"$*\" in *-encoders*) echo ' V....D {encoders} a codec'; exit 0;; esac\necho 'cannot encode' >&2\nexit 1\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    let no_x264 = fake("ffmpeg-no-x264", "mpeg4");
    let failing = fake("ffmpeg-failing", "libx264");
    let video = dir.join("x.mp4");
    let args = |ffmpeg: &Path| {
        vec![
            scene.to_str().unwrap().to_owned(),
            "--turntable".into(),
            "1".into(),
            "--fps".into(),
            "4".into(),
            "--size".into(),
            "32x32".into(),
            "--ffmpeg".into(),
            ffmpeg.to_str().unwrap().to_owned(),
            "--out".into(),
            video.to_str().unwrap().to_owned(),
        ]
    };
    let run = |ffmpeg: &Path| {
        let args = args(ffmpeg);
        render(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (ok, stderr) = run(&no_x264);
    assert!(
        !ok && error_lines(&stderr).len() == 1 && stderr.contains("no libx264 encoder"),
        "{stderr}"
    );
    assert!(!dir.join("x.mp4.frames").exists(), "nothing rendered");

    let (ok, stderr) = run(&failing);
    assert!(!ok && stderr.contains("its frames are in"), "{stderr}");
    assert!(!video.exists() && !dir.join("x.incomplete.mp4").exists(), "no video, whole or not");
    assert_eq!(
        std::fs::read_dir(dir.join("x.mp4.frames")).unwrap().count(),
        4,
        "the 4 frames kept"
    );
    std::fs::remove_dir_all(dir).ok();
}
