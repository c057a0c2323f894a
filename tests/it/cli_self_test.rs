//! `splatforge self-test` on this machine's adapter (lavapipe in CI): every check passes, the
//! summary names them, and the JSON report holds the adapter, the checks with their figures
//! and the verdict.

#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::process::Command;

use crate::helpers::error_lines;

#[test]
#[ignore = "slow: the whole self-test, about 3 minutes on lavapipe"]
fn self_test_passes_and_writes_its_report() {
    let dir = std::env::temp_dir().join(format!("splatforge-self-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_splatforge"))
        .args(["self-test", "--json"])
        .arg(&json)
        // The sample scene goes to the data folder: a temporary one here.
        .env("XDG_DATA_HOME", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(error_lines(&stderr).is_empty(), "{stderr}");
    for check in ["forward", "backward", "reductions", "training"] {
        assert!(stdout.lines().any(|l| l.starts_with("ok") && l.contains(check)), "{stdout}");
    }
    assert!(stdout.contains("all checks passed"), "{stdout}");

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["passed"], true);
    assert!(!report["adapter"]["name"].as_str().unwrap().is_empty());
    assert!(report["adapter"]["largest_run_by_budget"].as_u64().unwrap() > 100_000);
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 4);
    for check in checks {
        assert_eq!(check["passed"], true, "{check}");
        assert!(!check["figures"].as_object().unwrap().is_empty(), "{check}");
    }
    // lavapipe has timestamps: the training step's passes are timed.
    if report["adapter"]["timestamps"] == true {
        let passes = report["passes"].as_array().unwrap();
        assert!(passes.iter().any(|p| p["pass"] == "rasterize backward"), "{passes:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
