//! `splatforge info PATH`: what a file or dataset holds, as one JSON object on stdout.

use std::path::Path;

use anyhow::Context as _;
use serde_json::json;
use splat_trainer::dataset::{self, LoadOptions};
use splat_trainer::formats::{self, Loaded};

pub fn run(path: &Path, options: &LoadOptions) -> anyhow::Result<()> {
    let value = describe(path, options)?;
    println!("{value}");
    Ok(())
}

/// A folder or a `.zip` is a dataset; anything else is a splat or point-cloud file.
fn is_dataset(path: &Path) -> bool {
    path.is_dir() || path.extension().is_some_and(|e| e.eq_ignore_ascii_case("zip"))
}

pub fn describe(path: &Path, options: &LoadOptions) -> anyhow::Result<serde_json::Value> {
    splatforge::refuse_without_poses(path)?;
    if is_dataset(path) {
        let data = dataset::load_dataset(path, options).context("cannot load dataset")?;
        for warning in &data.warnings {
            eprintln!("warning: {warning}");
        }
        let first = data.view(0).map(|v| v.camera);
        return Ok(json!({
            "kind": "dataset",
            "format": data.format.name(),
            "images": data.train.len() + data.eval.len(),
            "train": data.train.len(),
            "eval": data.eval.len(),
            "cameras": data.camera_count,
            "points": data.init_points.as_ref().map_or(0, formats::PointCloud::len),
            "width": first.map(|c| c.width),
            "height": first.map(|c| c.height),
        }));
    }
    Ok(match formats::load_file(path)? {
        Loaded::Splats { format, splats } => json!({
            "kind": "splats",
            "format": format.name(),
            "count": splats.len(),
            "sh_degree": splats.sh_degree,
        }),
        Loaded::Points(cloud) => json!({
            "kind": "points",
            "count": cloud.len(),
            "has_color": cloud.has_color,
        }),
    })
}
