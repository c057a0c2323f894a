//! Checkpoint files: a run ([`RunSnapshot`]) and the identity of the dataset it trained on,
//! in one file that [`read`] / [`load`] turn back into the same values, bit for bit.
//!
//! # Format, version 1
//!
//! Little-endian throughout; offsets and lengths in bytes unless said otherwise.
//!
//! | offset        | size  | content                                                      |
//! |---------------|-------|--------------------------------------------------------------|
//! | 0             | 8     | magic `SPLATCKP`                                             |
//! | 8             | 4     | format version, u32: 1                                       |
//! | 12            | 4     | section count `S`, u32                                       |
//! | 16            | 8     | length of the whole file, u64 (checksum included)            |
//! | 24            | 8     | metadata length `J`, u64                                     |
//! | 32            | 8·S   | length of each section in f32 values, u64                    |
//! | 32 + 8·S      | J     | metadata: one UTF-8 JSON object (below)                      |
//! |               | 0..=7 | zero bytes up to a multiple of 8                             |
//! |               | 4·Σ   | the sections: f32 arrays back to back, in table order        |
//! | end − 8       | 8     | XXH64 (seed 0) of every byte before it, u64 ([`checksum`])   |
//!
//! Sections, in order: `means` \[N, 3\], `log_scales` \[N, 3\], `rotations` \[N, 4\],
//! `opacity_logits` \[N\], `sh_dc` \[N, 3\], `sh_rest` \[N, 3, K−1\] (the
//! [`Splats`] arrays); then `adam_m.i`, `adam_v.i` for each Adam moment buffer `i`
//! ([`HostOptimizerState::moments`], any lengths, as the GPU holds them: for a run whose
//! `config.sh_precision` is `"f16"`, those of SH bands 1..=3 carry two binary16 values in the
//! bits of each 32-bit value, see `ShPrecision`); then `densify` (any length); last, only in
//! the file of a run with per-view appearance (`config.appearance`), `appearance`
//! ([`HostOptimizerState::appearance`]). Sections start 8-byte aligned, so a reader may map
//! them in place.
//!
//! The metadata holds everything that is not a big array: `writer` (informational), `step`,
//! `rng`, `order`, `splats` (N), `peak_splats` (the most splats the run has had, written
//! only where it exceeds N; files without it, older ones included, read as N), `sh_degree`,
//! `moments` (number of moment pairs), `sections` (the section names, for people reading
//! the file), `dataset` ([`DatasetIdentity`], with the options the dataset was loaded with;
//! files written before those were stored read as `options: None`) and `config`
//! ([`TrainConfig`], strategy included; files written before `transparency` was stored read
//! as `"composite"`, what they trained with). Every floating-point value in it is a JSON
//! *string* in Rust's shortest round-trip notation (`"0.00016"`, `"-0.0"`, `"inf"`):
//! `serde_json`'s default number parser is not correctly rounded for every value, and
//! strings read back bit for bit (NaN comes back as a NaN, its payload not kept). Integers, `u64` included, are JSON integers.
//!
//! Later versions must keep the magic, the version field and the trailing checksum where
//! they are, so that every reader tells a foreign file, a newer format and a damaged file
//! apart.
//!
//! # Reading
//!
//! [`read`] checks, in order: the magic ("not a splatforge checkpoint"), the version, the
//! file length in the header (more than the file has: "cut short"), the checksum (any
//! changed byte), that the header's lengths add up to the file's length exactly, and that
//! the metadata agrees with the section lengths (splat count, SH degree, moment buffers).
//! Metadata with a field (or a setting's choice) this build does not know, at any depth,
//! comes from a newer build (version 1 gains optional fields) or an edited file: it is
//! refused, naming what it does not know and the writer, rather than read without it.
//! Only then does it allocate, exactly what the sections hold, and copy each array out of
//! the file's bytes with one `memcpy` (and a byte swap on big-endian machines). A damaged
//! header claiming billions of values therefore fails in microseconds, without allocating.
//!
//! [`load`] streams instead: it reads the header and metadata, makes the same length checks
//! against the file's size, reads each array straight into its vector while hashing, and
//! compares the checksum at the end; so a checkpoint is in memory once, not twice. When
//! anything is unexpected it reads the whole file with [`read`], so both give the same
//! errors.
//!
//! [`save`] writes atomically: to `NAME.<pid>-<n>.partial` beside the target, flushed and
//! synced, then renamed over the target; on any error (or a panic) the temporary file is
//! removed, so the target is either the old file, the complete new one, or absent.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use splat_formats::Splats;
use splat_formats::filter::Filter;

use crate::config::TrainConfig;
use crate::dataset::{Dataset, LoadOptions};
use crate::train::{HostOptimizerState, RunSnapshot};
use crop::CropDoc;
use xxh64::Xxh64;
pub use xxh64::checksum;

mod crop;
mod xxh64;

/// The first eight bytes of every checkpoint.
pub const MAGIC: [u8; 8] = *b"SPLATCKP";
/// The format version this build writes.
pub const VERSION: u32 = 1;
/// The format versions this build reads.
pub const READ_VERSIONS: [u32; 1] = [1];

