//! Rules about the repository itself: the crates depend one way (formats <- render <- trainer <- app,
//! formats <- trainer, poses <- app) and only the app may know UI crates, with `cargo tree` as the source
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
    for package in ["splat-render", "splat-formats", "splat-trainer", "splat-poses"] {
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
    // Poses drive external engines: no GPU, none of our other crates.
    let poses = normal_dependencies("splat-poses");
    let poses = crate_names(&poses);
    for other in ["splat-render", "splat-formats", "splat-trainer", "splatforge", "wgpu"] {
        assert!(!poses.contains(&other), "splat-poses depends on {other}");
    }
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

/// Every file ending in `.extension` under the repository's `folders`, with its path
/// relative to the root, and its text.
fn files_under(folders: &[&str], extension: &str) -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut folders: Vec<_> = folders.iter().map(|f| root.join(f)).collect();
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("read folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                let relative = path.strip_prefix(&root).unwrap_or(&path);
                found.push((relative.display().to_string(), text));
            }
        }
    }
    found
}

/// Every WGSL file of the repository, comments removed, with its path.
fn wgsl_files() -> Vec<(String, String)> {
    let mut files = files_under(&["render", "trainer", "app"], "wgsl");
    for (_, text) in &mut files {
        *text =
            text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    }
    files
}

/// The float-comparison guards that fast math may fold as if NaN and infinity did not
/// exist, found in `code`: a comparison with a literal of 1e30 or more (`abs(v) <= 3.4e38`),
/// a negated comparison (`!(det > 0.0)`, the usual way to catch NaN) and a value compared
/// with itself (`x != x`). Kernels test floats on their bits instead (`float_bits.wgsl`).
fn float_comparison_guards(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let is_compare = |s: &str| ["<=", ">=", "<", ">", "==", "!="].iter().any(|op| s.contains(op));
    for line in code.lines() {
        let line = &strip_generics(line).replace("->", "");
        let bytes = line.as_bytes();
        // A negated parenthesised comparison: `!(` … its matching `)`.
        for (at, _) in line.match_indices("!(") {
            let mut depth = 0;
            for (k, &b) in bytes.iter().enumerate().skip(at + 1) {
                depth += i32::from(b == b'(') - i32::from(b == b')');
                if depth == 0 {
                    let inside = &line[at + 2..k];
                    if is_compare(inside) {
                        found.push(format!("negated comparison: {}", line.trim()));
                    }
                    break;
                }
            }
        }
        // A huge literal on a line that compares.
        let huge = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '+'))
            .filter_map(|token| token.parse::<f64>().ok())
            .any(|v| v.abs() >= 1e30);
        if huge && is_compare(line) {
            found.push(format!("comparison with a huge literal: {}", line.trim()));
        }
        // `x != x` / `x == x`.
        for op in ["!=", "=="] {
            for (at, _) in line.match_indices(op) {
                let left = line[..at]
                    .trim_end()
                    .rsplit(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                    .next();
                let right = line[at + 2..]
                    .trim_start()
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                    .next();
                if left.is_some_and(|l| !l.is_empty()) && left == right {
                    found.push(format!("self-comparison: {}", line.trim()));
                }
            }
        }
    }
    found
}

/// `line` without type parameters (`vec3<f32>`, `array<atomic<u32>, 4>`), whose angle
/// brackets are not comparisons.
fn strip_generics(line: &str) -> String {
    let mut out = line.to_string();
    loop {
        let next = out.char_indices().find_map(|(at, c)| {
            (c == '<').then(|| {
                let rest = &out[at + 1..];
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ',' || c == ' '))?;
                (rest.as_bytes()[end] == b'>' && end > 0).then_some((at, at + end + 2))
            })?
        });
        match next {
            Some((start, end)) => out.replace_range(start..end, ""),
            None => return out,
        }
    }
}

#[test]
fn float_guards_in_wgsl_are_on_bits() {
    // The rule catches the guards it is about (so this test can fail).
    for bad in [
        "return all(abs(v) <= vec3<f32>(3.4e38));",
        "if !(det > 0.0) || !all_finite3(v) {",
        "if !(out.cut >= 0.0) {",
        "let nan = x != x;",
    ] {
        assert!(!float_comparison_guards(bad).is_empty(), "not caught: {bad}");
    }
    for good in
        ["if !is_positive_normal(det) || !all_finite3(v) {", "var least = 3.4e38;", "if !done {"]
    {
        assert!(float_comparison_guards(good).is_empty(), "caught: {good}");
    }
    let files = wgsl_files();
    assert!(files.len() > 10, "found only {} WGSL files", files.len());
    let offences: Vec<String> = files
        .iter()
        .flat_map(|(path, code)| {
            float_comparison_guards(code).into_iter().map(move |o| format!("{path}: {o}"))
        })
        .collect();
    assert!(
        offences.is_empty(),
        "float guards must test bits (float_bits.wgsl):\n{}",
        offences.join("\n")
    );
}

