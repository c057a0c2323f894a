//! What the render tests share.

use splat_render::GpuContext;

/// The adapter wgpu finds (lavapipe in CI and on the development machine).
pub fn context() -> GpuContext {
    pollster::block_on(GpuContext::new_headless()).expect("a GPU adapter (lavapipe in CI)")
}
