//! `PlayCanvas` compressed PLY (written by `SuperSplat` and splat-transform).
//!
//! # Layout
//!
//! A binary PLY with up to three elements, found by name (properties in any order):
//!
//! - `chunk`, one row per 256 splats (the last one may be partial), `float` properties:
//!   `min_x min_y min_z max_x max_y max_z` (position bounds), `min_scale_x … max_scale_z`
//!   (log-scale bounds) and, in newer files, `min_r min_g min_b max_r max_g max_b` (colour
//!   bounds).
//! - `vertex`, one row a splat, four `uint` properties:
//!   - `packed_position`: x, y, z as 11, 10, 11 bits (x highest), each a fraction of its
//!     chunk's bounds: value = min + (max − min) · bits / (2^bits − 1);
//!   - `packed_scale`: the same for log-scales;
//!   - `packed_rotation`: bits 30..31 index the quaternion's largest component in
//!     `rot_0..rot_3` (w, x, y, z) order; the other three follow in that order, 10 bits each
//!     (highest first), as (bits / 1023 − 0.5) · √2; the largest is positive and follows
//!     from unit length;
//!   - `packed_color`: r, g, b, a as 8 bits each (r highest) over 255; r, g, b are a
//!     fraction of the chunk's colour bounds when the chunk has them. Colour is
//!     0.5 + `SH_C0` · `f_dc`, alpha is sigmoid(opacity).
//! - `sh` (optional), one row a splat: `uchar f_rest_0 … f_rest_{M−1}` with M = 9, 24 or 45,
//!   in PLY's channel-major order, each byte b a bucket of width 8/256 over −4..4, read at its
//!   centre: (b + 0.5)/256 · 8 − 4, with 0 and 255 meaning the clamped ends −4 and 4.
//!
//! Axes are those of 3DGS PLY files. Before any row is read, the header's counts are checked
//! against each other (chunks = ⌈vertices / 256⌉, `sh` rows = vertices) and against the bytes
//! the file holds.

use ply_rs_bw::ply::{
    ElementDef, Header, PropertyAccess, PropertyAccessResult, PropertyType, ScalarType,
};

use crate::ply::PlyFile;
use crate::splat::logit_from_u8;
use crate::{ParseError, SH_C0, Splats, sh_degree_for_rest_count};

/// Splats a `chunk` row covers.
const CHUNK_SIZE: usize = 256;
/// Chunk properties every file has: position bounds, then log-scale bounds.
const CHUNK_BOUNDS: [&str; 12] = [
    "min_x",
    "min_y",
    "min_z",
    "max_x",
    "max_y",
    "max_z",
    "min_scale_x",
    "min_scale_y",
    "min_scale_z",
    "max_scale_x",
    "max_scale_y",
    "max_scale_z",
];
/// Chunk colour bounds, present in newer files.
const CHUNK_COLORS: [&str; 6] = ["min_r", "min_g", "min_b", "max_r", "max_g", "max_b"];
/// Vertex properties, in the order [`VertexRow`] keeps them.
const PACKED: [&str; 4] = ["packed_position", "packed_rotation", "packed_scale", "packed_color"];
/// Largest `f_rest_*` count (SH degree 3).
const MAX_REST: usize = 45;
/// `f_rest` bytes cover −`SH_HALF_RANGE`..`SH_HALF_RANGE`.
const SH_HALF_RANGE: f32 = 4.0;