/// Every character outside ASCII in the window's code (its strings: what it shows) has a glyph
/// in egui's fonts: the window would draw a box for a missing one (the window tests panic on
/// it, but only when they happen to draw it: "→" got as far as the full tier, 2026-11-28).
#[test]
fn every_character_the_window_shows_has_a_glyph() {
    let gui = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gui");
    let mut shown = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&gui).expect("read app/src/gui").flatten() {
        let text = std::fs::read_to_string(entry.path()).expect("read a source file");
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let code = line.split(" // ").next().unwrap_or_default();
            shown.extend(code.chars().filter(|c| !c.is_ascii()));
        }
    }
    assert!(shown.contains(&'°'), "the scan finds the crop turn's degree sign: {shown:?}");
    let lays_out = |text: String| {
        std::panic::catch_unwind(move || {
            let ctx = egui::Context::default();
            ctx.set_missing_glyph_policy(egui::MissingGlyphPolicy::Panic);
            let mut output = ctx.run_ui(egui::RawInput::default(), |ui| {
                ui.label(&text);
                ui.monospace(&text);
            });
            // No renderer here: the font atlas's upload is not wanted.
            output.textures_delta.clear();
        })
        .is_ok()
    };
    // The check can fail: an arrow has no glyph in egui's fonts.
    assert!(!lays_out("→".to_owned()), "egui draws an arrow now: pick another missing glyph");
    let missing: Vec<char> = shown.into_iter().filter(|&c| !lays_out(c.to_string())).collect();
    assert!(missing.is_empty(), "no glyph in egui's fonts for {missing:?}");
}

/// Every Rust file of the workspace's crates, with its path relative to the root.
fn rust_files() -> Vec<(String, String)> {
    files_under(&["formats", "render", "trainer", "poses", "app", "tests"], "rs")
}

/// Every ignored test is a slow test that says how long it takes alone and what it proves
/// (`#[ignore = "slow, about 40 s: …"]`: TESTING.md) or a measurement for BENCHMARKS.md
/// (`measure_*`, which no tier runs).
#[test]
fn every_ignored_test_says_its_time_and_its_claim() {
    let mut offences = Vec::new();
    let mut checked = 0;
    for (path, text) in rust_files() {
        let lines: Vec<&str> = text.lines().collect();
        for (number, line) in lines.iter().enumerate() {
            let Some(reason) = line.trim().strip_prefix("#[ignore") else { continue };
            let name = lines[number..]
                .iter()
                .find_map(|l| l.trim().strip_prefix("fn "))
                .and_then(|l| l.split('(').next())
                .unwrap_or_default();
            checked += 1;
            if name.starts_with("measure_") {
                continue;
            }
            let reason = reason.trim_start_matches(" = \"").trim_end_matches("\"]");
            let said = reason.strip_prefix("slow, about ").and_then(|r| r.split_once(": "));
            let timed = said.is_some_and(|(time, claim)| {
                let (amount, unit) = time.split_once(' ').unwrap_or_default();
                amount.parse::<u32>().is_ok() && ["s", "min"].contains(&unit) && claim.len() > 10
            });
            if !timed {
                offences.push(format!("{path}:{}: {name}: {reason}", number + 1));
            }
        }
    }
    assert!(checked > 20, "the scan found only {checked} ignored tests");
    assert!(
        offences.is_empty(),
        "an ignored test is `measure_*` or says `slow, about N s: what it proves`:\n{}",
        offences.join("\n")
    );
}

/// Every test `.config/nextest.toml` names exists (a renamed test would silently leave its
/// group or its limits): each `test(=module::name)` is a function `name` in a file
/// `module.rs`, each `test(/^module::/)` a file `module.rs`.
#[test]
fn the_runners_settings_name_tests_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let config = std::fs::read_to_string(root.join(".config/nextest.toml")).expect("nextest.toml");
    let files = rust_files();
    let module = |name: &str| -> Vec<&String> {
        let file = format!("/{name}.rs");
        files.iter().filter(|(path, _)| path.ends_with(&file)).map(|(_, text)| text).collect()
    };
    let mut named = 0;
    let mut missing = Vec::new();
    for (prefix, exact) in [("test(=", true), ("test(/^", false)] {
        for piece in config.split(prefix).skip(1) {
            let Some(item) = piece.split([')', '/']).next() else { continue };
            let path: Vec<&str> = item.trim_end_matches("::").split("::").collect();
            named += 1;
            let found = if exact {
                let (function, module_name) = (path[path.len() - 1], path[path.len() - 2]);
                module(module_name).iter().any(|text| text.contains(&format!("fn {function}(")))
            } else {
                !module(path[0]).is_empty()
            };
            if !found {
                missing.push(item.to_owned());
            }
        }
    }
    assert!(named > 10, "the scan found only {named} names in nextest.toml");
    assert!(missing.is_empty(), "nextest.toml names tests that do not exist: {missing:?}");
}

/// A kernel is built one way (ARCHITECTURE.md): no library source but
/// `render/src/kernels/compute.rs` makes a compute pipeline or takes a pipeline's automatic
/// layout, and no WGSL binds a uniform (parameters are read-only storage).
#[test]
fn kernels_are_built_one_way() {
    let mut offences = Vec::new();
    for (path, text) in rust_files() {
        let library = path.contains("/src/") && !path.starts_with("tests");
        if !library || path.ends_with("render/src/kernels/compute.rs") {
            continue;
        }
        for call in ["create_compute_pipeline", "get_bind_group_layout"] {
            if text.contains(call) {
                offences.push(format!("{path}: {call}"));
            }
        }
    }
    for (path, text) in wgsl_files() {
        if text.contains("var<uniform>") {
            offences.push(format!("{path}: var<uniform>"));
        }
    }
    assert!(
        offences.is_empty(),
        "kernels are built through ComputeKernel:\n{}",
        offences.join("\n")
    );
}

/// No Rust file is over 1,000 lines: a file that long holds more than one thing, and is split
/// by what it holds (a module per part, as `trainer/src/train/` or `tests/it/densify/`).
#[test]
fn no_rust_file_is_over_a_thousand_lines() {
    let mut long: Vec<String> = rust_files()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > 1000)
        .map(|(path, text)| format!("{path}: {} lines", text.lines().count()))
        .collect();
    long.sort();
    assert!(long.is_empty(), "split these by what they hold:\n{}", long.join("\n"));
}
