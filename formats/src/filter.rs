//! Which splats a scene keeps: a crop box (turned or not), a crop sphere, an opacity floor, a
//! size limit and the dense scene's cells (likely floaters left out), as `splatforge convert`
//! applies them, and rectangles and brush strokes drawn over views (the window's selections;
//! issue 33). The filter decides per splat from its stored values alone, so the same filter
//! keeps the same splats whatever the format it was read from, and the same rule holds for
//! splats a run adds after it was set.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::Splats;

/// A box in world coordinates: the axis-aligned box `min..=max`, turned about its centre by
/// `turn`; a splat is inside when its centre is (the faces included).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CropBox {
    pub min: [f32; 3],
    pub max: [f32; 3],
    /// Degrees the box is turned about its centre: about the world's x axis, then y, then z.
    /// All zero: the box is axis-aligned.
    pub turn: [f32; 3],
}

impl CropBox {
    /// The axis-aligned box `min..=max`.
    #[must_use]
    pub fn aligned(min: [f32; 3], max: [f32; 3]) -> Self {
        Self { min, max, turn: [0.0; 3] }
    }

    #[must_use]
    pub fn is_turned(&self) -> bool {
        self.turn.iter().any(|&degrees| degrees != 0.0)
    }

    /// The box's centre, in f64.
    #[must_use]
    pub fn center(&self) -> [f64; 3] {
        std::array::from_fn(|a| f64::midpoint(f64::from(self.min[a]), f64::from(self.max[a])))
    }

    /// The box's turn as a unit quaternion `[x, y, z, w]`: the rotation about x, then y,
    /// then z (`qz · qy · qx`).
    #[must_use]
    pub fn quaternion(&self) -> [f64; 4] {
        let half = self.turn.map(|d| f64::from(d).to_radians() / 2.0);
        let (sx, cx) = half[0].sin_cos();
        let (sy, cy) = half[1].sin_cos();
        let (sz, cz) = half[2].sin_cos();
        [
            sx * cy * cz - cx * sy * sz,
            cx * sy * cz + sx * cy * sz,
            cx * cy * sz - sx * sy * cz,
            cx * cy * cz + sx * sy * sz,
        ]
    }

    /// The box's axes in world coordinates (the columns of its rotation), in f64.
    #[must_use]
    pub fn axes(&self) -> [[f64; 3]; 3] {
        rotation_columns(self.quaternion())
    }

    /// Whether `point` lies inside the box or on its faces (a turned box in f64, so every
    /// machine agrees).
    #[must_use]
    pub fn contains(&self, point: [f32; 3]) -> bool {
        if !self.is_turned() {
            return (0..3)
                .all(|axis| self.min[axis] <= point[axis] && point[axis] <= self.max[axis]);
        }
        let center = self.center();
        let d: [f64; 3] = std::array::from_fn(|a| f64::from(point[a]) - center[a]);
        self.axes().iter().enumerate().all(|(a, axis)| {
            let along = axis[0] * d[0] + axis[1] * d[1] + axis[2] * d[2];
            along.abs() <= (f64::from(self.max[a]) - f64::from(self.min[a])) / 2.0
        })
    }

    /// The eight corners in world coordinates: bit 0 of the index picks max x, bit 1 max y,
    /// bit 2 max z.
    #[must_use]
    pub fn corners(&self) -> [[f64; 3]; 8] {
        let center = self.center();
        let axes = self.axes();
        std::array::from_fn(|i| {
            let local: [f64; 3] = std::array::from_fn(|a| {
                let end = if i >> a & 1 == 1 { self.max[a] } else { self.min[a] };
                f64::from(end) - center[a]
            });
            std::array::from_fn(|w| center[w] + (0..3).map(|a| axes[a][w] * local[a]).sum::<f64>())
        })
    }
}

/// The columns of the rotation matrix of the unit quaternion `[x, y, z, w]`.
fn rotation_columns([x, y, z, w]: [f64; 4]) -> [[f64; 3]; 3] {
    [
        [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y + w * z), 2.0 * (x * z - w * y)],
        [2.0 * (x * y - w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z + w * x)],
        [2.0 * (x * z + w * y), 2.0 * (y * z - w * x), 1.0 - 2.0 * (x * x + y * y)],
    ]
}

/// `x,y,z`: the degrees a crop box is turned about its centre (about x, then y, then z).
pub fn parse_turn(text: &str) -> Result<[f32; 3], String> {
    finite_numbers(text, 3).map(|v| [v[0], v[1], v[2]]).ok_or_else(|| {
        format!("a crop box's turn is three angles in degrees, x,y,z (got \"{text}\")")
    })
}

