//! Exposure and colour drift read from the pixels, for captures whose EXIF does not tell it: the
//! frames cut from a phone video have none, and a phone changes its white balance without
//! writing a new exposure.
//!
//! A sparse point's colour is the mean of the pixels that saw it (COLMAP's), so a view whose
//! camera brightened shows its points brighter than their colour, by its gain. For each train
//! view: project the sparse points (an even subsample), keep those nearest the camera in their
//! cell of a coarse grid (the others are likely hidden behind them), and take per channel the
//! median of log2(pixel / point colour), leaving out dark and clipped values, whose ratios say
//! little, and edges, where a point projected a pixel off reads another surface. The view's
//! exposure is the three channels' mean and its colour balance each channel less that; the
//! drift is their spread over the views, the largest less the smallest. It is read once, when
//! the capture loads, in milliseconds, and changes nothing in a run: `auto` decides before the
//! first step, so its run is `on`'s or `off`'s, bit for bit.

use glam::Vec3;
use splat_formats::PointCloud;

use crate::dataset::View;

/// Most points projected into a view: an even subsample of larger clouds.
const MAX_POINTS: usize = 4096;
/// Cells of the visibility grid across the image's long side.
const GRID_CELLS: u32 = 48;
/// A point counts as seen where its depth is within this fraction of the nearest in its cell.
const DEPTH_SLACK: f32 = 0.05;
/// Channel values (0..1) outside which a sample is left out: in dark ones the point colour's
/// noise and the pixel's quantisation are a large part of the ratio (at 0.06, the sample
/// scene's 0.04 of noise alone read 0.15 stops of colour drift), clipped ones do not follow
/// the gain.
const DARK: f32 = 0.15;
const CLIPPED: f32 = 0.98;
/// How far (a fraction of their mean) the 3×3 pixels around a point may spread for it to be read
/// ([`flat_patch`]).
const FLAT: f32 = 0.2;
/// Fewest samples a view's medians are taken over; a view with fewer is not measured.
const MIN_SAMPLES: usize = 64;
/// Fewest measured views a spread is read from; and at least half the train views must be.
const MIN_VIEWS: usize = 3;

/// How far the train views' colours drift against the sparse points' own
/// ([`PixelDrift::measure`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PixelDrift {
    /// Train views measured (those with at least [`MIN_SAMPLES`] points in sight).
    pub views: usize,
    /// Points projected into each view.
    pub points: usize,
    /// The views' exposure, largest less smallest, in stops of pixel value (log2 of the
    /// ratio of their brightness).
    pub exposure_stops: f64,
    /// The views' colour balance: for the channel that spreads most, largest less smallest,
    /// in stops of pixel value.
    pub colour_stops: f64,
}

impl PixelDrift {
    /// The drift of `train`'s colours against `points`'; `None` where the points have no
    /// colours, or where fewer than [`MIN_VIEWS`] views, or than half of them, see
    /// [`MIN_SAMPLES`] points (images too small to read: a few flat patches give noisy
    /// medians, desk-statue at 64 px read 0.14 stops of colour drift from 4 of its 20 views).
    #[must_use]
    pub fn measure(train: &[View], points: &PointCloud) -> Option<Self> {
        if !points.has_color || points.is_empty() {
            return None;
        }
        let stride = points.len().div_ceil(MAX_POINTS);
        let (positions, colours): (Vec<Vec3>, Vec<[f32; 3]>) = points
            .positions
            .iter()
            .zip(&points.colors)
            .step_by(stride)
            .map(|(p, c)| (Vec3::from(*p), *c))
            .unzip();
        let gains: Vec<[f64; 3]> =
            train.iter().filter_map(|view| view_gains(view, &positions, &colours)).collect();
        if gains.len() < MIN_VIEWS || gains.len() * 2 < train.len() {
            return None;
        }
        let exposure: Vec<f64> = gains.iter().map(|g| g.iter().sum::<f64>() / 3.0).collect();
        let colour_stops = (0..3)
            .map(|c| spread(gains.iter().zip(&exposure).map(|(g, e)| g[c] - e)))
            .fold(0.0, f64::max);
        Some(Self {
            views: gains.len(),
            points: positions.len(),
            exposure_stops: spread(exposure.iter().copied()),
            colour_stops,
        })
    }

    /// Whether it is drift `auto` compensates: [`super::AUTO_DRIFT_STOPS`] of exposure or
    /// [`super::AUTO_COLOUR_STOPS`] of colour balance, or more.
    #[must_use]
    pub fn drifts(&self) -> bool {
        self.exposure_stops >= super::AUTO_DRIFT_STOPS
            || self.colour_stops >= super::AUTO_COLOUR_STOPS
    }
}

