//! Niantic SPZ (`.spz`), versions 2, 3 and 4.
//!
//! # Layout
//!
//! Every version stores the same six attribute blocks, one after another, each holding all
//! points before the next block starts (N = number of points, D = SH coefficients per
//! channel, 0/3/8/15/24 for degree 0..4):
//!
//! | block     | bytes a point | encoding                                                     |
//! |-----------|---------------|--------------------------------------------------------------|
//! | positions | 9             | x, y, z as 24-bit signed little-endian fixed point with `fractional_bits` fraction bits |
//! | alphas    | 1             | sigmoid(opacity) · 255                                       |
//! | colours   | 3             | `f_dc` · 0.15 · 255 + 127.5 (note 0.15, *not* `SH_C0`)         |
//! | scales    | 3             | (ln σ + 10) · 16                                             |
//! | rotations | 3 (v2), 4 (v3+) | v2: x, y, z of the unit quaternion (w ≥ 0 implied) as q · 127.5 + 127.5; v3+: "smallest three", one little-endian u32 with the index of the largest component in the top 2 bits and the other three (in x, y, z, w order) as 10-bit sign + magnitude, magnitude scaled by 511/√½ |
//! | SH        | 3 · D         | coefficient-major, channel-minor (`c0 r, c0 g, c0 b, c1 r, …`), each `v · 128 + 128` |
//!
//! Containers:
//! - **v2, v3**: the whole file is one gzip stream; inside, a 16-byte header (`NGSP` magic,
//!   u32 version, u32 point count, u8 SH degree, u8 fractional bits, u8 flags, u8 reserved)
//!   and then the blocks above.
//! - **v4**: a 32-byte plain header (magic, version, count, SH degree, fractional bits,
//!   flags, u8 stream count, u32 byte offset of the table of contents, 12 reserved bytes),
//!   optional extension records up to that offset, a table of contents with a
//!   (compressed size, uncompressed size) pair of u64 per stream, then each non-empty block
//!   as its own zstd stream, in the order above.
//!
//! A raw (not gzipped) v2/v3 stream, which the spec does not define but some old tools
//! wrote, is read as well when its header is valid: its counts are checked the same way.
//!
//! # Axes
//!
//! SPZ stores points in RUB axes (x right, y up, z back; the OpenGL convention) while 3DGS
//! PLY files are RDF (y down, z forward). The two differ by a 180° turn about x, so reading
//! and writing both apply [`flip_y_z`]: positions become (x, −y, −z), quaternions
//! (w, x, −y, −z), and the SH coefficients odd in y + z flip sign. A scene therefore lands in
//! the same place whether it was loaded from a PLY or from an SPZ made from it.
//!
//! # Writing
//!
//! [`write()`] produces **version 4** (zstd streams), because that is what the reference
//! library (github.com/nianticlabs/spz) writes by default and what its current readers and
//! `PlayCanvas` read; [`write_version`] can produce the older gzip versions 2 and 3 for
//! viewers that have not caught up. Quantisation follows the reference packer: 12 fractional
//! bits for positions (fewer only when a coordinate would not fit in 24 bits), SH degree 1 on
//! 5 bits and higher degrees on 4 bits (the low bits are zero, which compresses better).
//!
//! SH degree 4 files are read with their fourth band dropped (this crate holds at most
//! degree 3). The anti-aliasing flag and extension records are skipped.

use std::io::Read;

use crate::splat::{logit_from_u8, sigmoid};
use crate::{ParseError, Splats, sh_coeffs_for_degree};

/// Magic of an uncompressed SPZ stream / v4 header: "NGSP" as little-endian 0x5053474e.
pub const MAGIC: &[u8] = b"NGSP";

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
/// Header inside a v2/v3 gzip stream.
const LEGACY_HEADER_LEN: usize = 16;
/// Plain header of a v4 file.
const V4_HEADER_LEN: usize = 32;
/// One table-of-contents entry: compressed size u64, uncompressed size u64.
const TOC_ENTRY_LEN: usize = 16;

