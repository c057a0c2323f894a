//! What the tests of every crate share (each crate's tests are one binary, `tests/it/`):
//! the shared data's path, temporary folders, and measuring the test's own process, which
//! needs the process to itself ([`assert_own_process`]: cargo-nextest gives every test one).

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A file or folder of `../shared/data` beside the repository (its README lists the sources).
/// Tests read it in place and never copy it into the tree.
#[must_use]
pub fn data(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data").join(relative)
}

/// A dataset folder of `../shared/data/datasets`.
#[must_use]
pub fn dataset_path(name: &str) -> PathBuf {
    data("datasets").join(name)
}

/// A fresh folder in the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// # Panics
    /// When the folder cannot be made.
    #[must_use]
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let unique = format!(
            "splatforge-test-{label}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(unique);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies the folder `from` into `to` (created), recursively. Copies are writable even when
/// the originals are read-only.
///
/// # Panics
/// When a file cannot be read or written.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create folder");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::write(&target, std::fs::read(&path).expect("read")).expect("write");
        }
    }
}

/// For a test that measures the whole process (its resident set, its heap through
/// [`CountingAllocator`]): panics unless this process runs test `name` (`module::function`)
/// and nothing else, as cargo-nextest runs every test (README's test commands). Under
/// `cargo test` the tests of a binary share one process, and the figures would be theirs
/// together. The name is checked so that a renamed test cannot pass unmeasured.
///
/// # Panics
/// When the test does not run alone in its process under that name.
pub fn assert_own_process(name: &str) {
    let mode = std::env::var("NEXTEST_EXECUTION_MODE").unwrap_or_default();
    assert!(
        mode == "process-per-test",
        "{name} measures its whole process: run it with `cargo nextest run` (a process a test), \
         not `cargo test`"
    );
    let running = std::env::var("NEXTEST_TEST_NAME").unwrap_or_default();
    assert_eq!(running, name, "assert_own_process names another test than the one running");
}

/// Set in the child process [`rerun_with_env`] starts, to the name of the test it runs.
const CHILD: &str = "SPLATFORGE_TEST_CHILD";

/// Whether this process is the one [`rerun_with_env`] started for test `name`.
#[must_use]
pub fn is_rerun(name: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|running| running == name)
}

/// Runs test `name` of this test binary again, in a child process with `envs` added: for a
/// setting a driver reads once when it loads (lavapipe's subgroup width), compared in one
/// test with this process's run. Panics unless exactly that test ran there and passed (a
/// renamed test would otherwise pass by running nothing). What the child printed is printed
/// here, through the test's capture.
///
/// # Panics
/// When the child fails, runs no test, or cannot start.
pub fn rerun_with_env(name: &str, envs: &[(&str, &OsStr)]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args(["--exact", name, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .envs(envs.iter().copied())
        .output()
        .expect("start the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    assert!(out.status.success(), "{name} failed in its child process:\n{stdout}");
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name} did not run in its child process (renamed?):\n{stdout}"
    );
}

/// The resident set of this process, where `/proc` tells it (Linux).
#[must_use]
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    Some(statm.split_whitespace().nth(1)?.parse::<u64>().ok()? * 4096)
}

/// The system allocator, counting live heap bytes and their peak; a test binary installs it
/// with `#[global_allocator]`, and a test reading it checks [`assert_own_process`].
pub struct CountingAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl CountingAllocator {
    /// Starts a measurement: the peak is the live bytes now. Returns them.
    pub fn start() -> usize {
        let live = LIVE.load(Ordering::Relaxed);
        PEAK.store(live, Ordering::Relaxed);
        live
    }

    /// The most live bytes since [`Self::start`].
    #[must_use]
    pub fn peak() -> usize {
        PEAK.load(Ordering::Relaxed)
    }
}

#[expect(unsafe_code, reason = "a global allocator is unsafe to implement by definition")]
// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}
