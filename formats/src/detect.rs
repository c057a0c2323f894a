//! Which format a file is, decided from its content (and its extension only where the
//! content has no magic), and one entry point that reads any of them.

use std::path::Path;

use crate::{FileError, ParseError, PointCloud, Splats, compressed_ply, ply, sog, splat, spz};

/// Splat scene formats we read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplatFormat {
    /// Standard 3DGS PLY.
    Ply,
    /// `PlayCanvas` compressed PLY (`chunk` + packed `vertex`, optional `sh`).
    CompressedPly,
    /// antimatter15 `.splat` (32 bytes a splat).
    Splat,
    /// Niantic `.spz`.
    Spz,
    /// PlayCanvas's SOG: a `.sog` bundle, or `meta.json` with its images beside it.
    Sog,
}

impl SplatFormat {
    /// Short lowercase name, as `info` prints it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Ply => "ply",
            Self::CompressedPly => "compressed-ply",
            Self::Splat => "splat",
            Self::Spz => "spz",
            Self::Sog => "sog",
        }
    }
}

/// What a file turned out to hold.
#[derive(Clone, Debug, PartialEq)]
pub enum Loaded {
    Splats { format: SplatFormat, splats: Splats },
    Points(PointCloud),
}

/// The kind of a file, found without reading all of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Splats(SplatFormat),
    Points,
}

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZIP_MAGIC: &[u8] = b"PK\x03\x04";

/// Decides the kind of a file from its first bytes (and for `.splat`, which has no magic,
/// from its name). PLY files are told apart by their header: `chunk` + `packed_position` is
/// compressed, `opacity`/`f_dc_0` is a splat scene, anything else with `x y z` is a cloud.
pub fn sniff(name: &str, bytes: &[u8]) -> Result<FileKind, ParseError> {
    let extension =
        Path::new(name).extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    if bytes.starts_with(b"ply") {
        return Ok(match ply::classify(bytes)? {
            ply::PlyKind::Splats => FileKind::Splats(SplatFormat::Ply),
            ply::PlyKind::Compressed => FileKind::Splats(SplatFormat::CompressedPly),
            ply::PlyKind::Points => FileKind::Points,
        });
    }
    if bytes.starts_with(GZIP_MAGIC) || bytes.starts_with(spz::MAGIC) {
        return Ok(FileKind::Splats(SplatFormat::Spz));
    }
    if bytes.starts_with(ZIP_MAGIC) && extension == "sog" {
        return Ok(FileKind::Splats(SplatFormat::Sog));
    }
    if extension == "json" && sog::is_meta_name(Path::new(name)) {
        return Ok(FileKind::Splats(SplatFormat::Sog));
    }
    if extension == "ksplat" {
        return Err(ParseError::Unsupported(
            "'.ksplat' (GaussianSplats3D's own format) is not read; export the scene as .ply, .splat or .spz".into(),
        ));
    }
    if extension == "splat" {
        return Ok(FileKind::Splats(SplatFormat::Splat));
    }
    if extension == "spz" {
        return Err(ParseError::invalid("not an SPZ file (no gzip or NGSP magic)"));
    }
    if extension == "ply" {
        return Err(ParseError::invalid("not a PLY file (does not start with 'ply')"));
    }
    Err(ParseError::Unsupported(
        "unknown file type (expected .ply, .compressed.ply, .splat, .spz, .sog or a SOG's meta.json)".into(),
    ))
}

/// Reads any splat or point-cloud file from memory; `name` is only used for `.splat`, which
/// has no magic bytes.
pub fn load_bytes(name: &str, bytes: &[u8]) -> Result<Loaded, ParseError> {
    Ok(match sniff(name, bytes)? {
        FileKind::Splats(format) => {
            let splats = match format {
                SplatFormat::Ply => ply::read_splats(bytes)?,
                SplatFormat::CompressedPly => compressed_ply::read(bytes)?,
                SplatFormat::Splat => splat::read(bytes)?,
                SplatFormat::Spz => spz::read(bytes)?,
                SplatFormat::Sog if sog::is_meta_name(Path::new(name)) => {
                    return Err(ParseError::invalid(
                        "an unbundled SOG's meta.json is read from its folder (load_file), not alone",
                    ));
                }
                SplatFormat::Sog => sog::read_bundle(bytes)?,
            };
            Loaded::Splats { format, splats }
        }
        FileKind::Points => Loaded::Points(ply::read_points(bytes)?),
    })
}

/// Reads any splat or point-cloud file; errors name the file.
pub fn load_file(path: &Path) -> Result<Loaded, FileError> {
    let bytes = std::fs::read(path).map_err(|e| FileError::new(path, e))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if sog::is_meta_name(path) {
        // An unbundled SOG: the images it names lie beside it.
        let folder = path.parent().unwrap_or(Path::new("."));
        let splats = sog::read(&bytes, &mut |file| {
            std::fs::read(folder.join(file)).map_err(|e| {
                ParseError::invalid(format!("SOG: cannot read {file} beside meta.json: {e}"))
            })
        })
        .map_err(|e| FileError::new(path, e))?;
        return Ok(Loaded::Splats { format: SplatFormat::Sog, splats });
    }
    load_bytes(&name, &bytes).map_err(|e| FileError::new(path, e))
}