/// Colour of the DC term in a byte: byte = `f_dc` · `COLOR_SCALE` · 255 + 127.5.
const COLOR_SCALE: f32 = 0.15;
/// Log-scale in a byte: byte = (ln σ + `SCALE_OFFSET`) · `SCALE_STEPS`.
const SCALE_OFFSET: f32 = 10.0;
const SCALE_STEPS: f32 = 16.0;
/// The largest magnitude of a 24-bit signed integer.
const FIXED24_MAX: f32 = 8_388_607.0;
/// Fraction bits the reference packer uses for positions (~0.25 mm).
const WRITE_FRACTIONAL_BITS: u8 = 12;
/// Bits kept for SH degree 1 and for degrees 2 and 3 when writing (reference defaults).
const SH1_BITS: u32 = 5;
const SH_REST_BITS: u32 = 4;
/// zstd level of the reference packer.
const ZSTD_LEVEL: i32 = 12;
/// Deflate can shrink data at most about 1032:1, so a gzip stream of `n` bytes cannot hold
/// more than this many times `n` (plus slack for the headers).
const MAX_DEFLATE_RATIO: usize = 1032;
const DEFLATE_SLACK: usize = 1024;
/// Bytes after the blocks of a v2/v3 stream (extension records) read to reach the gzip
/// checksum.
const MAX_GZIP_TRAILER: u64 = 1 << 20;
/// Versions this module reads.
const MIN_VERSION: u32 = 2;
const ZSTD_VERSION: u32 = 4;
/// Highest SH degree an SPZ file may declare; degree 4 is read with band 4 dropped.
const MAX_FILE_SH_DEGREE: u32 = 4;
/// Highest SH degree this crate holds.
const MAX_SH_DEGREE: u32 = 3;

/// √½: the largest possible magnitude of a quaternion's non-largest component.
const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 9 bits of magnitude in the smallest-three encoding.
const ROT_MAG_MAX: u32 = (1 << 9) - 1;

/// Sign each of the first 15 SH coefficients (degrees 1..3, in the standard real-SH order
/// `y, z, x, xy, yz, 3z²−1, xz, x²−y², y(3x²−y²), xyz, y(5z²−1), z(5z²−3), x(5z²−1),
/// z(x²−y²), x(x²−3y²)`) takes under (x, y, z) → (x, −y, −z): −1 where the polynomial has
/// odd total degree in y and z.
const SH_FLIP: [f32; 15] = [
    -1.0, -1.0, 1.0, // degree 1: y, z, x
    -1.0, 1.0, 1.0, -1.0, 1.0, // degree 2: xy, yz, 3z²−1, xz, x²−y²
    -1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 1.0, // degree 3
];

/// Names of the attribute blocks in file order, for messages.
const STREAM_NAMES: [&str; 6] =
    ["positions", "alphas", "colours", "scales", "rotations", "spherical harmonics"];

// ---------------------------------------------------------------------------------------------
// Reading.

/// Reads an SPZ file of version 2 or 3 (gzip, or raw with a valid header) or 4 (zstd).
pub fn read(bytes: &[u8]) -> Result<Splats, ParseError> {
    if bytes.starts_with(GZIP_MAGIC) {
        read_gzip(bytes)
    } else if bytes.starts_with(MAGIC) {
        read_plain(bytes)
    } else {
        Err(ParseError::invalid(
            "SPZ: not an SPZ file (it starts with neither the gzip magic 1f 8b nor 'NGSP')",
        ))
    }
}

/// The fields shared by the v2/v3 and v4 headers.
#[derive(Clone, Copy, Debug)]
struct Header {
    version: u32,
    num_points: usize,
    /// SH degree as the file declares it (0..=4).
    sh_degree: u32,
    fractional_bits: u8,
}

impl Header {
    /// Parses the first 16 bytes, common to all versions (an error if there are fewer).
    fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        if bytes.len() < LEGACY_HEADER_LEN {
            return Err(ParseError::truncated(format!(
                "SPZ: the header needs {LEGACY_HEADER_LEN} bytes but only {} are there",
                bytes.len()
            )));
        }
        if !bytes.starts_with(MAGIC) {
            return Err(ParseError::invalid("SPZ: the header does not start with 'NGSP'"));
        }
        let version = u32_le(bytes, 4);
        if !(MIN_VERSION..=ZSTD_VERSION).contains(&version) {
            return Err(ParseError::Unsupported(format!(
                "SPZ version {version} is not supported (2, 3 and 4 are)"
            )));
        }
        let num_points = usize::try_from(u32_le(bytes, 8)).map_err(|_| {
            ParseError::invalid("SPZ: point count does not fit in memory on this machine")
        })?;
        let sh_degree = u32::from(bytes[12]);
        if sh_degree > MAX_FILE_SH_DEGREE {
            return Err(ParseError::invalid(format!(
                "SPZ: SH degree {sh_degree} is not valid (0 to 4)"
            )));
        }
        Ok(Self { version, num_points, sh_degree, fractional_bits: bytes[13] })
    }

    fn layout(&self) -> Result<Layout, ParseError> {
        Layout::new(self.num_points, self.sh_degree, self.version)
    }
}

