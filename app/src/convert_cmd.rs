//! `splatforge convert IN OUT`: a splat scene from one format to another, each told by its
//! extension. Reads `.ply` (3DGS or compressed), `.splat`, `.spz` and `.ckpt` (a checkpoint's
//! splats); writes `.ply`, `.spz` and `.splat`.

use std::path::Path;

use anyhow::bail;
use splat_trainer::checkpoint;
use splat_trainer::formats::{Loaded, Splats, load_file};
use splat_trainer::task::{EXPORT_EXTENSIONS, write_splats};

pub fn run(input: &Path, output: &Path) -> anyhow::Result<()> {
    // The output's format first: a typo should not cost reading a large scene.
    let extension = extension(output);
    if !EXPORT_EXTENSIONS.contains(&extension.as_str()) {
        bail!("{}: write .ply, .spz or .splat", output.display());
    }
    let splats = read_scene(input)?;
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