/// The metadata's `writer`: who wrote a checkpoint.
const WRITER: &str = concat!("splat-trainer ", env!("CARGO_PKG_VERSION"));

/// Magic, version, section count, file length, metadata length.
const FIXED_HEADER_LEN: usize = 32;
const CHECKSUM_LEN: usize = 8;
/// The splat arrays, before the moments.
const SPLAT_SECTIONS: [&str; 6] =
    ["means", "log_scales", "rotations", "opacity_logits", "sh_dc", "sh_rest"];
/// Bytes hashed and written at a time, so each piece is still in cache when written.
const IO_CHUNK: usize = 1 << 20;

/// Which dataset a run trained on: where it was, and a fingerprint of what makes it the same
/// dataset for training.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetIdentity {
    /// The folder or zip it was loaded from (for messages and for finding it again).
    pub path: String,
    /// See [`dataset_identity`].
    pub fingerprint: u64,
    /// Train plus eval views.
    pub views: u32,
    /// How the dataset was loaded (image size, background, eval split), so that a run can
    /// load it the same way to continue; `None` in checkpoints written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<LoadOptions>,
}

/// What a checkpoint file holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub snapshot: RunSnapshot,
    pub dataset: DatasetIdentity,
    /// The window's crop when it was saved ([`Filter`]: what the view and exports keep; the
    /// run trains every splat). Empty in files written before it, or without a crop.
    pub crop: Filter,
}

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Any of the errors below, about this file ([`load`] and [`save`] add it).
    #[error("{file}: {error}")]
    File { file: String, error: Box<CheckpointError> },
    /// Reading, writing, creating or renaming a file failed.
    #[error("{action}: {cause}")]
    Io { action: String, cause: io::Error },
    /// The file does not start with [`MAGIC`].
    #[error("not a splatforge checkpoint (it does not start with \"SPLATCKP\")")]
    NotACheckpoint,
    /// A checkpoint of a format version this build does not read.
    #[error(
        "checkpoint format version {found} is not supported: this build reads version {}",
        versions_text()
    )]
    UnsupportedVersion { found: u32 },
    /// The file ends early. `expected` is the length its header gives, when it got that far.
    #[error("{}", truncated_text(*have, *expected))]
    Truncated { have: u64, expected: Option<u64> },
    /// Some byte changed since the file was written.
    #[error(
        "the checkpoint is damaged: its checksum does not match its contents (stored \
         {stored:016x}, computed {computed:016x})"
    )]
    ChecksumMismatch { stored: u64, computed: u64 },
    /// The checksum matches but the structure does not add up (a file written by something
    /// else, or a bug).
    #[error("the checkpoint is damaged: {0}")]
    Damaged(String),
    /// The metadata JSON is not what this version expects.
    #[error("the checkpoint's metadata cannot be read: {0}")]
    Metadata(serde_json::Error),
    /// The metadata holds a field, or a choice of a setting, this build does not know
    /// (`name`): a newer build wrote it (version 1 files gain optional fields; an older
    /// reader refuses rather than train differently), or someone edited it.
    #[error(
        "the checkpoint holds `{name}`, which this build ({WRITER}) does not know: it was \
         written by {writer}, a newer build, or edited since"
    )]
    NewerMetadata { name: String, writer: String },
    /// The values given to [`write()`] cannot be stored (splat arrays of different lengths,
    /// SH degree above 3).
    #[error("cannot write this checkpoint: {0}")]
    Unwritable(String),
}

impl CheckpointError {
    /// The error itself, without the file [`load`] / [`save`] wrap around it.
    #[must_use]
    pub fn root(&self) -> &Self {
        match self {
            Self::File { error, .. } => error.root(),
            other => other,
        }
    }

    fn in_file(path: &Path, error: Self) -> Self {
        Self::File { file: path.display().to_string(), error: Box::new(error) }
    }

    /// An I/O failure while doing `action`.
    pub(crate) fn io(action: impl Into<String>, cause: io::Error) -> Self {
        Self::Io { action: action.into(), cause }
    }
}

fn versions_text() -> String {
    let list: Vec<String> = READ_VERSIONS.iter().map(u32::to_string).collect();
    list.join(", ")
}

