//! The desktop app driven through `egui_kittest`: the real app, the real trainer task and the
//! real viewer, on software Vulkan (lavapipe). Keys and clicks go in as a user's would; the
//! checks read the app's state, the files it writes, the memory ledger and snapshot images.
//!
//! Snapshots of the main states (a dataset loaded and ready; a run finished at its planned
//! step; a splat file viewed) are taken where their pixels are deterministic: the log panel
//! (timestamps) and notifications are hidden, the memory budget is fixed, and a run is shown
//! at an exact step (its float-atomics noise, ~1e-5 in the loss, stays under kittest's
//! per-pixel threshold). `UPDATE_SNAPSHOTS=1` rewrites the images.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use egui::{Key, Modifiers, Vec2};
use egui_kittest::kittest::Queryable as _;
use egui_kittest::{Harness, SnapshotOptions};
use splat_test_support::data;
use splat_trainer::formats::filter::{CropBox, Filter, Shape};
use splat_trainer::render::Owner;
use splat_trainer::task::TaskState;
use splatforge::gui::{GuiArgs, Select, SplatApp, Tool, UiState};

const SIZE: Vec2 = Vec2::new(1280.0, 800.0);
/// Pixels that may differ in the deterministic snapshots: the adapter's name in the status bar
/// (llvmpipe reports the CPU's SIMD width) and rounding of the rasterizer on other CPUs.
const STRICT_PIXELS: usize = 1500;
/// A fixed budget: the default one follows the machine's free memory, which is shown.
const BUDGET: u64 = 4 << 30;

