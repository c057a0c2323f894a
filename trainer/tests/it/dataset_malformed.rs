//! Broken datasets give one clear error naming the file and what is wrong, never a panic.
//! Each test copies a real dataset from ../shared/data into a temp folder and breaks it.

use std::path::Path;

use splat_test_support::{TempDir, copy_dir, dataset_path};
use splat_trainer::dataset::{LoadOptions, load_dataset};

/// Loads `path` and returns the error message; panics when it loads.
fn load_error(path: &Path) -> String {
    match load_dataset(path, &LoadOptions::default()) {
        Ok(_) => panic!("{} loaded but should not", path.display()),
        Err(e) => e.to_string(),
    }
}

/// Copies `sparse/` of the desk statue (binary COLMAP) into a temp dataset with an empty
/// `images/` folder: parsing errors come before any image is needed.
fn desk_sparse_copy(label: &str) -> TempDir {
    let temp = TempDir::new(label);
    copy_dir(&dataset_path("desk-statue-colmap/sparse"), &temp.path().join("sparse"));
    std::fs::create_dir(temp.path().join("images")).expect("images folder");
    temp
}

fn truncate(path: &Path, len: usize) {
    let bytes = std::fs::read(path).expect("read");
    std::fs::write(path, &bytes[..len]).expect("write");
}

fn assert_contains(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} should contain {part:?}");
    }
}

#[test]
fn truncated_binary_files_are_named() {
    for file in ["cameras.bin", "images.bin", "points3D.bin"] {
        let temp = desk_sparse_copy("truncated");
        let path = temp.path().join("sparse").join(file);
        let len = std::fs::metadata(&path).expect("size").len() as usize;
        truncate(&path, len / 2);
        let message = load_error(temp.path());
        assert_contains(&message, &[&path.display().to_string(), "truncated"]);
    }
}

#[test]
fn every_truncation_of_binary_files_fails_cleanly() {
    for file in ["cameras.bin", "images.bin", "points3D.bin"] {
        let temp = desk_sparse_copy("truncations");
        let path = temp.path().join("sparse").join(file);
        let original = std::fs::read(&path).expect("read");
        // Every length for the small file; ~300 lengths spread over the big ones, plus the
        // first bytes where counts and headers live.
        let step = (original.len() / 300).max(1);
        let lengths = (0..64.min(original.len())).chain((0..original.len()).step_by(step));
        for len in lengths {
            std::fs::write(&path, &original[..len]).expect("write");
            let message = load_error(temp.path());
            assert!(message.contains(file), "{file} cut to {len} bytes: {message}");
        }
    }
}

#[test]
fn mutated_binary_files_never_panic() {
    let mut state = 0x5EED_u64;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for file in ["cameras.bin", "images.bin", "points3D.bin"] {
        let temp = desk_sparse_copy("mutations");
        let path = temp.path().join("sparse").join(file);
        let original = std::fs::read(&path).expect("read");
        for _ in 0..60 {
            let mut bytes = original.clone();
            // Mutate the first 256 bytes more often: that is where counts and headers are.
            for _ in 0..4 {
                let range = if next() % 2 == 0 { bytes.len().min(256) } else { bytes.len() };
                let index = (next() % range as u64) as usize;
                bytes[index] = next() as u8;
            }
            std::fs::write(&path, &bytes).expect("write");
            // Ok (the images folder is empty, so never) or a clean error: no panic.
            let _ = load_dataset(temp.path(), &LoadOptions::default());
        }
    }
}

#[test]
fn points3d_with_a_huge_count_fails_fast() {
    let temp = desk_sparse_copy("huge-count");
    let path = temp.path().join("sparse/points3D.bin");
    let mut bytes = 4_000_000_000_u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0; 1016]);
    std::fs::write(&path, bytes).expect("write");
    let start = std::time::Instant::now();
    let message = load_error(temp.path());
    assert!(start.elapsed().as_secs_f64() < 1.0, "took {:?}", start.elapsed());
    assert_contains(&message, &["points3D.bin", "claims 4000000000 points", "1016 bytes left"]);
}

#[test]
fn missing_images_folder() {
    let temp = TempDir::new("no-images");
    copy_dir(&dataset_path("desk-statue-colmap/sparse"), &temp.path().join("sparse"));
    let message = load_error(temp.path());
    assert_contains(
        &message,
        &[&temp.path().join("images").display().to_string(), "image folder is missing"],
    );
}

