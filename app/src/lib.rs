//! The desktop app, as a library so that tests can drive it (`egui_kittest`). The command line
//! lives in `main.rs`.

pub mod gui;
pub mod video;

use std::path::Path;

pub use splat_trainer::render::human_bytes;

/// The cameras of a dataset (loaded at its smallest: only the poses matter), for what needs
/// the scene's up or focus without training (`render --turntable`, `convert --level-from`).
///
/// # Errors
/// `PATH: cannot load the dataset: …`.
pub fn dataset_cameras(path: &Path) -> anyhow::Result<Vec<splat_trainer::render::Camera>> {
    use anyhow::Context as _;
    let options = splat_trainer::dataset::LoadOptions { max_resolution: 16, ..Default::default() };
    let data = splat_trainer::dataset::load_dataset(path, &options)
        .with_context(|| format!("{}: cannot load the dataset", path.display()))?;
    Ok(data.views().map(|v| v.camera).collect())
}

/// Refuses a folder of photos or a video that has no camera poses with an error that says how
/// to compute them, instead of the loader's "no dataset found". Anything else passes.
///
/// # Errors
/// `PATH: 23 photos in PATH and no camera poses: …`.
pub fn refuse_without_poses(path: &Path) -> anyhow::Result<()> {
    if splat_trainer::dataset::has_poses(path) {
        return Ok(());
    }
    match splat_poses::Input::detect(path) {
        Ok(input) => {
            let what = match input {
                splat_poses::Input::Photos { photos, .. } => format!("{} photos", photos.len()),
                splat_poses::Input::Video(_) => "a video".to_owned(),
            };
            anyhow::bail!(
                "{}: {what} and no camera poses: compute them first with `splatforge poses {}` \
                 (COLMAP), or drop it on the window",
                path.display(),
                path.display()
            )
        }
        Err(_) => Ok(()),
    }
}

/// Bytes from a size people write: `24GiB`, `512 MiB`, `1.5GB`, `300kB` or plain bytes.
/// Binary (KiB, MiB, GiB, TiB) and decimal (kB, MB, GB, TB) units, any case.
///
/// # Errors
/// A message saying what is wrong with `text`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a size (e.g. 24GiB)"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ));
        }
    };
    let bytes = (value * scale).round();
    if !(0.0..=u64::MAX as f64).contains(&bytes) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_people_write() {
        assert_eq!(parse_bytes("24GiB"), Ok(24 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5gb"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("123456"), Ok(123_456));
        assert!(parse_bytes("24 GiBs").is_err());
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("-1GiB").is_err());
    }
}
