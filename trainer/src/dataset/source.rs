//! File access for a dataset that is a folder or a `.zip` of one.
//!
//! Paths inside a dataset are relative, `/`-separated strings (`sparse/0/cameras.bin`). A zip
//! is never extracted: entries are read into memory on demand. Its entry names are checked
//! when it is opened (an entry that would land outside the archive, through `..` or an absolute
//! path, refuses the whole archive), and an entry's declared size is checked against
//! [`MAX_ZIP_ENTRY_BYTES`] before anything is allocated for it. When every file of the
//! archive sits in one top-level folder, that folder is the dataset root.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use super::DatasetError;

/// Largest zip entry we read into memory. Photos and sparse models are far below this; an
/// entry claiming more is a zip bomb or not dataset material.
pub const MAX_ZIP_ENTRY_BYTES: u64 = 1 << 30;

/// Folders that archivers add and that are no part of a dataset.
const IGNORED_ZIP_FOLDERS: [&str; 1] = ["__MACOSX"];
/// Files that archivers add and that are no part of a dataset.
const IGNORED_ZIP_FILES: [&str; 2] = [".DS_Store", "Thumbs.db"];

type Archive = zip::ZipArchive<BufReader<File>>;

/// Where a dataset's files come from.
pub(crate) enum DatasetSource {
    Folder { root: PathBuf },
    Zip(ZipSource),
}

/// A zip archive with its file index.
pub(crate) struct ZipSource {
    path: PathBuf,
    archive: Mutex<Archive>,
    /// Dataset-relative path → entry index.
    files: BTreeMap<String, usize>,
    /// Every folder that holds a file, dataset-relative, without trailing `/`.
    folders: BTreeSet<String>,
}

