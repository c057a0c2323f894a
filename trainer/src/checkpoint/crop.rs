//! The window's crop in a checkpoint's metadata ([`CropDoc`]): a [`Filter`] as JSON, each
//! rule absent where the crop does not have it, every float exact.

use serde::{Deserialize, Serialize};
use splat_formats::filter::{
    CropBox, CropSphere, Filter, MAX_SCENE_CELLS, MAX_SELECTIONS, MAX_STROKE_POINTS, SceneCells,
    Selection, Shape,
};

use crate::exact::F32;

/// [`Checkpoint::crop`]; each rule absent where the crop does not have it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CropDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crop_box: Option<[[F32; 3]; 2]>,
    /// The box's turn in degrees (about x, then y, then z); absent when it is not turned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crop_box_turn: Option<[F32; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crop_sphere: Option<([F32; 3], F32)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_opacity: Option<F32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_size: Option<F32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    selections: Vec<SelectionDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scene_cells: Option<SceneCellsDoc>,
}

/// [`SceneCells`]: its bits as words, x fastest (as many as its cells need).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SceneCellsDoc {
    origin: [F32; 3],
    scale: F32,
    dims: [u32; 3],
    bits: Vec<u32>,
}

/// One of [`Filter::selections`]: a rectangle or a stroke, exactly one of them.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectionDoc {
    camera_from_world: [F32; 4],
    position: [F32; 3],
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rect: Option<[F32; 4]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stroke: Option<StrokeDoc>,
    keep: bool,
}

/// [`Shape::Stroke`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StrokeDoc {
    radius: F32,
    points: Vec<[F32; 2]>,
}

impl CropDoc {
    /// What makes this crop one no [`Filter`] holds, in words (`None`: nothing).
    pub(super) fn problem(&self) -> Option<String> {
        let finite = |values: &[F32]| values.iter().all(|v| v.0.is_finite());
        if let Some(cells) = &self.scene_cells {
            let [x, y, z] = cells.dims.map(u64::from);
            let count = x.saturating_mul(y).saturating_mul(z);
            if count > MAX_SCENE_CELLS {
                return Some(format!(
                    "its crop's scene cells ({x} × {y} × {z}) are more than {MAX_SCENE_CELLS}"
                ));
            }
            let needed = count.div_ceil(32);
            if cells.bits.len() as u64 != needed {
                return Some(format!(
                    "its crop's scene cells ({x} × {y} × {z}) come with {} words of bits, not \
                     {needed}",
                    cells.bits.len()
                ));
            }
            if !(finite(&cells.origin) && cells.scale.0.is_finite() && cells.scale.0 > 0.0) {
                return Some("its crop's scene cells have no finite place or size".to_owned());
            }
        }
        let count = self.selections.len();
        if count > MAX_SELECTIONS {
            return Some(format!("its crop holds {count} selections, more than {MAX_SELECTIONS}"));
        }
        self.selections.iter().enumerate().find_map(|(i, s)| {
            let number = i + 1;
            if !finite(&s.camera_from_world) || !finite(&s.position) {
                return Some(format!(
                    "its crop's selection {number} has a camera of no finite pose"
                ));
            }
            match (&s.rect, &s.stroke) {
                (Some(rect), None) if finite(rect) => None,
                (None, Some(stroke))
                    if (1..=MAX_STROKE_POINTS).contains(&stroke.points.len())
                        && stroke.points.iter().all(|p| finite(p))
                        && stroke.radius.0.is_finite()
                        && stroke.radius.0 >= 0.0 =>
                {
                    None
                }
                (None, Some(stroke)) => Some(format!(
                    "its crop's selection {number} is a stroke of {} points (1 to \
                     {MAX_STROKE_POINTS} are drawn), finite, of a radius of at least 0",
                    stroke.points.len()
                )),
                (Some(_), None) => {
                    Some(format!("its crop's selection {number} is a rectangle of no finite size"))
                }
                _ => Some(format!(
                    "its crop's selection {number} is not exactly one of a rectangle and a stroke"
                )),
            }
        })
    }
}

impl From<&Filter> for CropDoc {
    fn from(filter: &Filter) -> Self {
        let Filter { crop_box, crop_sphere, min_opacity, max_size, selections, scene_cells } =
            filter;
        Self {
            crop_box: crop_box.map(|b| [b.min.map(F32), b.max.map(F32)]),
            crop_box_turn: crop_box.filter(CropBox::is_turned).map(|b| b.turn.map(F32)),
            crop_sphere: crop_sphere.map(|s| (s.center.map(F32), F32(s.radius))),
            min_opacity: min_opacity.map(F32),
            max_size: max_size.map(F32),
            selections: selections
                .iter()
                .map(|s| {
                    let (rect, stroke) = match &s.shape {
                        Shape::Rect(rect) => (Some(rect.map(F32)), None),
                        Shape::Stroke { radius, points } => (
                            None,
                            Some(StrokeDoc {
                                radius: F32(*radius),
                                points: points.iter().map(|p| p.map(F32)).collect(),
                            }),
                        ),
                    };
                    SelectionDoc {
                        camera_from_world: s.camera_from_world.map(F32),
                        position: s.position.map(F32),
                        rect,
                        stroke,
                        keep: s.keep,
                    }
                })
                .collect(),
            scene_cells: scene_cells.as_ref().map(|c| SceneCellsDoc {
                origin: c.origin.map(F32),
                scale: F32(c.scale),
                dims: c.dims,
                bits: c.bits.to_vec(),
            }),
        }
    }
}

impl From<CropDoc> for Filter {
    fn from(doc: CropDoc) -> Self {
        let CropDoc {
            crop_box,
            crop_box_turn,
            crop_sphere,
            min_opacity,
            max_size,
            selections,
            scene_cells,
        } = doc;
        let mut filter = Self {
            crop_box: crop_box.map(|[min, max]| CropBox {
                min: min.map(|v| v.0),
                max: max.map(|v| v.0),
                turn: crop_box_turn.map_or([0.0; 3], |turn| turn.map(|v| v.0)),
            }),
            crop_sphere: crop_sphere.map(|(center, radius)| CropSphere {
                center: center.map(|v| v.0),
                radius: radius.0,
            }),
            min_opacity: min_opacity.map(|v| v.0),
            max_size: max_size.map(|v| v.0),
            selections: Vec::new(),
            scene_cells: scene_cells.map(|c| SceneCells {
                origin: c.origin.map(|v| v.0),
                scale: c.scale.0,
                dims: c.dims,
                bits: c.bits.into(),
            }),
        };
        // What a filter holds (`CropDoc::problem` refused the rest when the file was read).
        for s in selections {
            let shape = match (s.rect, s.stroke) {
                (Some(rect), _) => Shape::Rect(rect.map(|v| v.0)),
                (None, Some(stroke)) => Shape::Stroke {
                    radius: stroke.radius.0,
                    points: stroke.points.iter().map(|p| p.map(|v| v.0)).collect(),
                },
                (None, None) => continue,
            };
            filter.add_selection(Selection {
                camera_from_world: s.camera_from_world.map(|v| v.0),
                position: s.position.map(|v| v.0),
                shape,
                keep: s.keep,
            });
        }
        filter
    }
}
