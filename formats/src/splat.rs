//! antimatter15 `.splat`: a headerless array of 32-byte records, one a splat, all
//! little-endian:
//!
//! | bytes  | field                                                        |
//! |--------|--------------------------------------------------------------|
//! | 0..12  | position x, y, z as `f32`                                    |
//! | 12..24 | scale x, y, z as `f32`, *linear* standard deviations          |
//! | 24..28 | colour r, g, b, a as `u8`: rgb = 0.5 + `SH_C0` · `f_dc`, a = sigmoid(opacity) |
//! | 28..32 | rotation w, x, y, z as `u8`: q · 128 + 128 of the unit quaternion |
//!
//! There is no SH beyond degree 0, and the axes are those of 3DGS PLY files. Nothing marks a
//! file as `.splat` but its name; a length that is not a multiple of 32 is refused.

use crate::{ParseError, SH_C0, Splats};

/// Bytes of one splat record.
pub const BYTES_PER_SPLAT: usize = 32;

/// An 8-bit probability is pulled this far (in steps of 1/255) inside 0 and 1 before taking
/// the logit, so 0 and 255 give finite opacities that still round back to the same byte.
const ALPHA_EDGE: f32 = 0.25;

/// Reads a `.splat` file. SH degree 0; scales become log-scales, colours `f_dc`, alphas
/// logits.
pub fn read(bytes: &[u8]) -> Result<Splats, ParseError> {
    if bytes.is_empty() {
        return Err(ParseError::invalid(".splat: the file is empty (no splats)"));
    }
    if !bytes.len().is_multiple_of(BYTES_PER_SPLAT) {
        return Err(ParseError::invalid(format!(
            ".splat: the file is {} bytes, not a multiple of {BYTES_PER_SPLAT} (one splat); it is cut short or not a .splat file ({} whole splats and {} bytes left over)",
            bytes.len(),
            bytes.len() / BYTES_PER_SPLAT,
            bytes.len() % BYTES_PER_SPLAT,
        )));
    }
    let n = bytes.len() / BYTES_PER_SPLAT;
    let mut splats = Splats::with_capacity(n, 0);
    for record in bytes.chunks_exact(BYTES_PER_SPLAT) {
        splats.means.push([0, 4, 8].map(|o| f32_le(record, o)));
        splats.log_scales.push([12, 16, 20].map(|o| log_scale(f32_le(record, o))));
        splats.sh_dc.push([record[24], record[25], record[26]].map(dc_from_u8));
        splats.opacity_logits.push(logit_from_u8(record[27]));
        splats.rotations.push(
            [record[28], record[29], record[30], record[31]]
                .map(|b| (f32::from(b) - 128.0) / 128.0),
        );
    }
    splats.validate()?;
    Ok(splats)
}

/// Writes a `.splat` file: SH beyond degree 0 is dropped, quaternions are normalised, and
/// colours and alphas are clamped to 0..1 as the format requires.
#[must_use]
pub fn write(splats: &Splats) -> Vec<u8> {
    let mut out = Vec::with_capacity(splats.len() * BYTES_PER_SPLAT);
    let rows = splats
        .means
        .iter()
        .zip(&splats.log_scales)
        .zip(&splats.sh_dc)
        .zip(&splats.opacity_logits)
        .zip(&splats.rotations);
    for ((((mean, log_scale), dc), &opacity), rotation) in rows {
        for v in mean {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in log_scale {
            out.extend_from_slice(&v.exp().to_le_bytes());
        }
        out.extend(dc.map(|dc| unit_to_u8(0.5 + SH_C0 * dc)));
        out.push(unit_to_u8(sigmoid(opacity)));
        let norm = rotation.iter().map(|v| v * v).sum::<f32>().sqrt();
        let q = if norm > 0.0 && norm.is_finite() {
            rotation.map(|v| v / norm)
        } else {
            [1.0, 0.0, 0.0, 0.0]
        };
        out.extend(q.map(|v| (v * 128.0 + 128.0).round().clamp(0.0, 255.0) as u8));
    }
    out
}

/// Natural log of a linear scale. The sign is dropped (only σ² matters) and zero becomes
/// the smallest normal float, so the log stays finite; NaN stays NaN for `validate` to name.
fn log_scale(s: f32) -> f32 {
    if s.is_nan() { s } else { s.abs().max(f32::MIN_POSITIVE).ln() }
}

/// `f_dc` from an 8-bit colour: c/255 = 0.5 + `SH_C0` · `f_dc`.
fn dc_from_u8(c: u8) -> f32 {
    (f32::from(c) / 255.0 - 0.5) / SH_C0
}

fn unit_to_u8(v: f32) -> u8 {
    (v * 255.0).round().clamp(0.0, 255.0) as u8
}

pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Opacity logit from an 8-bit alpha (a/255 = sigmoid(logit)), finite for 0 and 255 (see
/// [`ALPHA_EDGE`]).
pub(crate) fn logit_from_u8(a: u8) -> f32 {
    logit_from_unit(f32::from(a) / 255.0)
}

/// Opacity logit from a probability in 0..=1, kept [`ALPHA_EDGE`] 8-bit steps inside the
/// ends so it stays finite.
pub(crate) fn logit_from_unit(p: f32) -> f32 {
    let edge = ALPHA_EDGE / 255.0;
    let p = p.clamp(edge, 1.0 - edge);
    (p / (1.0 - p)).ln()
}

/// A little-endian `f32` at `offset`; the record is [`BYTES_PER_SPLAT`] long.
fn f32_le(record: &[u8], offset: usize) -> f32 {
    f32::from_le_bytes([record[offset], record[offset + 1], record[offset + 2], record[offset + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_ends_are_finite_and_round_back() {
        for a in [0u8, 1, 128, 254, 255] {
            let logit = logit_from_u8(a);
            assert!(logit.is_finite());
            assert_eq!(unit_to_u8(sigmoid(logit)), a);
        }
    }

    #[test]
    fn zero_and_negative_scales_stay_finite() {
        assert!(log_scale(0.0).is_finite());
        assert!((log_scale(-0.5) - 0.5f32.ln()).abs() < 1e-6);
        assert!(log_scale(f32::NAN).is_nan());
    }
}