/// Exactly `count` finite numbers separated by commas, or `None`.
fn finite_numbers(text: &str, count: usize) -> Option<Vec<f32>> {
    text.split(',')
        .map(|v| v.trim().parse::<f32>().ok().filter(|v| v.is_finite()))
        .collect::<Option<Vec<f32>>>()
        .filter(|values| values.len() == count)
}

/// `xmin,ymin,zmin,xmax,ymax,zmax`: six finite numbers, each min at most its max.
impl FromStr for CropBox {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let values = finite_numbers(text, 6).ok_or_else(|| {
            format!("a crop box is six numbers, xmin,ymin,zmin,xmax,ymax,zmax (got \"{text}\")")
        })?;
        let (min, max) = ([values[0], values[1], values[2]], [values[3], values[4], values[5]]);
        if let Some(axis) = (0..3).find(|&a| min[a] > max[a]) {
            let name = ["x", "y", "z"][axis];
            return Err(format!(
                "the crop box's {name}min ({}) is above its {name}max ({})",
                min[axis], max[axis]
            ));
        }
        Ok(Self::aligned(min, max))
    }
}

impl fmt::Display for CropBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c] = self.min;
        let [d, e, g] = self.max;
        write!(f, "({a}, {b}, {c}) to ({d}, {e}, {g})")?;
        if self.is_turned() {
            let [x, y, z] = self.turn;
            write!(f, " turned {x}°, {y}°, {z}°")?;
        }
        Ok(())
    }
}

/// A ball in world coordinates; a splat is inside when its centre is (the surface included).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CropSphere {
    pub center: [f32; 3],
    pub radius: f32,
}

impl CropSphere {
    /// Whether `point` lies inside the ball or on its surface (in f64, so every machine
    /// agrees).
    #[must_use]
    pub fn contains(&self, point: [f32; 3]) -> bool {
        let d2: f64 =
            (0..3).map(|a| (f64::from(point[a]) - f64::from(self.center[a])).powi(2)).sum();
        d2 <= f64::from(self.radius).powi(2)
    }
}

/// `x,y,z,radius`: four finite numbers, the radius above 0.
impl FromStr for CropSphere {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let values = finite_numbers(text, 4).ok_or_else(|| {
            format!("a crop sphere is four numbers, x,y,z,radius (got \"{text}\")")
        })?;
        if values[3] <= 0.0 {
            return Err(format!("the crop sphere's radius ({}) is not above 0", values[3]));
        }
        Ok(Self { center: [values[0], values[1], values[2]], radius: values[3] })
    }
}

impl fmt::Display for CropSphere {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [x, y, z] = self.center;
        write!(f, "of radius {} around ({x}, {y}, {z})", self.radius)
    }
}

/// Selections a filter holds at most (each is a test per splat in every frame it is on).
pub const MAX_SELECTIONS: usize = 64;
/// Points a brush stroke holds at most; the window thins a longer path to fit.
pub const MAX_STROKE_POINTS: usize = 256;

/// What a selection covers on the camera's image plane at depth 1 (a pixel (u, v) is at
/// ((u − cx) / fx, (v − cy) / fy)).
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// The rectangle `[x0, y0, x1, y1]`, x0 ≤ x1 and y0 ≤ y1, its edges included.
    Rect([f32; 4]),
    /// A brush stroke: every point within `radius` of the path through `points` (the pointer's
    /// path; one point is a dot). The radius is in the same units, so a round brush needs a
    /// camera with square pixels (fx = fy), as the viewer's are.
    Stroke { radius: f32, points: Vec<[f32; 2]> },
}

impl Shape {
    /// The rectangle around the shape, `[x0, y0, x1, y1]` (the stroke's, its radius
    /// included).
    #[must_use]
    pub fn bounds(&self) -> [f32; 4] {
        match self {
            Self::Rect(rect) => *rect,
            Self::Stroke { radius, points } => {
                let mut b = [f32::INFINITY, f32::INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY];
                for p in points {
                    b = [b[0].min(p[0]), b[1].min(p[1]), b[2].max(p[0]), b[3].max(p[1])];
                }
                [b[0] - radius, b[1] - radius, b[2] + radius, b[3] + radius]
            }
        }
    }
}

