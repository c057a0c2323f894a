//! Datasets, training and the trainer task. Knows nothing of any UI.

pub mod dataset;

pub use splat_formats as formats;
pub use splat_render as render;
