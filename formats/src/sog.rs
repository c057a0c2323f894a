//! PlayCanvas's SOG ("spatially ordered Gaussians", version 2): the format the web viewers load
//! (`PlayCanvas`, `SuperSplat`, Spark, `Babylon.js`). A `meta.json` and lossless WebP images in which
//! texel `i` (row-major from the top left) holds splat `i`:
//!
//! | image | a texel |
//! |---|---|
//! | `means_l`, `means_u` | the low and high bytes of x, y, z: 16 bits each, between the meta's `mins` and `maxs` of `sign(v)·ln(1+|v|)` |
//! | `quats` | the three smallest components of the unit quaternion ×√2, mapped −1..1 → 0..255, and 252 + the index of the largest (made positive) |
//! | `scales` | three indexes into a 256-entry codebook of log-scales |
//! | `sh0` | three indexes into a 256-entry codebook of DC coefficients, and sigmoid(opacity) × 255 |
//! | `shN_labels` | (SH degree > 0) a 16-bit index into a palette of SH vectors, low byte first |
//! | `shN_centroids` | the palette: 64 entries a row, each `coefficients` texels wide, every channel an index into a 256-entry codebook |
//!
//! The `.sog` bundle is the same files in a zip archive (stored); the unbundled form is the
//! files beside `meta.json`. What we write follows splat-transform's writer (the reference):
//! splats in Morton order of their centres, image width `⌈√n / 4⌉·4`, codebooks by 1-D
//! clustering, the SH palette by k-means with `min(64, 2^⌊log₂(n/1024)⌋)·1024` entries.
//! Codebooks are the exact optimum of a weighted squared error over binned values
//! ([`Codebook`]); quantised values are rounded (splat-transform truncates).
//!
//! The palette is the slow part (n × entries × 3·(K−1) per iteration): [`encode`] takes one
//! computed elsewhere (the GPU's, `render::kernels::kmeans`) or clusters on the CPU with [`kmeans`],
//! fine for small scenes.

use std::io::{Cursor, Read as _, Write as _};

use serde::{Deserialize, Serialize};

use crate::{ParseError, Splats, sh_coeffs_for_degree};

/// Entries of the scale, colour and SH codebooks.
pub const CODEBOOK_SIZE: usize = 256;
/// Palette entries a row of `shN_centroids`.
const PALETTE_ROW: usize = 64;
/// Most palette entries (labels are 16 bits).
pub const MAX_PALETTE: usize = 65_536;
/// Lloyd iterations of the SH palette (splat-transform's default).
pub const KMEANS_ITERATIONS: usize = 10;
/// WebP's largest side.
const MAX_SIDE: usize = 16_383;
/// Largest member of a bundle we unpack (a 16383² RGBA image is 1 GiB raw; WebP is smaller).
const MAX_MEMBER_BYTES: u64 = 1 << 30;

const MEANS_L: &str = "means_l.webp";
const MEANS_U: &str = "means_u.webp";
const SCALES: &str = "scales.webp";
const QUATS: &str = "quats.webp";
const SH0: &str = "sh0.webp";
const SHN_CENTROIDS: &str = "shN_centroids.webp";
const SHN_LABELS: &str = "shN_labels.webp";
pub const META: &str = "meta.json";

/// Whether `path` names an unbundled SOG's `meta.json` (any case).
#[must_use]
pub fn is_meta_name(path: &std::path::Path) -> bool {
    path.file_name().is_some_and(|n| n.eq_ignore_ascii_case(META))
}

#[derive(Serialize, Deserialize)]
struct Meta {
    version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    asset: Option<Asset>,
    count: usize,
    means: Means,
    scales: Codebooked,
    quats: Files,
    sh0: Codebooked,
    #[serde(rename = "shN", default, skip_serializing_if = "Option::is_none")]
    sh_n: Option<ShN>,
}

#[derive(Serialize, Deserialize)]
struct Asset {
    generator: String,
}

