//! Rules about the repository itself: the crates depend one way (formats <- render <- trainer <- app,
//! formats <- trainer) and only the app may know UI crates, with `cargo tree` as the source
//! of truth so a UI crate that leaks into a lower layer through any path fails here; and CI
//! runs the test command the README shows.

use std::process::Command;

fn normal_dependencies(package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "-p",
            package,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn crate_names(tree: &str) -> Vec<&str> {
    tree.lines().filter_map(|l| l.split_whitespace().next()).collect()
}

const UI_CRATES: [&str; 6] = ["egui", "eframe", "egui-wgpu", "winit", "rfd", "indicatif"];

#[test]
fn lower_layers_know_no_ui() {
    for package in ["splat-render", "splat-formats", "splat-trainer"] {
        let tree = normal_dependencies(package);
        let names = crate_names(&tree);
        for ui in UI_CRATES {
            assert!(!names.contains(&ui), "{package} depends on {ui}");
        }
    }
}

#[test]
fn layers_point_one_way() {
    let render = normal_dependencies("splat-render");
    let render = crate_names(&render);
    for upper in ["splat-trainer", "splatforge"] {
        assert!(!render.contains(&upper), "splat-render depends on {upper}");
    }
    let formats = normal_dependencies("splat-formats");
    let formats = crate_names(&formats);
    for other in ["splat-render", "splat-trainer", "splatforge", "wgpu"] {
        assert!(!formats.contains(&other), "splat-formats depends on {other}");
    }
    let trainer = normal_dependencies("splat-trainer");
    assert!(!crate_names(&trainer).contains(&"splatforge"), "splat-trainer depends on the app");
}

#[test]
fn one_wgpu_version() {
    // The app and the trainer share eframe's device only if there is a single wgpu.
    let tree = normal_dependencies("splatforge");
    // `cargo tree` marks a crate it has shown before with " (*)": same crate, same version.
    let versions: std::collections::BTreeSet<&str> = tree
        .lines()
        .filter(|l| l.starts_with("wgpu v"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(versions.len(), 1, "wgpu versions: {versions:?}");
}

#[test]
fn ci_runs_exactly_the_readme_test_command() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    let command = ci
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .expect(".ci/run has a last command");
    assert!(
        readme.lines().any(|l| l.trim() == command),
        "README.md does not show the command .ci/run runs: {command}"
    );
}
