//! `splatforge train`: every dataset in ../shared/data trains (a few steps), the output folder
//! holds a PLY that loads and the metrics the README lists; bad input is one clear line.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use std::path::Path;
use std::process::Command;

use splat_test_support::data;
use splat_trainer::formats::{Loaded, load_file};

use crate::helpers::error_lines;

fn train(args: &[&str]) -> (bool, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_splatforge")).arg("train").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn every_dataset_trains_and_writes_its_outputs() {
    let root = std::env::temp_dir().join(format!("splatforge-cli-train-{}", std::process::id()));
    for name in [
        "tiny-per-frame-intrinsics",
        "desk-statue-colmap",
        "maupertuis-colmap-txt",
        "fox-transforms",
        "lego-blender",
    ] {
        let out = root.join(name);
        let (ok, stderr) = train(&[
            data(&format!("datasets/{name}")).to_str().unwrap(),
            "--steps",
            "6",
            "--max-resolution",
            "48",
            "--eval-every",
            "3",
            "--max-splats",
            "5000",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(ok, "{name}: {stderr}");
        let metrics: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
        for key in [
            "steps",
            "seconds",
            "steps_per_second",
            "final_psnr",
            "final_ssim",
            "splats",
            "peak_gpu_bytes",
            "eval",
        ] {
            assert!(metrics.get(key).is_some(), "{name}: metrics.json lacks {key}: {metrics}");
        }
        assert_eq!(metrics["steps"], 6);
        assert_eq!(
            metrics["eval"].as_array().unwrap().len(),
            2,
            "{name}: evals at step 3 and the end"
        );
        assert!(metrics["final_psnr"].as_f64().unwrap() > 3.0, "{name}: {metrics}");
        let Loaded::Splats { splats, .. } = load_file(&out.join("splats.ply")).unwrap() else {
            panic!("{name}: not splats")
        };
        assert_eq!(splats.len() as u64, metrics["splats"].as_u64().unwrap());
        // Each evaluation with where the run stood: the curve of a run.
        let last = metrics["eval"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["step"], 6, "{name}: {last}");
        assert_eq!(last["splats"], metrics["splats"], "{name}: {last}");
        assert!(last["seconds"].as_f64().unwrap() > 0.0, "{name}: {last}");
        assert!(last["peak_gpu_bytes"].as_u64().unwrap() > 0, "{name}: {last}");
        assert!(splats.len() <= 5000, "{name}: --max-splats holds");
        assert!(!out.join("splats.ply.partial").exists());
    }
    std::fs::remove_dir_all(root).ok();
}

#[test]
fn bad_input_is_one_clear_line() {
    let tiny = data("datasets/tiny-per-frame-intrinsics");
    let out = std::env::temp_dir().join(format!("splatforge-cli-train-bad-{}", std::process::id()));
    let out = out.to_str().unwrap();
    for (args, words) in [
        (
            vec![
                data("splats/inria-ply/rtgs-16.ply").to_str().unwrap().to_string(),
                "--out".into(),
                out.into(),
            ],
            "no dataset found",
        ),
        (
            vec![
                tiny.to_str().unwrap().to_string(),
                "--steps".into(),
                "0".into(),
                "--out".into(),
                out.into(),
            ],
            "--steps",
        ),
        (
            vec![
                tiny.to_str().unwrap().to_string(),
                "--strategy".into(),
                "magic".into(),
                "--out".into(),
                out.into(),
            ],
            "'magic': compact, 3dgs or mcmc",
        ),
        (
            vec![
                tiny.to_str().unwrap().to_string(),
                "--max-splats".into(),
                "0".into(),
                "--out".into(),
                out.into(),
            ],
            "--max-splats",
        ),
        (
            vec![
                tiny.to_str().unwrap().to_string(),
                "--init".into(),
                data("splats/spz/minimal-v4.spz").to_str().unwrap().to_string(),
                "--out".into(),
                out.into(),
            ],
            "minimal-v4.spz",
        ),
        (
            vec![
                tiny.to_str().unwrap().to_string(),
                "--transparency".into(),
                "alpha-loss=-1".into(),
                "--out".into(),
                out.into(),
            ],
            "weight",
        ),
        (
            vec![
                tiny.to_str().unwrap().to_string(),
                "--transparency".into(),
                "magic".into(),
                "--out".into(),
                out.into(),
            ],
            "random-background, alpha-loss",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, stderr) = train(&args);
        assert!(!ok, "{args:?} should fail");
        let lines = error_lines(&stderr);
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(words), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(out).ok();
}

#[test]
fn checkpoints_and_resume() {
    let root = std::env::temp_dir().join(format!("splatforge-cli-resume-{}", std::process::id()));
    let first = root.join("first");
    // Loaded at another size than the default: the checkpoint carries that.
    let (ok, stderr) = train(&[
        data("datasets/tiny-per-frame-intrinsics").to_str().unwrap(),
        "--max-resolution",
        "40",
        "--steps",
        "10",
        "--checkpoint-every",
        "5",
        "--eval-every",
        "0",
        "--export",
        "ply,spz",
        "--out",
        first.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let checkpoint = first.join("checkpoint.ckpt");
    assert!(checkpoint.exists(), "{stderr}");
    // Both exports, and the checkpoint of the last step converts to the same PLY.
    let ply = std::fs::read(first.join("splats.ply")).unwrap();
    let Loaded::Splats { splats, .. } = load_file(&first.join("splats.spz")).unwrap() else {
        panic!("splats.spz holds points")
    };
    let converted = first.join("from-checkpoint.ply");
    let out = Command::new(env!("CARGO_BIN_EXE_splatforge"))
        .args(["convert".as_ref(), checkpoint.as_os_str(), converted.as_os_str()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(&converted).unwrap() == ply, "the checkpoint's splats are the export's");
    let Loaded::Splats { splats: from_ply, .. } = load_file(&converted).unwrap() else {
        panic!("points")
    };
    assert_eq!(splats.len(), from_ply.len());
    // Continue from the last checkpoint (step 10) to 15 steps in all, without naming the
    // dataset or how it was loaded: the checkpoint knows both.
    let second = root.join("second");
    let (ok, stderr) = train(&[
        "--resume",
        checkpoint.to_str().unwrap(),
        "--steps",
        "15",
        "--eval-every",
        "0",
        "--out",
        second.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(second.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["steps"], 15, "{metrics}");
    resume_options_must_agree_with_the_checkpoint(&checkpoint, &second);
    // A damaged checkpoint is refused with one clear line.
    let damaged = root.join("damaged.ckpt");
    let mut bytes = std::fs::read(&checkpoint).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&damaged, bytes).unwrap();
    let (ok, stderr) = train(&[
        "--resume",
        damaged.to_str().unwrap(),
        "--steps",
        "15",
        "--out",
        second.to_str().unwrap(),
    ]);
    assert!(!ok);
    let lines = error_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("damaged.ckpt"), "{stderr}");
    // Each thing said once (a cause's text was repeated after its own message).
    assert_eq!(lines[0].matches("checksum").count(), 1, "{stderr}");
    assert_eq!(lines[0].matches("damaged.ckpt").count(), 1, "{stderr}");
    std::fs::remove_dir_all(root).ok();
}

/// With --resume, options that contradict the checkpoint are refused, in one line; those that
/// agree with it are no contradiction.
fn resume_options_must_agree_with_the_checkpoint(checkpoint: &Path, second: &Path) {
    // Options that contradict the checkpoint are refused, in one line.
    let (ok, stderr) = train(&[
        "--resume",
        checkpoint.to_str().unwrap(),
        "--max-resolution",
        "50",
        "--out",
        second.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("--max-resolution 50: the checkpoint trained with 40"), "{stderr}");
    let (ok, stderr) = train(&[
        "--resume",
        checkpoint.to_str().unwrap(),
        "--transparency",
        "composite",
        "--out",
        second.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert_eq!(error_lines(&stderr).len(), 1, "{stderr}");
    assert!(
        stderr.contains("--transparency composite: the checkpoint trained with random-background"),
        "{stderr}"
    );
    // A setting given as the checkpoint has it is no contradiction: the run continues.
    let (ok, stderr) = train(&[
        "--resume",
        checkpoint.to_str().unwrap(),
        "--max-resolution",
        "40",
        "--strategy",
        "compact",
        "--progressive",
        "off",
        "--appearance",
        "auto",
        "--steps",
        "11",
        "--eval-every",
        "0",
        "--out",
        second.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
}

#[test]
fn a_memory_budget_caps_the_splat_count() {
    let out = std::env::temp_dir().join(format!("splatforge-cli-budget-{}", std::process::id()));
    let (ok, stderr) = train(&[
        data("datasets/desk-statue-colmap").to_str().unwrap(),
        "--steps",
        "3",
        "--max-resolution",
        "48",
        "--eval-every",
        "0",
        "--memory-budget",
        "2000000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("predicted peak GPU memory"), "{stderr}");
    assert!(stderr.contains("predicted peak passes the memory budget (1.91 MiB)"), "{stderr}");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    // The prediction is an upper bound: the measured peak fits the budget.
    assert!(metrics["peak_gpu_bytes"].as_u64().unwrap() <= 2_000_000, "{metrics}");
    std::fs::remove_dir_all(out).ok();
}