fn truncated_text(have: u64, expected: Option<u64>) -> String {
    match expected {
        Some(expected) => format!(
            "the checkpoint is cut short: the file has {have} of its {expected} bytes (was it \
             copied or saved only in part?)"
        ),
        None => format!(
            "the checkpoint is cut short: the file has only {have} bytes, less than a \
             checkpoint header"
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Dataset identity

/// The identity of `dataset`. The fingerprint is [`checksum`] (XXH64) of, in order: a
/// format tag; for the train views, then the eval views: their count, and for each view its
/// index, name (length and UTF-8 bytes), image width and height, `fx fy cx cy` and the 16
/// values of `world_from_camera` (column-major), floats as their bits, all little-endian.
///
/// So it changes with the views, their split into train and eval, the image size they were
/// loaded at (`max_resolution`) and any camera, but not with the folder's location. The
/// pixels are *not* hashed (reading them all would take as long as loading the dataset): a
/// dataset whose images were edited in place, or loaded over another background colour, has
/// the same fingerprint.
#[must_use]
pub fn dataset_identity(dataset: &Dataset) -> DatasetIdentity {
    let mut hash = Xxh64::new();
    hash.update(b"splatforge dataset identity 1\0");
    for views in [&dataset.train, &dataset.eval] {
        hash.update(&(views.len() as u64).to_le_bytes());
        for view in views {
            let camera = &view.camera;
            hash.update(&(view.index as u64).to_le_bytes());
            hash.update(&(view.name.len() as u64).to_le_bytes());
            hash.update(view.name.as_bytes());
            hash.update(&camera.width.to_le_bytes());
            hash.update(&camera.height.to_le_bytes());
            let floats = [camera.fx, camera.fy, camera.cx, camera.cy]
                .into_iter()
                .chain(camera.world_from_camera.to_cols_array());
            for value in floats {
                hash.update(&value.to_bits().to_le_bytes());
            }
        }
    }
    let views = dataset.train.len() + dataset.eval.len();
    DatasetIdentity {
        path: dataset.source.display().to_string(),
        fingerprint: hash.finish(),
        views: u32::try_from(views).unwrap_or(u32::MAX),
        options: Some(dataset.options.clone()),
    }
}

/// What differs between the dataset a checkpoint trained on (`saved`) and `here`, whose
/// fingerprints differ, in words: "it trained on 12 views of /a/x; this dataset has 14".
#[must_use]
pub fn identity_difference(saved: &DatasetIdentity, here: &DatasetIdentity) -> String {
    let then = if saved.path == here.path {
        String::new()
    } else {
        format!(" (it trained on {})", saved.path)
    };
    if saved.views != here.views {
        return format!(
            "it trained on {} views{then}; {} has {}",
            saved.views, here.path, here.views
        );
    }
    if let (Some(a), Some(b)) = (&saved.options, &here.options)
        && a != b
    {
        return format!(
            "it was loaded with {}{then}; {} with {}",
            describe(a),
            here.path,
            describe(b)
        );
    }
    format!(
        "the same number of views ({}), but their names, image sizes or cameras differ{then}",
        here.views
    )
}

fn describe(options: &LoadOptions) -> String {
    let LoadOptions { max_resolution, background, eval_every, alpha_as_mask } = options;
    let [r, g, b] = background;
    let alpha = if *alpha_as_mask { ", alpha as mask" } else { "" };
    format!(
        "max resolution {max_resolution}, background {r},{g},{b}, every {eval_every}th view for \
         eval{alpha}"
    )
}

// ---------------------------------------------------------------------------------------
// Writing

/// Writes `checkpoint` to `out` in the format above. Values are checked (splat arrays of
/// matching lengths, SH degree at most 3) before the first byte is written.
pub fn write(checkpoint: &Checkpoint, out: &mut impl Write) -> Result<(), CheckpointError> {
    let snapshot = &checkpoint.snapshot;
    let splats = &snapshot.splats;
    check_splats(splats).map_err(CheckpointError::Unwritable)?;

    let mut sections: Vec<&[f32]> = vec![
        bytemuck::cast_slice(&splats.means),
        bytemuck::cast_slice(&splats.log_scales),
        bytemuck::cast_slice(&splats.rotations),
        &splats.opacity_logits,
        bytemuck::cast_slice(&splats.sh_dc),
        &splats.sh_rest,
    ];
    for (m, v) in &snapshot.optimizer.moments {
        sections.push(m);
        sections.push(v);
    }
    sections.push(&snapshot.optimizer.densify);
    if snapshot.config.appearance.is_on() {
        sections.push(&snapshot.optimizer.appearance);
    }

    let section_count = u32::try_from(sections.len())
        .map_err(|_| CheckpointError::Unwritable("too many moment buffers".to_owned()))?;
    let metadata = Metadata::new(checkpoint);
    let json = serde_json::to_vec(&metadata)
        .map_err(|e| CheckpointError::Unwritable(format!("metadata: {e}")))?;
    let table_end = FIXED_HEADER_LEN + 8 * sections.len();
    let data_start = (table_end + json.len()).next_multiple_of(8);
    let data_len: u64 = sections.iter().map(|s| 4 * s.len() as u64).sum();
    let total = data_start as u64 + data_len + CHECKSUM_LEN as u64;

    let mut header = Vec::with_capacity(data_start);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&section_count.to_le_bytes());
    header.extend_from_slice(&total.to_le_bytes());
    header.extend_from_slice(&(json.len() as u64).to_le_bytes());
    for section in &sections {
        header.extend_from_slice(&(section.len() as u64).to_le_bytes());
    }
    header.extend_from_slice(&json);
    header.resize(data_start, 0);

    let fail = |e| CheckpointError::io("cannot write the checkpoint", e);
    let mut writer = HashingWriter { out, hash: Xxh64::new() };
    writer.put(&header).map_err(fail)?;
    for section in sections {
        writer.put_f32(section).map_err(fail)?;
    }
    let HashingWriter { out, hash } = writer;
    out.write_all(&hash.finish().to_le_bytes()).map_err(fail)?;
    out.flush().map_err(fail)
}

/// Writes `checkpoint` to `path` atomically (see the module documentation). Errors name
/// the file.
pub fn save(path: &Path, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
    write_atomically(path, |out| write(checkpoint, out))
}

/// Creates `path` with what `fill` writes, atomically: `fill` writes to a temporary file in
/// the same folder, which is flushed, synced and renamed to `path` only if `fill` succeeds;
/// otherwise (or if `fill` panics) it is removed and `path` is left as it was. Errors name
/// `path`.
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> Result<(), CheckpointError>,
) -> Result<(), CheckpointError> {
    let in_file = |error| CheckpointError::in_file(path, error);
    let temporary_path = temporary_path(path).map_err(in_file)?;
    let file =
        OpenOptions::new().write(true).create_new(true).open(&temporary_path).map_err(|e| {
            in_file(CheckpointError::io(
                format!("cannot create the temporary file {}", temporary_path.display()),
                e,
            ))
        })?;
    // From here on, any early return or panic removes the temporary file.
    let mut temporary = TemporaryFile { path: temporary_path, keep: false };
    let mut out = BufWriter::with_capacity(IO_CHUNK, file);
    fill(&mut out).map_err(in_file)?;
    let file = out
        .into_inner()
        .map_err(|e| in_file(CheckpointError::io("cannot write", e.into_error())))?;
    file.sync_all().map_err(|e| in_file(CheckpointError::io("cannot write", e)))?;
    drop(file);
    fs::rename(&temporary.path, path).map_err(|e| {
        in_file(CheckpointError::io(format!("cannot rename {} to it", temporary.path.display()), e))
    })?;
    temporary.keep = true;
    sync_folder(path);
    Ok(())
}

/// `NAME.<pid>-<n>.partial` beside `path`: unique within and across processes.
fn temporary_path(path: &Path) -> Result<PathBuf, CheckpointError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let Some(name) = path.file_name() else {
        return Err(CheckpointError::Unwritable("the path does not name a file".to_owned()));
    };
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temporary = name.to_os_string();
    temporary.push(format!(".{}-{n}.partial", std::process::id()));
    Ok(path.with_file_name(temporary))
}

