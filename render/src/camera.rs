use glam::{Mat4, Vec3};

/// A pinhole camera in the OpenCV convention (x right, y down, z forward), with the size of
/// the image it takes. Pixel (i, j) covers [i, i+1) × [j, j+1); `cx, cy` are in those units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Camera {
    pub width: u32,
    pub height: u32,
    pub fx: f32,
    pub fy: f32,
    pub cx: f32,
    pub cy: f32,
    /// Camera-to-world transform (rotation and translation only).
    pub world_from_camera: Mat4,
}

impl Camera {
    /// Camera centre in world space.
    #[must_use]
    pub fn position(&self) -> Vec3 {
        self.world_from_camera.w_axis.truncate()
    }

    /// World-to-camera transform.
    #[must_use]
    pub fn camera_from_world(&self) -> Mat4 {
        self.world_from_camera.inverse()
    }

    /// Number of 16×16 tiles across and down.
    #[must_use]
    pub fn tiles(&self) -> (u32, u32) {
        (self.width.div_ceil(crate::TILE_SIZE), self.height.div_ceil(crate::TILE_SIZE))
    }
}
