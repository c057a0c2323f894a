//! `splatforge convert IN OUT`: a splat scene from one format to another, each told by its
//! extension. Reads `.ply` (3DGS or compressed), `.splat`, `.spz` and `.ckpt` (a checkpoint's
//! splats); writes `.ply`, `.spz` and `.splat`. A [`Filter`] (a crop box, an opacity floor)
//! keeps only some of the splats.

use std::path::Path;

use anyhow::bail;
use splat_trainer::checkpoint;
use splat_trainer::formats::filter::Filter;
use splat_trainer::formats::{Loaded, Splats, load_file};
use splat_trainer::task::{EXPORT_EXTENSIONS, write_splats};

/// `--min-opacity`: a number from 0 to 1.
pub fn parse_opacity(text: &str) -> Result<f32, String> {
    text.trim()
        .parse::<f32>()
        .ok()
        .filter(|o| (0.0..=1.0).contains(o))
        .ok_or_else(|| format!("an opacity is a number from 0 to 1 (got \"{text}\")"))
}

pub fn run(input: &Path, output: &Path, filter: &Filter) -> anyhow::Result<()> {
    // The output's format first: a typo should not cost reading a large scene.
    let extension = extension(output);
    if !EXPORT_EXTENSIONS.contains(&extension.as_str()) {
        bail!("{}: write .ply, .spz or .splat", output.display());
    }
    let mut splats = read_scene(input)?;
    if !filter.is_empty() {
        let read = splats.len();
        let counts = filter.apply(&mut splats);
        let mut removed = Vec::new();
        if let Some(crop_box) = filter.crop_box {
            removed.push(format!("{} outside the box {crop_box}", counts.outside_box));
        }
        if let Some(min_opacity) = filter.min_opacity {
            removed.push(format!("{} below opacity {min_opacity}", counts.below_opacity));
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
    write_splats(output, &splats).map_err(anyhow::Error::msg)?;
    eprintln!("wrote {}: {} splats", output.display(), splats.len());
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
