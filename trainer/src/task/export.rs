//! Writing a run's splats: the export formats, SOG's SH palette (on the GPU where it is a real
//! one), atomic writes.

use std::path::Path;

use splat_formats::{PointCloud, Splats, ply, sog, splat, spz};
use splat_render::kernels::kmeans::Kmeans;
use splat_render::{GpuContext, Owner};

use crate::checkpoint;

/// The formats [`write_splats`] writes, by extension.
pub const EXPORT_EXTENSIONS: [&str; 4] = ["ply", "spz", "splat", "sog"];

/// Writes `.ply`, `.spz`, `.splat` or `.sog` (by extension; `.splat` keeps SH degree 0 only)
/// through a temporary file and a rename. A `.sog`'s SH palette is clustered on `gpu` when
/// given ([`sog_files`]).
pub fn write_splats(path: &Path, splats: &Splats, gpu: Option<&GpuContext>) -> Result<(), String> {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let in_file = |e: splat_formats::ParseError| format!("{}: {e}", path.display());
    let bytes = match extension.as_str() {
        "ply" => {
            let mut bytes = Vec::new();
            ply::write_splats(splats, &mut bytes).map_err(in_file)?;
            bytes
        }
        "spz" => spz::write(splats).map_err(in_file)?,
        "splat" => splat::write(splats),
        "sog" => {
            sog::bundle(&sog_files(splats, gpu).map_err(|e| format!("{}: {e}", path.display()))?)
                .map_err(in_file)?
        }
        _ => return Err(format!("{}: export as .ply, .spz, .splat or .sog", path.display())),
    };
    write_atomically(path, &bytes)
}

/// The files of a SOG of `splats` (`formats::sog::encode`), the SH palette clustered by
/// k-means ([`sh_palette`]).
pub fn sog_files(
    splats: &Splats,
    gpu: Option<&GpuContext>,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let palette = sh_palette(splats, gpu)?;
    sog::encode(splats, palette).map_err(|e| e.to_string())
}

/// SOG's SH palette of `splats` (none at SH degree 0): the k-means assignment on `gpu` when it
/// is a real one (seconds for a million splats), else on every CPU core (a software adapter
/// such as llvmpipe is slower than that).
pub fn sh_palette(
    splats: &Splats,
    gpu: Option<&GpuContext>,
) -> Result<Option<sog::ShPalette>, String> {
    if splats.sh_degree == 0 || splats.is_empty() {
        return Ok(None);
    }
    let dim = 3 * (splat_formats::sh_coeffs_for_degree(splats.sh_degree) - 1);
    let k = sog::palette_size(splats.len());
    let points = &splats.sh_rest;
    if let Some(ctx) = gpu.filter(|ctx| !is_software(ctx)) {
        let palette = Kmeans::new(ctx)
            .and_then(|kmeans| {
                kmeans.run(ctx, points, dim, k, sog::KMEANS_ITERATIONS, Owner::Shared)
            })
            .map_err(|e| format!("clustering the SH palette on the GPU failed: {e}"))?;
        return Ok(Some(palette));
    }
    let assign = &mut |centroids: &[f32], labels: &mut [u32]| {
        use rayon::prelude::*;
        labels
            .par_iter_mut()
            .zip(points.par_chunks_exact(dim))
            .for_each(|(label, point)| *label = sog::nearest(point, centroids, dim));
        Ok::<(), std::convert::Infallible>(())
    };
    let palette = match sog::kmeans_with(points, dim, k, sog::KMEANS_ITERATIONS, assign) {
        Ok(palette) => palette,
        Err(never) => match never {},
    };
    Ok(Some(palette))
}

/// Whether `ctx` is a software adapter (llvmpipe, WARP): the CPU under another name.
#[must_use]
pub fn is_software(ctx: &GpuContext) -> bool {
    ctx.adapter_info.device_type == splat_render::wgpu::DeviceType::Cpu
}

/// Seconds the SH palette of `splats` takes on this machine's CPU cores, roughly (measured:
/// about 1.9 GFLOP/s a core for the assignment's multiply-adds).
#[must_use]
pub fn cpu_palette_seconds(splats: &Splats) -> f64 {
    let dim = 3 * (splat_formats::sh_coeffs_for_degree(splats.sh_degree) - 1);
    let work = splats.len() as f64
        * sog::palette_size(splats.len()) as f64
        * dim as f64
        * (sog::KMEANS_ITERATIONS + 1) as f64;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    work / (1.9e9 * cores as f64)
}

/// Writes `bytes` atomically: a temporary file in the same folder, synced, then renamed
/// (see [`checkpoint::write_atomically`]), so a crash never leaves a truncated file under the
/// final name.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    checkpoint::write_atomically(path, |out| {
        out.write_all(bytes).map_err(|e| checkpoint::CheckpointError::io("write", e))
    })
    .map_err(|e| e.to_string())
}

/// Creates the folder `path` goes in (the app's `<dataset>_exports/` may not exist yet).
pub(super) fn create_parent(path: &Path) -> Result<(), String> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => std::fs::create_dir_all(parent)
            .map_err(|e| format!("{}: cannot create the folder: {e}", parent.display())),
        None => Ok(()),
    }
}

/// Keeps at most `max` points, evenly spread over the input order.
#[must_use]
pub fn keep_at_most(cloud: PointCloud, max: usize) -> PointCloud {
    let n = cloud.len();
    if n <= max {
        return cloud;
    }
    let keep = (0..max).map(|i| i * n / max);
    PointCloud {
        positions: keep.clone().map(|i| cloud.positions[i]).collect(),
        colors: keep.map(|i| cloud.colors[i]).collect(),
        has_color: cloud.has_color,
    }
}