/// Removes the file when dropped (a failed or panicking save) unless it was renamed.
struct TemporaryFile {
    path: PathBuf,
    keep: bool,
}

impl Drop for TemporaryFile {
    fn drop(&mut self) {
        if !self.keep
            && let Err(e) = fs::remove_file(&self.path)
        {
            log::warn!("cannot remove the temporary file {}: {e}", self.path.display());
        }
    }
}

/// Makes the rename durable where the platform allows it; the file is complete either way.
fn sync_folder(path: &Path) {
    #[cfg(unix)]
    {
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        if let Err(e) = File::open(folder).and_then(|f| f.sync_all()) {
            log::warn!("{}: cannot sync the folder after saving: {e}", path.display());
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Hashes what it writes, in pieces of [`IO_CHUNK`].
struct HashingWriter<'a, W: Write> {
    out: &'a mut W,
    hash: Xxh64,
}

impl<W: Write> HashingWriter<'_, W> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        for piece in bytes.chunks(IO_CHUNK) {
            self.hash.update(piece);
            self.out.write_all(piece)?;
        }
        Ok(())
    }

    fn put_f32(&mut self, values: &[f32]) -> io::Result<()> {
        if cfg!(target_endian = "little") {
            return self.put(bytemuck::cast_slice(values));
        }
        let mut buffer = Vec::with_capacity(IO_CHUNK);
        for chunk in values.chunks(IO_CHUNK / 4) {
            buffer.clear();
            buffer.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            self.put(&buffer)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Reading

/// Reads a checkpoint from the bytes of a whole file (see the module documentation for the
/// checks, and their order).
pub fn read(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let have = bytes.len() as u64;
    check_envelope(bytes)?;
    let header = Header::parse(bytes, have)?;
    let ranges = header.sections(bytes, have)?;
    let metadata = header.metadata(bytes)?;
    let lens: Vec<usize> = ranges.iter().map(|range| range.len() / 4).collect();
    let mut arrays = Arrays::zeroed(&metadata, &lens)?;
    for (section, range) in arrays.sections_mut().into_iter().zip(ranges) {
        section.copy_from_slice(&bytes[range]);
    }
    Ok(arrays.into_checkpoint(metadata))
}

/// Reads the checkpoint file at `path`. Errors name the file.
///
/// Reads the arrays straight from the file into their vectors, so it needs memory for the
/// checkpoint once, not twice as `read(&fs::read(path)?)` would. Anything unexpected (a
/// damaged or cut-short file) is then reported by reading the whole file with [`read`], so
/// both give the same errors.
pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let in_file = |error| CheckpointError::in_file(path, error);
    let cannot_read = |e| in_file(CheckpointError::io("cannot read", e));
    let mut file = File::open(path).map_err(cannot_read)?;
    let have = file.metadata().map_err(cannot_read)?.len();
    if let Some(checkpoint) = stream(&mut file, have).map_err(cannot_read)? {
        return Ok(checkpoint);
    }
    drop(file);
    let bytes = fs::read(path).map_err(cannot_read)?;
    read(&bytes).map_err(in_file)
}

/// The dataset the checkpoint file at `path` trained on and the settings of its run, from its
/// header and metadata only (the arrays and the checksum are [`load`]'s to check). Errors name
/// the file.
pub fn load_settings(path: &Path) -> Result<(DatasetIdentity, TrainConfig), CheckpointError> {
    let cannot_read = |e| CheckpointError::in_file(path, CheckpointError::io("cannot read", e));
    let mut file = File::open(path).map_err(cannot_read)?;
    let have = file.metadata().map_err(cannot_read)?.len();
    if let Some((header, head)) = read_head(&mut file, have).map_err(cannot_read)?
        && let Ok(metadata) = header.metadata(&head)
    {
        return Ok((metadata.dataset, metadata.config));
    }
    // Something is wrong: `load` says what.
    load(path).map(|checkpoint| (checkpoint.dataset, checkpoint.snapshot.config))
}

/// The header and the bytes up to the first section of a file of `have` bytes; `None` where
/// [`read`] would find something wrong with them.
fn read_head(file: &mut File, have: u64) -> io::Result<Option<(Header, Vec<u8>)>> {
    let mut head = vec![0; FIXED_HEADER_LEN];
    if have < (FIXED_HEADER_LEN + CHECKSUM_LEN) as u64 {
        return Ok(None);
    }
    file.read_exact(&mut head)?;
    if !head.starts_with(&MAGIC)
        || le_u32(&head, 8).is_none_or(|version| !READ_VERSIONS.contains(&version))
        || le_u64(&head, 16) != Some(have)
    {
        return Ok(None);
    }
    let Ok(header) = Header::parse(&head, have) else { return Ok(None) };
    head.resize(header.data_start, 0);
    file.read_exact(&mut head[FIXED_HEADER_LEN..])?;
    Ok(Some((header, head)))
}

/// [`read`] from a file of `have` bytes without holding the file in memory; `None` where
/// [`read`] would find something wrong (or might: the checksum is only known at the end).
fn stream(file: &mut File, have: u64) -> io::Result<Option<Checkpoint>> {
    let Some((header, head)) = read_head(file, have)? else { return Ok(None) };
    let (Ok(ranges), Ok(metadata)) = (header.sections(&head, have), header.metadata(&head)) else {
        return Ok(None);
    };
    let lens: Vec<usize> = ranges.iter().map(|range| range.len() / 4).collect();
    let Ok(mut arrays) = Arrays::zeroed(&metadata, &lens) else { return Ok(None) };

    let mut hash = Xxh64::new();
    hash.update(&head);
    for section in arrays.sections_mut() {
        for piece in section.chunks_mut(IO_CHUNK) {
            file.read_exact(piece)?;
            hash.update(piece);
        }
    }
    let mut stored = [0; CHECKSUM_LEN];
    file.read_exact(&mut stored)?;
    if u64::from_le_bytes(stored) != hash.finish() {
        return Ok(None);
    }
    Ok(Some(arrays.into_checkpoint(metadata)))
}

/// The checks that need the whole file: magic, version, length, checksum.
fn check_envelope(bytes: &[u8]) -> Result<(), CheckpointError> {
    let have = bytes.len() as u64;
    if !bytes.starts_with(&MAGIC) {
        return Err(if MAGIC.starts_with(bytes) {
            CheckpointError::Truncated { have, expected: None }
        } else {
            CheckpointError::NotACheckpoint
        });
    }
    let truncated = CheckpointError::Truncated { have, expected: None };
    let version = le_u32(bytes, 8).ok_or(truncated)?;
    if !READ_VERSIONS.contains(&version) {
        return Err(CheckpointError::UnsupportedVersion { found: version });
    }
    if let Some(total) = le_u64(bytes, 16).filter(|&total| total > have) {
        return Err(CheckpointError::Truncated { have, expected: Some(total) });
    }
    let Some(body_len) =
        bytes.len().checked_sub(CHECKSUM_LEN).filter(|&len| len >= FIXED_HEADER_LEN)
    else {
        return Err(CheckpointError::Truncated { have, expected: None });
    };
    // Any changed byte stops here, before a length is trusted.
    let (body, stored) = bytes.split_at(body_len);
    let stored = le_u64(stored, 0).unwrap_or_default();
    let computed = checksum(body);
    if stored != computed {
        return Err(CheckpointError::ChecksumMismatch { stored, computed });
    }
    let total = le_u64(bytes, 16).unwrap_or_default();
    if total != have {
        return Err(damaged(format!("its header gives {total} bytes, the file has {have}")));
    }
    Ok(())
}

/// Where the parts before the sections end, from the fixed header, checked against the
/// length of the file (`have` bytes) before anything is allocated.
struct Header {
    sections: usize,
    table_end: usize,
    json_end: usize,
    data_start: usize,
}

impl Header {
    /// From the first [`FIXED_HEADER_LEN`] bytes of `head`.
    fn parse(head: &[u8], have: u64) -> Result<Self, CheckpointError> {
        let (Some(section_count), Some(json_len)) = (le_u32(head, 12), le_u64(head, 24)) else {
            return Err(CheckpointError::Truncated { have, expected: None });
        };
        let body_len = usize::try_from(have.saturating_sub(CHECKSUM_LEN as u64))
            .map_err(|_| damaged(format!("{have} bytes do not fit in memory")))?;
        let sections = section_count as usize;
        let table_end = sections
            .checked_mul(8)
            .and_then(|table| table.checked_add(FIXED_HEADER_LEN))
            .filter(|&end| end <= body_len)
            .ok_or_else(|| {
                damaged(format!(
                    "its header lists {section_count} sections, more than a {have}-byte file \
                     holds"
                ))
            })?;
        let json_end = usize::try_from(json_len)
            .ok()
            .and_then(|len| len.checked_add(table_end))
            .filter(|&end| end <= body_len)
            .ok_or_else(|| {
                damaged(format!(
                    "its header gives {json_len} bytes of metadata, more than the {} bytes left",
                    body_len - table_end
                ))
            })?;
        let data_start = json_end.next_multiple_of(8);
        if data_start > body_len {
            return Err(damaged("its metadata runs into the checksum".to_owned()));
        }
        Ok(Self { sections, table_end, json_end, data_start })
    }

    /// The byte range of each section in the file, from the section table in `head` (the
    /// file's first [`Header::data_start`] bytes or more).
    fn sections(&self, head: &[u8], have: u64) -> Result<Vec<Range<usize>>, CheckpointError> {
        let body_len = usize::try_from(have - CHECKSUM_LEN as u64).unwrap_or(usize::MAX);
        let padding = head.get(self.json_end..self.data_start).unwrap_or_default();
        if padding.iter().any(|&b| b != 0) {
            return Err(damaged("the padding after the metadata is not zero bytes".to_owned()));
        }
        let mut ranges = Vec::with_capacity(self.sections);
        let mut offset = self.data_start;
        for i in 0..self.sections {
            let values = le_u64(head, FIXED_HEADER_LEN + 8 * i).unwrap_or(u64::MAX);
            let end = usize::try_from(values)
                .ok()
                .and_then(|v| v.checked_mul(4))
                .and_then(|len| len.checked_add(offset))
                .filter(|&end| end <= body_len)
                .ok_or_else(|| {
                    damaged(format!(
                        "section {} claims {values} values, more than the {} bytes left hold",
                        section_label(i, self.sections),
                        body_len - offset
                    ))
                })?;
            ranges.push(offset..end);
            offset = end;
        }
        if offset != body_len {
            return Err(damaged(format!(
                "{} bytes between the last section and the checksum",
                body_len - offset
            )));
        }
        Ok(ranges)
    }

    fn metadata(&self, head: &[u8]) -> Result<Metadata, CheckpointError> {
        let json = head.get(self.table_end..self.json_end).unwrap_or_default();
        let metadata: Metadata =
            serde_json::from_slice(json).map_err(|error| match unknown_name(&error) {
                Some(name) => {
                    #[derive(Deserialize)]
                    struct Writer {
                        writer: String,
                    }
                    let writer = serde_json::from_slice::<Writer>(json)
                        .map_or_else(|_| "an unknown writer".to_owned(), |doc| doc.writer);
                    CheckpointError::NewerMetadata { name, writer }
                }
                None => CheckpointError::Metadata(error),
            })?;
        if let Some(problem) = metadata.crop.as_ref().and_then(CropDoc::problem) {
            return Err(damaged(problem));
        }
        Ok(metadata)
    }
}

/// The field or the value (of a setting with named choices) a metadata error names as
/// unknown (serde's `unknown field `NAME`, expected ...` or `unknown variant ...`), at
/// whatever depth of the document.
fn unknown_name(error: &serde_json::Error) -> Option<String> {
    let message = error.to_string();
    let name = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))?;
    Some(name[..name.find('`')?].to_owned())
}