/// Byte sizes of the six attribute blocks for a point count, SH degree and version.
#[derive(Clone, Copy, Debug)]
struct Layout {
    num_points: usize,
    /// Bytes a point in each block, in file order.
    per_point: [usize; 6],
    /// Bytes of each block, in file order.
    sizes: [usize; 6],
}

impl Layout {
    fn new(num_points: usize, sh_degree: u32, version: u32) -> Result<Self, ParseError> {
        let rotation = if version >= 3 { 4 } else { 3 };
        let sh = 3 * (sh_coeffs_for_degree(sh_degree) - 1);
        let per_point = [9, 1, 3, 3, rotation, sh];
        let mut sizes = [0; 6];
        for (size, per) in sizes.iter_mut().zip(per_point) {
            *size = num_points.checked_mul(per).ok_or_else(|| {
                ParseError::invalid(format!(
                    "SPZ: {num_points} points is more than this machine can address"
                ))
            })?;
        }
        Ok(Self { num_points, per_point, sizes })
    }

    fn bytes_per_point(&self) -> usize {
        self.per_point.iter().sum()
    }

    /// Total bytes of all blocks.
    fn total(&self) -> Result<usize, ParseError> {
        self.num_points.checked_mul(self.bytes_per_point()).ok_or_else(|| {
            ParseError::invalid(format!(
                "SPZ: {} points is more than this machine can address",
                self.num_points
            ))
        })
    }

    /// The error for a payload of `available` bytes that is shorter than the header implies.
    fn too_short(&self, available: usize) -> ParseError {
        ParseError::truncated(format!(
            "SPZ: header says {} points but the data holds {} ({} of {} bytes)",
            self.num_points,
            available / self.bytes_per_point(),
            available,
            self.total().unwrap_or(usize::MAX),
        ))
    }
}

/// v2/v3: a gzip stream holding the 16-byte header and the blocks back to back.
fn read_gzip(bytes: &[u8]) -> Result<Splats, ParseError> {
    let mut decoder = flate2::read::GzDecoder::new(bytes);
    let mut head = Vec::with_capacity(LEGACY_HEADER_LEN);
    read_limited(&mut decoder, LEGACY_HEADER_LEN, &mut head, "gzip")?;
    let header = Header::parse(&head)?;
    if header.version >= ZSTD_VERSION {
        return Err(ParseError::invalid(format!(
            "SPZ: a gzip stream holds a version {} header, but version 4 files are not gzipped",
            header.version
        )));
    }
    let layout = header.layout()?;
    let total = layout.total()?;
    // Fail fast on a count no gzip stream of this size could hold, before inflating.
    let most = bytes.len().saturating_mul(MAX_DEFLATE_RATIO).saturating_add(DEFLATE_SLACK);
    if total > most {
        return Err(ParseError::truncated(format!(
            "SPZ: header says {} points ({total} bytes unpacked), more than a {}-byte gzip file can hold",
            header.num_points,
            bytes.len()
        )));
    }
    // Grows with what really comes out of the stream, never past what the header implies.
    let mut payload = Vec::new();
    read_limited(&mut decoder, total, &mut payload, "gzip")?;
    if payload.len() < total {
        return Err(layout.too_short(payload.len()));
    }
    finish_gzip(&mut decoder)?;
    unpack(&header, &layout, split_blocks(&payload, &layout))
}

/// Reads past what follows the blocks (extension records, skipped) to the end of the gzip
/// stream, so that its checksum is verified. Beyond [`MAX_GZIP_TRAILER`] bytes, the rest is
/// left unread.
fn finish_gzip(decoder: &mut impl Read) -> Result<(), ParseError> {
    match std::io::copy(&mut decoder.take(MAX_GZIP_TRAILER), &mut std::io::sink()) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(ParseError::truncated(
            "SPZ: the gzip stream is cut short after the data (its checksum is missing)",
        )),
        Err(e) => Err(ParseError::invalid(format!("SPZ: the gzip stream is damaged ({e})"))),
    }
}

/// An uncompressed stream: a v4 file, or a raw v2/v3 stream (not gzipped, outside the spec;
/// read when its header is valid).
fn read_plain(bytes: &[u8]) -> Result<Splats, ParseError> {
    let header = Header::parse(bytes)?;
    if header.version >= ZSTD_VERSION {
        return read_v4(bytes, &header);
    }
    let layout = header.layout()?;
    let payload = bytes.get(LEGACY_HEADER_LEN..).unwrap_or_default();
    if payload.len() < layout.total()? {
        return Err(layout.too_short(payload.len()));
    }
    unpack(&header, &layout, split_blocks(payload, &layout))
}

