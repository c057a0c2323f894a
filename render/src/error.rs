//! What can go wrong on the GPU ([`GpuError`]), in words a user can act on, and which of a
//! device's size limits a buffer meets ([`Limit`]).

/// Which of a device's size limits a buffer meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `max_buffer_size`: one buffer.
    Buffer,
    /// `max_storage_buffer_binding_size`: one storage binding (a buffer a kernel binds whole).
    StorageBinding,
}

impl Limit {
    /// The most bytes one buffer that a kernel binds whole may hold on a device with
    /// `limits`, and which limit that is: the storage binding limit (wgpu caps it at 2 GiB − 1
    /// on Vulkan and DX12; lavapipe has 128 MiB) or, where that is larger, the buffer limit.
    #[must_use]
    pub fn whole_binding(limits: &wgpu::Limits) -> (u64, Self) {
        if limits.max_storage_buffer_binding_size <= limits.max_buffer_size {
            (limits.max_storage_buffer_binding_size, Self::StorageBinding)
        } else {
            (limits.max_buffer_size, Self::Buffer)
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Buffer => "buffer",
            Self::StorageBinding => "storage binding",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no GPU adapter found ({0}); install a Vulkan, Metal or DX12 driver (on Linux without a GPU: Debian's mesa-vulkan-drivers)"
    )]
    NoAdapter(String),
    #[error("could not open the GPU device: {0}")]
    RequestDevice(String),
    #[error(
        "this GPU ({adapter}) cannot run splatforge's kernels: {lacks}{hint}",
        hint = if adapter.contains("Dx12") {
            " (on Windows, the Vulkan driver may offer more: set WGPU_BACKEND=vulkan)"
        } else {
            ""
        }
    )]
    Unsupported { adapter: String, lacks: String },
    #[error(
        "'{label}': {} is more than this GPU allows in one {which} ({})",
        sizes_apart(*bytes, *limit).0,
        sizes_apart(*bytes, *limit).1
    )]
    TooLarge { label: String, bytes: u64, limit: u64, which: Limit },
    #[error("'{label}': {count} is more than 4,294,967,295, the most a GPU index (u32) holds")]
    TooMany { label: String, count: u64 },
    #[error(
        "'{label}': the GPU is out of memory{}",
        bytes.map(|b| format!(" ({} requested)", crate::human_bytes(b))).unwrap_or_default()
    )]
    OutOfMemory { label: String, bytes: Option<u64> },
    #[error("'{label}': {message}")]
    Validation { label: String, message: String },
    /// The driver failed where WebGPU expects no failure: a shader its compiler rejects, a
    /// limit of its own.
    #[error("'{label}': the GPU driver failed ({adapter}): {message}")]
    Internal { label: String, adapter: String, message: String },
    #[error("waiting for the GPU failed: {0}")]
    Poll(String),
}

/// Two sizes for a person, in bytes where their rounded forms would read the same
/// ("128 MiB … (128 MiB)").
fn sizes_apart(a: u64, b: u64) -> (String, String) {
    let (x, y) = (crate::human_bytes(a), crate::human_bytes(b));
    if x == y { (format!("{a} bytes"), format!("{b} bytes")) } else { (x, y) }
}