#[test]
fn unsupported_camera_model_text() {
    let temp = TempDir::new("fov-txt");
    copy_dir(&dataset_path("maupertuis-colmap-txt"), temp.path());
    let cameras = temp.path().join("sparse/0/cameras.txt");
    let text = std::fs::read_to_string(&cameras).expect("read");
    std::fs::write(
        &cameras,
        text.replace(
            "SIMPLE_PINHOLE 1919 1079 1847.53 959.5 539.5",
            "FOV 1919 1079 1847.53 1847.53 959.5 539.5 0.1",
        ),
    )
    .expect("write");
    let message = load_error(temp.path());
    assert_contains(
        &message,
        &["cameras.txt", "camera 1 uses the FOV camera model", "not supported"],
    );
}

#[test]
fn unknown_camera_model_binary() {
    let temp = desk_sparse_copy("model-99");
    let path = temp.path().join("sparse/cameras.bin");
    let mut bytes = std::fs::read(&path).expect("read");
    // First camera's model id follows the u64 count and its u32 id.
    bytes[12..16].copy_from_slice(&99_i32.to_le_bytes());
    std::fs::write(&path, bytes).expect("write");
    let message = load_error(temp.path());
    assert_contains(&message, &["cameras.bin", "unknown (id 99) camera model", "not supported"]);
}

/// Distorted cameras load without a warning, undistorted: the pinhole camera's centre pixels
/// are the source's, the periphery moves; a fisheye camera loads too.
#[test]
fn distorted_cameras_are_undistorted() {
    let pinhole = load_dataset(
        &dataset_path("maupertuis-colmap-txt"),
        &LoadOptions { max_resolution: 240, ..LoadOptions::default() },
    )
    .expect("pinhole loads");
    for (model, line) in [
        ("radial", "SIMPLE_RADIAL 1919 1079 1847.53 959.5 539.5 -0.1"),
        ("fisheye", "OPENCV_FISHEYE 1919 1079 1847.53 1847.53 959.5 539.5 0.05 0 0 0"),
    ] {
        let temp = TempDir::new(model);
        copy_dir(&dataset_path("maupertuis-colmap-txt"), temp.path());
        let cameras = temp.path().join("sparse/0/cameras.txt");
        let text = std::fs::read_to_string(&cameras).expect("read");
        std::fs::write(
            &cameras,
            text.replace("SIMPLE_PINHOLE 1919 1079 1847.53 959.5 539.5", line),
        )
        .expect("write");
        let options = LoadOptions { max_resolution: 240, ..LoadOptions::default() };
        let dataset = load_dataset(temp.path(), &options).expect("distorted loads");
        assert!(dataset.warnings.is_empty(), "{model}: {:?}", dataset.warnings);
        let (a, b) = (&pinhole.train[0], &dataset.train[0]);
        assert_eq!(a.camera, b.camera, "{model}: the same pinhole camera");
        let (w, h) = a.image.dimensions();
        let centre = |image: &image::RgbImage| image.get_pixel(w / 2, h / 2).0;
        assert_eq!(centre(&a.image), centre(&b.image), "{model}: the centre stays");
        let moved = a.image.pixels().zip(b.image.pixels()).filter(|(p, q)| p != q).count();
        assert!(moved > (w * h / 10) as usize, "{model}: only {moved} pixels moved");
    }
}

#[test]
fn invalid_json() {
    let temp = TempDir::new("bad-json");
    copy_dir(&dataset_path("tiny-per-frame-intrinsics"), temp.path());
    let path = temp.path().join("transforms.json");
    std::fs::write(&path, "{\"frames\": [ {\"file_path\": ").expect("write");
    let message = load_error(temp.path());
    assert_contains(&message, &[&path.display().to_string(), "invalid transforms JSON", "line 1"]);

    std::fs::write(
        &path,
        "{\"frames\": [{\"file_path\": \"train/r_0.png\", \"transform_matrix\": [[1,0,0,0]]}]}",
    )
    .expect("write");
    let message = load_error(temp.path());
    assert_contains(
        &message,
        &["transforms.json", "frame 0 (train/r_0.png)", "transform_matrix has 1 rows"],
    );
}

