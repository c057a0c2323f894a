//! Initial splats from a point cloud, with the 3DGS defaults: one splat a point, isotropic
//! scale from the mean squared distance to its 3 nearest neighbours, identity rotation,
//! opacity 0.1, SH DC from the point's colour and higher SH coefficients zero.

use rayon::prelude::*;
use splat_formats::{PointCloud, SH_C0, Splats, sh_coeffs_for_degree};
use splat_render::{GpuContext, GpuError, GpuSplats, Owner, ShPrecision};

/// Starting opacity of every splat (3DGS).
pub const INITIAL_OPACITY: f32 = 0.1;
/// Neighbours whose mean squared distance sets the scale (3DGS's distCUDA2).
const NEIGHBOURS: usize = 3;
/// Smallest squared distance, so duplicate points still get a finite log-scale (3DGS).
const MIN_DIST2: f32 = 1e-7;

/// Points converted and uploaded per chunk by [`upload_from_points`].
pub const UPLOAD_CHUNK: usize = 65_536;

/// Splats of SH degree `sh_degree` at the points of `cloud`.
#[must_use]
pub fn splats_from_points(cloud: &PointCloud, sh_degree: u32) -> Splats {
    let dist2 = mean_neighbour_dist2(&cloud.positions);
    rows_from_points(cloud, &dist2, 0..cloud.len(), sh_degree)
}

/// The splats of points `range` (their neighbour distances precomputed).
fn rows_from_points(
    cloud: &PointCloud,
    dist2: &[f32],
    range: std::ops::Range<usize>,
    sh_degree: u32,
) -> Splats {
    let n = range.len();
    let rest = 3 * (sh_coeffs_for_degree(sh_degree) - 1);
    let logit = (INITIAL_OPACITY / (1.0 - INITIAL_OPACITY)).ln();
    Splats {
        means: cloud.positions[range.clone()].to_vec(),
        log_scales: dist2[range.clone()].iter().map(|d| [0.5 * d.max(MIN_DIST2).ln(); 3]).collect(),
        rotations: vec![[1.0, 0.0, 0.0, 0.0]; n],
        opacity_logits: vec![logit; n],
        sh_dc: cloud.colors[range].iter().map(|c| c.map(|v| (v - 0.5) / SH_C0)).collect(),
        sh_rest: vec![0.0; n * rest],
        sh_degree,
    }
}

/// Uploads the splats of `cloud` straight into GPU buffers, [`UPLOAD_CHUNK`] points at a
/// time: the host holds the cloud, 4 bytes of neighbour distance a point and one chunk of
/// splats, never the whole scene as splats (236 bytes a point at SH 3) next to the cloud.
pub fn upload_from_points(
    ctx: &GpuContext,
    cloud: &PointCloud,
    sh_degree: u32,
    precision: ShPrecision,
    owner: Owner,
) -> Result<GpuSplats, GpuError> {
    let count = u32::try_from(cloud.len()).map_err(|_| GpuError::TooMany {
        label: "init points".into(),
        count: cloud.len() as u64,
    })?;
    let dist2 = mean_neighbour_dist2(&cloud.positions);
    let splats = GpuSplats::allocate(ctx, count, sh_degree, precision, owner)?;
    for start in (0..cloud.len()).step_by(UPLOAD_CHUNK) {
        let end = (start + UPLOAD_CHUNK).min(cloud.len());
        splats.write_rows(
            ctx,
            start as u32,
            &rows_from_points(cloud, &dist2, start..end, sh_degree),
        )?;
        // Lands each chunk now, so staging memory holds one chunk, not the scene.
        ctx.queue.submit([]);
        ctx.wait_idle()?;
    }
    Ok(splats)
}

/// For every point, the mean squared distance to its `NEIGHBOURS` nearest other points
/// (fewer when the cloud is smaller; `MIN_DIST2` for a lone point). A k-d tree, queried in
/// parallel: O(n log n).
#[must_use]
pub fn mean_neighbour_dist2(points: &[[f32; 3]]) -> Vec<f32> {
    let tree = KdTree::new(points);
    (0..points.len())
        .into_par_iter()
        .map(|i| {
            let best = tree.nearest(points, i, NEIGHBOURS);
            if best.is_empty() { MIN_DIST2 } else { best.iter().sum::<f32>() / best.len() as f32 }
        })
        .collect()
}