fn snapshots() -> SnapshotOptions {
    SnapshotOptions::new()
        .output_path(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/snapshots"))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("splatforge-gui-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn harness(args: GuiArgs) -> Harness<'static, SplatApp> {
    Harness::builder()
        .with_size(SIZE)
        .wgpu_setup(splatforge::gui::wgpu_setup())
        .build_eframe(move |cc| SplatApp::new(cc, args).expect("the app starts"))
}

/// Steps the app (as frames would) until `done` holds; fails after `seconds`.
fn wait_for(
    harness: &mut Harness<'static, SplatApp>,
    what: &str,
    seconds: u64,
    done: impl Fn(&UiState) -> bool,
) -> UiState {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        harness.step();
        let state = harness.state().ui_state();
        if done(&state) {
            return state;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; state: {state:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lets the layout settle and the viewer draw what the UI asks for now (a frame on lavapipe
/// can take a second): until the last frame matches the request for several frames running.
fn settle(harness: &mut Harness<'static, SplatApp>) {
    let mut current = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while current < 10 {
        harness.step();
        let state = harness.state().ui_state();
        current = if state.frame_current { current + 1 } else { 0 };
        assert!(Instant::now() < deadline, "the viewport never caught up: {state:#?}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Lets the layout settle where the viewport has nothing to draw.
fn settle_layout(harness: &mut Harness<'static, SplatApp>) {
    for _ in 0..20 {
        harness.step();
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn sample_scene_start_pause_new_run_export_and_checkpoint() {
    let out = temp_dir("run");
    let mut harness = harness(GuiArgs {
        path: None,
        out: Some(out.clone()),
        start: false,
        steps: Some(40),
        memory_budget: Some(BUDGET),
    });
    // Before any run the window shows the initial splats (the trainer's run 0) from the
    // first dataset camera, its image beside.
    let state = wait_for(&mut harness, "the sample scene's initial splats", 120, |s| {
        s.task == TaskState::Ready && s.dataset.is_some() && s.frame == Some(Some((0, 0)))
    });
    assert!(state.frame_splats > 0, "{state:?}");
    assert!(state.errors.is_empty(), "{:?}", state.errors);
    assert!(
        state.dataset.as_ref().is_some_and(|p| p.ends_with("sample-scene.zip")),
        "the sample scene loads by default: {state:?}"
    );
    harness.state_mut().set_log_visible(false);
    settle_layout(&mut harness);
    harness.snapshot_options("ready", &snapshots().max_failed_pixels(STRICT_PIXELS));
    harness.state_mut().set_log_visible(true);

    // Space starts; the Pause button pauses.
    harness.key_press(Key::Space);
    wait_for(&mut harness, "training", 120, |s| s.task == TaskState::Training && s.step >= 3);
    harness.get_by_label("Pause").click();
    let paused = wait_for(&mut harness, "the pause", 60, |s| s.task == TaskState::Paused);
    let run = paused.run.expect("a run");
    // The viewport shows the run's splats (the viewer slot is refreshed on pause).
    wait_for(&mut harness, "a frame of the run", 60, |s| {
        s.frame.is_some_and(|f| f.is_some_and(|(r, _)| r == run))
    });
    let ledger = harness.state().gpu().ledger().snapshot();
    assert!(ledger.owner_bytes(Owner::Run(run)) > 0, "the paused run keeps its parameters");
    assert!(ledger.owner_bytes(Owner::Viewer) > 0, "the viewer's copy and texture");

    // Space resumes, Ctrl+N starts a new run and frees the old one.
    harness.key_press(Key::Space);
    wait_for(&mut harness, "the resume", 60, |s| s.task == TaskState::Training);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::N);
    let second = wait_for(&mut harness, "the new run", 120, |s| {
        s.run.is_some_and(|r| r > run) && s.step >= 2
    });
    assert_eq!(
        harness.state().gpu().ledger().owner_bytes(Owner::Run(run)),
        0,
        "the first run's memory is back after the new run started"
    );

    // Ctrl+E exports into --out, Ctrl+S saves a checkpoint there.
    harness.key_press_modifiers(Modifiers::COMMAND, Key::E);
    let exported = wait_for(&mut harness, "the export", 60, |s| !s.exported.is_empty());
    let ply = &exported.exported[0];
    assert!(ply.starts_with(&out) && ply.extension().is_some_and(|e| e == "ply"), "{ply:?}");
    match splat_trainer::formats::load_file(ply).expect("the export loads") {
        splat_trainer::formats::Loaded::Splats { splats, .. } => assert!(!splats.is_empty()),
        splat_trainer::formats::Loaded::Points(_) => panic!("the export holds splats"),
    }
    // The button does what the key does.
    harness.get_by_label("Export PLY").click();
    wait_for(&mut harness, "the second export", 60, |s| s.exported.len() >= 2);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::S);
    let saved = wait_for(&mut harness, "the checkpoint", 60, |s| !s.checkpoints.is_empty());
    assert!(saved.checkpoints[0].starts_with(&out));
    splat_trainer::checkpoint::load(&saved.checkpoints[0]).expect("the checkpoint loads");

    // Runs to its planned steps and stays, paused.
    let finished = wait_for(&mut harness, "the end of the run", 300, |s| {
        s.task == TaskState::Paused && s.step >= 40
    });
    assert_eq!(finished.run, second.run);
    assert!(finished.errors.is_empty(), "{:?}", finished.errors);
    wait_for(&mut harness, "the last frame", 60, |s| {
        s.frame.is_some_and(|f| f.is_some_and(|(r, step)| Some(r) == s.run && step == 40))
    });
    harness.state_mut().set_log_visible(false);
    harness.state_mut().clear_notification();
    settle(&mut harness);
    harness.snapshot_options("finished", &snapshots().max_failed_pixels(STRICT_PIXELS));
    harness.state_mut().set_log_visible(true);

    the_crop_keeps_what_convert_keeps(&mut harness, &out);
    a_turntable_video_is_made_with_progress(&mut harness);

    // Stop frees the run; what is left belongs to the viewer and shared resources.
    harness.get_by_label("Stop").click();
    wait_for(&mut harness, "the stop", 60, |s| s.task == TaskState::Ready && s.run.is_none());
    let ledger = harness.state().gpu().ledger().snapshot();
    assert!(
        ledger.by_owner.keys().all(|o| !matches!(o, Owner::Run(_))),
        "no run holds memory after Stop: {:?}",
        ledger.by_owner
    );
    drop(harness);
    let _ = std::fs::remove_dir_all(&out);
}

/// The crop hides splats from the view and the exports without touching the run: an export
/// holds exactly what `convert --crop-box --crop-box-turn --min-opacity` keeps of the whole
/// scene, the box turned and one face dragged by its handle in the viewport. The run is
/// finished (paused at its last step), so both exports are of the same splats.
fn the_crop_keeps_what_convert_keeps(harness: &mut Harness<'static, SplatApp>, out: &Path) {
    harness.state_mut().set_level_exports(false);
    harness.get_by_label("Export PLY").click();
    let whole_path =
        wait_for(harness, "the whole export", 60, |s| s.exported.len() >= 3).exported[2].clone();
    let whole = match splat_trainer::formats::load_file(&whole_path).expect("the export loads") {
        splat_trainer::formats::Loaded::Splats { splats, .. } => splats,
        splat_trainer::formats::Loaded::Points(_) => panic!("the export holds splats"),
    };
    let saved_whole = out.join("whole.ply");
    std::fs::copy(&whole_path, &saved_whole).expect("a copy of the export");
    // A box around the scene's tenth to nine tenths on each axis, turned about y…
    let quantile = |axis: usize, q: f32| {
        let mut v: Vec<f32> = whole.means.iter().map(|m| m[axis]).collect();
        v.sort_by(f32::total_cmp);
        v[((v.len() - 1) as f32 * q) as usize]
    };
    let crop_box = CropBox {
        turn: [0.0, 25.0, 0.0],
        ..CropBox::aligned(
            [quantile(0, 0.1), quantile(1, 0.1), quantile(2, 0.1)],
            [quantile(0, 0.9), quantile(1, 0.9), quantile(2, 0.9)],
        )
    };
    harness.state_mut().set_crop(&Filter {
        crop_box: Some(crop_box),
        min_opacity: Some(0.2),
        ..Filter::default()
    });
    // …and one of its faces dragged by its handle in the viewport: that face moves, the one
    // across from it stays where it was on the screen (so the view did not orbit).
    let crop_box = drag_a_face_handle(harness, crop_box);
    harness.get_by_label("Export PLY").click();
    let cropped_path =
        wait_for(harness, "the cropped export", 60, |s| s.exported.len() >= 4).exported[3].clone();
    let agreed = out.join("convert.ply");
    let [x0, y0, z0] = crop_box.min;
    let [x1, y1, z1] = crop_box.max;
    let [tx, ty, tz] = crop_box.turn;
    let converted = std::process::Command::new(env!("CARGO_BIN_EXE_splatforge"))
        .arg("convert")
        .args([&saved_whole, &agreed])
        .arg(format!("--crop-box={x0},{y0},{z0},{x1},{y1},{z1}"))
        .arg(format!("--crop-box-turn={tx},{ty},{tz}"))
        .args(["--min-opacity", "0.2"])
        .output()
        .expect("convert runs");
    assert!(converted.status.success(), "{}", String::from_utf8_lossy(&converted.stderr));
    let load = |path: &Path| match splat_trainer::formats::load_file(path).expect("it loads") {
        splat_trainer::formats::Loaded::Splats { splats, .. } => splats,
        splat_trainer::formats::Loaded::Points(_) => panic!("points"),
    };
    let cropped = load(&cropped_path);
    assert!(
        !cropped.is_empty() && cropped.len() < whole.len(),
        "{} of {}",
        cropped.len(),
        whole.len()
    );
    assert_eq!(cropped, load(&agreed), "the window's crop and convert's agree");

    // Shown all again, a rectangle drawn over the middle of the view hides what it holds: the
    // export is what the same filter keeps of the whole scene on the CPU.
    harness.state_mut().set_crop(&Filter::default());
    // (The Crop panel's Hide is scrolled out of the window's view: set as it sets it.)
    harness.state_mut().set_select(Select::Hide);
    harness.step();
    let view = harness.state().ui_state().viewport;
    let at = |x: f32, y: f32| egui::pos2(view[0] + x * view[2], view[1] + y * view[3]);
    let crop = draw_a_selection(harness, &[at(0.35, 0.3), at(0.6, 0.55)], &whole, 5);
    assert_eq!(crop.selections.len(), 1, "{crop:?}");

    // Shown all again, a brush stroke painted across the view keeps only what it covers.
    harness.state_mut().set_crop(&Filter::default());
    harness.state_mut().set_select(Select::Keep);
    harness.state_mut().set_select_tool(Tool::Brush, 30.0);
    let path = [at(0.2, 0.4), at(0.5, 0.6), at(0.8, 0.45)];
    let crop = draw_a_selection(harness, &path, &whole, 6);
    let [stroke] = crop.selections.as_slice() else { panic!("{crop:?}") };
    let Shape::Stroke { points, .. } = &stroke.shape else { panic!("{stroke:?}") };
    assert!(points.len() >= 3 && stroke.keep, "{stroke:?}");

    // Shown all again, "Hide likely floaters" keeps the dense scene's cells of the run's
    // splats: those the CPU finds in the whole export, and the export keeps what they keep.
    harness.state_mut().set_crop(&Filter::default());
    harness.state_mut().hide_likely_floaters();
    let crop = wait_for(harness, "the scene's cells", 60, |s| s.crop.scene_cells.is_some()).crop;
    let cells = splat_trainer::formats::filter::scene_cells(&whole).expect("the scene's cells");
    assert_eq!(crop.scene_cells.as_ref(), Some(&cells));
    harness.get_by_label("Export PLY").click();
    let exported =
        wait_for(harness, "the export", 60, |s| s.exported.len() >= 7).exported[6].clone();
    let mut expected = whole.clone();
    let counts = crop.apply(&mut expected);
    assert_eq!(load(&exported), expected, "the export is what the scene's cells keep ({counts:?})");
    assert_eq!(harness.state().ui_state().step, 40, "the crop did not touch the run");
}

/// Drags the pointer over the viewport along `path` (with Select on: a rectangle from its
/// first to its last point, or a brush stroke along it), turns Select off and exports, the
/// run's `nth` export; checks that the export holds what the crop keeps of `whole` on the CPU,
/// and returns the crop.
fn draw_a_selection(
    harness: &mut Harness<'static, SplatApp>,
    path: &[egui::Pos2],
    whole: &splat_trainer::formats::Splats,
    nth: usize,
) -> Filter {
    harness.step();
    harness.hover_at(path[0]);
    harness.step();
    harness.drag_at(path[0]);
    harness.step();
    for leg in path.windows(2) {
        for k in 1..=5 {
            harness.hover_at(leg[0] + (leg[1] - leg[0]) * k as f32 / 5.0);
            harness.step();
        }
    }
    harness.drop_at(path[path.len() - 1]);
    harness.step();
    let crop = harness.state().ui_state().crop;
    harness.state_mut().set_select(Select::Off);
    harness.get_by_label("Export PLY").click();
    let exported = wait_for(harness, "the selected export", 60, |s| s.exported.len() >= nth)
        .exported[nth - 1]
        .clone();
    let mut expected = whole.clone();
    crop.apply(&mut expected);
    let selected = match splat_trainer::formats::load_file(&exported).expect("it loads") {
        splat_trainer::formats::Loaded::Splats { splats, .. } => splats,
        splat_trainer::formats::Loaded::Points(_) => panic!("points"),
    };
    assert!(
        !selected.is_empty() && selected.len() < whole.len(),
        "{} of {}",
        selected.len(),
        whole.len()
    );
    assert_eq!(selected, expected, "the export is what the crop keeps");
    crop
}

/// Drags the first face handle of `before` that the viewport shows (with the face across
/// from it) by 40 × 24 points; returns the box after it.
fn drag_a_face_handle(harness: &mut Harness<'static, SplatApp>, before: CropBox) -> CropBox {
    for _ in 0..3 {
        harness.step();
    }
    let handles = harness.state().ui_state().crop_handles;
    let at = |handles: &[(&str, [f32; 2])], name: &str| {
        handles.iter().find(|(n, _)| *n == name).map(|(_, [x, y])| egui::pos2(*x, *y))
    };
    let (grabbed, across) =
        [("box x max", "box x min"), ("box y max", "box y min"), ("box z max", "box z min")]
            .into_iter()
            .find(|(a, b)| at(&handles, a).is_some() && at(&handles, b).is_some())
            .unwrap_or_else(|| {
                panic!("no face of the box and the one across in view: {handles:?}")
            });
    let from = at(&handles, grabbed).expect("found above");
    harness.hover_at(from);
    harness.step();
    harness.drag_at(from);
    harness.step();
    for k in 1..=4 {
        harness.hover_at(from + egui::vec2(10.0, 6.0) * k as f32);
        harness.step();
    }
    harness.drop_at(from + egui::vec2(40.0, 24.0));
    harness.step();
    let state = harness.state().ui_state();
    let after = state.crop.crop_box.expect("the box is still there");
    assert_ne!(after, before, "dragging {grabbed} changed nothing");
    assert_eq!(after.turn.map(f32::to_bits), before.turn.map(f32::to_bits));
    let stayed = at(&state.crop_handles, across).expect("the face across is still drawn");
    let was = at(&handles, across).expect("found above");
    assert!((stayed - was).length() < 0.5, "{across} moved from {was} to {stayed}");
    after
}

/// The Turntable video button makes an .mp4 of the run (cropped as shown) in the exports
/// folder: ffprobe counts its frames.
fn a_turntable_video_is_made_with_progress(harness: &mut Harness<'static, SplatApp>) {
    let engines = [("ffmpeg", "-version"), ("ffprobe", "-version")];
    if !crate::helpers::engines_present("a_turntable_video_is_made_with_progress", &engines) {
        return;
    }
    harness.state_mut().set_video(1.0, (64, 48));
    harness.get_by_label("Turntable video").click();
    let made =
        wait_for(harness, "the video", 300, |s| !s.videos.is_empty() || !s.errors.is_empty());
    assert!(made.errors.is_empty(), "{:?}", made.errors);
    let video = &made.videos[0];
    assert!(video.to_string_lossy().ends_with("-turntable.mp4"), "{}", video.display());
    assert_eq!(probe(video), "64,48,30");
    a_path_video_follows_the_keyframes_placed_in_the_viewer(harness);
}

/// What ffprobe counts in `video`: "width,height,frames".
fn probe(video: &Path) -> String {
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_read_frames,width,height", "-of", "csv=p=0"])
        .arg(video)
        .output()
        .expect("ffprobe runs");
    String::from_utf8_lossy(&probe.stdout).trim().to_owned()
}

/// Two keyframes placed from two dataset cameras, 2 s apart: "Save path" writes the file
/// `render --path` reads (the same two poses), and "Path video" films 2 s at 30 frames a
/// second, both ends included: 61 frames, which ffprobe counts. The ledger after the video is
/// as before it.
fn a_path_video_follows_the_keyframes_placed_in_the_viewer(
    harness: &mut Harness<'static, SplatApp>,
) {
    for camera in [0, 5] {
        harness.state_mut().jump_to_camera(camera);
        // Half a second of frames (a 60th each): two clicks closer would be a double click.
        for _ in 0..30 {
            harness.step();
        }
        harness.get_by_label("Add keyframe").click();
        wait_for(harness, "the keyframe", 10, |s| s.keyframes == camera.min(1) + 1);
    }
    harness.get_by_label("Save path").click();
    let saved = wait_for(harness, "the camera path", 10, |s| !s.camera_paths.is_empty());
    let text = std::fs::read_to_string(&saved.camera_paths[0]).expect("the path file");
    let file: splat_trainer::render::camera_path::PathFile =
        serde_json::from_str(&text).expect("a camera path file");
    let path = file.to_path().expect("a usable path");
    assert_eq!(path.keyframes().len(), 2);
    assert!((path.duration() - 2.0).abs() < 1e-6, "{}", path.duration());

    settle(harness);
    let before = harness.state().gpu().ledger().snapshot();
    harness.get_by_label("Path video").click();
    let made =
        wait_for(harness, "the path video", 300, |s| s.videos.len() >= 2 || !s.errors.is_empty());
    assert!(made.errors.is_empty(), "{:?}", made.errors);
    // The video's renderer, scratch and frames are gone with it: the ledger is as it was.
    settle(harness);
    let after = harness.state().gpu().ledger().snapshot();
    assert_eq!(
        (after.total_bytes, after.allocations.len()),
        (before.total_bytes, before.allocations.len()),
        "the video left memory behind: {:?} → {:?}",
        before.by_owner,
        after.by_owner
    );
    let video = &made.videos[1];
    assert!(video.to_string_lossy().ends_with("-path.mp4"), "{}", video.display());
    assert_eq!(probe(video), "64,48,61");
}

#[test]
fn every_kind_of_file_does_the_right_thing() {
    let out = temp_dir("files");
    // Open a splat file from the command line: no dataset, the file is shown.
    let spz = data("splats/spz/biker.spz");
    let mut harness = harness(GuiArgs {
        path: Some(spz.clone()),
        out: Some(out.clone()),
        start: false,
        steps: Some(20),
        memory_budget: Some(BUDGET),
    });
    wait_for(&mut harness, "the splat file", 120, |s| {
        s.viewing_file.as_deref() == Some(spz.as_path()) && s.frame == Some(None)
    });
    harness.state_mut().set_log_visible(false);
    settle(&mut harness);
    harness.snapshot_options("view-splat-file", &snapshots().max_failed_pixels(STRICT_PIXELS));
    harness.state_mut().set_log_visible(true);

    // A point cloud needs a dataset: a clear message, nothing else changes.
    drop_file(&mut harness, data("pointclouds/donut-xyz-rgb-45624.ply"));
    let state = wait_for(&mut harness, "the point-cloud message", 60, |s| !s.errors.is_empty());
    assert!(state.errors[0].contains("open a dataset first"), "{:?}", state.errors);

    // A dataset folder loads.
    drop_file(&mut harness, data("datasets/tiny-per-frame-intrinsics"));
    wait_for(&mut harness, "the dataset", 120, |s| {
        s.task == TaskState::Ready && s.dataset.is_some()
    });
    // Now the point cloud becomes init.ply.
    let cloud = data("pointclouds/donut-xyz-rgb-45624.ply");
    drop_file(&mut harness, cloud.clone());
    wait_for(&mut harness, "init.ply", 60, |s| s.init.as_deref() == Some(cloud.as_path()));

    // Malformed and unsupported files: a message each; the app and its dataset stay.
    let errors_before = harness.state().ui_state().errors.len();
    for bad in [
        data("splats/splat/minimal-4.ksplat"),
        data("pointclouds/ply-rs/example_plys/single_elements_err_ascii.ply"),
        data("README.md"),
        out.join("does-not-exist.ply"),
    ] {
        drop_file(&mut harness, bad);
    }
    let state =
        wait_for(&mut harness, "four messages", 60, |s| s.errors.len() >= errors_before + 4);
    assert!(state.dataset.is_some(), "the dataset stays loaded");
    assert!(state.errors.iter().any(|e| e.to_lowercase().contains("ksplat")), "{:?}", state.errors);
    assert!(state.errors.iter().any(|e| e.contains("not something Splatforge opens")));

    // A compressed PLY and a .splat replace the viewed file; the previous one is freed.
    for file in ["splats/compressed-ply/biker.compressed.ply", "splats/splat/bob_10k.splat"] {
        let path = data(file);
        drop_file(&mut harness, path.clone());
        wait_for(&mut harness, file, 60, |s| s.viewing_file.as_deref() == Some(path.as_path()));
    }
    wait_for(&mut harness, "a frame of bob_10k", 60, |s| s.frame_splats == 10_000);
    let viewer_bytes = harness.state().gpu().ledger().owner_bytes(Owner::Viewer);
    // bob_10k (10,000 splats of SH 0) with its rasterizer scratch and the viewport texture is
    // about 5 MB; biker's 152k splats and the scratch grown for them (~45 MB) must be gone.
    assert!(viewer_bytes < 12 << 20, "the previous file's memory was freed: {viewer_bytes} B");
    drop(harness);
    let _ = std::fs::remove_dir_all(&out);
}

/// A file dropped onto the window, as the platform layer hands it to egui.
#[derive(Debug)]
struct Dropped(PathBuf);

impl egui::DroppedFile for Dropped {
    fn path(&self) -> &Path {
        &self.0
    }

    fn bytes(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.0).map_err(|e| e.to_string())
    }
}

fn drop_file(harness: &mut Harness<'static, SplatApp>, path: PathBuf) {
    harness.input_mut().dropped_files.push(std::sync::Arc::new(Dropped(path)));
    harness.step();
}

#[test]
#[ignore = "slow, about 150 s: the whole self-test (the suite's one) passes on the window's device and frees its buffers"]
fn help_self_test_runs_on_the_windows_device() {
    let mut harness = harness(GuiArgs {
        path: None,
        out: Some(temp_dir("self-test")),
        start: false,
        steps: Some(40),
        memory_budget: Some(BUDGET),
    });
    wait_for(&mut harness, "the sample scene", 120, |s| s.task == TaskState::Ready);
    harness.get_by_label("Help").click();
    for _ in 0..5 {
        harness.step();
    }
    harness.get_by_label("Self-test").click();
    // On its own thread: the window keeps drawing meanwhile.
    let state = wait_for(&mut harness, "the self-test", 600, |s| s.self_test.is_some());
    assert_eq!(state.self_test, Some(true), "{state:#?}");
    assert!(state.errors.is_empty(), "{:?}", state.errors);
    harness.get_by_label("All checks passed.");
    assert_eq!(
        harness.state().gpu().ledger().owner_bytes(Owner::Shared),
        0,
        "the self-test's buffers are gone"
    );
}

/// A video dropped on the window: it asks whether to compute camera poses, runs COLMAP on its
/// own thread while the window keeps drawing, and opens the dataset it wrote. Needs COLMAP and
/// ffmpeg (see `tests/it/cli_poses.rs`: skipped with a reason without them, unless
/// `SPLATFORGE_REQUIRE_ENGINES` is set).
#[test]
fn a_dropped_video_gets_camera_poses_and_opens() {
    let engines = ["colmap", "ffmpeg"];
    if engines.iter().any(|e| std::process::Command::new(e).arg("-h").output().is_err()) {
        assert!(
            std::env::var_os("SPLATFORGE_REQUIRE_ENGINES").is_none(),
            "COLMAP or ffmpeg is not on the PATH, and SPLATFORGE_REQUIRE_ENGINES is set"
        );
        eprintln!("a_dropped_video_gets_camera_poses_and_opens: skipped: no COLMAP or ffmpeg");
        return;
    }
    let dir = temp_dir("poses");
    let video = dir.join("desk.mp4");
    // Twelve consecutive frames of the desk-penguin phone capture, small.
    let made = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-framerate", "4", "-i"])
        .arg(data("datasets/desk-penguin-opencv/images/input_%04d.jpg"))
        .args(["-frames:v", "12", "-vf", "scale=400:-2", "-c:v", "mpeg4", "-q:v", "3"])
        .arg(&video)
        .output()
        .expect("ffmpeg runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let mut harness = harness(GuiArgs {
        path: None,
        out: Some(dir.clone()),
        start: false,
        steps: Some(20),
        memory_budget: Some(BUDGET),
    });
    wait_for(&mut harness, "the sample scene", 120, |s| s.task == TaskState::Ready);
    drop_file(&mut harness, video);
    wait_for(&mut harness, "the question", 60, |s| s.poses_window);
    // A new window is laid out invisibly in its first frame.
    for _ in 0..5 {
        harness.step();
    }
    harness.get_by_label("Compute camera poses").click();
    let dataset = dir.join("desk_dataset");
    let state = wait_for(&mut harness, "the dataset from the video", 600, |s| {
        s.dataset.as_deref() == Some(dataset.as_path()) && s.task == TaskState::Ready
    });
    assert!(state.errors.is_empty(), "{:?}", state.errors);
    assert!(!state.poses_window, "the window closes when the dataset opens");
    drop(harness);
    let _ = std::fs::remove_dir_all(&dir);
}