#[test]
fn transforms_without_any_image() {
    let temp = TempDir::new("no-frames");
    std::fs::copy(
        dataset_path("fox-transforms/transforms.json"),
        temp.path().join("transforms.json"),
    )
    .expect("copy");
    let message = load_error(temp.path());
    assert_contains(&message, &["transforms.json", "no usable images"]);
}

#[test]
fn corrupt_image_is_named() {
    let temp = TempDir::new("bad-png");
    copy_dir(&dataset_path("tiny-per-frame-intrinsics"), temp.path());
    let image = temp.path().join("train/r_0.png");
    truncate(&image, 100);
    let message = load_error(temp.path());
    assert_contains(&message, &[&image.display().to_string(), "cannot decode image"]);
}

#[test]
fn colmap_image_with_unknown_camera() {
    let temp = TempDir::new("camera-id");
    copy_dir(&dataset_path("maupertuis-colmap-txt"), temp.path());
    let images = temp.path().join("sparse/0/images.txt");
    let text = std::fs::read_to_string(&images).expect("read");
    std::fs::write(&images, text.replace(" 1 03.jpg", " 7 03.jpg")).expect("write");
    let message = load_error(temp.path());
    assert_contains(&message, &["images.txt", "uses camera 7", "does not define"]);
}

#[test]
fn not_a_dataset() {
    let temp = TempDir::new("empty");
    let message = load_error(temp.path());
    assert_contains(
        &message,
        &[&temp.path().display().to_string(), "no dataset found", "transforms.json"],
    );

    let missing = temp.path().join("does-not-exist");
    let message = load_error(&missing);
    assert_contains(&message, &["does-not-exist", "cannot read"]);

    let not_zip = temp.path().join("notes.zip");
    std::fs::write(&not_zip, "not a zip").expect("write");
    let message = load_error(&not_zip);
    assert_contains(&message, &["notes.zip", "not a readable zip archive"]);
}

#[test]
fn bad_init_ply_is_named() {
    let temp = TempDir::new("bad-ply");
    copy_dir(&dataset_path("tiny-per-frame-intrinsics"), temp.path());
    let ply = temp.path().join("init.ply");
    truncate(&ply, 300);
    let message = load_error(temp.path());
    assert!(message.starts_with(&ply.display().to_string()), "{message}");
}

#[test]
fn transforms_without_focal_length() {
    let temp = TempDir::new("no-focal");
    copy_dir(&dataset_path("tiny-per-frame-intrinsics"), temp.path());
    let path = temp.path().join("transforms.json");
    let json = r#"{"frames": [{"file_path": "train/r_0.png",
        "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}]}"#;
    std::fs::write(&path, json).expect("write");
    let message = load_error(temp.path());
    assert_contains(&message, &[&path.display().to_string(), "train/r_0.png", "no focal length"]);
}

/// `sparse/0` holds a 2-image model, `sparse/1` the full 4-image one: the larger wins.
#[test]
fn colmap_picks_the_model_with_most_images() {
    let temp = TempDir::new("two-models");
    copy_dir(&dataset_path("maupertuis-colmap-txt"), temp.path());
    let sparse = temp.path().join("sparse");
    std::fs::rename(sparse.join("0"), sparse.join("1")).expect("rename");
    copy_dir(&sparse.join("1"), &sparse.join("0"));
    let images = sparse.join("0/images.txt");
    let text = std::fs::read_to_string(&images).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    // 4 comment lines, then two lines per image: keep the first two images.
    std::fs::write(&images, lines[..8].join("\n")).expect("write");

    let dataset = load_dataset(temp.path(), &LoadOptions::default()).expect("loads");
    assert_eq!(dataset.train.len() + dataset.eval.len(), 4);
}

#[test]
fn colmap_missing_image_file_is_skipped_with_a_warning() {
    let temp = TempDir::new("colmap-missing");
    copy_dir(&dataset_path("maupertuis-colmap-txt"), temp.path());
    std::fs::remove_file(temp.path().join("images/02.jpg")).expect("remove");
    let dataset = load_dataset(temp.path(), &LoadOptions::default()).expect("loads");
    assert_eq!(dataset.train.len() + dataset.eval.len(), 3);
    assert_eq!(dataset.warnings.len(), 1, "{:?}", dataset.warnings);
    assert_contains(&dataset.warnings[0], &["images.txt", "skipped 1 of 4", "02.jpg"]);
}
