//! The optimizer: Adam on the GPU, with the 3DGS learning rates per parameter group.

mod adam;

pub use adam::{Adam, AdamState, Moments, ParamGroup};