#[derive(Serialize, Deserialize)]
struct Means {
    mins: [f64; 3],
    maxs: [f64; 3],
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Codebooked {
    codebook: Vec<f32>,
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Files {
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct ShN {
    count: usize,
    bands: u32,
    codebook: Vec<f32>,
    files: Vec<String>,
}

/// SH vectors clustered: `count` centroids of `dim` values (`sh_rest`'s layout: channel-major,
/// 3·(K−1) a splat) and each splat's centroid.
#[derive(Clone, Debug, PartialEq)]
pub struct ShPalette {
    pub centroids: Vec<f32>,
    pub labels: Vec<u32>,
}

/// Palette entries for `n` splats: splat-transform's rule (1,024 to 65,536 in powers of two,
/// about one for every 1 to 16 splats), never more than the splats.
#[must_use]
pub fn palette_size(n: usize) -> usize {
    let exponent = (n as f64 / 1024.0).log2().floor();
    let rule = (2_f64.powf(exponent).min(64.0) * 1024.0) as usize;
    rule.min(n).clamp(1, MAX_PALETTE)
}

/// Lloyd's k-means of `points` (rows of `dim`) into `k` centroids on the CPU (n × k × dim work
/// a round: small scenes, and the reference of the GPU's): [`kmeans_with`] and
/// [`assign_nearest`].
#[must_use]
pub fn kmeans(points: &[f32], dim: usize, k: usize, iterations: usize) -> ShPalette {
    let assign = &mut |centroids: &[f32], labels: &mut [u32]| {
        assign_nearest(points, dim, centroids, labels);
        Ok::<(), std::convert::Infallible>(())
    };
    match kmeans_with(points, dim, k, iterations, assign) {
        Ok(palette) => palette,
        Err(never) => match never {},
    }
}

/// k-means' assignment step: `(centroids, labels)` sets each point's label to its nearest
/// centroid.
pub type Assign<'a, E> = dyn FnMut(&[f32], &mut [u32]) -> Result<(), E> + 'a;

/// Lloyd's k-means with the assignment step given (the GPU's, or [`assign_nearest`]): starts
/// from the points at evenly spaced indexes (`k` at most the points), then `iterations` rounds
/// of assigning every point to its nearest centroid and moving each centroid to its points'
/// mean ([`update_centroids`]), and a last assignment. Deterministic.
pub fn kmeans_with<E>(
    points: &[f32],
    dim: usize,
    k: usize,
    iterations: usize,
    assign: &mut Assign<'_, E>,
) -> Result<ShPalette, E> {
    let n = points.len().checked_div(dim).unwrap_or(0);
    let k = k.min(n).max(1);
    let mut centroids: Vec<f32> = (0..k)
        .flat_map(|c| {
            let i = c * n / k;
            points.get(i * dim..(i + 1) * dim).unwrap_or(&[]).iter().copied()
        })
        .collect();
    centroids.resize(k * dim, 0.0);
    let mut labels = vec![0_u32; n];
    for round in 0..=iterations {
        assign(&centroids, &mut labels)?;
        if round < iterations {
            update_centroids(points, dim, &labels, &mut centroids);
        }
    }
    Ok(ShPalette { centroids, labels })
}

/// Each point's nearest centroid ([`nearest`]).
pub fn assign_nearest(points: &[f32], dim: usize, centroids: &[f32], labels: &mut [u32]) {
    for (point, label) in points.chunks_exact(dim).zip(labels) {
        *label = nearest(point, centroids, dim);
    }
}

/// Index of the centroid nearest `point` (squared distance; the lowest index on a tie).
#[must_use]
pub fn nearest(point: &[f32], centroids: &[f32], dim: usize) -> u32 {
    let mut best = (f32::INFINITY, 0_u32);
    for (index, centroid) in centroids.chunks_exact(dim).enumerate() {
        let distance: f32 = point.iter().zip(centroid).map(|(p, c)| (p - c) * (p - c)).sum();
        if distance < best.0 {
            best = (distance, index as u32);
        }
    }
    best.1
}

/// Moves each centroid to the mean of its points (f64 sums); one with none stays.
pub fn update_centroids(points: &[f32], dim: usize, labels: &[u32], centroids: &mut [f32]) {
    let k = centroids.len() / dim.max(1);
    let mut sums = vec![0_f64; k * dim];
    let mut counts = vec![0_u32; k];
    for (point, &label) in points.chunks_exact(dim).zip(labels) {
        let label = label as usize;
        counts[label] += 1;
        for (sum, value) in sums[label * dim..(label + 1) * dim].iter_mut().zip(point) {
            *sum += f64::from(*value);
        }
    }
    for (c, &count) in counts.iter().enumerate() {
        if count > 0 {
            for d in 0..dim {
                centroids[c * dim + d] = (sums[c * dim + d] / f64::from(count)) as f32;
            }
        }
    }
}

/// The files of a SOG for `splats`, `meta.json` last: in Morton order, `palette` the SH
/// palette of the splats in *their* order (clustered here on the CPU when `None` and the
/// splats have SH above degree 0). Refuses an empty scene, one larger than WebP's
/// 16383 × 16383 texels, a palette of the wrong shape and non-finite centres.
pub fn encode(
    splats: &Splats,
    palette: Option<ShPalette>,
) -> Result<Vec<(String, Vec<u8>)>, ParseError> {
    let layout = Layout::new(splats)?;
    let mut files = Vec::new();
    let means = encode_means(splats, &layout, &mut files)?;
    files.push((QUATS.into(), layout.image(&|i, t| *t = pack_quaternion(splats.rotations[i]))?));

    let scales = Codebook::fit(splats.log_scales.iter().flatten().copied());
    let scale_texel = |i: usize, t: &mut [u8; 4]| {
        for (slot, &value) in t.iter_mut().zip(&splats.log_scales[i]) {
            *slot = scales.label(value);
        }
    };
    files.push((SCALES.into(), layout.image(&scale_texel)?));

    let colours = Codebook::fit(splats.sh_dc.iter().flatten().copied());
    let colour_texel = |i: usize, t: &mut [u8; 4]| {
        for (slot, &value) in t.iter_mut().zip(&splats.sh_dc[i]) {
            *slot = colours.label(value);
        }
        let opacity = 1.0 / (1.0 + (-f64::from(splats.opacity_logits[i])).exp());
        t[3] = (opacity * 255.0).round().clamp(0.0, 255.0) as u8;
    };
    files.push((SH0.into(), layout.image(&colour_texel)?));

    let sh_n = if splats.sh_degree > 0 {
        Some(encode_sh_n(splats, palette, &layout, &mut files)?)
    } else {
        None
    };
    let meta = Meta {
        version: 2,
        asset: Some(Asset { generator: format!("splatforge {}", env!("CARGO_PKG_VERSION")) }),
        count: splats.len(),
        means,
        scales: Codebooked { codebook: scales.centroids, files: vec![SCALES.into()] },
        quats: Files { files: vec![QUATS.into()] },
        sh0: Codebooked { codebook: colours.centroids, files: vec![SH0.into()] },
        sh_n,
    };
    let json = serde_json::to_vec(&meta).map_err(|e| ParseError::invalid(format!("SOG: {e}")))?;
    files.push((META.into(), json));
    Ok(files)
}

/// Where each splat goes in the images: texel `j` holds splat `order[j]`.
struct Layout {
    width: usize,
    height: usize,
    order: Vec<u32>,
}

impl Layout {
    fn new(splats: &Splats) -> Result<Self, ParseError> {
        let n = splats.len();
        if n == 0 {
            return Err(ParseError::invalid("SOG: no splats to write"));
        }
        let width = ((n as f64).sqrt() / 4.0).ceil() as usize * 4;
        let height = n.div_ceil(width).div_ceil(4) * 4;
        if width > MAX_SIDE || height > MAX_SIDE {
            return Err(ParseError::invalid(format!(
                "SOG: {n} splats do not fit WebP's {MAX_SIDE} × {MAX_SIDE} texels"
            )));
        }
        if let Some(i) = splats.means.iter().position(|m| !m.iter().all(|v| v.is_finite())) {
            return Err(ParseError::NonFinite {
                what: format!("SOG: splat {i}'s centre"),
                value: f32::NAN,
            });
        }
        Ok(Self { width, height, order: morton_order(&splats.means) })
    }

    /// A WebP of one texel a splat, `fill(splat, texel)` from `[0, 0, 0, 255]`.
    fn image(&self, fill: &dyn Fn(usize, &mut [u8; 4])) -> Result<Vec<u8>, ParseError> {
        let mut texels = vec![0_u8; self.width * self.height * 4];
        for (texel, &splat) in texels.chunks_exact_mut(4).zip(&self.order) {
            let mut rgba = [0, 0, 0, 255];
            fill(splat as usize, &mut rgba);
            texel.copy_from_slice(&rgba);
        }
        webp(&texels, self.width, self.height)
    }
}

/// `means_l` and `means_u`: 16 bits an axis between the bounds of the log-transformed centres.
fn encode_means(
    splats: &Splats,
    layout: &Layout,
    files: &mut Vec<(String, Vec<u8>)>,
) -> Result<Means, ParseError> {
    let logged: Vec<[f64; 3]> =
        splats.means.iter().map(|m| m.map(|v| log_transform(f64::from(v)))).collect();
    let mut mins = [f64::INFINITY; 3];
    let mut maxs = [f64::NEG_INFINITY; 3];
    for m in &logged {
        for axis in 0..3 {
            mins[axis] = mins[axis].min(m[axis]);
            maxs[axis] = maxs[axis].max(m[axis]);
        }
    }
    let quantized: Vec<[u16; 3]> = logged
        .iter()
        .map(|m| {
            std::array::from_fn(|axis| {
                let range = maxs[axis] - mins[axis];
                if range > 0.0 {
                    (65535.0 * (m[axis] - mins[axis]) / range).round().clamp(0.0, 65535.0) as u16
                } else {
                    0
                }
            })
        })
        .collect();
    let quantized = &quantized;
    let bytes = |shift: u32| {
        move |i: usize, t: &mut [u8; 4]| {
            for (slot, &q) in t.iter_mut().zip(&quantized[i]) {
                *slot = (q >> shift) as u8;
            }
        }
    };
    files.push((MEANS_L.into(), layout.image(&bytes(0))?));
    files.push((MEANS_U.into(), layout.image(&bytes(8))?));
    Ok(Means { mins, maxs, files: vec![MEANS_L.into(), MEANS_U.into()] })
}

/// `shN_labels` and `shN_centroids`: the palette (clustered on the CPU when not given) and its
/// values through a 256-entry codebook.
fn encode_sh_n(
    splats: &Splats,
    palette: Option<ShPalette>,
    layout: &Layout,
    files: &mut Vec<(String, Vec<u8>)>,
) -> Result<ShN, ParseError> {
    let n = splats.len();
    let coefficients = sh_coeffs_for_degree(splats.sh_degree) - 1;
    let dim = 3 * coefficients;
    let palette = match palette {
        Some(palette) => palette,
        None => kmeans(&splats.sh_rest, dim, palette_size(n), KMEANS_ITERATIONS),
    };
    let count = palette.centroids.len() / dim;
    if palette.centroids.len() != count * dim
        || !(1..=MAX_PALETTE).contains(&count)
        || palette.labels.len() != n
        || palette.labels.iter().any(|&l| l as usize >= count)
    {
        return Err(ParseError::invalid("SOG: the SH palette does not fit the splats"));
    }
    let codebook = Codebook::fit(palette.centroids.iter().copied());
    let label_texel = |i: usize, t: &mut [u8; 4]| {
        let label = palette.labels[i];
        t[0] = (label & 0xff) as u8;
        t[1] = (label >> 8) as u8;
    };
    files.push((SHN_LABELS.into(), layout.image(&label_texel)?));
    let width = PALETTE_ROW * coefficients;
    let height = count.div_ceil(PALETTE_ROW);
    let mut texels = vec![0_u8; width * height * 4];
    for (entry, centroid) in palette.centroids.chunks_exact(dim).enumerate() {
        for j in 0..coefficients {
            let x = (entry % PALETTE_ROW) * coefficients + j;
            let at = ((entry / PALETTE_ROW) * width + x) * 4;
            for channel in 0..3 {
                texels[at + channel] = codebook.label(centroid[channel * coefficients + j]);
            }
            texels[at + 3] = 255;
        }
    }
    files.push((SHN_CENTROIDS.into(), webp(&texels, width, height)?));
    Ok(ShN {
        count,
        bands: splats.sh_degree,
        codebook: codebook.centroids,
        files: vec![SHN_CENTROIDS.into(), SHN_LABELS.into()],
    })
}

/// The `.sog` bundle of `files`: a zip archive, each member stored (WebP is compressed already).
pub fn bundle(files: &[(String, Vec<u8>)]) -> Result<Vec<u8>, ParseError> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in files {
        zip.start_file(name.as_str(), options).map_err(zip_error)?;
        zip.write_all(bytes)?;
    }
    Ok(zip.finish().map_err(zip_error)?.into_inner())
}

/// The splats of a `.sog` bundle.
pub fn read_bundle(bytes: &[u8]) -> Result<Splats, ParseError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(zip_error)?;
    let mut member = |name: &str| -> Result<Vec<u8>, ParseError> {
        let file = archive
            .by_name(name)
            .map_err(|_| ParseError::invalid(format!("SOG: the bundle has no {name}")))?;
        let mut bytes = Vec::new();
        file.take(MAX_MEMBER_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_MEMBER_BYTES {
            return Err(ParseError::invalid(format!("SOG: {name} is larger than 1 GiB")));
        }
        Ok(bytes)
    };
    let meta = member(META)?;
    read(&meta, &mut member)
}

/// The splats of a SOG from its `meta.json` and a way to get each file it names.
pub fn read(
    meta: &[u8],
    file: &mut dyn FnMut(&str) -> Result<Vec<u8>, ParseError>,
) -> Result<Splats, ParseError> {
    let meta: Meta = serde_json::from_slice(meta)
        .map_err(|e| ParseError::invalid(format!("SOG: meta.json is not SOG's: {e}")))?;
    if meta.version != 2 {
        return Err(ParseError::Unsupported(format!(
            "SOG version {} (we read version 2; splat-transform converts older ones)",
            meta.version
        )));
    }
    let n = meta.count;
    if n == 0 || n > MAX_SIDE * MAX_SIDE {
        return Err(ParseError::invalid(format!("SOG: count {n} is not a number of splats")));
    }
    let sh_degree = meta.sh_n.as_ref().map_or(0, |s| s.bands);
    if sh_degree > 3 {
        return Err(ParseError::invalid(format!("SOG: {sh_degree} SH bands (at most 3)")));
    }
    let mut images = Images { file, n };
    let means_l = images.per_splat(&meta.means.files, 0)?;
    let means_u = images.per_splat(&meta.means.files, 1)?;
    let quats = images.per_splat(&meta.quats.files, 0)?;
    let scales = images.per_splat(&meta.scales.files, 0)?;
    let sh0 = images.per_splat(&meta.sh0.files, 0)?;
    let mut splats = Splats::with_capacity(n, sh_degree);
    for at in (0..n).map(|i| i * 4) {
        splats.means.push(std::array::from_fn(|axis| {
            let q = f64::from(
                u16::from(means_l.rgba[at + axis]) | (u16::from(means_u.rgba[at + axis]) << 8),
            );
            let range = meta.means.maxs[axis] - meta.means.mins[axis];
            inverse_log_transform(meta.means.mins[axis] + range * q / 65535.0) as f32
        }));
        let q = &quats.rgba[at..at + 4];
        splats.rotations.push(unpack_quaternion([q[0], q[1], q[2], q[3]]));
        let s = &scales.rgba[at..at + 3];
        let codebook = &meta.scales.codebook;
        splats.log_scales.push([
            lookup(codebook, s[0], "scale")?,
            lookup(codebook, s[1], "scale")?,
            lookup(codebook, s[2], "scale")?,
        ]);
        let c = &sh0.rgba[at..at + 4];
        let codebook = &meta.sh0.codebook;
        splats.sh_dc.push([
            lookup(codebook, c[0], "colour")?,
            lookup(codebook, c[1], "colour")?,
            lookup(codebook, c[2], "colour")?,
        ]);
        let opacity = (f32::from(c[3]) / 255.0).clamp(1e-6, 1.0 - 1e-6);
        splats.opacity_logits.push((opacity / (1.0 - opacity)).ln());
    }
    if let Some(sh_n) = meta.sh_n.as_ref().filter(|_| sh_degree > 0) {
        read_sh_rest(sh_n, &mut images, &mut splats)?;
    }
    splats.validate()?;
    Ok(splats)
}

/// The images a `meta.json` names, decoded.
struct Images<'a> {
    file: &'a mut dyn FnMut(&str) -> Result<Vec<u8>, ParseError>,
    /// Splats the meta counts.
    n: usize,
}

impl Images<'_> {
    /// `files[index]`, a plain file name beside `meta.json`.
    fn get(&mut self, files: &[String], index: usize) -> Result<Image, ParseError> {
        let name = files
            .get(index)
            .ok_or_else(|| ParseError::invalid("SOG: meta.json names too few files"))?;
        if name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(ParseError::invalid(format!(
                "SOG: {name:?} is not a file name beside meta.json"
            )));
        }
        decode_webp(&(self.file)(name)?)
            .map_err(|e| ParseError::invalid(format!("SOG: {name}: {e}")))
    }

    /// [`Images::get`] of an image with a texel for every splat.
    fn per_splat(&mut self, files: &[String], index: usize) -> Result<Image, ParseError> {
        let image = self.get(files, index)?;
        if image.width * image.height < self.n {
            return Err(ParseError::invalid(format!(
                "SOG: {} holds fewer texels than the {} splats",
                files[index], self.n
            )));
        }
        Ok(image)
    }
}

