//! `splatforge convert IN OUT`: a splat scene from one format to another, each told by its
//! extension. Reads `.ply` (3DGS or compressed), `.splat`, `.spz`, SOG (`.sog` or its
//! `meta.json`) and `.ckpt` (a checkpoint's splats); writes `.ply`, `.spz`, `.splat` and SOG
//! (`.sog`, or `meta.json` and its images in a folder; the SH palette clustered on the GPU
//! when there is one). A [`Filter`] (a crop box or sphere, an opacity floor, a size limit, the
//! box around the dense scene) keeps only some of the
//! splats; a [`Level`] turns the scene upright.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use glam::Vec3;
use splat_trainer::checkpoint;
use splat_trainer::formats::filter::Filter;
use splat_trainer::formats::{Loaded, Splats, load_file, sog};
use splat_trainer::render::GpuContext;
use splat_trainer::render::level::{leveling_rotation, rotate_splats};
use splat_trainer::render::view_controller::scene_up;
use splat_trainer::task::{
    EXPORT_EXTENSIONS, cpu_palette_seconds, is_software, sog_files, write_atomically, write_splats,
};

/// How to level the scene: turn its up to −y.
pub enum Level {
    /// The scene's up, given.
    Up([f32; 3]),
    /// The up of a dataset's cameras.
    FromDataset(PathBuf),
}

/// `--up x,y,z`: three finite numbers, not all zero.
pub fn parse_up(text: &str) -> Result<[f32; 3], String> {
    let values: Option<Vec<f32>> =
        text.split(',').map(|v| v.trim().parse::<f32>().ok().filter(|v| v.is_finite())).collect();
    match values.as_deref() {
        Some(&[x, y, z]) if [x, y, z].iter().any(|v| *v != 0.0) => Ok([x, y, z]),
        _ => Err(format!("an up direction is x,y,z: three numbers, not all zero (got \"{text}\")")),
    }
}

/// `--min-opacity`: a number from 0 to 1.
pub fn parse_opacity(text: &str) -> Result<f32, String> {
    text.trim()
        .parse::<f32>()
        .ok()
        .filter(|o| (0.0..=1.0).contains(o))
        .ok_or_else(|| format!("an opacity is a number from 0 to 1 (got \"{text}\")"))
}

/// `--max-size`: a number above 0.
pub fn parse_size(text: &str) -> Result<f32, String> {
    text.trim()
        .parse::<f32>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .ok_or_else(|| format!("a size is a number above 0 (got \"{text}\")"))
}

pub fn run(
    input: &Path,
    output: &Path,
    filter: &Filter,
    drop_floaters: bool,
    level: Option<&Level>,
) -> anyhow::Result<()> {
    // The output's format first: a typo should not cost reading a large scene.
    let extension = extension(output);
    let unbundled_sog = sog::is_meta_name(output);
    if !EXPORT_EXTENSIONS.contains(&extension.as_str()) && !unbundled_sog {
        bail!("{}: write .ply, .spz, .splat, .sog or a SOG's meta.json", output.display());
    }
    let up = match level {
        Some(Level::Up(up)) => Some(Vec3::from(*up)),
        Some(Level::FromDataset(dataset)) => {
            let cameras = splatforge::dataset_cameras(dataset)?;
            Some(scene_up(&cameras))
        }
        None => None,
    };
    let mut splats = read_scene(input)?;
    let mut filter = filter.clone();
    if drop_floaters {
        filter.scene_cells = splat_trainer::formats::filter::scene_cells(&splats);
        if filter.scene_cells.is_none() {
            bail!(
                "--drop-floaters: {} has too few splats, or too spread out, to tell floaters \
                 from the scene",
                input.display()
            );
        }
    }
    if !filter.is_empty() {
        let read = splats.len();
        let counts = filter.apply(&mut splats);
        let mut removed = Vec::new();
        if let Some(crop_box) = filter.crop_box {
            removed.push(format!("{} outside the box {crop_box}", counts.outside_box));
        }
        if let Some(sphere) = filter.crop_sphere {
            removed.push(format!("{} outside the sphere {sphere}", counts.outside_sphere));
        }
        if let Some(min_opacity) = filter.min_opacity {
            removed.push(format!("{} below opacity {min_opacity}", counts.below_opacity));
        }
        if let Some(max_size) = filter.max_size {
            removed.push(format!("{} larger than {max_size}", counts.above_size));
        }
        if filter.scene_cells.is_some() {
            removed.push(format!("{} likely floaters apart from the dense scene", counts.floaters));
        }
        eprintln!("kept {} of {read} splats: {}", counts.kept, removed.join(", "));
        if splats.is_empty() {
            bail!("nothing to write: no splat of {} passes the filter", input.display());
        }
    }
    if extension == "splat" && splats.sh_degree > 0 {
        eprintln!(
            "warning: .splat stores one colour a splat: SH degree {} dropped to 0",
            splats.sh_degree
        );
    }
    // Filtered in the scene's own frame, then levelled, as the window's exports are.
    if let Some(up) = up {
        rotate_splats(&mut splats, leveling_rotation(up));
        let up = up.normalize();
        eprintln!("levelled: up ({:.3}, {:.3}, {:.3}) turned to −y", up.x, up.y, up.z);
    }
    let is_sog = extension == "sog" || unbundled_sog;
    let gpu = if is_sog && splats.sh_degree > 0 { sog_gpu(&splats) } else { None };
    let started = Instant::now();
    if unbundled_sog {
        write_unbundled_sog(output, &splats, gpu.as_ref())?;
    } else {
        write_splats(output, &splats, gpu.as_ref()).map_err(anyhow::Error::msg)?;
    }
    if is_sog {
        eprintln!("encoded SOG in {:.2} s", started.elapsed().as_secs_f64());
    }
    eprintln!("wrote {}: {} splats", output.display(), splats.len());
    Ok(())
}

/// A GPU for the SOG palette's k-means, or `None` when there is none; says how long the CPU
/// will take instead when that is long.
fn sog_gpu(splats: &Splats) -> Option<GpuContext> {
    let gpu = pollster::block_on(GpuContext::new_headless()).ok();
    if gpu.as_ref().is_none_or(is_software) {
        let seconds = cpu_palette_seconds(splats);
        if seconds > 10.0 {
            eprintln!(
                "no GPU: the SH palette of {} splats is clustered on the CPU, about {:.0} \
                 minutes",
                splats.len(),
                (seconds / 60.0).ceil()
            );
        }
    }
    gpu
}

/// A SOG's files into `meta.json`'s folder (made if needed), `meta.json` last, each through
/// a temporary file and a rename.
fn write_unbundled_sog(
    meta: &Path,
    splats: &Splats,
    gpu: Option<&GpuContext>,
) -> anyhow::Result<()> {
    let folder = meta.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)
        .with_context(|| format!("{}: cannot make the folder", folder.display()))?;
    for (name, bytes) in sog_files(splats, gpu).map_err(anyhow::Error::msg)? {
        let path = if name == sog::META { meta.to_path_buf() } else { folder.join(name) };
        write_atomically(&path, &bytes).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// The splats of a scene file or a checkpoint.
fn read_scene(path: &Path) -> anyhow::Result<Splats> {
    if extension(path) == "ckpt" {
        return Ok(checkpoint::load(path)?.snapshot.splats);
    }
    match load_file(path)? {
        Loaded::Splats { splats, .. } => Ok(splats),
        Loaded::Points(_) => {
            bail!("{}: a point cloud, not splats (train from it with --init)", path.display())
        }
    }
}

fn extension(path: &Path) -> String {
    path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase()
}
