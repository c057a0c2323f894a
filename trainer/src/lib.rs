//! Datasets, training and the trainer task. Knows nothing of any UI.

pub mod dataset;
pub mod init;
pub mod optim;
// pub mod train; (enabled once loss and densify land)

pub use splat_formats as formats;
pub use splat_render as render;