/// The arrays of a checkpoint, allocated for the section lengths a file gives.
struct Arrays {
    splats: Splats,
    optimizer: HostOptimizerState,
}

impl Arrays {
    /// Zeroed arrays for sections of `lens` f32 values, once they agree with `metadata`.
    fn zeroed(metadata: &Metadata, lens: &[usize]) -> Result<Self, CheckpointError> {
        let appearance = usize::from(metadata.config.appearance.is_on());
        let count = 2 * u64::from(metadata.moments) + 7 + appearance as u64;
        if count != lens.len() as u64 {
            return Err(damaged(format!(
                "its metadata gives {} moment buffers, which need {count} sections, but its \
                 header lists {}",
                metadata.moments,
                lens.len()
            )));
        }
        let names = section_names(metadata.moments, metadata.config.appearance.is_on());
        if metadata.sections != names {
            return Err(damaged(format!(
                "its metadata lists the sections {:?}, expected {names:?}",
                metadata.sections
            )));
        }
        if metadata.sh_degree > 3 {
            return Err(damaged(format!("SH degree {} (at most 3)", metadata.sh_degree)));
        }
        let n = usize::try_from(metadata.splats).unwrap_or(usize::MAX);
        let rest = 3 * (splat_formats::sh_coeffs_for_degree(metadata.sh_degree) - 1);
        for ((name, &len), per_splat) in SPLAT_SECTIONS.iter().zip(lens).zip([3, 3, 4, 1, 3, rest])
        {
            if Some(len) != n.checked_mul(per_splat) {
                return Err(damaged(format!(
                    "section {name} has {len} values; {} splats of SH degree {} need \
                     {per_splat} each",
                    metadata.splats, metadata.sh_degree
                )));
            }
        }
        let optimizer = &lens[SPLAT_SECTIONS.len()..lens.len() - appearance];
        let (moments, densify) = optimizer.split_at(optimizer.len() - 1);
        let appearance = lens[lens.len() - appearance..].first().copied().unwrap_or(0);
        Ok(Self {
            splats: Splats {
                means: vec![[0.0; 3]; n],
                log_scales: vec![[0.0; 3]; n],
                rotations: vec![[0.0; 4]; n],
                opacity_logits: vec![0.0; n],
                sh_dc: vec![[0.0; 3]; n],
                sh_rest: vec![0.0; n * rest],
                sh_degree: metadata.sh_degree,
            },
            optimizer: HostOptimizerState {
                moments: moments
                    .chunks_exact(2)
                    .map(|mv| (vec![0.0; mv[0]], vec![0.0; mv[1]]))
                    .collect(),
                densify: vec![0.0; densify[0]],
                appearance: vec![0.0; appearance],
            },
        })
    }

