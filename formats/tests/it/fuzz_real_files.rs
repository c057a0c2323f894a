//! Mutation fuzzing of every real file in ../shared/data/{splats,pointclouds}: each mutant
//! must give `Ok` or an error, never a panic, and reading it must not allocate more than a
//! small multiple of its size (a header may not make us allocate from a count it invents).
//!
//! Bounded in time: each file gets up to `ROUNDS` mutants or `BUDGET_PER_FILE`, whichever
//! ends first. The PRNG is seeded, so a failure names the seed and mutation to replay.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use splat_formats::random::SplitMix64;
use splat_test_support::{CountingAllocator, assert_own_process, data};

const ROUNDS: usize = 400;
const BUDGET_PER_FILE: Duration = Duration::from_millis(700);

/// The result of a read can be larger than the file (a 32-byte `.splat` row becomes 56
/// bytes of f32, an ASCII "0 0 0" row 24 bytes of positions plus 12 of colour) and vectors
/// double when they grow; 40× the input plus 1 MiB of fixed overhead covers every honest
/// file, while an allocation driven by an invented count is orders of magnitude larger.
fn allocation_limit(input_len: usize) -> usize {
    40 * input_len + (1 << 20)
}

struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values that break naive code: zero, all ones, sign bits, NaN, infinity.
const NASTY_WORDS: [u32; 7] =
    [0, u32::MAX, 0x7fff_ffff, 0x8000_0000, 0x7fc0_0000, 0x7f80_0000, 0xff80_0000];

fn mutate(rng: &mut Rng, input: &[u8]) -> (Vec<u8>, String) {
    let mut bytes = input.to_vec();
    let len = bytes.len();
    let what = match rng.below(6) {
        0 => {
            let cut = rng.below(len);
            bytes.truncate(cut);
            format!("truncate at {cut}")
        }
        1 => {
            let n = 1 + rng.below(8);
            for _ in 0..n {
                let i = rng.below(len);
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= 1 << rng.below(8);
                }
            }
            format!("{n} bit flips")
        }
        2 if len >= 4 => {
            let i = rng.below(len - 3);
            let word = NASTY_WORDS[rng.below(NASTY_WORDS.len())];
            bytes[i..i + 4].copy_from_slice(&word.to_le_bytes());
            format!("word {word:#x} at {i}")
        }
        3 => {
            // Header fields (counts, versions) live in the first bytes: hit them harder.
            let i = rng.below(len.min(300));
            let digit = b'0' + rng.below(10) as u8;
            if let Some(b) = bytes.get_mut(i) {
                *b = if b.is_ascii_digit() { b'9' } else { digit };
            }
            format!("header byte {i}")
        }
        4 => {
            let i = rng.below(len);
            let n = 1 + rng.below(16);
            let cut = (i + n).min(len);
            bytes.drain(i..cut);
            format!("delete {i}..{cut}")
        }
        _ => {
            let i = rng.below(len + 1);
            let junk: Vec<u8> = (0..=rng.below(16)).map(|_| rng.next() as u8).collect();
            bytes.splice(i..i, junk);
            format!("insert at {i}")
        }
    };
    (bytes, what)
}

fn gunzip(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).ok()?;
    Some(out)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("write to memory");
    encoder.finish().expect("finish gzip")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("data dir").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else if path
            .extension()
            .is_some_and(|e| ["ply", "spz", "splat", "ksplat"].contains(&e.to_str().unwrap_or("")))
        {
            out.push(path);
        }
    }
}

fn check_one(name: &str, bytes: &[u8], context: &dyn Fn() -> String) {
    let before = CountingAllocator::start();
    let result = std::panic::catch_unwind(|| splat_formats::load_bytes(name, bytes).map(drop));
    let peak = CountingAllocator::peak() - before;
    assert!(result.is_ok(), "panic on {}", context());
    if let Ok(Err(e)) = &result {
        assert!(!e.to_string().is_empty(), "empty error message on {}", context());
    }
    assert!(
        peak <= allocation_limit(bytes.len()),
        "{peak} bytes allocated for a {}-byte input: {}",
        bytes.len(),
        context()
    );
}

#[test]
fn mutated_real_files_never_panic_or_overallocate() {
    // The heap is counted for the whole process: no other test may run beside this one.
    assert_own_process("fuzz_real_files::mutated_real_files_never_panic_or_overallocate");
    let root = data("");
    let mut paths = Vec::new();
    files(&root.join("splats"), &mut paths);
    files(&root.join("pointclouds"), &mut paths);
    assert!(paths.len() >= 30, "expected the shared data set, found {} files", paths.len());

    std::panic::set_hook(Box::new(|_| {})); // catch_unwind reports; keep the log readable
    let mut rng = Rng(SplitMix64::new(0x5eed));
    let mut mutants = 0;
    for path in &paths {
        let original = std::fs::read(path).expect("read data file");
        let name = path.file_name().expect("file name").to_string_lossy().into_owned();
        // Gzipped SPZ: mutate the inner stream too and recompress, or nearly every mutant
        // would only exercise the gzip checksum.
        let inner = if original.starts_with(&[0x1f, 0x8b]) { gunzip(&original) } else { None };
        let start = Instant::now();
        for round in 0..ROUNDS {
            if start.elapsed() > BUDGET_PER_FILE {
                break;
            }
            let (mutant, what) = match (&inner, round % 2) {
                (Some(inner), 0) => {
                    let (m, what) = mutate(&mut rng, inner);
                    (gzip(&m), format!("{what} (inside gzip)"))
                }
                _ => mutate(&mut rng, &original),
            };
            check_one(&name, &mutant, &|| format!("{} round {round}: {what}", path.display()));
            mutants += 1;
        }
    }
    let _ = std::panic::take_hook();
    eprintln!("{mutants} mutants of {} files", paths.len());
}
