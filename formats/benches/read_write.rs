//! Reading and writing splat files: real files from ../shared/data and a synthetic SH-3
//! scene of 1M splats. `cargo bench -p splat-formats`; prints one line per case (median of
//! the runs) and figures for BENCHMARKS.md.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use splat_formats::{Splats, load_bytes, ply, spz};

fn median_time(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn report(name: &str, bytes: usize, splats: usize, time: Duration) {
    let secs = time.as_secs_f64();
    println!(
        "{name:<44} {:>9.2} ms  {:>8.1} MB/s  {:>7.2} M splats/s",
        secs * 1e3,
        bytes as f64 / secs / 1e6,
        splats as f64 / secs / 1e6
    );
}

/// A deterministic scene: values spread like a trained one (small log-scales, logits around
/// zero, SH rest small).
fn synthetic(n: usize, sh_degree: u32) -> Splats {
    let mut s = Splats::with_capacity(n, sh_degree);
    let rest = 3 * (splat_formats::sh_coeffs_for_degree(sh_degree) - 1);
    let mut x: u32 = 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        (x as f32 / u32::MAX as f32) * 2.0 - 1.0
    };
    for _ in 0..n {
        s.means.push([next() * 10.0, next() * 10.0, next() * 10.0]);
        s.log_scales.push([next() * 3.0 - 4.0, next() * 3.0 - 4.0, next() * 3.0 - 4.0]);
        s.rotations.push([next(), next(), next(), next()]);
        s.opacity_logits.push(next() * 4.0);
        s.sh_dc.push([next(), next(), next()]);
        for _ in 0..rest {
            s.sh_rest.push(next() * 0.2);
        }
    }
    s
}

fn main() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/splats");
    for rel in [
        "inria-ply/lod2-tile-6831.ply",
        "inria-ply/donut-sh0-no-normals.ply",
        "compressed-ply/biker.compressed.ply",
        "spz/biker.spz",
        "splat/bob_10k.splat",
    ] {
        let bytes = std::fs::read(data.join(rel)).expect("shared data");
        let n = match load_bytes(rel, &bytes).expect("loads") {
            splat_formats::Loaded::Splats { splats, .. } => splats.len(),
            splat_formats::Loaded::Points(p) => p.len(),
        };
        let t = median_time(7, || drop(load_bytes(rel, &bytes).expect("loads")));
        report(&format!("read {rel}"), bytes.len(), n, t);
    }

    let n = 1_000_000;
    let scene = synthetic(n, 3);
    let mut ply_bytes = Vec::new();
    let t = median_time(3, || {
        ply_bytes.clear();
        ply::write_splats(&scene, &mut ply_bytes).expect("write");
    });
    report("write PLY 1M splats SH3", ply_bytes.len(), n, t);
    let t = median_time(3, || drop(ply::read_splats(&ply_bytes).expect("read")));
    report("read PLY 1M splats SH3", ply_bytes.len(), n, t);

    let mut spz_bytes = Vec::new();
    let t = median_time(3, || spz_bytes = spz::write(&scene).expect("write"));
    report("write SPZ v4 1M splats SH3", spz_bytes.len(), n, t);
    let t = median_time(3, || drop(spz::read(&spz_bytes).expect("read")));
    report("read SPZ v4 1M splats SH3", spz_bytes.len(), n, t);
}
