//! Pinhole intrinsics as dataset files state them, and their scaling to the loaded image.

/// Pinhole intrinsics in pixels, for an image of `width` × `height` pixels. The principal
/// point uses COLMAP's convention: (0, 0) is the top-left corner of the top-left pixel, so
/// scaling the image by `s` scales every value by `s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PixelIntrinsics {
    pub width: f64,
    pub height: f64,
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
}

impl PixelIntrinsics {
    /// The same camera for an image of `width` × `height` pixels (per-axis ratio).
    pub fn scaled_to(self, width: u32, height: u32) -> Self {
        let scale_x = f64::from(width) / self.width;
        let scale_y = f64::from(height) / self.height;
        Self {
            width: f64::from(width),
            height: f64::from(height),
            fx: self.fx * scale_x,
            fy: self.fy * scale_y,
            cx: self.cx * scale_x,
            cy: self.cy * scale_y,
        }
    }

    /// Checks that every value is finite and the focal lengths and size are positive.
    pub fn validate(&self) -> Result<(), String> {
        let values = [self.width, self.height, self.fx, self.fy, self.cx, self.cy];
        if values.iter().any(|v| !v.is_finite()) {
            return Err(format!("intrinsics are not finite numbers: {self:?}"));
        }
        if self.width <= 0.0 || self.height <= 0.0 || self.fx <= 0.0 || self.fy <= 0.0 {
            return Err(format!("image size and focal lengths must be positive: {self:?}"));
        }
        Ok(())
    }
}

/// Intrinsics as a dataset file gives them, possibly partly: a `transforms.json` may give only
/// a field of view and leave the image size to the image file. Resolved against the decoded
/// image with [`IntrinsicsSpec::resolve`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct IntrinsicsSpec {
    /// Image size (width, height) in pixels the values refer to; `None` = the image file's.
    pub reference_size: Option<(f64, f64)>,
    /// Focal lengths in pixels.
    pub fx: Option<f64>,
    pub fy: Option<f64>,
    /// Full horizontal / vertical field of view in radians, used when a focal length is absent.
    pub fov_x_rad: Option<f64>,
    pub fov_y_rad: Option<f64>,
    /// Principal point in pixels; the image centre when absent.
    pub cx: Option<f64>,
    pub cy: Option<f64>,
}

impl IntrinsicsSpec {
    /// Complete intrinsics for the decoded image of `image_width` × `image_height` pixels: the
    /// values are completed for the reference size, then scaled to the image when its size
    /// differs.
    pub fn resolve(&self, image_width: u32, image_height: u32) -> Result<PixelIntrinsics, String> {
        let (width, height) =
            self.reference_size.unwrap_or((f64::from(image_width), f64::from(image_height)));
        let focal_from_fov = |size: f64, fov_rad: f64| 0.5 * size / (0.5 * fov_rad).tan();
        let fx_given = self.fx.or_else(|| self.fov_x_rad.map(|fov| focal_from_fov(width, fov)));
        let fy_given = self.fy.or_else(|| self.fov_y_rad.map(|fov| focal_from_fov(height, fov)));
        let (fx, fy) = match (fx_given, fy_given) {
            (Some(fx), Some(fy)) => (fx, fy),
            (Some(f), None) | (None, Some(f)) => (f, f),
            (None, None) => {
                return Err(
                    "no focal length (fl_x, fl_y, camera_angle_x or camera_angle_y)".to_owned()
                );
            }
        };
        let intrinsics = PixelIntrinsics {
            width,
            height,
            fx,
            fy,
            cx: self.cx.unwrap_or(0.5 * width),
            cy: self.cy.unwrap_or(0.5 * height),
        };
        intrinsics.validate()?;
        Ok(intrinsics.scaled_to(image_width, image_height))
    }
}

impl From<PixelIntrinsics> for IntrinsicsSpec {
    fn from(p: PixelIntrinsics) -> Self {
        Self {
            reference_size: Some((p.width, p.height)),
            fx: Some(p.fx),
            fy: Some(p.fy),
            fov_x_rad: None,
            fov_y_rad: None,
            cx: Some(p.cx),
            cy: Some(p.cy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_of_view_gives_focal_length_and_centre() {
        let spec =
            IntrinsicsSpec { fov_x_rad: Some(std::f64::consts::FRAC_PI_2), ..Default::default() };
        let k = spec.resolve(800, 600).expect("resolves");
        assert!((k.fx - 400.0).abs() < 1e-9 && (k.fy - 400.0).abs() < 1e-9);
        assert!((k.cx - 400.0).abs() < 1e-9 && (k.cy - 300.0).abs() < 1e-9);
    }

    #[test]
    fn reference_size_scales_to_image() {
        let spec = IntrinsicsSpec::from(PixelIntrinsics {
            width: 1000.0,
            height: 500.0,
            fx: 800.0,
            fy: 700.0,
            cx: 500.0,
            cy: 250.0,
        });
        let k = spec.resolve(500, 250).expect("resolves");
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (400.0, 350.0, 250.0, 125.0));
    }

    #[test]
    fn missing_focal_length_is_an_error() {
        assert!(IntrinsicsSpec::default().resolve(10, 10).is_err());
    }
}