    /// Each section's bytes, in file order, to be filled with the file's little-endian
    /// values (byte-swapped by [`Arrays::into_checkpoint`] on big-endian machines).
    fn sections_mut(&mut self) -> Vec<&mut [u8]> {
        let Splats { means, log_scales, rotations, opacity_logits, sh_dc, sh_rest, .. } =
            &mut self.splats;
        let mut sections: Vec<&mut [u8]> = vec![
            bytemuck::cast_slice_mut(means),
            bytemuck::cast_slice_mut(log_scales),
            bytemuck::cast_slice_mut(rotations),
            bytemuck::cast_slice_mut(opacity_logits),
            bytemuck::cast_slice_mut(sh_dc),
            bytemuck::cast_slice_mut(sh_rest),
        ];
        for (m, v) in &mut self.optimizer.moments {
            sections.push(bytemuck::cast_slice_mut(m));
            sections.push(bytemuck::cast_slice_mut(v));
        }
        sections.push(bytemuck::cast_slice_mut(&mut self.optimizer.densify));
        // Empty unless the run has per-view appearance (its section is the last one).
        sections.push(bytemuck::cast_slice_mut(&mut self.optimizer.appearance));
        sections
    }

    fn into_checkpoint(mut self, metadata: Metadata) -> Checkpoint {
        if cfg!(target_endian = "big") {
            for section in self.sections_mut() {
                for value in section.chunks_exact_mut(4) {
                    value.reverse();
                }
            }
        }
        let peak_splats = metadata.peak_splats.unwrap_or(self.splats.len() as u32);
        Checkpoint {
            snapshot: RunSnapshot {
                splats: self.splats,
                optimizer: self.optimizer,
                step: metadata.step,
                rng: metadata.rng,
                order: metadata.order,
                peak_splats,
                config: metadata.config,
            },
            dataset: metadata.dataset,
            crop: metadata.crop.map(Filter::from).unwrap_or_default(),
        }
    }
}

