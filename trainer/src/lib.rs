//! Datasets, training and the trainer task. Knows nothing of any UI.

pub mod appearance;
pub mod checkpoint;
pub mod config;
pub mod dataset;
pub mod densify;
pub mod exact;
pub mod init;
pub mod loss;
pub mod memory;
pub mod optim;
pub mod sample_scene;
pub mod self_test;
pub mod task;
pub mod train;

pub use splat_formats as formats;
pub use splat_render as render;