/// Reads a compressed PLY scene.
pub fn read(bytes: &[u8]) -> Result<Splats, ParseError> {
    let mut file = PlyFile::open(bytes)?;
    let shape = Shape::from_header(&file.header)?;
    // Elements are read in file order; whatever follows the ones we need is not read.
    let mut order: Vec<ElementDef> = file.header.elements.values().cloned().collect();
    let wanted = ["chunk", "vertex"].into_iter().chain((shape.rest_count > 0).then_some("sh"));
    let last = order.iter().rposition(|e| wanted.clone().any(|w| w == e.name)).unwrap_or(0);
    order.truncate(last + 1);

    let (mut chunks, mut vertices, mut sh) = (Vec::new(), Vec::new(), Vec::new());
    for element in &order {
        match element.name.as_str() {
            "chunk" => chunks = file.collect_rows::<ChunkRow>(element)?,
            "vertex" => vertices = file.collect_rows::<VertexRow>(element)?,
            "sh" if shape.rest_count > 0 => sh = file.collect_rows::<ShRow>(element)?,
            _ => file.read_rows(element, |_: Skip| {})?,
        }
    }
    decode(&shape, &chunks, &vertices, &sh)
}

/// What the header says about the scene, once checked.
struct Shape {
    vertices: usize,
    /// The chunks carry colour bounds.
    chunk_colors: bool,
    /// `f_rest_*` bytes a splat: 0, 9, 24 or 45.
    rest_count: usize,
    sh_degree: u32,
}

impl Shape {
    fn from_header(header: &Header) -> Result<Self, ParseError> {
        let chunk = element(header, "chunk")?;
        let vertex = element(header, "vertex")?;
        for name in CHUNK_BOUNDS {
            require(chunk, name, &ScalarType::Float)?;
        }
        let colors = CHUNK_COLORS.iter().filter(|n| chunk.properties.contains_key(**n)).count();
        if colors != 0 && colors != CHUNK_COLORS.len() {
            return Err(ParseError::invalid(format!(
                "compressed PLY: 'chunk' has {colors} of the 6 colour bounds (min_r … max_b); a file has all or none"
            )));
        }
        for name in CHUNK_COLORS.iter().take(colors) {
            require(chunk, name, &ScalarType::Float)?;
        }
        for name in PACKED {
            require(vertex, name, &ScalarType::UInt)?;
        }

        let needed_chunks = vertex.count.div_ceil(CHUNK_SIZE);
        if chunk.count != needed_chunks {
            return Err(ParseError::invalid(format!(
                "compressed PLY: {} vertices need {needed_chunks} chunks of {CHUNK_SIZE}, but the file has {}",
                vertex.count, chunk.count
            )));
        }

        let (rest_count, sh_degree) = match header.elements.get("sh") {
            None => (0, 0),
            Some(sh) => sh_shape(sh, vertex.count)?,
        };
        Ok(Self { vertices: vertex.count, chunk_colors: colors > 0, rest_count, sh_degree })
    }
}

/// Checks the `sh` element: `uchar f_rest_0..M−1` with M = 9, 24 or 45 and one row a vertex.
fn sh_shape(sh: &ElementDef, vertices: usize) -> Result<(usize, u32), ParseError> {
    let count = sh.properties.keys().filter(|k| k.starts_with("f_rest_")).count();
    let degree = sh_degree_for_rest_count(count).filter(|&d| d > 0).ok_or_else(|| {
        ParseError::invalid(format!(
            "compressed PLY: 'sh' has {count} f_rest properties (a file has 9, 24 or 45)"
        ))
    })?;
    for i in 0..count {
        require(sh, &format!("f_rest_{i}"), &ScalarType::UChar)?;
    }
    if sh.count != vertices {
        return Err(ParseError::invalid(format!(
            "compressed PLY: 'sh' has {} rows but 'vertex' has {vertices}; they must match",
            sh.count
        )));
    }
    Ok((count, degree))
}

fn element<'h>(header: &'h Header, name: &str) -> Result<&'h ElementDef, ParseError> {
    header.elements.get(name).ok_or_else(|| {
        ParseError::invalid(format!("compressed PLY: the file has no '{name}' element"))
    })
}

/// Checks that `element` has a scalar property `name` of type `want`.
fn require(element: &ElementDef, name: &str, want: &ScalarType) -> Result<(), ParseError> {
    match element.properties.get(name).map(|p| &p.data_type) {
        Some(PropertyType::Scalar(t)) if t == want => Ok(()),
        Some(other) => {
            let found = match other {
                PropertyType::Scalar(t) => scalar_name(t),
                PropertyType::List(..) => "a list",
            };
            Err(ParseError::invalid(format!(
                "compressed PLY: '{name}' of '{}' is {found}, expected {}",
                element.name,
                scalar_name(want)
            )))
        }
        None => Err(ParseError::invalid(format!(
            "compressed PLY: '{}' has no '{name}' property",
            element.name
        ))),
    }
}

