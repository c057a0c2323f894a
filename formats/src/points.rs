use crate::ParseError;

/// Colour given to points of a cloud that has none: neutral grey.
pub const NEUTRAL_GREY: [f32; 3] = [0.5, 0.5, 0.5];

/// A coloured point cloud used to initialise splats (an `init.ply`, COLMAP's `points3D`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointCloud {
    /// World-space positions. [N, 3]
    pub positions: Vec<[f32; 3]>,
    /// Linear 0..1 colours; [`NEUTRAL_GREY`] where the file had none. [N, 3]
    pub colors: Vec<[f32; 3]>,
    /// Whether the file carried colours.
    pub has_color: bool,
}

impl PointCloud {
    #[must_use]
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Checks that both arrays have the same length and every position is finite.
    pub fn validate(&self) -> Result<(), ParseError> {
        if self.colors.len() != self.positions.len() {
            return Err(ParseError::invalid("point positions and colours have different lengths"));
        }
        for (i, p) in self.positions.iter().enumerate() {
            if let Some(&value) = p.iter().find(|v| !v.is_finite()) {
                return Err(ParseError::NonFinite { what: format!("point {i}: position"), value });
            }
        }
        for (i, c) in self.colors.iter().enumerate() {
            if let Some(&value) = c.iter().find(|v| !v.is_finite()) {
                return Err(ParseError::NonFinite { what: format!("point {i}: colour"), value });
            }
        }
        Ok(())
    }
}
