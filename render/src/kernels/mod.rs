//! WGSL compute kernels, each beside its Rust wrapper.

pub mod scan;
pub mod sort;