/// The PLY header spelling of a type.
fn scalar_name(t: &ScalarType) -> &'static str {
    match t {
        ScalarType::Char => "char",
        ScalarType::UChar => "uchar",
        ScalarType::Short => "short",
        ScalarType::UShort => "ushort",
        ScalarType::Int => "int",
        ScalarType::UInt => "uint",
        ScalarType::Float => "float",
        ScalarType::Double => "double",
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding.

fn decode(
    shape: &Shape,
    chunks: &[ChunkRow],
    vertices: &[VertexRow],
    sh: &[ShRow],
) -> Result<Splats, ParseError> {
    if vertices.len() != shape.vertices || chunks.len() != shape.vertices.div_ceil(CHUNK_SIZE) {
        return Err(ParseError::invalid(
            "compressed PLY: rows read do not match the header counts",
        ));
    }
    let mut splats = Splats::with_capacity(shape.vertices, shape.sh_degree);
    for (group, chunk) in vertices.chunks(CHUNK_SIZE).zip(chunks) {
        for v in group {
            let [position, rotation, scale, color] = v.packed;
            splats.means.push(lerp3(
                chunk.position_min(),
                chunk.position_max(),
                unpack_11_10_11(position),
            ));
            splats.log_scales.push(lerp3(
                chunk.scale_min(),
                chunk.scale_max(),
                unpack_11_10_11(scale),
            ));
            splats.rotations.push(unpack_rotation(rotation));
            let [r, g, b, a] = color.to_be_bytes();
            let rgb = [r, g, b].map(|c| f32::from(c) / 255.0);
            let rgb = if shape.chunk_colors {
                lerp3(chunk.color_min(), chunk.color_max(), rgb)
            } else {
                rgb
            };
            splats.sh_dc.push(rgb.map(|c| (c - 0.5) / SH_C0));
            splats.opacity_logits.push(logit_from_u8(a));
        }
    }
    if shape.rest_count > 0 {
        if sh.len() != shape.vertices {
            return Err(ParseError::invalid(
                "compressed PLY: 'sh' rows read do not match the vertex count",
            ));
        }
        for row in sh {
            splats.sh_rest.extend(row.values.iter().take(shape.rest_count).map(|&b| sh_from_u8(b)));
        }
    }
    splats.validate()?;
    Ok(splats)
}

/// Fractions of 11, 10 and 11 bits (x highest).
fn unpack_11_10_11(v: u32) -> [f32; 3] {
    [unorm(v >> 21, 11), unorm(v >> 11, 10), unorm(v, 11)]
}

/// The low `bits` of `v` over their maximum.
fn unorm(v: u32, bits: u32) -> f32 {
    let max = (1u32 << bits) - 1;
    (v & max) as f32 / max as f32
}

fn lerp3(min: [f32; 3], max: [f32; 3], t: [f32; 3]) -> [f32; 3] {
    [0, 1, 2].map(|i| min[i] * (1.0 - t[i]) + max[i] * t[i])
}

/// Quaternion `w, x, y, z` from 2 bits of largest-component index and three 10-bit values.
fn unpack_rotation(v: u32) -> [f32; 4] {
    let largest = (v >> 30) as usize;
    let small = [20, 10, 0].map(|shift| (unorm(v >> shift, 10) - 0.5) * std::f32::consts::SQRT_2);
    let sum_squares: f32 = small.iter().map(|c| c * c).sum();
    let mut q = [0.0; 4];
    let mut rest = small.into_iter();
    for (i, slot) in q.iter_mut().enumerate() {
        *slot = if i == largest {
            (1.0 - sum_squares).max(0.0).sqrt()
        } else {
            rest.next().unwrap_or(0.0)
        };
    }
    q
}

/// An `f_rest` byte read at the centre of its bucket; 0 and 255 are the clamped ends.
fn sh_from_u8(b: u8) -> f32 {
    let t = match b {
        0 => 0.0,
        255 => 1.0,
        _ => (f32::from(b) + 0.5) / 256.0,
    };
    (t - 0.5) * 2.0 * SH_HALF_RANGE
}

// ---------------------------------------------------------------------------------------------
// Rows.

/// One `chunk` row: [`CHUNK_BOUNDS`] then [`CHUNK_COLORS`].
struct ChunkRow {
    values: [f32; 18],
}

impl ChunkRow {
    fn position_min(&self) -> [f32; 3] {
        [self.values[0], self.values[1], self.values[2]]
    }
    fn position_max(&self) -> [f32; 3] {
        [self.values[3], self.values[4], self.values[5]]
    }
    fn scale_min(&self) -> [f32; 3] {
        [self.values[6], self.values[7], self.values[8]]
    }
    fn scale_max(&self) -> [f32; 3] {
        [self.values[9], self.values[10], self.values[11]]
    }
    fn color_min(&self) -> [f32; 3] {
        [self.values[12], self.values[13], self.values[14]]
    }
    fn color_max(&self) -> [f32; 3] {
        [self.values[15], self.values[16], self.values[17]]
    }
}

impl PropertyAccess for ChunkRow {
    fn new() -> Self {
        Self { values: [0.0; 18] }
    }
    fn set_float(&mut self, name: &str, value: f32) -> PropertyAccessResult {
        match CHUNK_BOUNDS.iter().chain(&CHUNK_COLORS).position(|n| *n == name) {
            Some(i) => {
                self.values[i] = value;
                PropertyAccessResult::Set
            }
            None => PropertyAccessResult::Ignored,
        }
    }
}

/// One `vertex` row: the [`PACKED`] words.
struct VertexRow {
    packed: [u32; 4],
}

impl PropertyAccess for VertexRow {
    fn new() -> Self {
        Self { packed: [0; 4] }
    }
    fn set_uint(&mut self, name: &str, value: u32) -> PropertyAccessResult {
        match PACKED.iter().position(|n| *n == name) {
            Some(i) => {
                self.packed[i] = value;
                PropertyAccessResult::Set
            }
            None => PropertyAccessResult::Ignored,
        }
    }
}

/// One `sh` row: `f_rest_0..` bytes.
struct ShRow {
    values: [u8; MAX_REST],
}

impl PropertyAccess for ShRow {
    fn new() -> Self {
        Self { values: [0; MAX_REST] }
    }
    fn set_uchar(&mut self, name: &str, value: u8) -> PropertyAccessResult {
        let slot = name
            .strip_prefix("f_rest_")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| self.values.get_mut(i));
        match slot {
            Some(slot) => {
                *slot = value;
                PropertyAccessResult::Set
            }
            None => PropertyAccessResult::Ignored,
        }
    }
}

/// A row we only read past.
struct Skip;

impl PropertyAccess for Skip {
    fn new() -> Self {
        Self
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    #[test]
    fn rotation_puts_the_largest_in_its_slot() {
        // Middle of the 10-bit range is 0.
        let zero = 511u32; // (511/1023 - 0.5) * √2 ≈ -0.0007
        for largest in 0..4u32 {
            let v = (largest << 30) | (zero << 20) | (zero << 10) | zero;
            let q = unpack_rotation(v);
            assert!((q[largest as usize] - 1.0).abs() < 1e-3, "{q:?}");
        }
    }

    #[test]
    fn sh_bytes_cover_minus_four_to_four() {
        assert_eq!(sh_from_u8(0), -4.0);
        assert_eq!(sh_from_u8(255), 4.0);
        assert!((sh_from_u8(128) - (128.5 / 256.0 - 0.5) * 8.0).abs() < 1e-6);
    }
}
