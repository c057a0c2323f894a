//! The render crate's integration tests: one binary, a module per concern (TESTING.md).

mod binary16_gpu;
mod depth_bands;
mod helpers;
mod intersections;
mod ledger_gpu;
mod overflow;
mod present_gpu;
mod rasterize_gpu;
mod reference;
mod scan_sort;
mod wgsl_valid;