/// `codebook[byte]`, or the error of a damaged file.
fn lookup(codebook: &[f32], byte: u8, what: &str) -> Result<f32, ParseError> {
    codebook
        .get(usize::from(byte))
        .copied()
        .ok_or_else(|| ParseError::invalid(format!("SOG: a {what} index beyond its codebook")))
}

/// Each splat's SH above degree 0: its palette entry's values through the codebook.
fn read_sh_rest(
    sh_n: &ShN,
    images: &mut Images<'_>,
    splats: &mut Splats,
) -> Result<(), ParseError> {
    let n = images.n;
    let coefficients = sh_coeffs_for_degree(splats.sh_degree) - 1;
    let centroids = images.get(&sh_n.files, 0)?;
    let labels = images.per_splat(&sh_n.files, 1)?;
    if centroids.width != PALETTE_ROW * coefficients
        || sh_n.count > MAX_PALETTE
        || centroids.height * PALETTE_ROW < sh_n.count
    {
        return Err(ParseError::invalid(
            "SOG: shN_centroids does not hold the palette meta.json counts",
        ));
    }
    splats.sh_rest.reserve(n * 3 * coefficients);
    for i in 0..n {
        let label = usize::from(labels.rgba[i * 4]) | (usize::from(labels.rgba[i * 4 + 1]) << 8);
        if label >= sh_n.count {
            return Err(ParseError::invalid(format!(
                "SOG: splat {i}'s SH label {label} is beyond the palette of {}",
                sh_n.count
            )));
        }
        let row = (label / PALETTE_ROW) * centroids.width + (label % PALETTE_ROW) * coefficients;
        for channel in 0..3 {
            for j in 0..coefficients {
                let byte = centroids.rgba[(row + j) * 4 + channel];
                splats.sh_rest.push(lookup(&sh_n.codebook, byte, "SH")?);
            }
        }
    }
    Ok(())
}

