//! GPU resources registered in the memory ledger: each holds its ledger entry, so dropping it
//! unregisters it ([`crate::GpuContext::create_buffer`] and `create_texture` make them).

use std::ops::Deref;

use crate::ledger::LedgerEntry;

/// A buffer registered in the ledger. Derefs to [`wgpu::Buffer`]; dropping it unregisters it.
#[derive(Debug)]
pub struct GpuBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) _entry: LedgerEntry,
}

impl Deref for GpuBuffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

/// A texture registered in the ledger. Derefs to [`wgpu::Texture`].
#[derive(Debug)]
pub struct GpuTexture {
    pub(crate) texture: wgpu::Texture,
    pub(crate) _entry: LedgerEntry,
}

impl Deref for GpuTexture {
    type Target = wgpu::Texture;
    fn deref(&self) -> &wgpu::Texture {
        &self.texture
    }
}
