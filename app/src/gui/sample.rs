//! The built-in sample scene (assets/sample-scene.zip, made by
//! `splat_trainer::sample_scene`): embedded in the binary, written to the user's data folder
//! on first use so that it loads like any dataset and its exports land beside it.

use std::path::{Path, PathBuf};

/// The scene, as committed in assets/.
pub const SAMPLE_ZIP: &[u8] = include_bytes!("../../../assets/sample-scene.zip");
const FILE_NAME: &str = "sample-scene.zip";

/// The per-user data folder: `$XDG_DATA_HOME/splatforge`, `~/.local/share/splatforge`,
/// `%APPDATA%\splatforge`, else the temporary folder.
#[must_use]
pub fn data_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("APPDATA").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("splatforge")
}

/// The sample scene's dataset, loaded from the data folder (written there first if it is not
/// there yet): what the self-test trains on.
pub fn load_dataset() -> anyhow::Result<std::sync::Arc<splat_trainer::dataset::Dataset>> {
    use anyhow::Context as _;
    let path =
        ensure_on_disk(&data_dir()).context("cannot write the sample scene to the data folder")?;
    let options = splat_trainer::dataset::LoadOptions::default();
    Ok(std::sync::Arc::new(splat_trainer::dataset::load_dataset(&path, &options)?))
}

/// Writes the sample scene into `dir` unless an identical copy is there; returns its path.
pub fn ensure_on_disk(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join(FILE_NAME);
    let same = std::fs::metadata(&path).is_ok_and(|m| m.len() == SAMPLE_ZIP.len() as u64)
        && std::fs::read(&path).is_ok_and(|bytes| bytes == SAMPLE_ZIP);
    if !same {
        std::fs::create_dir_all(dir)?;
        // Write beside and rename, so a second window starting at the same time never reads
        // half a file.
        let temporary = dir.join(format!("{FILE_NAME}.{}.tmp", std::process::id()));
        std::fs::write(&temporary, SAMPLE_ZIP)?;
        std::fs::rename(&temporary, &path)?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_once_and_rewrites_a_damaged_copy() {
        let dir = std::env::temp_dir().join(format!("splatforge-sample-{}", std::process::id()));
        let path = ensure_on_disk(&dir).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), SAMPLE_ZIP);
        std::fs::write(&path, b"damaged").expect("damage");
        ensure_on_disk(&dir).expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), SAMPLE_ZIP);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