/// Splits a v2/v3 payload (at least `layout.total()` bytes) into its six blocks.
fn split_blocks<'a>(payload: &'a [u8], layout: &Layout) -> [&'a [u8]; 6] {
    let mut rest = payload;
    layout.sizes.map(|size| {
        let (block, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        block
    })
}

/// v4: plain header, optional extensions, table of contents, one zstd stream per non-empty
/// block.
fn read_v4(bytes: &[u8], header: &Header) -> Result<Splats, ParseError> {
    if bytes.len() < V4_HEADER_LEN {
        return Err(ParseError::truncated(format!(
            "SPZ v4: the header needs {V4_HEADER_LEN} bytes but the file has only {}",
            bytes.len()
        )));
    }
    let layout = header.layout()?;
    let num_streams = usize::from(bytes[15]);
    let expected_streams = layout.sizes.iter().filter(|&&s| s > 0).count();
    if num_streams != expected_streams {
        return Err(ParseError::invalid(format!(
            "SPZ v4: header lists {num_streams} streams, but {} points of SH degree {} need {expected_streams}",
            header.num_points, header.sh_degree
        )));
    }
    let toc_offset = usize::try_from(u32_le(bytes, 16)).unwrap_or(usize::MAX);
    if toc_offset < V4_HEADER_LEN {
        return Err(ParseError::invalid(format!(
            "SPZ v4: table of contents at byte {toc_offset}, inside the {V4_HEADER_LEN}-byte header"
        )));
    }
    let toc_end = toc_offset.saturating_add(num_streams * TOC_ENTRY_LEN);
    let toc = bytes.get(toc_offset..toc_end).ok_or_else(|| {
        ParseError::truncated(format!(
            "SPZ v4: the table of contents (bytes {toc_offset}..{toc_end}) ends past the end of the {}-byte file",
            bytes.len()
        ))
    })?;

    let mut data = bytes.get(toc_end..).unwrap_or_default();
    let mut entries = toc.chunks_exact(TOC_ENTRY_LEN);
    let mut blocks: [Vec<u8>; 6] = Default::default();
    for (index, (block, &size)) in blocks.iter_mut().zip(&layout.sizes).enumerate() {
        if size == 0 {
            continue;
        }
        let Some(entry) = entries.next() else { break };
        let name = STREAM_NAMES[index];
        let compressed = usize::try_from(u64_le(entry, 0)).unwrap_or(usize::MAX);
        let uncompressed = u64_le(entry, 8);
        if uncompressed != size as u64 {
            return Err(ParseError::invalid(format!(
                "SPZ v4: the {name} stream holds {uncompressed} bytes, but {} points need {size}",
                header.num_points
            )));
        }
        if compressed > data.len() {
            return Err(ParseError::truncated(format!(
                "SPZ v4: the {name} stream is {compressed} bytes but only {} are left in the file",
                data.len()
            )));
        }
        let (stream, tail) = data.split_at(compressed);
        data = tail;
        *block = unzstd(stream, size, name)?;
        if block.len() < size {
            let per = layout.per_point[index];
            return Err(ParseError::truncated(format!(
                "SPZ v4: header says {} points but the {name} stream holds {} ({} of {size} bytes)",
                header.num_points,
                block.len() / per,
                block.len()
            )));
        }
    }
    unpack(header, &layout, blocks.each_ref().map(Vec::as_slice))
}

/// Inflates one zstd stream, keeping at most `limit` bytes (what the header implies).
fn unzstd(stream: &[u8], limit: usize, name: &str) -> Result<Vec<u8>, ParseError> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(stream).map_err(|e| {
        ParseError::invalid(format!("SPZ v4: cannot start zstd for the {name} stream: {e}"))
    })?;
    let mut out = Vec::new();
    read_limited(&mut decoder, limit, &mut out, &format!("zstd {name}"))?;
    Ok(out)
}

/// Reads up to `limit` bytes from a decompressor into `out`. A stream that ends early is not
/// an error here (the caller names what is missing); a damaged one is.
fn read_limited(
    source: &mut impl Read,
    limit: usize,
    out: &mut Vec<u8>,
    what: &str,
) -> Result<(), ParseError> {
    let limit = u64::try_from(limit).unwrap_or(u64::MAX);
    match source.take(limit).read_to_end(out) {
        Ok(_) => Ok(()),
        // A stream cut short: report it by what it holds, as the caller does.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(()),
        Err(e) => Err(ParseError::invalid(format!("SPZ: the {what} stream is damaged ({e})"))),
    }
}

