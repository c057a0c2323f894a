//! Standard 3DGS PLY scenes and point-cloud PLY files (`init.ply`).
//!
//! Parsing goes through `ply-rs-bw` (header grammar, ASCII and both binary byte orders, list
//! properties) one row at a time, straight into our struct of arrays: no intermediate
//! `Vec` of rows, so reading a file costs the file plus the result. Properties are found by
//! name in any order; unknown ones are ignored. Before any row is read, the element counts
//! of the header are checked against the bytes the file really has, so a header that claims
//! billions of vertices in a small file fails at once.
//!
//! Writing produces the standard binary little-endian layout that other viewers open:
//! `x y z nx ny nz f_dc_0..2 f_rest_0.. opacity scale_0..2 rot_0..3`, all `float`. The
//! header comes from `ply-rs-bw`; the rows are fixed-size float records written directly,
//! which keeps them bit-exact (a file written and read back gives identical values).

use std::io::{BufRead, Cursor, Write};

use ply_rs_bw::parser::{Parser, Reader};
use ply_rs_bw::ply::{
    Addable, ElementDef, Encoding, Header, PropertyAccess, PropertyAccessResult, PropertyDef,
    PropertyType, ScalarType,
};
use ply_rs_bw::writer::Writer;

use crate::points::NEUTRAL_GREY;
use crate::{ParseError, PointCloud, SH_C0, Splats, sh_degree_for_rest_count};

/// Largest `f_rest_*` count (SH degree 3): 3 channels × 15 coefficients.
const MAX_REST: usize = 45;

/// What a PLY file holds, decided from its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlyKind {
    /// A standard 3DGS scene (`vertex` with `f_dc_*`, `opacity`, `scale_*`, `rot_*`).
    Splats,
    /// A `PlayCanvas` compressed scene (`chunk` + `vertex` with `packed_position`).
    Compressed,
    /// A point cloud (`vertex` with `x y z`).
    Points,
}

/// Reads the header and says what the file holds.
pub fn classify(bytes: &[u8]) -> Result<PlyKind, ParseError> {
    let mut file = PlyFile::open(bytes)?;
    // A header that promises more rows than the file holds is broken whatever it holds.
    file.ensure_counts_fit()?;
    let vertex = file.element("vertex")?;
    let has = |name: &str| vertex.properties.contains_key(name);
    if file.header.elements.contains_key("chunk") && has("packed_position") {
        return Ok(PlyKind::Compressed);
    }
    if has("f_dc_0") || (has("opacity") && has("scale_0")) {
        return Ok(PlyKind::Splats);
    }
    if has("x") && has("y") && has("z") {
        return Ok(PlyKind::Points);
    }
    Err(ParseError::invalid("PLY 'vertex' element has no x, y, z properties"))
}

/// Reads a standard 3DGS PLY scene. SH degree is inferred from the number of `f_rest_*`
/// properties (0, 9, 24 or 45); normals are optional; unknown properties are ignored.
pub fn read_splats(bytes: &[u8]) -> Result<Splats, ParseError> {
    let mut file = PlyFile::open(bytes)?;
    let vertex = file.element("vertex")?.clone();
    let sh_degree = check_splat_properties(&vertex)?;
    let rest_len = 3 * (crate::sh_coeffs_for_degree(sh_degree) - 1);

    file.ensure_counts_fit()?;
    file.skip_until(&vertex.name)?;
    let mut splats = Splats::with_capacity(vertex.count, sh_degree);
    file.read_rows(&vertex, |row: SplatRow| {
        splats.means.push(row.mean);
        splats.log_scales.push(row.log_scale);
        splats.rotations.push(row.rotation);
        splats.opacity_logits.push(row.opacity_logit);
        splats.sh_dc.push(row.sh_dc);
        splats.sh_rest.extend_from_slice(&row.sh_rest[..rest_len]);
    })?;
    splats.validate()?;
    Ok(splats)
}