/// A shape drawn over a view: the splats whose centre the camera sees inside it (in front of
/// the camera). The filter hides them, or keeps only them.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// The camera's rotation, world to camera (OpenCV axes: x right, y down, z forward), a
    /// unit quaternion `[x, y, z, w]`.
    pub camera_from_world: [f32; 4],
    /// The camera's centre in world coordinates.
    pub position: [f32; 3],
    pub shape: Shape,
    /// Keep only what is inside (else: hide what is inside).
    pub keep: bool,
}

impl Selection {
    /// Whether the camera sees `point` inside the shape, its edges included (in f64).
    #[must_use]
    pub fn contains(&self, point: [f32; 3]) -> bool {
        let v: [f64; 3] =
            std::array::from_fn(|a| f64::from(point[a]) - f64::from(self.position[a]));
        // In camera coordinates: v turned by the rotation.
        let columns = rotation_columns(self.camera_from_world.map(f64::from));
        let c: [f64; 3] = std::array::from_fn(|a| (0..3).map(|k| columns[k][a] * v[k]).sum());
        if c[2] <= 0.0 {
            return false;
        }
        match &self.shape {
            Shape::Rect(rect) => {
                let [x0, y0, x1, y1] = rect.map(f64::from);
                x0 * c[2] <= c[0] && c[0] <= x1 * c[2] && y0 * c[2] <= c[1] && c[1] <= y1 * c[2]
            }
            Shape::Stroke { radius, points } => {
                let at = [c[0] / c[2], c[1] / c[2]];
                let r2 = f64::from(*radius).powi(2);
                let first = points.first().map(|&p| [p, p]);
                first.into_iter().chain(points.windows(2).map(|w| [w[0], w[1]])).any(|[a, b]| {
                    segment_distance_squared(at, a.map(f64::from), b.map(f64::from)) <= r2
                })
            }
        }
    }

    /// Whether a splat with its centre at `point` passes this selection.
    #[must_use]
    pub fn passes(&self, point: [f32; 3]) -> bool {
        self.contains(point) == self.keep
    }
}

/// The squared distance from `p` to the segment from `a` to `b` (a point when they meet).
#[must_use]
pub fn segment_distance_squared(p: [f64; 2], a: [f64; 2], b: [f64; 2]) -> f64 {
    let (ab, ap) = ([b[0] - a[0], b[1] - a[1]], [p[0] - a[0], p[1] - a[1]]);
    let length2 = ab[0] * ab[0] + ab[1] * ab[1];
    let t = if length2 > 0.0 {
        ((ap[0] * ab[0] + ap[1] * ab[1]) / length2).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let d = [ap[0] - t * ab[0], ap[1] - t * ab[1]];
    d[0] * d[0] + d[1] * d[1]
}

/// What a scene keeps; an empty filter keeps everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// Keep only splats whose centre is inside.
    pub crop_box: Option<CropBox>,
    /// Keep only splats whose centre is inside.
    pub crop_sphere: Option<CropSphere>,
    /// Keep only splats at least this opaque (after the sigmoid; 0..=1).
    pub min_opacity: Option<f32>,
    /// Keep only splats whose largest axis (its standard deviation, in world units) is at
    /// most this: the huge faint splats a run leaves behind the scene.
    pub max_size: Option<f32>,
    /// Shapes drawn over views, each hiding what it holds or keeping only that, in the order
    /// drawn; at most [`MAX_SELECTIONS`] (`add_selection`).
    pub selections: Vec<Selection>,
    /// Keep only splats whose centre is in the dense scene's cells (likely floaters hidden).
    pub scene_cells: Option<SceneCells>,
}

/// How many splats each rule of a [`Filter`] removed (a splat outside the box is counted there
/// only, whatever its opacity).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filtered {
    pub kept: usize,
    pub outside_box: usize,
    pub outside_sphere: usize,
    pub below_opacity: usize,
    pub above_size: usize,
    pub selected_out: usize,
    pub floaters: usize,
}

impl Filter {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Adds `selection` after the others; `false` when the filter holds [`MAX_SELECTIONS`]
    /// already, or the selection is a stroke of no points or more than [`MAX_STROKE_POINTS`].
    pub fn add_selection(&mut self, selection: Selection) -> bool {
        let fits = match &selection.shape {
            Shape::Rect(_) => true,
            Shape::Stroke { points, .. } => (1..=MAX_STROKE_POINTS).contains(&points.len()),
        };
        let added = fits && self.selections.len() < MAX_SELECTIONS;
        if added {
            self.selections.push(selection);
        }
        added
    }