/// Largest less smallest.
fn spread(values: impl Iterator<Item = f64>) -> f64 {
    let (low, high) = values.fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(v), h.max(v)));
    (high - low).max(0.0)
}

/// One view's gain per channel against the points' colours, in stops (log2): the median over
/// the points it sees of log2(pixel / colour); `None` where it sees fewer than
/// [`MIN_SAMPLES`].
#[must_use]
pub fn view_gains(view: &View, positions: &[Vec3], colours: &[[f32; 3]]) -> Option<[f64; 3]> {
    let camera = &view.camera;
    let (width, height) = (camera.width, camera.height);
    let camera_from_world = camera.camera_from_world();
    let cell = (width.max(height) / GRID_CELLS).max(1);
    let columns = width.div_ceil(cell);
    let cells = (columns * height.div_ceil(cell)) as usize;
    // (point, pixel x, pixel y, depth, cell)
    let seen: Vec<(usize, u32, u32, f32, usize)> = positions
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let q = camera_from_world.transform_point3(*p);
            if q.z <= 1e-6 {
                return None;
            }
            let x = camera.fx * q.x / q.z + camera.cx;
            let y = camera.fy * q.y / q.z + camera.cy;
            // `!(a < b)` also drops NaN.
            if !(x >= 0.0 && y >= 0.0 && x < width as f32 && y < height as f32) {
                return None;
            }
            let (x, y) = (x as u32, y as u32);
            Some((i, x, y, q.z, ((y / cell) * columns + x / cell) as usize))
        })
        .collect();
    let mut nearest = vec![f32::INFINITY; cells];
    for &(_, _, _, depth, c) in &seen {
        nearest[c] = nearest[c].min(depth);
    }
    let mut logs: [Vec<f32>; 3] = Default::default();
    for &(i, x, y, depth, c) in &seen {
        if depth > nearest[c] * (1.0 + DEPTH_SLACK) {
            continue;
        }
        let Some(pixel) = flat_patch(&view.image, x, y) else { continue };
        let colour = colours[i];
        let usable = |v: f32| (DARK..=CLIPPED).contains(&v);
        if !(pixel.into_iter().all(usable) && colour.into_iter().all(usable)) {
            continue;
        }
        for channel in 0..3 {
            logs[channel].push((pixel[channel] / colour[channel]).log2());
        }
    }
    if logs[0].len() < MIN_SAMPLES {
        return None;
    }
    Some(logs.map(|mut values| f64::from(median(&mut values))))
}

/// The mean colour (0..1) of the 3×3 pixels around `(x, y)`, where they agree: each channel
/// within [`FLAT`] of its mean. Elsewhere (an edge, fine texture, the image's border) a point
/// projected a pixel off, or blurred by the downscale, reads another surface's colour.
fn flat_patch(image: &image::RgbImage, x: u32, y: u32) -> Option<[f32; 3]> {
    if x == 0 || y == 0 || x + 1 >= image.width() || y + 1 >= image.height() {
        return None;
    }
    let mut sum = [0.0_f32; 3];
    let mut low = [f32::MAX; 3];
    let mut high = [0.0_f32; 3];
    for j in y - 1..=y + 1 {
        for i in x - 1..=x + 1 {
            for (c, &v) in image.get_pixel(i, j).0.iter().enumerate() {
                let v = f32::from(v) / 255.0;
                sum[c] += v;
                low[c] = low[c].min(v);
                high[c] = high[c].max(v);
            }
        }
    }
    let mean = sum.map(|s| s / 9.0);
    (0..3).all(|c| high[c] - low[c] <= FLAT * mean[c]).then_some(mean)
}

fn median(values: &mut [f32]) -> f32 {
    let middle = values.len() / 2;
    *values.select_nth_unstable_by(middle, f32::total_cmp).1
}