/// Reads a point cloud: `x y z` (any numeric type) with optional colour `red green blue`
/// (`r g b` and `diffuse_*` too) as uchar (0..255), ushort (0..65535) or float (0..1). Points
/// without colour get neutral grey. A 3DGS scene PLY also reads as points, coloured from
/// its `f_dc_*`. Elements after `vertex` (faces, edges) are not read.
pub fn read_points(bytes: &[u8]) -> Result<PointCloud, ParseError> {
    let mut file = PlyFile::open(bytes)?;
    let vertex = file.element("vertex")?.clone();
    for axis in ["x", "y", "z"] {
        require_scalar(&vertex, axis)?;
    }
    let color_names = color_property_names(&vertex);
    let from_dc = color_names.is_none()
        && ["f_dc_0", "f_dc_1", "f_dc_2"].iter().all(|n| vertex.properties.contains_key(*n));

    file.ensure_counts_fit()?;
    file.skip_until(&vertex.name)?;
    let mut cloud = PointCloud {
        positions: Vec::with_capacity(vertex.count),
        colors: Vec::with_capacity(vertex.count),
        has_color: color_names.is_some() || from_dc,
    };
    file.read_rows(&vertex, |row: PointRow| {
        cloud.positions.push(row.position);
        let color = if color_names.is_some() {
            row.color
        } else if from_dc {
            row.sh_dc.map(|dc| 0.5 + SH_C0 * dc)
        } else {
            NEUTRAL_GREY
        };
        cloud.colors.push(color);
    })?;
    cloud.validate()?;
    Ok(cloud)
}

/// Reads every row of every element and returns `(name, row count)` per element: a full
/// check of a PLY file of any kind, for `info` on PLY files that are neither splats nor
/// clouds and for tests of the parser on its edge cases.
pub fn read_elements(bytes: &[u8]) -> Result<Vec<(String, usize)>, ParseError> {
    let mut file = PlyFile::open(bytes)?;
    let elements: Vec<ElementDef> = file.header.elements.values().cloned().collect();
    for element in &elements {
        file.read_rows(element, |_: Ignore| {})?;
    }
    Ok(elements.into_iter().map(|e| (e.name, e.count)).collect())
}

/// Writes a standard binary little-endian 3DGS PLY (normals written as zero).
pub fn write_splats(splats: &Splats, out: &mut impl Write) -> Result<(), ParseError> {
    splats.validate()?;
    let rest = splats.rest_per_splat();
    let names = splat_property_names(rest);

    let mut header = Header::new();
    header.encoding = Encoding::BinaryLittleEndian;
    let mut vertex = ElementDef::new("vertex".to_string());
    vertex.count = splats.len();
    for name in &names {
        vertex
            .properties
            .add(PropertyDef::new(name.clone(), PropertyType::Scalar(ScalarType::Float)));
    }
    header.elements.add(vertex);
    Writer::<ply_rs_bw::ply::DefaultElement>::new().write_header(out, &header)?;

    let mut row: Vec<f32> = Vec::with_capacity(names.len());
    let mut bytes: Vec<u8> = Vec::with_capacity(names.len() * 4);
    for i in 0..splats.len() {
        row.clear();
        row.extend_from_slice(&splats.means[i]);
        row.extend_from_slice(&[0.0; 3]); // normals
        row.extend_from_slice(&splats.sh_dc[i]);
        row.extend_from_slice(&splats.sh_rest[i * rest..(i + 1) * rest]);
        row.push(splats.opacity_logits[i]);
        row.extend_from_slice(&splats.log_scales[i]);
        row.extend_from_slice(&splats.rotations[i]);
        bytes.clear();
        bytes.extend(row.iter().flat_map(|v| v.to_le_bytes()));
        out.write_all(&bytes)?;
    }
    Ok(())
}

/// Property names of the standard layout, in file order.
fn splat_property_names(rest: usize) -> Vec<String> {
    let mut names: Vec<String> = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
        .iter()
        .map(ToString::to_string)
        .collect();
    names.extend((0..rest).map(|i| format!("f_rest_{i}")));
    names.push("opacity".into());
    names.extend((0..3).map(|i| format!("scale_{i}")));
    names.extend((0..4).map(|i| format!("rot_{i}")));
    names
}