/// `sign(v) · ln(1 + |v|)`: centres near the origin get more of the 16 bits.
fn log_transform(v: f64) -> f64 {
    v.signum() * v.abs().ln_1p()
}

fn inverse_log_transform(v: f64) -> f64 {
    v.signum() * v.abs().exp_m1()
}

/// Smallest three of the unit quaternion `w, x, y, z`, the largest made positive.
fn pack_quaternion(q: [f32; 4]) -> [u8; 4] {
    let q = q.map(f64::from);
    let length = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let q = if length > 0.0 && length.is_finite() {
        q.map(|v| v / length)
    } else {
        [1.0, 0.0, 0.0, 0.0]
    };
    let largest = (0..4).fold(0, |best, i| if q[i].abs() > q[best].abs() { i } else { best });
    let sign = if q[largest] < 0.0 { -1.0 } else { 1.0 };
    let mut texel = [0, 0, 0, 252 + largest as u8];
    for (slot, i) in (0..4).filter(|&i| i != largest).enumerate() {
        let v = q[i] * sign * std::f64::consts::SQRT_2;
        texel[slot] = (255.0 * (v * 0.5 + 0.5)).round().clamp(0.0, 255.0) as u8;
    }
    texel
}

fn unpack_quaternion(texel: [u8; 4]) -> [f32; 4] {
    if !(252..=255).contains(&texel[3]) {
        return [1.0, 0.0, 0.0, 0.0];
    }
    let largest = usize::from(texel[3] - 252);
    let mut q = [0.0_f64; 4];
    let mut squares = 0.0;
    for (slot, i) in (0..4).filter(|&i| i != largest).enumerate() {
        let v = (f64::from(texel[slot]) / 255.0 * 2.0 - 1.0) / std::f64::consts::SQRT_2;
        q[i] = v;
        squares += v * v;
    }
    q[largest] = (1.0 - squares).max(0.0).sqrt();
    q.map(|v| v as f32)
}