/// A k-d tree over point indices: `order` is permuted so that each node's median sits in the
/// middle of its range, split on axis depth % 3.
struct KdTree {
    order: Vec<u32>,
}

impl KdTree {
    fn new(points: &[[f32; 3]]) -> Self {
        let mut order: Vec<u32> = (0..points.len() as u32).collect();
        build(points, &mut order, 0);
        Self { order }
    }

    /// Squared distances to the `k` nearest points other than `query` itself, ascending.
    fn nearest(&self, points: &[[f32; 3]], query: usize, k: usize) -> Vec<f32> {
        let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
        search(points, &self.order, 0, query, k, &mut best);
        best.into_iter().map(|(d, _)| d).collect()
    }
}

fn build(points: &[[f32; 3]], order: &mut [u32], depth: usize) {
    if order.len() <= 1 {
        return;
    }
    let axis = depth % 3;
    let mid = order.len() / 2;
    order.select_nth_unstable_by(mid, |a, b| {
        points[*a as usize][axis].total_cmp(&points[*b as usize][axis])
    });
    let (left, right) = order.split_at_mut(mid);
    build(points, left, depth + 1);
    build(points, &mut right[1..], depth + 1);
}

fn search(
    points: &[[f32; 3]],
    order: &[u32],
    depth: usize,
    query: usize,
    k: usize,
    best: &mut Vec<(f32, u32)>,
) {
    if order.is_empty() {
        return;
    }
    let mid = order.len() / 2;
    let node = order[mid] as usize;
    let q = points[query];
    let p = points[node];
    if node != query {
        let d2 = (0..3).map(|a| (p[a] - q[a]) * (p[a] - q[a])).sum::<f32>();
        if best.len() < k || d2 < best[best.len() - 1].0 {
            let at = best.partition_point(|(d, _)| *d <= d2);
            best.insert(at, (d2, node as u32));
            best.truncate(k);
        }
    }
    let axis = depth % 3;
    let delta = q[axis] - p[axis];
    let (near, far) = if delta < 0.0 {
        (&order[..mid], &order[mid + 1..])
    } else {
        (&order[mid + 1..], &order[..mid])
    };
    search(points, near, depth + 1, query, k, best);
    if best.len() < k || delta * delta < best[best.len() - 1].0 {
        search(points, far, depth + 1, query, k, best);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_force(points: &[[f32; 3]]) -> Vec<f32> {
        points
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let mut d: Vec<f32> = points
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, p)| (0..3).map(|a| (p[a] - q[a]).powi(2)).sum())
                    .collect();
                d.sort_by(f32::total_cmp);
                d.truncate(NEIGHBOURS);
                if d.is_empty() { MIN_DIST2 } else { d.iter().sum::<f32>() / d.len() as f32 }
            })
            .collect()
    }

    #[test]
    fn kd_tree_matches_brute_force() {
        let mut state = 7_u64;
        let mut next = || {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        for n in [0, 1, 2, 3, 4, 50, 1000] {
            let mut points: Vec<[f32; 3]> =
                (0..n).map(|_| [next(), next() * 3.0, next() * 0.1]).collect();
            if n > 10 {
                points[5] = points[6]; // duplicates
            }
            let got = mean_neighbour_dist2(&points);
            let want = brute_force(&points);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-6 * w.max(1e-3), "{n}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn splats_follow_the_3dgs_defaults() {
        let cloud = PointCloud {
            positions: vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]],
            colors: vec![[0.5, 1.0, 0.0]; 4],
            has_color: true,
        };
        let s = splats_from_points(&cloud, 2);
        assert_eq!(s.len(), 4);
        assert_eq!(s.sh_rest.len(), 4 * 24);
        // Point 0's neighbours are at 1, 2, 3: mean squared distance 14/3.
        assert!((s.log_scales[0][0] - 0.5 * (14.0_f32 / 3.0).ln()).abs() < 1e-6);
        let opacity = 1.0 / (1.0 + (-s.opacity_logits[0]).exp());
        assert!((opacity - 0.1).abs() < 1e-6);
        assert!((0.5 + SH_C0 * s.sh_dc[0][1] - 1.0).abs() < 1e-6);
        s.validate().unwrap();
    }
}