/// Checks that a splat `vertex` has every property it needs as a scalar, and returns the SH
/// degree its `f_rest_*` count implies.
fn check_splat_properties(vertex: &ElementDef) -> Result<u32, ParseError> {
    for name in ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity"]
        .into_iter()
        .chain(["scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])
    {
        require_scalar(vertex, name)?;
    }
    let rest = vertex.properties.keys().filter(|k| k.starts_with("f_rest_")).count();
    let degree = sh_degree_for_rest_count(rest).ok_or_else(|| {
        ParseError::invalid(format!("{rest} f_rest properties (a 3DGS file has 0, 9, 24 or 45)"))
    })?;
    for i in 0..rest {
        require_scalar(vertex, &format!("f_rest_{i}"))?;
    }
    Ok(degree)
}

fn require_scalar(element: &ElementDef, name: &str) -> Result<(), ParseError> {
    match element.properties.get(name).map(|p| &p.data_type) {
        Some(PropertyType::Scalar(_)) => Ok(()),
        Some(PropertyType::List(..)) => Err(ParseError::invalid(format!(
            "property '{name}' of '{}' is a list, expected a number",
            element.name
        ))),
        None => Err(ParseError::invalid(format!("'{}' has no '{name}' property", element.name))),
    }
}

/// The colour property names a vertex uses, if it has all three.
fn color_property_names(vertex: &ElementDef) -> Option<[&'static str; 3]> {
    [["red", "green", "blue"], ["r", "g", "b"], ["diffuse_red", "diffuse_green", "diffuse_blue"]]
        .into_iter()
        .find(|names| {
            names.iter().all(|n| {
                matches!(
                    vertex.properties.get(*n).map(|p| &p.data_type),
                    Some(PropertyType::Scalar(_))
                )
            })
        })
}

// ---------------------------------------------------------------------------------------------
// Row-by-row reading on top of ply-rs-bw.

/// A PLY file in memory whose header has been read. Before the first row is read, the
/// element counts are checked against the file's size (after the caller has had the chance
/// to check the header's properties, whose errors are more specific). Elements must be read
/// in header order.
pub(crate) struct PlyFile<'a> {
    pub(crate) header: Header,
    reader: Reader<Cursor<&'a [u8]>>,
    total_len: usize,
    counts_checked: bool,
}

impl<'a> PlyFile<'a> {
    pub(crate) fn open(bytes: &'a [u8]) -> Result<Self, ParseError> {
        if !bytes.starts_with(b"ply") {
            return Err(ParseError::invalid("not a PLY file (does not start with 'ply')"));
        }
        let mut reader = Reader::new(Cursor::new(bytes));
        let header = Parser::<Ignore>::new().read_header(&mut reader)?;
        Ok(Self { header, reader, total_len: bytes.len(), counts_checked: false })
    }

    pub(crate) fn element(&self, name: &str) -> Result<&ElementDef, ParseError> {
        self.header
            .elements
            .get(name)
            .ok_or_else(|| ParseError::invalid(format!("PLY has no '{name}' element")))
    }

    fn remaining(&self) -> usize {
        let pos = usize::try_from(self.reader.get_ref().position()).unwrap_or(usize::MAX);
        self.total_len.saturating_sub(pos)
    }

    /// Refuses a header whose element counts need more bytes than the file has; call before
    /// allocating from a count (reading rows calls it too).
    pub(crate) fn ensure_counts_fit(&mut self) -> Result<(), ParseError> {
        if !self.counts_checked {
            self.check_counts_fit()?;
            self.counts_checked = true;
        }
        Ok(())
    }

    /// Refuses a header whose element counts need more bytes than the file has. Binary rows
    /// have a known minimum size (scalars plus list counts); an ASCII value takes at least
    /// two bytes (a digit and a separator).
    fn check_counts_fit(&self) -> Result<(), ParseError> {
        let available = self.remaining() as u128;
        let mut needed: u128 = 0;
        for element in self.header.elements.values() {
            let row: u128 = element
                .properties
                .values()
                .map(|p| match (&self.header.encoding, &p.data_type) {
                    (Encoding::Ascii, _) => 2,
                    (_, PropertyType::Scalar(t) | PropertyType::List(t, _)) => {
                        scalar_size(t) as u128
                    }
                })
                .sum();
            needed += row * element.count as u128;
            if needed > available {
                return Err(ParseError::truncated(format!(
                    "header declares {} '{}' rows, which need at least {needed} bytes, but only {available} follow the header",
                    element.count, element.name
                )));
            }
        }
        Ok(())
    }

    /// Reads (and drops) every element before `name`.
    pub(crate) fn skip_until(&mut self, name: &str) -> Result<(), ParseError> {
        let before: Vec<ElementDef> =
            self.header.elements.values().take_while(|e| e.name != name).cloned().collect();
        for element in &before {
            self.read_rows(element, |_: Ignore| {})?;
        }
        Ok(())
    }

    /// Reads every row of `element` (which must be the next in the file) into a `Vec`.
    pub(crate) fn collect_rows<E: PropertyAccess>(
        &mut self,
        element: &ElementDef,
    ) -> Result<Vec<E>, ParseError> {
        let mut rows = Vec::with_capacity(element.count);
        self.read_rows(element, |row| rows.push(row))?;
        Ok(rows)
    }

    /// Reads every row of `element` (which must be the next in the file) into `f`.
    pub(crate) fn read_rows<E: PropertyAccess>(
        &mut self,
        element: &ElementDef,
        mut f: impl FnMut(E),
    ) -> Result<(), ParseError> {
        self.ensure_counts_fit()?;
        let parser = Parser::<E>::new();
        let mut line = String::new();
        for i in 0..element.count {
            let row = match self.header.encoding {
                Encoding::Ascii => {
                    line.clear();
                    if self.reader.get_mut().read_line(&mut line)? == 0 {
                        return Err(ParseError::truncated(format!(
                            "file ends after {i} of {} '{}' rows",
                            element.count, element.name
                        )));
                    }
                    parser.read_ascii_element(&line, element)
                }
                Encoding::BinaryLittleEndian => {
                    parser.read_little_endian_element(self.reader.get_mut(), element)
                }
                Encoding::BinaryBigEndian => {
                    parser.read_big_endian_element(self.reader.get_mut(), element)
                }
            };
            let row = row.map_err(|e| match ParseError::from(e) {
                ParseError::Truncated(_) => ParseError::truncated(format!(
                    "file ends inside '{}' row {i} of {}",
                    element.name, element.count
                )),
                other => ParseError::invalid(format!("'{}' row {i}: {other}", element.name)),
            })?;
            f(row);
        }
        Ok(())
    }
}

fn scalar_size(t: &ScalarType) -> usize {
    match t {
        ScalarType::Char | ScalarType::UChar => 1,
        ScalarType::Short | ScalarType::UShort => 2,
        ScalarType::Int | ScalarType::UInt | ScalarType::Float => 4,
        ScalarType::Double => 8,
    }
}

/// Implements every scalar setter of [`PropertyAccess`] by converting the value with the
/// given expressions and handing it to `self.set(name, value)`.
macro_rules! scalar_setters {
    ($float:ident, $normalised:ident) => {
        fn set_char(&mut self, name: &str, v: i8) -> PropertyAccessResult {
            self.set(name, f32::from(v), $normalised(f64::from(v), f64::from(i8::MAX)))
        }
        fn set_uchar(&mut self, name: &str, v: u8) -> PropertyAccessResult {
            self.set(name, f32::from(v), $normalised(f64::from(v), f64::from(u8::MAX)))
        }
        fn set_short(&mut self, name: &str, v: i16) -> PropertyAccessResult {
            self.set(name, f32::from(v), $normalised(f64::from(v), f64::from(i16::MAX)))
        }
        fn set_ushort(&mut self, name: &str, v: u16) -> PropertyAccessResult {
            self.set(name, f32::from(v), $normalised(f64::from(v), f64::from(u16::MAX)))
        }
        fn set_int(&mut self, name: &str, v: i32) -> PropertyAccessResult {
            self.set(name, v as f32, $normalised(f64::from(v), f64::from(i32::MAX)))
        }
        fn set_uint(&mut self, name: &str, v: u32) -> PropertyAccessResult {
            self.set(name, v as f32, $normalised(f64::from(v), f64::from(u32::MAX)))
        }
        fn set_float(&mut self, name: &str, v: f32) -> PropertyAccessResult {
            self.set(name, v, $float(v))
        }
        fn set_double(&mut self, name: &str, v: f64) -> PropertyAccessResult {
            self.set(name, v as f32, $float(v as f32))
        }
    };
}

/// Integer colours are scaled to 0..1 by their type's maximum; float colours are taken as is.
fn int_color(v: f64, max: f64) -> f32 {
    (v / max) as f32
}

fn float_color(v: f32) -> f32 {
    v
}

/// One row of a 3DGS `vertex` element. `set` receives the value as f32 and (unused here)
/// as a 0..1 colour.
struct SplatRow {
    mean: [f32; 3],
    log_scale: [f32; 3],
    rotation: [f32; 4],
    opacity_logit: f32,
    sh_dc: [f32; 3],
    sh_rest: [f32; MAX_REST],
}

impl SplatRow {
    fn set(&mut self, name: &str, v: f32, _color: f32) -> PropertyAccessResult {
        let slot = match name {
            "x" => &mut self.mean[0],
            "y" => &mut self.mean[1],
            "z" => &mut self.mean[2],
            "scale_0" => &mut self.log_scale[0],
            "scale_1" => &mut self.log_scale[1],
            "scale_2" => &mut self.log_scale[2],
            "rot_0" => &mut self.rotation[0],
            "rot_1" => &mut self.rotation[1],
            "rot_2" => &mut self.rotation[2],
            "rot_3" => &mut self.rotation[3],
            "opacity" => &mut self.opacity_logit,
            "f_dc_0" => &mut self.sh_dc[0],
            "f_dc_1" => &mut self.sh_dc[1],
            "f_dc_2" => &mut self.sh_dc[2],
            _ => match name.strip_prefix("f_rest_").and_then(|i| i.parse::<usize>().ok()) {
                Some(i) if i < MAX_REST => &mut self.sh_rest[i],
                _ => return PropertyAccessResult::Ignored,
            },
        };
        *slot = v;
        PropertyAccessResult::Set
    }
}

impl PropertyAccess for SplatRow {
    fn new() -> Self {
        Self {
            mean: [0.0; 3],
            log_scale: [0.0; 3],
            rotation: [0.0; 4],
            opacity_logit: 0.0,
            sh_dc: [0.0; 3],
            sh_rest: [0.0; MAX_REST],
        }
    }
    scalar_setters!(float_color, int_color);
}

/// One row of a point-cloud `vertex` element.
struct PointRow {
    position: [f32; 3],
    color: [f32; 3],
    sh_dc: [f32; 3],
}

impl PointRow {
    fn set(&mut self, name: &str, v: f32, color: f32) -> PropertyAccessResult {
        match name {
            "x" => self.position[0] = v,
            "y" => self.position[1] = v,
            "z" => self.position[2] = v,
            "red" | "r" | "diffuse_red" => self.color[0] = color,
            "green" | "g" | "diffuse_green" => self.color[1] = color,
            "blue" | "b" | "diffuse_blue" => self.color[2] = color,
            "f_dc_0" => self.sh_dc[0] = v,
            "f_dc_1" => self.sh_dc[1] = v,
            "f_dc_2" => self.sh_dc[2] = v,
            _ => return PropertyAccessResult::Ignored,
        }
        PropertyAccessResult::Set
    }
}

impl PropertyAccess for PointRow {
    fn new() -> Self {
        Self { position: [0.0; 3], color: NEUTRAL_GREY, sh_dc: [0.0; 3] }
    }
    scalar_setters!(float_color, int_color);
}

/// A row we only read past.
struct Ignore;

impl PropertyAccess for Ignore {
    fn new() -> Self {
        Self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_scene(n: usize, sh_degree: u32) -> Splats {
        let mut s = Splats::with_capacity(n, sh_degree);
        let rest = 3 * (crate::sh_coeffs_for_degree(sh_degree) - 1);
        for i in 0..n {
            let f = i as f32;
            s.means.push([f, -f * 0.5, 1.0 / (f + 1.0)]);
            s.log_scales.push([-3.0 - f, -2.0, -23.0]);
            s.rotations.push([0.9, 0.1 * f, -0.2, 0.3]);
            s.opacity_logits.push(16.7 - f);
            s.sh_dc.push([0.1, f32::MIN_POSITIVE, -0.3]);
            s.sh_rest.extend((0..rest).map(|j| (j as f32 + f).sin()));
        }
        s
    }

    #[test]
    fn write_then_read_is_bit_identical() {
        for degree in 0..=3 {
            let scene = tiny_scene(7, degree);
            let mut bytes = Vec::new();
            write_splats(&scene, &mut bytes).unwrap();
            assert_eq!(classify(&bytes).unwrap(), PlyKind::Splats);
            let back = read_splats(&bytes).unwrap();
            assert_eq!(back.sh_degree, degree);
            // Compare bit patterns, not float equality, so -0.0 vs 0.0 would show too.
            let bits = |s: &Splats| -> Vec<u32> {
                s.means
                    .iter()
                    .flatten()
                    .chain(s.log_scales.iter().flatten())
                    .chain(s.rotations.iter().flatten())
                    .chain(&s.opacity_logits)
                    .chain(s.sh_dc.iter().flatten())
                    .chain(&s.sh_rest)
                    .map(|v| v.to_bits())
                    .collect()
            };
            assert_eq!(bits(&scene), bits(&back));
        }
    }

    #[test]
    fn header_count_larger_than_file_fails_fast() {
        let bytes = b"ply\nformat binary_little_endian 1.0\nelement vertex 4000000000\nproperty float x\nproperty float y\nproperty float z\nend_header\n\0\0\0\0";
        let err = read_points(bytes).unwrap_err().to_string();
        assert!(err.contains("truncated") && err.contains("4000000000"), "{err}");
    }

    #[test]
    #[expect(clippy::float_cmp, reason = "small integers and 51/255 are exact in f32")]
    fn properties_in_any_order_and_ascii() {
        let text = "ply\nformat ascii 1.0\nelement vertex 2\nproperty uchar blue\nproperty float z\nproperty uchar red\nproperty double x\nproperty float y\nproperty uchar green\nend_header\n255 3 0 1 2 51\n0 -3 255 -1 -2 0\n";
        let cloud = read_points(text.as_bytes()).unwrap();
        assert_eq!(cloud.positions, vec![[1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]]);
        assert_eq!(cloud.colors[0], [0.0, 0.2, 1.0]);
        assert!(cloud.has_color);
    }

    #[test]
    fn nan_is_refused_with_its_row() {
        let mut bytes = b"ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n".to_vec();
        for v in [0.0, 0.0, 0.0, 1.0, f32::NAN, 2.0_f32] {
            bytes.extend(v.to_le_bytes());
        }
        let err = read_points(&bytes).unwrap_err().to_string();
        assert!(err.contains("point 1"), "{err}");
        // The ASCII grammar has no NaN: the row is refused by the parser, also with its index.
        let text = "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 0 0\n1 nan 2\n";
        let err = read_points(text.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("row 1"), "{err}");
    }
}
