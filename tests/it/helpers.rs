//! What the end-to-end tests share.

/// The `error` lines of a command's stderr. Mesa prints "error: `XDG_RUNTIME_DIR` is
/// invalid" on machines without a session; such lines are the driver's, not ours.
pub fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("error") && !l.contains("XDG_RUNTIME_DIR")).collect()
}

/// Whether each `(program, flag)` runs (`ffmpeg -version`); when one does not and the engines
/// are not required (`SPLATFORGE_REQUIRE_ENGINES`, set by `.ci/run`, which installs them),
/// prints why the test is skipped. Fails the test when they are required.
pub fn engines_present(test: &str, engines: &[(&str, &str)]) -> bool {
    let runs =
        |program: &str, flag: &str| std::process::Command::new(program).arg(flag).output().is_ok();
    let missing: Vec<&str> = engines.iter().filter(|(p, f)| !runs(p, f)).map(|(p, _)| *p).collect();
    if missing.is_empty() {
        return true;
    }
    let missing = missing.join(" and ");
    assert!(
        std::env::var_os("SPLATFORGE_REQUIRE_ENGINES").is_none(),
        "{test}: {missing} is not on the PATH, and SPLATFORGE_REQUIRE_ENGINES is set"
    );
    eprintln!("{test}: skipped: {missing} is not installed on this machine");
    false
}
