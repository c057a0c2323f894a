//! `scripts/gpu-figures.sh`, the one command a lent GPU machine runs, and `splatforge
//! self-test`, its first step: on a CPU adapter (lavapipe here) the script refuses in words
//! unless --allow-cpu; with --allow-cpu --tiny it runs every step to the end, each status kept,
//! everything under its output folder; and the self-test in it (the quick one: the suite's
//! whole self-test is the window's, `gui::help_self_test_runs_on_the_windows_device`) passes
//! every check on this machine's adapter, names them, and its JSON report holds the adapter,
//! the checks with their figures and the verdict.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::path::Path;
use std::process::{Command, Output};

use splat_test_support::TempDir;

use crate::helpers::error_lines;

fn script(args: &[&str], out: &Path) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    Command::new("bash")
        .arg(root.join("scripts/gpu-figures.sh"))
        .arg("run")
        .args(args)
        .arg(root.join("assets/sample-scene.zip"))
        .arg(out)
        .env("SPLATFORGE", env!("CARGO_BIN_EXE_splatforge"))
        .output()
        .expect("run bash")
}

#[test]
#[ignore = "slow, about 20 s: the GPU script refuses a CPU adapter, and with --allow-cpu --tiny runs every step"]
fn the_gpu_script_refuses_a_cpu_adapter_and_runs_every_step_with_allow_cpu() {
    let temp = TempDir::new("gpu-script");
    let refused = script(&[], &temp.path().join("refused"));
    let adapter = std::fs::read_to_string(temp.path().join("refused/adapter.json")).unwrap();
    if adapter.contains("\"device_type\": \"Cpu\"") {
        assert_eq!(refused.status.code(), Some(3), "{refused:?}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("refusing: the adapter is a CPU"), "{stderr}");
        assert!(!temp.path().join("refused/self-test.json").exists(), "a step ran after refusing");
    }

    let out = temp.path().join("tiny");
    let ran = script(&["--allow-cpu", "--tiny"], &out);
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(ran.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&ran.stderr));
    let status = std::fs::read_to_string(out.join("status.txt")).unwrap();
    let steps: Vec<&str> = status.lines().collect();
    assert_eq!(
        steps,
        ["adapter 0", "self-test 0", "bench-train 0", "bench-render 0", "train 0"],
        "{stdout}"
    );
    for file in ["bench-train.json", "bench-render.json", "train/splats.ply"] {
        assert!(out.join(file).is_file(), "{file} missing:\n{stdout}");
    }
    assert!(out.join("data").is_dir(), "the sample scene went elsewhere than OUT");
    self_test_passed(&out);
}

/// The self-test's printout (`self-test.txt`) and report (`self-test.json`) in `out`.
fn self_test_passed(out: &Path) {
    let printed = std::fs::read_to_string(out.join("self-test.txt")).unwrap();
    assert!(error_lines(&printed).is_empty(), "{printed}");
    for check in ["forward", "backward", "reductions", "training"] {
        assert!(printed.lines().any(|l| l.starts_with("ok") && l.contains(check)), "{printed}");
    }
    assert!(printed.contains("all checks passed"), "{printed}");
    assert!(printed.contains("memory budget "), "{printed}");

    let json = std::fs::read(out.join("self-test.json")).unwrap();
    let report: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(report["passed"], true);
    assert!(!report["adapter"]["name"].as_str().unwrap().is_empty());
    assert!(report["adapter"]["largest_run_by_budget"].as_u64().unwrap() > 100_000);
    assert!(!report["adapter"]["memory_budget"].as_str().unwrap().is_empty());
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 4);
    for check in checks {
        assert_eq!(check["passed"], true, "{check}");
        assert!(!check["figures"].as_object().unwrap().is_empty(), "{check}");
    }
    // --tiny asks for the quick self-test: 60 training steps, not 150.
    let training = checks.iter().find(|c| c["name"] == "training").unwrap();
    assert_eq!(training["figures"]["steps"], 60.0, "{training}");
    // lavapipe has timestamps: the training step's passes are timed.
    if report["adapter"]["timestamps"] == true {
        let passes = report["passes"].as_array().unwrap();
        assert!(passes.iter().any(|p| p["pass"] == "rasterize backward"), "{passes:?}");
    }
}