/// Splat indexes in the Morton (Z-order) order of their centres: 10 bits an axis over the
/// bounds, ties in index order.
fn morton_order(means: &[[f32; 3]]) -> Vec<u32> {
    let mut low = [f32::INFINITY; 3];
    let mut high = [f32::NEG_INFINITY; 3];
    for m in means {
        for axis in 0..3 {
            low[axis] = low[axis].min(m[axis]);
            high[axis] = high[axis].max(m[axis]);
        }
    }
    let spread = |v: u32| {
        let mut v = v & 0x3ff;
        v = (v | (v << 16)) & 0xff00_00ff;
        v = (v | (v << 8)) & 0x0300_f00f;
        v = (v | (v << 4)) & 0x030c_30c3;
        (v | (v << 2)) & 0x0924_9249
    };
    let mut keyed: Vec<(u32, u32)> = means
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let cell = |axis: usize| {
                let extent = high[axis] - low[axis];
                if extent > 0.0 {
                    ((m[axis] - low[axis]) / extent * 1024.0).clamp(0.0, 1023.0) as u32
                } else {
                    0
                }
            };
            (spread(cell(0)) | (spread(cell(1)) << 1) | (spread(cell(2)) << 2), i as u32)
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// A 256-entry 1-D codebook. The finite values are binned — bin edges at [`CODEBOOK_BINS`]
/// even steps of the range and as many quantiles, so a few far outliers do not squeeze the
/// dense middle into one bin — and each bin, at its values' mean, weighs the square root of
/// its count, so sparse tails (the largest scales, the brightest colours) still earn entries.
/// The entries are then the optimum of that weighted squared error, found exactly by dynamic
/// programming over the bins (as splat-transform does): Lloyd's iterations from quantiles
/// leave a far tail sharing one entry (the largest splats of a scene 30% off in size).
/// Non-finite values take the nearest end entry (NaN the first).
struct Codebook {
    centroids: Vec<f32>,
}

/// Bins of each kind (even, quantile) the codebook's values are gathered into.
const CODEBOOK_BINS: usize = 1024;

impl Codebook {
    fn fit(values: impl Iterator<Item = f32>) -> Self {
        let mut sorted: Vec<f64> = values.filter(|v| v.is_finite()).map(f64::from).collect();
        sorted.sort_unstable_by(f64::total_cmp);
        let (Some(&low), Some(&high)) = (sorted.first(), sorted.last()) else {
            return Self { centroids: vec![0.0; CODEBOOK_SIZE] };
        };
        let n = sorted.len();
        let mut prefix = Vec::with_capacity(n + 1);
        prefix.push(0.0);
        for v in &sorted {
            prefix.push(prefix[prefix.len() - 1] + v);
        }
        // Bin edges: even steps and quantiles, as indexes into `sorted`.
        let mut edges: Vec<usize> = (0..=CODEBOOK_BINS)
            .map(|i| {
                let at = low + (high - low) * i as f64 / CODEBOOK_BINS as f64;
                sorted.partition_point(|&v| v < at)
            })
            .chain((0..=CODEBOOK_BINS).map(|i| i * n / CODEBOOK_BINS))
            .chain([n])
            .collect();
        edges.sort_unstable();
        edges.dedup();
        // (mean, weight) of each non-empty bin, in order.
        let bins: Vec<(f64, f64)> = edges
            .windows(2)
            .map(|w| {
                let count = (w[1] - w[0]) as f64;
                ((prefix[w[1]] - prefix[w[0]]) / count, count.sqrt())
            })
            .collect();
        let mut centroids: Vec<f32> =
            optimal_segments(&bins, CODEBOOK_SIZE).into_iter().map(|c| c as f32).collect();
        centroids.sort_unstable_by(f32::total_cmp);
        centroids.dedup();
        // Unused entries repeat the last, as splat-transform pads.
        let last = centroids[centroids.len() - 1];
        centroids.resize(CODEBOOK_SIZE, last);
        Self { centroids }
    }

    /// Index of the entry nearest `value`.
    fn label(&self, value: f32) -> u8 {
        if value.is_nan() {
            return 0;
        }
        let c = &self.centroids;
        let above = c.partition_point(|&e| e < value).min(c.len() - 1);
        let index = if above > 0 && (value - c[above - 1]) <= (c[above] - value) {
            above - 1
        } else {
            above
        };
        index as u8
    }
}

/// The weighted means of the at most `k` runs of consecutive `(value, weight)` points (in
/// value order) that minimise the weighted squared error: dynamic programming over the number
/// of runs, each row by divide and conquer (the best start of a run ending at `j` does not
/// decrease with `j`), so O(k · n · log n).
fn optimal_segments(points: &[(f64, f64)], k: usize) -> Vec<f64> {
    let n = points.len();
    let k = k.min(n);
    // Prefix sums of w, w·v and w·v² for a run's cost in O(1).
    let mut sums = vec![(0.0_f64, 0.0_f64, 0.0_f64); n + 1];
    for (i, &(v, w)) in points.iter().enumerate() {
        let (a, b, c) = sums[i];
        sums[i + 1] = (a + w, b + w * v, c + w * v * v);
    }
    // Points start..end (exclusive) as one run: Σw v² − (Σw v)² / Σw.
    let cost = |start: usize, end: usize| {
        let w = sums[end].0 - sums[start].0;
        let wv = sums[end].1 - sums[start].1;
        let wvv = sums[end].2 - sums[start].2;
        if w > 0.0 { (wvv - wv * wv / w).max(0.0) } else { 0.0 }
    };
    // previous[j]: the least error of the first j points in m − 1 runs; starts[m][j]: where the
    // last of m runs over the first j points begins.
    let mut previous: Vec<f64> = (0..=n).map(|j| cost(0, j)).collect();
    let mut starts = vec![vec![0_u32; n + 1]];
    for m in 2..=k {
        let mut current = vec![f64::INFINITY; n + 1];
        let mut start = vec![0_u32; n + 1];
        // Ends m..=n, each run's start in [m − 1, end − 1].
        let mut stack = vec![(m, n, m - 1, n - 1)];
        while let Some((lo, hi, first, last)) = stack.pop() {
            if lo > hi {
                continue;
            }
            let mid = usize::midpoint(lo, hi);
            let mut best = (f64::INFINITY, first);
            let end = last.min(mid - 1);
            for (s, &before) in previous.iter().enumerate().take(end + 1).skip(first) {
                let total = before + cost(s, mid);
                if total < best.0 {
                    best = (total, s);
                }
            }
            current[mid] = best.0;
            start[mid] = best.1 as u32;
            stack.push((lo, mid - 1, first, best.1));
            stack.push((mid + 1, hi, best.1, last));
        }
        previous = current;
        starts.push(start);
    }
    // Walk the runs back from the end.
    let mut means = Vec::with_capacity(k);
    let mut end = n;
    for m in (1..=k).rev() {
        let start = if m == 1 { 0 } else { starts[m - 1][end] as usize };
        let w = sums[end].0 - sums[start].0;
        if w > 0.0 {
            means.push((sums[end].1 - sums[start].1) / w);
        }
        end = start;
    }
    means.reverse();
    means
}

/// An image decoded to RGBA.
struct Image {
    width: usize,
    height: usize,
    rgba: Vec<u8>,
}

fn webp(rgba: &[u8], width: usize, height: usize) -> Result<Vec<u8>, ParseError> {
    let mut bytes = Vec::new();
    image_webp::WebPEncoder::new(&mut bytes)
        .encode(rgba, width as u32, height as u32, image_webp::ColorType::Rgba8)
        .map_err(|e| ParseError::invalid(format!("WebP: {e}")))?;
    Ok(bytes)
}

fn decode_webp(bytes: &[u8]) -> Result<Image, String> {
    let mut decoder =
        image_webp::WebPDecoder::new(Cursor::new(bytes)).map_err(|e| e.to_string())?;
    if decoder.is_lossy() {
        return Err("a lossy WebP (SOG's values need lossless images)".into());
    }
    let (width, height) = decoder.dimensions();
    let (width, height) = (width as usize, height as usize);
    let size = decoder.output_buffer_size().ok_or("the image is too large")?;
    let mut pixels = vec![0_u8; size];
    decoder.read_image(&mut pixels).map_err(|e| e.to_string())?;
    let rgba = if decoder.has_alpha() {
        pixels
    } else {
        pixels.chunks_exact(3).flat_map(|p| [p[0], p[1], p[2], 255]).collect()
    };
    Ok(Image { width, height, rgba })
}

fn zip_error(e: impl std::fmt::Display) -> ParseError {
    ParseError::invalid(format!("SOG: not a readable zip archive: {e}"))
}

#[cfg(test)]
mod tests;
