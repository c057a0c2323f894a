//! GPU context, memory ledger and the differentiable splat rasterizer.
//!
//! This crate knows nothing of training, datasets or any UI: it depends on wgpu and nothing
//! above it. Every GPU allocation of the project goes through [`GpuContext`], which records
//! it in the [`Ledger`].

mod buffer;
mod camera;
pub mod camera_path;
mod context;
mod device_memory;
mod error;
pub mod gpu_splats;
pub mod kernels;
pub mod ledger;
pub mod level;
pub mod profiler;
mod readback;
pub mod reference;
mod renderer;
pub mod view_controller;

pub use buffer::{GpuBuffer, GpuTexture};
pub use camera::Camera;
pub use context::{
    Fault, FaultKind, GpuContext, HeadlessOptions, KERNEL_NEEDS, KernelNeeds,
    MEMORY_BUDGET_THRESHOLDS, adapter_name, device_descriptor, texture_bytes,
};
pub use device_memory::{DeviceMemory, device_memory};
pub use error::{GpuError, Limit};
pub use gpu_splats::{GpuSplats, ShPrecision, SplatGradients};
pub use ledger::{Allocation, Category, Ledger, LedgerEntry, LedgerSnapshot, Owner};
pub use profiler::{FrameTimings, PassTimer, PassTiming, Profile};
pub use readback::SetOnDrop;
pub use renderer::{
    ForwardBackward, FrameCounts, FrameScratch, FrameStats, Growth, RenderSettings, Renderer,
};
pub use view_controller::ViewController;
pub use wgpu;

/// Bytes for people, to three significant figures ("1.02 MiB", "128 MiB", "17.6 GiB"), so
/// that a size just past a limit does not read as the limit.
#[must_use]
pub fn human_bytes(bytes: u64) -> String {
    let (value, unit) = [("GiB", 30), ("MiB", 20), ("KiB", 10)]
        .into_iter()
        .find(|(_, shift)| bytes >= 1 << shift)
        .map_or((bytes as f64, "B"), |(unit, shift)| {
            (bytes as f64 / (1_u64 << shift) as f64, unit)
        });
    let decimals = if value >= 100.0 || unit == "B" {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$} {unit}")
}

/// Side of the square screen tiles the rasterizer bins splats into, in pixels.
pub const TILE_SIZE: u32 = 16;

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn sizes_read_to_three_figures() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1000), "1000 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(1 << 20), "1.00 MiB");
        // Just past a limit does not read as the limit.
        assert_eq!(human_bytes((1 << 20) + (20 << 10)), "1.02 MiB");
        assert_eq!(human_bytes(128 << 20), "128 MiB");
        assert_eq!(human_bytes(17_644_369_920), "16.4 GiB");
        assert_eq!(human_bytes(u64::MAX), "17179869184 GiB");
    }
}
