//! Splat scenes and point clouds on disk.
//!
//! Everything here is plain bytes in, plain structs out: no GPU, no threads, no global state.
//! Readers never trust a count from a file before checking it against the bytes that are
//! actually there, and every failure names what is wrong ([`ParseError`]); the path-level entry
//! points add the file name ([`FileError`]).
//!
//! Values stay *raw* in memory, exactly as the 3DGS PLY format stores them (log-scales,
//! opacity logits, unnormalised `w x y z` quaternions, SH coefficients with `f_rest`
//! channel-major), so that a PLY written and read back is bit-identical. Formats that store
//! something else (`.splat`, `.spz`, compressed PLY) convert on the way in and out.

mod error;
mod points;
mod splats;

pub mod compressed_ply;
pub mod detect;
pub mod filter;
pub mod ply;
pub mod random;
pub mod sog;
pub mod splat;
pub mod spz;

pub use detect::{FileKind, Loaded, SplatFormat, load_bytes, load_file};
pub use error::{FileError, ParseError};
pub use points::PointCloud;
pub use splats::{SH_C0, Splats, sh_coeffs_for_degree, sh_degree_for_rest_count};
