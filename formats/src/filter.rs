//! Which splats a scene keeps: a crop box and an opacity floor, as `splatforge convert`
//! applies them (issue 33). The filter decides per splat from its stored values alone, so the
//! same filter keeps the same splats whatever the format it was read from.

use std::fmt;
use std::str::FromStr;

use crate::Splats;

/// An axis-aligned box in world coordinates; a splat is inside when its centre is (bounds
/// included).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CropBox {
    pub min: [f32; 3],
    pub max: [f32; 3],
}

impl CropBox {
    /// Whether `point` lies inside the box or on its faces.
    #[must_use]
    pub fn contains(&self, point: [f32; 3]) -> bool {
        (0..3).all(|axis| self.min[axis] <= point[axis] && point[axis] <= self.max[axis])
    }
}

/// `xmin,ymin,zmin,xmax,ymax,zmax`: six finite numbers, each min at most its max.
impl FromStr for CropBox {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let values: Vec<f32> = text
            .split(',')
            .map(|v| v.trim().parse::<f32>().ok().filter(|v| v.is_finite()))
            .collect::<Option<_>>()
            .filter(|v: &Vec<f32>| v.len() == 6)
            .ok_or_else(|| {
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
        Ok(Self { min, max })
    }
}

impl fmt::Display for CropBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c] = self.min;
        let [d, e, g] = self.max;
        write!(f, "({a}, {b}, {c}) to ({d}, {e}, {g})")
    }
}

/// What a scene keeps; an empty filter keeps everything.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Filter {
    /// Keep only splats whose centre is inside.
    pub crop_box: Option<CropBox>,
    /// Keep only splats at least this opaque (after the sigmoid; 0..=1).
    pub min_opacity: Option<f32>,
}

/// How many splats each rule of a [`Filter`] removed (a splat outside the box is counted there
/// only, whatever its opacity).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filtered {
    pub kept: usize,
    pub outside_box: usize,
    pub below_opacity: usize,
}

impl Filter {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.crop_box.is_none() && self.min_opacity.is_none()
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
                } else if self
                    .min_opacity
                    .is_some_and(|m| opacity(splats.opacity_logits[i]) < f64::from(m))
                {
                    counts.below_opacity += 1;
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

/// An opacity logit after the sigmoid, in f64 so that a logit and the floor compare the same
/// way on every machine.
fn opacity(logit: f32) -> f64 {
    1.0 / (1.0 + (-f64::from(logit)).exp())
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
        assert_eq!(b, CropBox { min: [-1.0, -2.0, -3.0], max: [1.0, 2.0, 3.0] });
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
            crop_box: Some(CropBox { min: [0.5, -1.0, -1.0], max: [3.0, 1.0, 1.0] }),
            min_opacity: Some(0.4),
        };
        let counts = filter.apply(&mut s);
        assert_eq!(counts, Filtered { kept: 2, outside_box: 1, below_opacity: 1 });
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
            crop_box: Some(CropBox { min: [0.0, 0.0, 0.0], max: [3.0, 0.0, 0.0] }),
            min_opacity: None,
        };
        assert_eq!(on_faces.apply(&mut s).kept, 4);
        assert!(Filter::default().is_empty());
        assert_eq!(Filter::default().apply(&mut s), Filtered { kept: 4, ..Filtered::default() });
        assert_eq!(s, scene());
    }
}