/// Decodes the six blocks (each exactly `layout.sizes` long) into a scene in PLY axes.
fn unpack(header: &Header, layout: &Layout, blocks: [&[u8]; 6]) -> Result<Splats, ParseError> {
    for ((block, &size), name) in blocks.iter().zip(&layout.sizes).zip(STREAM_NAMES) {
        if block.len() != size {
            return Err(ParseError::invalid(format!(
                "SPZ: the {name} block holds {} bytes where {size} were expected",
                block.len()
            )));
        }
    }
    let [positions, alphas, colors, scales, rotations, sh] = blocks;
    // 2^-fractional_bits, by powi so any byte value is safe.
    let unit = 2f32.powi(-i32::from(header.fractional_bits));
    let sh_degree = header.sh_degree.min(MAX_SH_DEGREE);
    let mut out = Splats {
        // [N, 3]
        means: positions
            .chunks_exact(9)
            .map(|p| [0, 3, 6].map(|o| fixed24(&p[o..o + 3]) as f32 * unit))
            .collect(),
        // [N, 3]
        log_scales: scales
            .chunks_exact(3)
            .map(|s| [s[0], s[1], s[2]].map(|b| f32::from(b) / SCALE_STEPS - SCALE_OFFSET))
            .collect(),
        // [N, 4]
        rotations: if header.version >= 3 {
            rotations.chunks_exact(4).map(|r| xyzw_to_wxyz(unpack_smallest_three(r))).collect()
        } else {
            rotations.chunks_exact(3).map(|r| xyzw_to_wxyz(unpack_first_three(r))).collect()
        },
        // [N]
        opacity_logits: alphas.iter().map(|&a| logit_from_u8(a)).collect(),
        // [N, 3]
        sh_dc: colors.chunks_exact(3).map(|c| [c[0], c[1], c[2]].map(color_from_byte)).collect(),
        // [N, 3, K-1]
        sh_rest: Vec::new(),
        sh_degree,
    };
    let file_coeffs = sh_coeffs_for_degree(header.sh_degree) - 1;
    let kept_coeffs = sh_coeffs_for_degree(sh_degree) - 1;
    if file_coeffs > 0 {
        out.sh_rest.reserve(header.num_points * 3 * kept_coeffs);
        for record in sh.chunks_exact(3 * file_coeffs) {
            push_sh_channel_major(record, kept_coeffs, &mut out.sh_rest);
        }
    }
    flip_y_z(&mut out);
    out.validate()?;
    Ok(out)
}

/// A 24-bit signed little-endian integer from 3 bytes.
fn fixed24(b: &[u8]) -> i32 {
    // Put the 24 bits in the top of an i32, then shift back to sign-extend.
    i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8
}

fn color_from_byte(b: u8) -> f32 {
    (f32::from(b) / 255.0 - 0.5) / COLOR_SCALE
}

/// v2: x, y, z as `q · 127.5 + 127.5`; w ≥ 0 from unit length. Returns x, y, z, w.
fn unpack_first_three(r: &[u8]) -> [f32; 4] {
    let [x, y, z] = [r[0], r[1], r[2]].map(|b| f32::from(b) / 127.5 - 1.0);
    let w = (1.0 - (x * x + y * y + z * z)).max(0.0).sqrt();
    [x, y, z, w]
}

/// v3+: "smallest three" in a little-endian u32. Bits 30..31: index (x, y, z, w order) of the
/// largest component, which is positive and follows from unit length. Below it, the other
/// three in index order, 10 bits each with the last one lowest: a sign bit then 9 bits of
/// magnitude in units of √½ / 511. Returns x, y, z, w.
fn unpack_smallest_three(r: &[u8]) -> [f32; 4] {
    let mut bits = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
    let largest = (bits >> 30) as usize;
    let mut q = [0.0f32; 4];
    let mut sum_squares = 0.0;
    for i in (0..4).rev().filter(|&i| i != largest) {
        let magnitude = (bits & ROT_MAG_MAX) as f32 / ROT_MAG_MAX as f32 * SQRT_HALF;
        let negative = bits & (1 << 9) != 0;
        bits >>= 10;
        q[i] = if negative { -magnitude } else { magnitude };
        sum_squares += q[i] * q[i];
    }
    // Clamped: damaged bytes can claim three components whose squares sum past 1.
    q[largest] = (1.0 - sum_squares).max(0.0).sqrt();
    q
}