fn damaged(message: String) -> CheckpointError {
    CheckpointError::Damaged(message)
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(*bytes.get(at..)?.first_chunk()?))
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(*bytes.get(at..)?.first_chunk()?))
}

/// Splat arrays whose lengths agree with the count and SH degree.
fn check_splats(splats: &Splats) -> Result<(), String> {
    if splats.sh_degree > 3 {
        return Err(format!("SH degree {} (at most 3)", splats.sh_degree));
    }
    let n = splats.len();
    let rows = [
        ("log_scales", splats.log_scales.len()),
        ("rotations", splats.rotations.len()),
        ("opacity_logits", splats.opacity_logits.len()),
        ("sh_dc", splats.sh_dc.len()),
    ];
    for (name, len) in rows {
        if len != n {
            return Err(format!("{n} splat positions but {len} {name}"));
        }
    }
    let rest = n * splats.rest_per_splat();
    if splats.sh_rest.len() != rest {
        return Err(format!(
            "{n} splats of SH degree {} need {rest} sh_rest values, not {}",
            splats.sh_degree,
            splats.sh_rest.len()
        ));
    }
    Ok(())
}

/// The name of section `i` of `count` in a well-formed file.
fn section_label(i: usize, count: usize) -> String {
    match SPLAT_SECTIONS.get(i) {
        Some(name) => (*name).to_owned(),
        None if i + 1 == count => "densify".to_owned(),
        None => {
            let moment = (i - SPLAT_SECTIONS.len()) / 2;
            let kind = if (i - SPLAT_SECTIONS.len()).is_multiple_of(2) { "m" } else { "v" };
            format!("adam_{kind}.{moment}")
        }
    }
}