    /// Removes from `splats` every splat the filter does not keep; the kept ones stay in
    /// their order with every value as it was.
    pub fn apply(&self, splats: &mut Splats) -> Filtered {
        let mut counts = Filtered::default();
        let keep: Vec<bool> = (0..splats.len())
            .map(|i| {
                if self.crop_box.is_some_and(|b| !b.contains(splats.means[i])) {
                    counts.outside_box += 1;
                    false
                } else if self.crop_sphere.is_some_and(|b| !b.contains(splats.means[i])) {
                    counts.outside_sphere += 1;
                    false
                } else if self
                    .min_opacity
                    .is_some_and(|m| opacity(splats.opacity_logits[i]) < f64::from(m))
                {
                    counts.below_opacity += 1;
                    false
                } else if self.max_size.is_some_and(|m| size(splats.log_scales[i]) > f64::from(m)) {
                    counts.above_size += 1;
                    false
                } else if self.selections.iter().any(|s| !s.passes(splats.means[i])) {
                    counts.selected_out += 1;
                    false
                } else if self.scene_cells.as_ref().is_some_and(|c| !c.contains(splats.means[i])) {
                    counts.floaters += 1;
                    false
                } else {
                    counts.kept += 1;
                    true
                }
            })
            .collect();
        retain(splats, &keep);
        counts
    }
}

/// Cells along the centres' robust extent (their 2nd to 98th percentile on the longest axis)
/// that [`scene_cells`] groups splats by, at most: fewer where there are fewer than 64³
/// splats (the cube root of the count), so a sparse scene's cells still touch.
const DENSE_CELLS: f64 = 64.0;
/// The share of the splats a group of touching cells needs to count as scene, not floaters.
const DENSE_SHARE: f64 = 0.02;
/// Cells a [`SceneCells`] grid holds at most (2 MiB of bits).
pub const MAX_SCENE_CELLS: u64 = 1 << 24;

/// A grid of cubic cells and which of them hold the scene ([`scene_cells`]): a splat is
/// inside when its centre's cell is one of them. The cell of a point `p` is
/// `floor((p − origin) · scale)` on each axis, in f32 (a subtraction and a multiplication,
/// both correctly rounded in WGSL as here, so the GPU's cull picks the same cell).
#[derive(Clone, Debug, PartialEq)]
pub struct SceneCells {
    /// The corner of cell (0, 0, 0).
    pub origin: [f32; 3],
    /// Cells per world unit.
    pub scale: f32,
    pub dims: [u32; 3],
    /// One bit a cell, x fastest, then y, then z: cell `i` is bit `i % 32` of word `i / 32`.
    /// Shared: the window copies its crop every frame.
    pub bits: Arc<[u32]>,
}

impl SceneCells {
    /// Whether `point`'s cell holds scene.
    #[must_use]
    pub fn contains(&self, point: [f32; 3]) -> bool {
        let mut index = 0u64;
        for axis in (0..3).rev() {
            let c = ((point[axis] - self.origin[axis]) * self.scale).floor();
            // NaN and cells off the grid are outside.
            if !(c >= 0.0 && c < self.dims[axis] as f32) {
                return false;
            }
            index = index * u64::from(self.dims[axis]) + c as u64;
        }
        let word = self.bits.get((index / 32) as usize).copied().unwrap_or(0);
        word >> (index % 32) & 1 == 1
    }