fn xyzw_to_wxyz([x, y, z, w]: [f32; 4]) -> [f32; 4] {
    [w, x, y, z]
}

fn unquantize_sh(b: u8) -> f32 {
    (f32::from(b) - 128.0) / 128.0
}

/// Appends one point's SH from SPZ order (coefficient-major: `c0 r, c0 g, c0 b, c1 r, …`) to
/// `rest` in PLY order (channel-major: all red coefficients, then green, then blue), keeping
/// the first `kept` coefficients of each channel.
fn push_sh_channel_major(record: &[u8], kept: usize, rest: &mut Vec<f32>) {
    for channel in 0..3 {
        rest.extend(record.iter().skip(channel).step_by(3).take(kept).map(|&b| unquantize_sh(b)));
    }
}

// ---------------------------------------------------------------------------------------------
// Axes.

/// Turns a scene 180° about the x axis, which converts between PLY's RDF axes and SPZ's RUB
/// axes (it is its own inverse): positions (x, −y, −z), quaternions (w, x, −y, −z), and every
/// SH coefficient whose basis function is odd in y and z negated. Colours
/// seen from a direction d before are seen from (dx, −dy, −dz) after.
pub fn flip_y_z(splats: &mut Splats) {
    for m in &mut splats.means {
        *m = [m[0], -m[1], -m[2]];
    }
    for q in &mut splats.rotations {
        *q = [q[0], q[1], -q[2], -q[3]];
    }
    let per_channel = sh_coeffs_for_degree(splats.sh_degree) - 1;
    if per_channel == 0 {
        return;
    }
    for splat in splats.sh_rest.chunks_exact_mut(3 * per_channel) {
        for channel in splat.chunks_exact_mut(per_channel) {
            for (v, sign) in channel.iter_mut().zip(SH_FLIP) {
                *v *= sign;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Writing.

/// Writes an SPZ file of version 4 (zstd streams), the reference library's default.
pub fn write(splats: &Splats) -> Result<Vec<u8>, ParseError> {
    write_version(splats, ZSTD_VERSION)
}

/// Writes an SPZ file of the given version: 4 (zstd streams), or 3 or 2 (one gzip stream;
/// 2 stores rotations less precisely, for old viewers only).
pub fn write_version(splats: &Splats, version: u32) -> Result<Vec<u8>, ParseError> {
    if !(MIN_VERSION..=ZSTD_VERSION).contains(&version) {
        return Err(ParseError::Unsupported(format!(
            "SPZ version {version} cannot be written (2, 3 and 4 can)"
        )));
    }
    splats.validate()?;
    if splats.is_empty() {
        return Err(ParseError::invalid(
            "SPZ cannot store an empty scene (readers refuse 0 points)",
        ));
    }
    let num_points = u32::try_from(splats.len())
        .ok()
        .filter(|&n| i32::try_from(n).is_ok())
        .ok_or_else(|| {
            ParseError::invalid(format!(
                "SPZ holds at most {} points, the scene has {}",
                i32::MAX,
                splats.len()
            ))
        })?;

    let mut scene = splats.clone();
    flip_y_z(&mut scene);
    let fractional_bits = fractional_bits_for(&scene)?;
    let blocks = pack(&scene, version, fractional_bits);
    let header =
        HeaderFields { version, num_points, sh_degree: scene.sh_degree as u8, fractional_bits };
    if version >= ZSTD_VERSION {
        container_v4(&header, &blocks)
    } else {
        container_gzip(&header, &blocks)
    }
}

/// What goes in a header when writing.
struct HeaderFields {
    version: u32,
    num_points: u32,
    sh_degree: u8,
    fractional_bits: u8,
}

impl HeaderFields {
    /// The first 16 bytes, common to all versions; the last byte is the v4 stream count
    /// (reserved, zero, in v2/v3).
    fn common(&self, last: u8) -> [u8; LEGACY_HEADER_LEN] {
        let mut h = [0u8; LEGACY_HEADER_LEN];
        h[0..4].copy_from_slice(MAGIC);
        h[4..8].copy_from_slice(&self.version.to_le_bytes());
        h[8..12].copy_from_slice(&self.num_points.to_le_bytes());
        h[12] = self.sh_degree;
        h[13] = self.fractional_bits;
        h[14] = 0; // flags: not anti-aliased, no extensions
        h[15] = last;
        h
    }
}

/// 12 fraction bits, or fewer if the farthest coordinate would not fit in 24 bits.
fn fractional_bits_for(scene: &Splats) -> Result<u8, ParseError> {
    let farthest = scene.means.iter().flatten().fold(0.0f32, |m, v| m.max(v.abs()));
    (0..=WRITE_FRACTIONAL_BITS)
        .rev()
        .find(|&bits| (farthest * f32::from(1u16 << bits)).round() <= FIXED24_MAX)
        .ok_or_else(|| {
            ParseError::invalid(format!(
                "SPZ: a coordinate of {farthest} is too far from the origin (24-bit fixed point holds at most ±{FIXED24_MAX})"
            ))
        })
}

/// Quantises a scene already in SPZ axes into the six blocks, in file order.
fn pack(scene: &Splats, version: u32, fractional_bits: u8) -> [Vec<u8>; 6] {
    let unit = f32::from(1u16 << fractional_bits);
    let positions = scene
        .means
        .iter()
        .flatten()
        .flat_map(|&v| {
            let [b0, b1, b2, _] = ((v * unit).round() as i32).to_le_bytes();
            [b0, b1, b2]
        })
        .collect();
    let alphas = scene.opacity_logits.iter().map(|&o| to_byte(sigmoid(o) * 255.0)).collect();
    let colors =
        scene.sh_dc.iter().flatten().map(|&c| to_byte(c * COLOR_SCALE * 255.0 + 127.5)).collect();
    let scales = scene
        .log_scales
        .iter()
        .flatten()
        .map(|&s| to_byte((s + SCALE_OFFSET) * SCALE_STEPS))
        .collect();
    let rotations = scene
        .rotations
        .iter()
        .flat_map(|&[w, x, y, z]| {
            let q = normalized([x, y, z, w]);
            if version >= 3 {
                pack_smallest_three(q).to_vec()
            } else {
                pack_first_three(q).to_vec()
            }
        })
        .collect();
    [positions, alphas, colors, scales, rotations, pack_sh(scene)]
}

/// Rounds and clamps to a byte.
fn to_byte(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// Unit quaternion (x, y, z, w); a zero one becomes the identity.
fn normalized(q: [f32; 4]) -> [f32; 4] {
    let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() { q.map(|v| v / norm) } else { [0.0, 0.0, 0.0, 1.0] }
}

/// v2 rotation: x, y, z of the unit quaternion with w made non-negative.
fn pack_first_three(q: [f32; 4]) -> [u8; 3] {
    let sign = if q[3] < 0.0 { -1.0 } else { 1.0 };
    [q[0], q[1], q[2]].map(|v| to_byte(v * sign * 127.5 + 127.5))
}

/// v3+ rotation: see [`unpack_smallest_three`].
fn pack_smallest_three(q: [f32; 4]) -> [u8; 4] {
    let largest = (0..4).fold(0, |best, i| if q[i].abs() > q[best].abs() { i } else { best });
    // q and −q are the same rotation: make the largest component positive.
    let sign = if q[largest] < 0.0 { -1.0 } else { 1.0 };
    let mut bits = largest as u32;
    for i in (0..4).filter(|&i| i != largest) {
        let v = q[i] * sign;
        let magnitude =
            ((v.abs() / SQRT_HALF * ROT_MAG_MAX as f32).round() as u32).min(ROT_MAG_MAX);
        bits = (bits << 10) | (u32::from(v < 0.0) << 9) | magnitude;
    }
    bits.to_le_bytes()
}

/// SH in SPZ order (coefficient-major, channel-minor), degree 1 on [`SH1_BITS`] bits, higher
/// degrees on [`SH_REST_BITS`].
fn pack_sh(scene: &Splats) -> Vec<u8> {
    let per_channel = sh_coeffs_for_degree(scene.sh_degree) - 1;
    if per_channel == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(scene.sh_rest.len());
    for splat in scene.sh_rest.chunks_exact(3 * per_channel) {
        for k in 0..per_channel {
            let bits = if k < 3 { SH1_BITS } else { SH_REST_BITS };
            for channel in 0..3 {
                out.push(quantize_sh(splat[channel * per_channel + k], bits));
            }
        }
    }
    out
}

/// `v · 128 + 128` rounded, then to the nearest multiple of 2^(8 − bits), clamped to a byte.
fn quantize_sh(v: f32, bits: u32) -> u8 {
    let bucket = 1i32 << (8 - bits);
    let q = (v * 128.0).round() as i32 + 128;
    let q = (q + bucket / 2).div_euclid(bucket) * bucket;
    q.clamp(0, 255) as u8
}

/// v4 container: header, table of contents, one zstd stream per non-empty block.
fn container_v4(header: &HeaderFields, blocks: &[Vec<u8>; 6]) -> Result<Vec<u8>, ParseError> {
    let mut streams = Vec::new();
    for block in blocks.iter().filter(|b| !b.is_empty()) {
        let compressed = zstd::bulk::compress(block, ZSTD_LEVEL)?;
        streams.push((compressed, block.len()));
    }
    let mut out = Vec::new();
    out.extend_from_slice(&header.common(streams.len() as u8));
    out.extend_from_slice(&(V4_HEADER_LEN as u32).to_le_bytes()); // table of contents offset
    out.extend_from_slice(&[0; 12]); // reserved
    for (compressed, size) in &streams {
        out.extend_from_slice(&(compressed.len() as u64).to_le_bytes());
        out.extend_from_slice(&(*size as u64).to_le_bytes());
    }
    for (compressed, _) in &streams {
        out.extend_from_slice(compressed);
    }
    Ok(out)
}

/// v2/v3 container: one gzip stream of the 16-byte header and the blocks.
fn container_gzip(header: &HeaderFields, blocks: &[Vec<u8>; 6]) -> Result<Vec<u8>, ParseError> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&header.common(0))?;
    for block in blocks {
        encoder.write_all(block)?;
    }
    Ok(encoder.finish()?)
}

// ---------------------------------------------------------------------------------------------
// Little-endian fields. Callers check the length first.

fn u32_le(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn u64_le(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed24_sign_extends() {
        assert_eq!(fixed24(&[0xff, 0xff, 0xff]), -1);
        assert_eq!(fixed24(&[0x00, 0x00, 0x80]), -8_388_608);
        assert_eq!(fixed24(&[0xff, 0xff, 0x7f]), 8_388_607);
        assert_eq!(fixed24(&[0x01, 0x02, 0x03]), 0x03_0201);
    }

    #[test]
    fn smallest_three_round_trips_every_largest_index() {
        for q in [
            [0.1, -0.2, 0.3, 0.9],
            [0.9, 0.1, -0.2, 0.3],
            [-0.2, -0.9, 0.1, 0.3],
            [0.3, 0.1, -0.95, -0.2],
        ] {
            let q = normalized(q);
            let back = unpack_smallest_three(&pack_smallest_three(q));
            let dot: f32 = q.iter().zip(back).map(|(a, b)| a * b).sum();
            assert!(dot.abs() > 0.99999, "{q:?} -> {back:?}");
        }
    }

    #[test]
    fn smallest_three_of_damaged_bytes_is_finite() {
        // Three components at full magnitude: their squares sum to 1.5.
        let q = unpack_smallest_three(&[0xff, 0xff, 0xff, 0xff]);
        assert!(q.iter().all(|v| v.is_finite()), "{q:?}");
    }

    #[test]
    fn sh_quantisation_matches_reference_buckets() {
        assert_eq!(quantize_sh(0.0, 5), 128);
        assert_eq!(quantize_sh(0.0, 4), 128);
        assert_eq!(quantize_sh(1.0, 8), 255);
        assert_eq!(quantize_sh(-1.0, 4), 0);
        assert_eq!(quantize_sh(0.1, 5), 144); // 12.8 -> 13 + 128 = 141 -> bucket of 8 -> 144
    }

    /// A degree-4 file (which only the reference library writes) is read with band 4 dropped.
    #[test]
    fn degree_four_drops_band_four() {
        let n = 2usize;
        let header =
            HeaderFields { version: 4, num_points: n as u32, sh_degree: 4, fractional_bits: 12 };
        let layout = Layout::new(n, 4, 4).unwrap();
        let mut blocks: [Vec<u8>; 6] = layout.sizes.map(|s| vec![128u8; s]);
        // Rotations: largest component w (index 3), the others zero: the identity.
        blocks[4] = (0..n).flat_map(|_| (3u32 << 30).to_le_bytes()).collect();
        // SH: coefficient k of channel c = k (as a byte above 128), in SPZ order.
        blocks[5] = (0..n).flat_map(|_| (0..24u8).flat_map(|k| [128 + k; 3])).collect();
        let bytes = container_v4(&header, &blocks).unwrap();
        let s = read(&bytes).unwrap();
        assert_eq!(s.sh_degree, 3);
        assert_eq!(s.sh_rest.len(), n * 45);
        // Red channel of splat 0, coefficients 0..15, flipped back to PLY axes.
        for (k, (value, sign)) in s.sh_rest.iter().zip(SH_FLIP).enumerate() {
            let expected = k as f32 / 128.0 * sign;
            assert!((value - expected).abs() < 1e-6, "coefficient {k}: {value}");
        }
    }
}