/// The sections of a file with `moments` moment pairs, and per-view appearance or not.
fn section_names(moments: u32, appearance: bool) -> Vec<String> {
    let count = SPLAT_SECTIONS.len() + 2 * moments as usize + 1;
    let mut names: Vec<String> = (0..count).map(|i| section_label(i, count)).collect();
    if appearance {
        names.push("appearance".to_owned());
    }
    names
}

// ---------------------------------------------------------------------------------------
// Metadata: the JSON document. The settings are stored as their own types serialise them
// (`crate::config`, `crate::dataset::LoadOptions`, `crate::densify`): a setting added there is
// in the file without a word here. The checkpoints in `tests/fixtures/` were written by
// earlier builds; they must read back, and rewrite to the same bytes.

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    writer: String,
    step: u32,
    rng: u64,
    order: Vec<u32>,
    splats: u64,
    /// [`RunSnapshot::peak_splats`], written where it exceeds `splats` (files without it,
    /// older ones included, read as a peak of `splats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    peak_splats: Option<u32>,
    sh_degree: u32,
    moments: u32,
    sections: Vec<String>,
    dataset: DatasetIdentity,
    config: TrainConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crop: Option<CropDoc>,
}

impl Metadata {
    fn new(checkpoint: &Checkpoint) -> Self {
        let snapshot = &checkpoint.snapshot;
        let moments = u32::try_from(snapshot.optimizer.moments.len()).unwrap_or(u32::MAX);
        Self {
            writer: WRITER.to_owned(),
            step: snapshot.step,
            rng: snapshot.rng,
            order: snapshot.order.clone(),
            splats: snapshot.splats.len() as u64,
            peak_splats: Some(snapshot.peak_splats)
                .filter(|&peak| u64::from(peak) > snapshot.splats.len() as u64),
            sh_degree: snapshot.splats.sh_degree,
            moments,
            sections: section_names(moments, snapshot.config.appearance.is_on()),
            dataset: checkpoint.dataset.clone(),
            config: snapshot.config.clone(),
            crop: (!checkpoint.crop.is_empty()).then(|| CropDoc::from(&checkpoint.crop)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::appearance::Compensation;
    use crate::config::{Progressive, SplatBudget, Transparency};
    use crate::densify::{CompactConfig, SplitRule, Strategy};
    use splat_render::ShPrecision;

    /// A checkpoint written before `transparency` was stored trained on the composited
    /// images: it reads back as `Composite`, whatever today's default is; one written before
    /// `sh_precision` was stored trained in f32; one written before progressive resolution
    /// trained every step at full size; one written before the long-axis split split as
    /// 3DGS does; one written before per-view appearance trained without it.
    #[test]
    fn configs_without_transparency_read_as_composite() {
        let config = TrainConfig {
            steps: 10,
            sh_precision: ShPrecision::F16,
            strategy: Strategy::Compact(CompactConfig::default()),
            max_splats: SplatBudget::Count(100),
            eval_every: 0,
            seed: 1,
            progressive: Progressive::for_steps(10),
            appearance: Compensation::On,
            ..TrainConfig::default()
        };
        let mut json = serde_json::to_value(&config).expect("serialise");
        let written: TrainConfig = serde_json::from_value(json.clone()).expect("read back");
        assert_eq!(written, config);
        let fields = json.as_object_mut().expect("an object");
        fields.remove("transparency");
        fields.remove("sh_precision");
        fields.remove("progressive");
        assert_eq!(fields.remove("appearance"), Some(serde_json::json!(true)));
        let refine = fields["strategy"]["compact"]["refine"].as_object_mut().expect("an object");
        assert_eq!(refine.remove("split"), Some(serde_json::json!("long_axis")));
        let old: TrainConfig = serde_json::from_value(json).expect("older");
        assert_eq!(old.transparency, Transparency::Composite);
        assert_eq!(old.sh_precision, ShPrecision::F32);
        assert_eq!(old.progressive, Progressive::Off);
        assert_eq!(old.appearance, Compensation::Off);
        let Strategy::Compact(compact) = old.strategy else { panic!("compact") };
        assert_eq!(compact.refine.split, SplitRule::Sampled);
    }
}