    /// Cells holding scene.
    #[must_use]
    pub fn count(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// The cells of the dense scene, leaving out "likely floaters": small clusters of splats
/// apart from it, wherever they are (between parts of the scene too). The centres are binned
/// in cubic cells (1/64 of their robust extent, the 2nd to 98th percentile, so a few far
/// floaters do not coarsen the grid; coarser for fewer than 64³ splats); cells that touch (26
/// neighbours) form groups; the groups holding at least 2% of the splats (and the largest,
/// always) are the scene. The grid keeps their cells and every cell touching them, so that a
/// splat training adds at the scene's edge stays, and so that f32 rounding (one cell at most)
/// never hides a scene splat. `None` for fewer than two splats with finite centres, or a
/// scene whose cells would span more than 2^24 cells.
#[must_use]
pub fn scene_cells(splats: &Splats) -> Option<SceneCells> {
    use std::collections::{HashMap, HashSet};
    let centres: Vec<[f64; 3]> = splats
        .means
        .iter()
        .filter(|m| m.iter().all(|v| v.is_finite()))
        .map(|m| m.map(f64::from))
        .collect();
    if centres.len() < 2 {
        return None;
    }
    let percentile = |axis: usize, q: f64| {
        let mut values: Vec<f64> = centres.iter().map(|c| c[axis]).collect();
        let at = ((values.len() - 1) as f64 * q).round() as usize;
        *values.select_nth_unstable_by(at, f64::total_cmp).1
    };
    let extent = (0..3).map(|a| percentile(a, 0.98) - percentile(a, 0.02)).fold(0.0, f64::max);
    let cells = DENSE_CELLS.min((centres.len() as f64).cbrt());
    let cell_size = if extent > 0.0 { extent / cells } else { 1.0 };
    // Cells 2^40 or more from the origin (a centre a trillion times the scene's size away)
    // join no group: floaters, and the grid's arithmetic below cannot overflow.
    let cell_of = |c: &[f64; 3]| {
        let cell = c.map(|v| (v / cell_size).floor());
        cell.iter().all(|v| v.abs() < 2f64.powi(40)).then(|| cell.map(|v| v as i64))
    };
    // Each occupied cell's number and splat count.
    let mut numbers: HashMap<[i64; 3], usize> = HashMap::new();
    let mut counts: Vec<usize> = Vec::new();
    for cell in centres.iter().filter_map(cell_of) {
        let next = numbers.len();
        let number = *numbers.entry(cell).or_insert(next);
        if number == counts.len() {
            counts.push(0);
        }
        counts[number] += 1;
    }
    if counts.is_empty() {
        return None;
    }
    let neighbours = |cell: [i64; 3]| {
        (0..27).map(move |k| [cell[0] + k % 3 - 1, cell[1] + k / 3 % 3 - 1, cell[2] + k / 9 - 1])
    };
    // Union-find over touching cells.
    let mut parent: Vec<usize> = (0..counts.len()).collect();
    for (&cell, &number) in &numbers {
        for neighbour in neighbours(cell) {
            if let Some(&other) = numbers.get(&neighbour) {
                let (a, b) = (root(&mut parent, number), root(&mut parent, other));
                // The smaller number roots: the same groups in any iteration order.
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut group_counts = vec![0usize; counts.len()];
    for (number, &count) in counts.iter().enumerate() {
        group_counts[root(&mut parent, number)] += count;
    }
    let largest = group_counts.iter().copied().max().unwrap_or(0);
    let needed = (DENSE_SHARE * centres.len() as f64).ceil() as usize;
    // The scene's cells and those touching them.
    let mut kept: HashSet<[i64; 3]> = HashSet::new();
    for (&cell, &number) in &numbers {
        if group_counts[root(&mut parent, number)] >= needed.min(largest) {
            kept.extend(neighbours(cell));
        }
    }
    let lo: [i64; 3] = std::array::from_fn(|a| kept.iter().map(|c| c[a]).min().unwrap_or(0));
    let hi: [i64; 3] = std::array::from_fn(|a| kept.iter().map(|c| c[a]).max().unwrap_or(0));
    let dims: [u64; 3] = std::array::from_fn(|a| (hi[a] - lo[a] + 1) as u64);
    if dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).is_none_or(|n| n > MAX_SCENE_CELLS) {
        return None;
    }
    let mut bits = vec![0u32; dims.iter().product::<u64>().div_ceil(32) as usize];
    for cell in &kept {
        let [x, y, z] = std::array::from_fn(|a| (cell[a] - lo[a]) as u64);
        let index = x + dims[0] * (y + dims[1] * z);
        bits[(index / 32) as usize] |= 1 << (index % 32);
    }
    Some(SceneCells {
        origin: lo.map(|l| (l as f64 * cell_size) as f32),
        scale: (1.0 / cell_size) as f32,
        dims: dims.map(|d| d as u32),
        bits: bits.into(),
    })
}

/// The root of `i`'s tree in a union-find forest, halving the path on the way.
fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// An opacity logit after the sigmoid, in f64 so that a logit and the floor compare the same
/// way on every machine.
fn opacity(logit: f32) -> f64 {
    1.0 / (1.0 + (-f64::from(logit)).exp())
}

/// A splat's largest axis in world units (its log-scales' largest, exponentiated), in f64.
fn size(log_scales: [f32; 3]) -> f64 {
    f64::from(log_scales[0].max(log_scales[1]).max(log_scales[2])).exp()
}

/// Keeps the splats whose `keep` is true, in order.
fn retain(splats: &mut Splats, keep: &[bool]) {
    fn rows<T>(values: &mut Vec<T>, keep: &[bool]) {
        let mut row = 0;
        values.retain(|_| {
            row += 1;
            keep[row - 1]
        });
    }
    rows(&mut splats.means, keep);
    rows(&mut splats.log_scales, keep);
    rows(&mut splats.rotations, keep);
    rows(&mut splats.opacity_logits, keep);
    rows(&mut splats.sh_dc, keep);
    let rest = splats.rest_per_splat();
    if rest > 0 {
        let mut row = 0;
        splats.sh_rest.retain(|_| {
            row += 1;
            keep[(row - 1) / rest]
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scene() -> Splats {
        let mut s = Splats::with_capacity(4, 1);
        for i in 0..4 {
            let x = i as f32;
            s.means.push([x, 0.0, 0.0]);
            s.log_scales.push([x; 3]);
            s.rotations.push([1.0, x, 0.0, 0.0]);
            // Opacities 0.1, 0.3, 0.5, 0.7.
            let o = 0.1 + 0.2 * x;
            s.opacity_logits.push((o / (1.0 - o)).ln());
            s.sh_dc.push([x; 3]);
            s.sh_rest.extend((0..9).map(|k| 10.0 * x + k as f32));
        }
        s
    }

    #[test]
    fn a_crop_box_parses_from_six_numbers_and_refuses_anything_else() {
        let b: CropBox = "-1, -2,-3,1,2,3".parse().unwrap();
        assert_eq!(b, CropBox::aligned([-1.0, -2.0, -3.0], [1.0, 2.0, 3.0]));
        for bad in ["", "1,2,3", "1,2,3,4,5,6,7", "a,0,0,1,1,1", "0,0,0,1,1,inf", "0,0,0,1,NaN,1"] {
            let message = bad.parse::<CropBox>().unwrap_err();
            assert!(message.contains("six numbers"), "{bad}: {message}");
        }
        let message = "0,2,0,1,1,1".parse::<CropBox>().unwrap_err();
        assert_eq!(message, "the crop box's ymin (2) is above its ymax (1)");
        // A flat box is a box.
        assert!("0,0,0,0,1,1".parse::<CropBox>().is_ok());
    }

    #[test]
    fn the_filter_keeps_splats_inside_the_box_and_opaque_enough_in_order() {
        let mut s = scene();
        let filter = Filter {
            crop_box: Some(CropBox::aligned([0.5, -1.0, -1.0], [3.0, 1.0, 1.0])),
            min_opacity: Some(0.4),
            ..Filter::default()
        };
        let counts = filter.apply(&mut s);
        assert_eq!(
            counts,
            Filtered { kept: 2, outside_box: 1, below_opacity: 1, ..Filtered::default() }
        );
        assert_eq!(s.means, [[2.0, 0.0, 0.0], [3.0, 0.0, 0.0]]);
        assert_eq!(s.log_scales, [[2.0; 3], [3.0; 3]]);
        assert_eq!(s.rotations, [[1.0, 2.0, 0.0, 0.0], [1.0, 3.0, 0.0, 0.0]]);
        assert_eq!(s.sh_dc, [[2.0; 3], [3.0; 3]]);
        let rest: Vec<f32> =
            [20.0, 30.0].iter().flat_map(|b| (0..9).map(move |k| b + k as f32)).collect();
        assert_eq!(s.sh_rest, rest);
        assert_eq!(s.opacity_logits.len(), 2);
        s.validate().unwrap();
    }

    #[test]
    fn bounds_are_inside_and_an_empty_filter_keeps_everything() {
        let mut s = scene();
        let on_faces = Filter {
            crop_box: Some(CropBox::aligned([0.0, 0.0, 0.0], [3.0, 0.0, 0.0])),
            ..Filter::default()
        };
        assert_eq!(on_faces.apply(&mut s).kept, 4);
        assert!(Filter::default().is_empty());
        assert_eq!(Filter::default().apply(&mut s), Filtered { kept: 4, ..Filtered::default() });
        assert_eq!(s, scene());
    }

    #[test]
    fn a_turned_box_keeps_what_lies_inside_it_turned() {
        // 4 × 2 × 2 around the origin, turned a quarter about z: long along y now.
        let mut b = CropBox {
            turn: [0.0, 0.0, 90.0],
            ..CropBox::aligned([-2.0, -1.0, -1.0], [2.0, 1.0, 1.0])
        };
        assert!(b.contains([0.0, 1.9, 0.0]));
        assert!(!b.contains([1.5, 0.0, 0.0]));
        let axes = b.axes();
        let near = |a: [f64; 3], e: [f64; 3]| (0..3).all(|i| (a[i] - e[i]).abs() < 1e-12);
        assert!(near(axes[0], [0.0, 1.0, 0.0]), "{axes:?}");
        assert!(near(axes[1], [-1.0, 0.0, 0.0]), "{axes:?}");
        // About x first, then y, then z: x's quarter turn takes y to z, then z's leaves z.
        b.turn = [90.0, 0.0, 90.0];
        assert!(near(b.axes()[1], [0.0, 0.0, 1.0]), "{:?}", b.axes());
        // Turned about its own centre, wherever that is; 45° puts (1.9, 1.9) near a corner
        // out of a 2-wide box but (1.3, 1.3) inside.
        let moved = CropBox {
            turn: [0.0, 0.0, 45.0],
            ..CropBox::aligned([8.0, -1.0, -1.0], [12.0, 1.0, 1.0])
        };
        assert!(moved.contains([11.3, 1.3, 0.0]));
        assert!(!moved.contains([11.9, 1.9, 0.0]));
        // The corners are the turned box's: each is on three faces.
        for corner in moved.corners() {
            let d: Vec<f64> = (0..3)
                .map(|a| {
                    let axis = moved.axes()[a];
                    (0..3).map(|w| axis[w] * (corner[w] - moved.center()[w])).sum::<f64>()
                })
                .collect();
            assert!((d[0].abs() - 2.0).abs() < 1e-9 && (d[1].abs() - 1.0).abs() < 1e-9, "{d:?}");
        }
        assert_eq!(
            parse_turn(" 0, 30,-5").unwrap().map(f32::to_bits),
            [0.0, 30.0, -5.0f32].map(f32::to_bits)
        );
        assert!(parse_turn("0,30").unwrap_err().contains("three angles"));
        assert_eq!(moved.to_string(), "(8, -1, -1) to (12, 1, 1) turned 0°, 0°, 45°");
    }

    #[test]
    fn a_sphere_and_a_size_limit_keep_what_they_say() {
        // Centres at x = 0..3, sizes e^0..e^3.
        let mut s = scene();
        let filter = Filter {
            crop_sphere: Some(CropSphere { center: [1.0, 0.0, 0.0], radius: 1.5 }),
            max_size: Some(3.0),
            ..Filter::default()
        };
        let counts = filter.apply(&mut s);
        assert_eq!(
            counts,
            Filtered { kept: 2, outside_sphere: 1, above_size: 1, ..Filtered::default() }
        );
        assert_eq!(s.means, [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]);
        // On the surface is inside.
        assert!(CropSphere { center: [0.0; 3], radius: 3.0 }.contains([3.0, 0.0, 0.0]));
        let parsed: CropSphere = " 1, 2,3, 0.5".parse().unwrap();
        assert_eq!(parsed, CropSphere { center: [1.0, 2.0, 3.0], radius: 0.5 });
        for bad in ["", "1,2,3", "1,2,3,4,5", "1,2,x,1", "0,0,0,inf"] {
            assert!(bad.parse::<CropSphere>().unwrap_err().contains("four numbers"), "{bad}");
        }
        assert_eq!(
            "0,0,0,0".parse::<CropSphere>().unwrap_err(),
            "the crop sphere's radius (0) is not above 0"
        );
    }

    #[test]
    fn a_stroke_holds_what_the_camera_sees_within_its_radius_of_the_path() {
        // The identity camera at the origin: a point (x, y, z) is at (x / z, y / z).
        let stroke = |points: Vec<[f32; 2]>| Selection {
            camera_from_world: [0.0, 0.0, 0.0, 1.0],
            position: [0.0; 3],
            shape: Shape::Stroke { radius: 0.1, points },
            keep: false,
        };
        let line = stroke(vec![[0.0, 0.0], [1.0, 0.0]]);
        assert!(line.contains([0.5, 0.09, 1.0]), "beside the path");
        assert!(line.contains([1.0, 0.18, 2.0]), "the same place twice as deep");
        assert!(line.contains([1.09, 0.0, 1.0]), "the round end");
        assert!(!line.contains([1.08, 0.08, 1.0]), "past the round end's corner");
        assert!(!line.contains([0.5, 0.11, 1.0]), "past the radius");
        assert!(!line.contains([0.5, 0.0, -1.0]), "behind the camera");
        assert!(!line.passes([0.5, 0.0, 1.0]) && line.passes([0.5, 0.5, 1.0]), "hides");
        let dot = stroke(vec![[0.5, 0.5]]);
        assert!(dot.contains([0.55, 0.55, 1.0]) && !dot.contains([0.58, 0.58, 1.0]));
        assert_eq!(
            line.shape.bounds().map(f32::to_bits),
            [-0.1_f32, -0.1, 1.1, 0.1].map(f32::to_bits)
        );
    }

    #[test]
    fn a_filter_refuses_selections_past_its_limits() {
        let rect = Selection {
            camera_from_world: [0.0, 0.0, 0.0, 1.0],
            position: [0.0; 3],
            shape: Shape::Rect([0.0, 0.0, 1.0, 1.0]),
            keep: true,
        };
        let stroke = |n: usize| Selection {
            shape: Shape::Stroke { radius: 0.1, points: vec![[0.0, 0.0]; n] },
            ..rect.clone()
        };
        let mut filter = Filter::default();
        assert!(
            !filter.add_selection(stroke(0))
                && !filter.add_selection(stroke(MAX_STROKE_POINTS + 1))
        );
        assert!(filter.add_selection(stroke(MAX_STROKE_POINTS)));
        while filter.selections.len() < MAX_SELECTIONS {
            assert!(filter.add_selection(rect.clone()));
        }
        assert!(!filter.add_selection(rect));
        assert_eq!(filter.selections.len(), MAX_SELECTIONS);
    }

    /// Two dense cubes of splats and four small clusters apart from them, one between the
    /// cubes: the clusters are floaters; a cluster touching a cube is part of the scene.
    #[test]
    fn the_scene_cells_leave_out_small_clusters_wherever_they_are() {
        fn push(s: &mut Splats, m: [f32; 3]) {
            s.means.push(m);
            s.log_scales.push([0.0; 3]);
            s.rotations.push([1.0, 0.0, 0.0, 0.0]);
            s.opacity_logits.push(0.0);
            s.sh_dc.push([0.0; 3]);
        }
        // Two unit cubes of scene, 3 apart on x, with small clusters far away and one between
        // them (inside the box around the scene).
        let mut s = Splats::with_capacity(0, 0);
        let mut rng = crate::random::SplitMix64::new(7);
        for offset in [0.0, 3.0] {
            for _ in 0..5000 {
                push(&mut s, [offset + rng.next_f32(), rng.next_f32(), rng.next_f32()]);
            }
        }
        let floaters = [[8.0, 0.0, 0.0], [0.0, -4.0, 3.0], [-6.0, 6.0, -6.0], [2.0, 0.5, 0.5]];
        for centre in floaters {
            for _ in 0..20 {
                push(&mut s, std::array::from_fn(|a| centre[a] + 0.01 * rng.next_f32()));
            }
        }
        let cells = scene_cells(&s).expect("the scene's cells");
        let mut kept = s.clone();
        let counts =
            Filter { scene_cells: Some(cells.clone()), ..Filter::default() }.apply(&mut kept);
        assert_eq!((counts.kept, counts.floaters), (10_000, 80), "{counts:?}");
        // Splats a run adds at the scene's surface stay; a new cluster far away does not.
        assert!(cells.contains([1.01, 0.5, 0.5]) && cells.contains([3.5, 1.01, -0.01]));
        assert!(!cells.contains([1.5, 0.5, 0.5]) && !cells.contains([f32::NAN, 0.5, 0.5]));
        // A cluster just past a cube's face touches it: scene, not floaters.
        for _ in 0..20 {
            push(&mut s, [1.0 + 0.01 * rng.next_f32(), 0.5, 0.5]);
        }
        let mut kept = s.clone();
        let counts = Filter { scene_cells: scene_cells(&s), ..Filter::default() }.apply(&mut kept);
        assert_eq!((counts.kept, counts.floaters), (10_020, 80), "{counts:?}");
        assert_eq!(scene_cells(&Splats::with_capacity(0, 0)), None);
        // Centres as far as a float goes: floaters, no overflow.
        for far in [f32::MAX, -f32::MAX, 1e30] {
            push(&mut s, [far, 0.5, far]);
        }
        let counts = Filter { scene_cells: scene_cells(&s), ..Filter::default() }.apply(&mut s);
        assert_eq!((counts.kept, counts.floaters), (10_020, 83), "{counts:?}");
        let mut far = Splats::with_capacity(0, 0);
        for _ in 0..10 {
            push(&mut far, [f32::MAX, f32::MAX, f32::MAX]);
        }
        assert_eq!(scene_cells(&far), None);
    }
}
