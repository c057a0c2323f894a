//! GPU context, memory ledger and the differentiable splat rasterizer.
//!
//! This crate knows nothing of training, datasets or any UI: it depends on wgpu and nothing
//! above it. Every GPU allocation of the project goes through [`GpuContext`], which records
//! it in the [`Ledger`].

mod camera;
mod context;
pub mod gpu_splats;
pub mod kernels;
pub mod ledger;
pub mod profiler;
mod readback;
pub mod reference;
mod renderer;
pub mod view_controller;

pub use camera::Camera;
pub use context::{GpuBuffer, GpuContext, GpuError, GpuTexture, device_descriptor, texture_bytes};
pub use gpu_splats::{GpuSplats, ShPrecision, SplatGradients};
pub use ledger::{Allocation, Category, Ledger, LedgerEntry, LedgerSnapshot, Owner};
pub use profiler::{FrameTimings, PassTimer, PassTiming, Profile};
pub use readback::SetOnDrop;
pub use renderer::{FrameCounts, FrameScratch, FrameStats, RenderSettings, Renderer};
pub use view_controller::ViewController;
pub use wgpu;

/// Side of the square screen tiles the rasterizer bins splats into, in pixels.
pub const TILE_SIZE: u32 = 16;