impl DatasetSource {
    /// Opens a dataset folder or zip archive.
    pub fn open(path: &Path) -> Result<Self, DatasetError> {
        let metadata = std::fs::metadata(path)
            .map_err(|cause| DatasetError::Read { file: path.display().to_string(), cause })?;
        let is_zip = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("zip"));
        if metadata.is_dir() {
            Ok(Self::Folder { root: path.to_path_buf() })
        } else if is_zip {
            ZipSource::open(path).map(Self::Zip)
        } else {
            Err(DatasetError::NotADataset {
                file: path.display().to_string(),
                message: "a dataset is a folder or a .zip of one".to_owned(),
            })
        }
    }

    /// How to name `rel` in messages: a full path, or `archive.zip:rel`.
    pub fn display(&self, rel: &str) -> String {
        match self {
            Self::Folder { root } => root.join(rel).display().to_string(),
            Self::Zip(zip) => format!("{}:{rel}", zip.path.display()),
        }
    }

    /// Whether the dataset holds a file at `rel`.
    pub fn is_file(&self, rel: &str) -> bool {
        match self {
            Self::Folder { root } => root.join(rel).is_file(),
            Self::Zip(zip) => zip.files.contains_key(rel),
        }
    }

    /// Whether the dataset holds a folder at `rel` (`""` is the root).
    pub fn is_dir(&self, rel: &str) -> bool {
        match self {
            Self::Folder { root } => root.join(rel).is_dir(),
            Self::Zip(zip) => rel.is_empty() || zip.folders.contains(rel),
        }
    }

    /// Names of the folders directly inside folder `rel`, sorted.
    pub fn subfolders(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = match self {
            Self::Folder { root } => std::fs::read_dir(root.join(rel))
                .map(|entries| {
                    entries
                        .filter_map(Result::ok)
                        .filter(|entry| entry.path().is_dir())
                        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            Self::Zip(zip) => {
                let prefix = if rel.is_empty() { String::new() } else { format!("{rel}/") };
                zip.folders
                    .iter()
                    .filter_map(|folder| folder.strip_prefix(&prefix))
                    .filter(|name| !name.is_empty() && !name.contains('/'))
                    .map(str::to_owned)
                    .collect()
            }
        };
        names.sort();
        names
    }

    /// Reads the whole file at `rel`.
    pub fn read(&self, rel: &str) -> Result<Vec<u8>, DatasetError> {
        match self {
            Self::Folder { root } => std::fs::read(root.join(rel))
                .map_err(|cause| DatasetError::Read { file: self.display(rel), cause }),
            Self::Zip(zip) => zip.read(rel),
        }
    }
}

impl ZipSource {
    fn open(path: &Path) -> Result<Self, DatasetError> {
        let archive_error =
            |message: String| DatasetError::Archive { file: path.display().to_string(), message };
        let file = File::open(path)
            .map_err(|cause| DatasetError::Read { file: path.display().to_string(), cause })?;
        let archive = zip::ZipArchive::new(BufReader::new(file))
            .map_err(|e| archive_error(format!("not a readable zip archive: {e}")))?;

        let mut names = Vec::with_capacity(archive.len());
        for index in 0..archive.len() {
            let entry = archive
                .by_index_data(index)
                .map_err(|e| archive_error(format!("zip entry {index}: {e}")))?;
            let raw_name = String::from_utf8_lossy(entry.name_raw()).into_owned();
            let enclosed = entry.enclosed_name().filter(|_| !is_absolute_name(&raw_name));
            let Some(enclosed) = enclosed else {
                return Err(archive_error(format!(
                    "zip entry \"{raw_name}\" points outside the archive (absolute path or \
                     \"..\"); refusing the archive"
                )));
            };
            if entry.is_file()
                && let Some(name) = relative_name(&enclosed)
                && !is_ignored(&name)
            {
                names.push((name, index));
            }
        }

        let root_prefix = common_root_folder(names.iter().map(|(name, _)| name.as_str()));
        let files: BTreeMap<String, usize> = names
            .into_iter()
            .map(|(name, index)| (name[root_prefix.len()..].to_owned(), index))
            .collect();
        let folders = files.keys().flat_map(|name| parent_folders(name)).collect();
        Ok(Self { path: path.to_path_buf(), archive: Mutex::new(archive), files, folders })
    }

    fn read(&self, rel: &str) -> Result<Vec<u8>, DatasetError> {
        let file = format!("{}:{rel}", self.path.display());
        let fail = |message: String| DatasetError::Archive { file: file.clone(), message };
        let not_found = || DatasetError::Read {
            file: file.clone(),
            cause: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        let index = *self.files.get(rel).ok_or_else(not_found)?;
        let mut archive =
            self.archive.lock().map_err(|_| fail("zip reader failed earlier".to_owned()))?;
        let mut entry = archive.by_index(index).map_err(|e| fail(format!("zip entry: {e}")))?;
        let declared_size = entry.size();
        if declared_size > MAX_ZIP_ENTRY_BYTES {
            return Err(fail(format!(
                "zip entry declares {declared_size} bytes, more than the {MAX_ZIP_ENTRY_BYTES} \
                 bytes accepted"
            )));
        }
        // `declared_size` is at most 1 GiB here, so it fits a usize on every supported target.
        let mut bytes = Vec::with_capacity(declared_size as usize);
        // Read one byte more than declared, so an entry that inflates past its size is caught.
        (&mut entry)
            .take(declared_size + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| fail(format!("zip entry cannot be read: {e}")))?;
        if bytes.len() as u64 != declared_size {
            return Err(fail(format!(
                "zip entry holds {} bytes but declares {declared_size}",
                bytes.len()
            )));
        }
        Ok(bytes)
    }
}

/// Whether a zip entry name is absolute (`/x`, `\x`, `C:x`). `enclosed_name` strips a leading
/// root instead of refusing it; we refuse it.
fn is_absolute_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    name.starts_with(['/', '\\']) || (bytes.len() >= 2 && bytes[1] == b':')
}

/// A checked entry path as a `/`-separated string; `None` for the empty path.
fn relative_name(enclosed: &Path) -> Option<String> {
    let parts: Vec<&str> = enclosed
        .components()
        .filter_map(|component| match component {
            Component::Normal(part) => part.to_str(),
            _ => None,
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}

fn is_ignored(name: &str) -> bool {
    let mut parts = name.split('/');
    let first = parts.next().unwrap_or_default();
    let last = name.rsplit('/').next().unwrap_or_default();
    IGNORED_ZIP_FOLDERS.contains(&first) || IGNORED_ZIP_FILES.contains(&last)
}

/// `"folder/"` when every name lies inside that one top-level folder, else `""`.
fn common_root_folder<'a>(mut names: impl Iterator<Item = &'a str>) -> String {
    let top_folder = |name: &'a str| name.split_once('/').map(|(top, _)| top);
    let Some(first) = names.next().and_then(top_folder) else {
        return String::new();
    };
    if names.all(|name| top_folder(name) == Some(first)) {
        format!("{first}/")
    } else {
        String::new()
    }
}

/// Every folder above `name`: `a/b/c.png` → `a`, `a/b`.
fn parent_folders(name: &str) -> impl Iterator<Item = String> + '_ {
    name.match_indices('/').map(|(end, _)| name[..end].to_owned())
}

/// Makes a dataset-relative path from one a dataset file gives (`./train/r_0`,
/// `images\0001.jpg`): drops `.` and empty parts, resolves `..`. `None` when it is absolute or
/// climbs out of the dataset.
pub(crate) fn normalize_relative(path: &str) -> Option<String> {
    if is_absolute_name(path) {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            _ => parts.push(part),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_dataset_paths() {
        assert_eq!(normalize_relative("./train/r_0").as_deref(), Some("train/r_0"));
        assert_eq!(normalize_relative("images\\a.jpg").as_deref(), Some("images/a.jpg"));
        assert_eq!(normalize_relative("a/../b.png").as_deref(), Some("b.png"));
        assert_eq!(normalize_relative("../b.png"), None);
        assert_eq!(normalize_relative("/etc/passwd"), None);
        assert_eq!(normalize_relative("C:/x.png"), None);
    }

    #[test]
    fn finds_single_top_level_folder() {
        assert_eq!(common_root_folder(["lego/a.json", "lego/train/r.png"].into_iter()), "lego/");
        assert_eq!(common_root_folder(["a.json", "lego/train/r.png"].into_iter()), "");
        assert_eq!(common_root_folder(["x/a.json", "y/b.png"].into_iter()), "");
        assert_eq!(common_root_folder(std::iter::empty()), "");
    }

    #[test]
    fn lists_parent_folders() {
        let folders: Vec<String> = parent_folders("a/b/c.png").collect();
        assert_eq!(folders, ["a", "a/b"]);
    }
}