/// `image` with each channel multiplied by `gains` (rounded, clamped to 0..255): the drift a
/// camera's exposure and white balance put on a photo, for tests and measurements.
#[must_use]
pub fn with_gains(image: &image::RgbImage, gains: [f32; 3]) -> image::RgbImage {
    let mut out = image.clone();
    for pixel in out.pixels_mut() {
        for (value, gain) in pixel.0.iter_mut().zip(gains) {
            *value = (f32::from(*value) * gain).round().clamp(0.0, 255.0) as u8;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{Camera, Exposure};
    use glam::Mat4;
    use splat_formats::random::SplitMix64;

    /// Views of a wall of coloured squares, each square's colour one point's, and one point
    /// behind the wall (hidden) with a colour that would spoil any mean.
    fn wall(gains: &[[f32; 3]]) -> (Vec<View>, PointCloud) {
        let mut rng = SplitMix64::new(7);
        let size = 64_u32;
        let squares = 16_u32;
        let step = size / squares;
        let mut positions = Vec::new();
        let mut colors = Vec::new();
        let mut base = image::RgbImage::new(size, size);
        // Camera at the origin looking down +z at a wall at z = 4 that fills its image.
        let f = size as f32 / 2.0;
        for j in 0..squares {
            for i in 0..squares {
                let colour = [0; 3].map(|_| 0.2 + 0.6 * rng.next_f32());
                let (x, y) = ((i * step + step / 2) as f32, (j * step + step / 2) as f32);
                let z = 4.0;
                positions.push([(x + 0.5 - f) * z / f, (y + 0.5 - f) * z / f, z]);
                colors.push(colour);
                for dy in 0..step {
                    for dx in 0..step {
                        let px = colour.map(|c| (c * 255.0).round() as u8);
                        base.put_pixel(i * step + dx, j * step + dy, image::Rgb(px));
                    }
                }
            }
        }
        // Behind the wall's first square (twice as far, on the same ray): red, never seen.
        let first = (step as f32 / 2.0 + 0.5 - f) * 8.0 / f;
        positions.push([first, first, 8.0]);
        colors.push([0.95, 0.1, 0.1]);
        let camera = Camera {
            width: size,
            height: size,
            fx: f,
            fy: f,
            cx: f,
            cy: f,
            world_from_camera: Mat4::IDENTITY,
        };
        let views = gains
            .iter()
            .enumerate()
            .map(|(index, &g)| View {
                index,
                name: format!("{index}.png"),
                camera,
                image: with_gains(&base, g),
                mask: None,
                alpha: None,
                exposure: Exposure::default(),
            })
            .collect();
        (views, PointCloud { positions, colors, has_color: true })
    }

    #[test]
    fn a_views_gain_is_read_from_its_points() {
        let gains = [[1.0, 1.0, 1.0], [1.25, 1.25, 1.25], [0.8, 0.9, 1.1]];
        let (views, points) = wall(&gains);
        let positions: Vec<Vec3> = points.positions.iter().map(|&p| Vec3::from(p)).collect();
        for (view, want) in views.iter().zip(gains) {
            let got = view_gains(view, &positions, &points.colors).expect("the wall is seen");
            for channel in 0..3 {
                // 8-bit rounding of colours from 0.2: at most 0.5 / 51 ≈ 1% (0.014 stops).
                let want = f64::from(want[channel]).log2();
                assert!((got[channel] - want).abs() < 0.02, "{got:?} against {want}");
            }
        }
        let drift = PixelDrift::measure(&views, &points).expect("three views measured");
        assert_eq!(drift.views, 3);
        // Exposure: the channels' means, log2 of (1, 1.25, (0.8·0.9·1.1)^(1/3)).
        let exposure = [0.0, 1.25_f64.log2(), (0.8_f64 * 0.9 * 1.1).log2() / 3.0];
        let want = exposure.iter().copied().fold(f64::MIN, f64::max)
            - exposure.iter().copied().fold(f64::MAX, f64::min);
        assert!((drift.exposure_stops - want).abs() < 0.02, "{drift:?}, want {want}");
        // Colour: the third view's channels against its exposure; blue's is the largest.
        let colour = [0.8_f64, 0.9, 1.1].map(|g| (g.log2() - exposure[2]).abs());
        let want = colour.into_iter().fold(0.0, f64::max);
        assert!((drift.colour_stops - want).abs() < 0.03, "{drift:?}, want {want}");
    }

    #[test]
    fn views_alike_show_no_drift_and_nothing_seen_is_no_measure() {
        let (views, points) = wall(&[[1.0; 3]; 4]);
        let drift = PixelDrift::measure(&views, &points).expect("measured");
        assert!(drift.exposure_stops < 1e-6 && drift.colour_stops < 1e-6, "{drift:?}");
        let grey = PointCloud { has_color: false, ..points.clone() };
        assert_eq!(PixelDrift::measure(&views, &grey), None);
        assert_eq!(PixelDrift::measure(&views[..2], &points), None);
        // Every point behind the camera.
        let behind = PointCloud {
            positions: points.positions.iter().map(|p| [p[0], p[1], -p[2]]).collect(),
            ..points
        };
        assert_eq!(PixelDrift::measure(&views, &behind), None);
    }
}
