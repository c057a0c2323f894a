//! GPU context, memory ledger and (later) the splat rasterizer kernels.
//!
//! This crate knows nothing of training, datasets or any UI: it depends on wgpu and nothing
//! above it. Every GPU allocation of the project goes through [`GpuContext`], which records
//! it in the [`Ledger`].

mod camera;
mod context;
pub mod kernels;
pub mod reference;
pub mod ledger;

pub use camera::Camera;
pub use context::{GpuBuffer, GpuContext, GpuError, GpuTexture, device_descriptor, texture_bytes};
pub use ledger::{Allocation, Category, Ledger, LedgerEntry, LedgerSnapshot, Owner};
pub use wgpu;

/// Side of the square screen tiles the rasterizer bins splats into, in pixels.
pub const TILE_SIZE: u32 = 16;
