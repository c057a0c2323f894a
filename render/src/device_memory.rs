//! How much memory the GPU has, and has free, as its driver says: the device-local heaps and
//! `VK_EXT_memory_budget` on Vulkan; the adapter's dedicated video memory and DXGI's
//! `QueryVideoMemoryInfo` (the local segment's budget and this process's use) on DX12; Metal's
//! `recommendedMaxWorkingSetSize` and `currentAllocatedSize`. On GL [`device_memory`] says
//! nothing and the memory budget says it assumed one.
//!
//! The one module of the crate with unsafe code: reading the driver means reaching through
//! wgpu to the backend's handles (`as_hal`) and calling the backend's API; each block says why
//! it is sound. The DX12 and Metal readers are compiled for their targets only;
//! `scripts/check-other-backends.sh` lints them from Linux. Their figures have not been seen on
//! a real device yet.

/// The device's memory as its driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes in the device-local heaps.
    pub total: u64,
    /// What the driver says this process may still allocate in them, where it says: each
    /// heap's budget less its usage, other processes' use included (`VK_EXT_memory_budget`);
    /// the local segment's budget less this process's use (DXGI); the recommended working set
    /// less what this process has allocated (Metal).
    pub free: Option<u64>,
}

/// What the driver of `device` says about its memory; `None` where the backend cannot say.
#[must_use]
pub fn device_memory(device: &wgpu::Device) -> Option<DeviceMemory> {
    #[cfg(not(any(target_vendor = "apple", target_arch = "wasm32")))]
    if let Some(memory) = vulkan(device) {
        return Some(memory);
    }
    #[cfg(windows)]
    if let Some(memory) = dx12(device) {
        return Some(memory);
    }
    #[cfg(target_vendor = "apple")]
    if let Some(memory) = metal(device) {
        return Some(memory);
    }
    let _ = device;
    None
}

#[cfg(not(any(target_vendor = "apple", target_arch = "wasm32")))]
#[expect(unsafe_code, reason = "the driver's memory heaps are only reachable through Vulkan")]
fn vulkan(device: &wgpu::Device) -> Option<DeviceMemory> {
    use ash::vk;

    // SAFETY: `as_hal` is unsafe because the raw device must not be used in ways that break
    // wgpu's own tracking; we only read properties of its physical device below, which
    // Vulkan allows from any thread at any time, and keep nothing past the guard's life.
    // `None` on any other backend.
    let hal = unsafe { device.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let shared = hal.shared_instance();
    let instance = shared.raw_instance();
    let physical = hal.raw_physical_device();
    let has_budget = shared.instance_api_version() >= vk::API_VERSION_1_1
        && hal.enabled_device_extensions().contains(&ash::ext::memory_budget::NAME);

    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let properties = if has_budget {
        let mut properties = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: `physical` was enumerated from `instance`, whose API version (checked
        // above) has the call; the chain holds one structure the device's enabled
        // `VK_EXT_memory_budget` fills, and both outlive the call.
        unsafe { instance.get_physical_device_memory_properties2(physical, &mut properties) };
        properties.memory_properties
    } else {
        // SAFETY: `physical` was enumerated from `instance`; a Vulkan 1.0 call.
        unsafe { instance.get_physical_device_memory_properties(physical) }
    };

    let count = (properties.memory_heap_count as usize).min(vk::MAX_MEMORY_HEAPS);
    let local = (0..count)
        .filter(|&i| properties.memory_heaps[i].flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL));
    let total: u64 = local.clone().map(|i| properties.memory_heaps[i].size).sum();
    let free = has_budget
        .then(|| local.map(|i| budget.heap_budget[i].saturating_sub(budget.heap_usage[i])).sum());
    (total > 0).then_some(DeviceMemory { total, free })
}

#[cfg(windows)]
#[expect(unsafe_code, reason = "the adapter's video memory is only reachable through DXGI")]
fn dx12(device: &wgpu::Device) -> Option<DeviceMemory> {
    use windows::Win32::Graphics::Dxgi::{
        CreateDXGIFactory1, DXGI_MEMORY_SEGMENT_GROUP_LOCAL, DXGI_QUERY_VIDEO_MEMORY_INFO,
        IDXGIAdapter3, IDXGIFactory4,
    };

    // SAFETY: as for Vulkan: we only ask the raw device which adapter it runs on, and keep
    // nothing past the guard's life. `None` on any other backend.
    let hal = unsafe { device.as_hal::<wgpu::hal::api::Dx12>() }?;
    // SAFETY: `GetAdapterLuid` reads the device's identity; the device is alive (the guard).
    let luid = unsafe { hal.raw_device().GetAdapterLuid() };
    // SAFETY: a DXGI factory of our own (DXGI 1.4, which `QueryVideoMemoryInfo` needs and
    // every Windows 10 has), released when dropped; the adapter it finds by the LUID likewise.
    let factory: IDXGIFactory4 = unsafe { CreateDXGIFactory1() }.ok()?;
    // SAFETY: see above.
    let adapter: IDXGIAdapter3 = unsafe { factory.EnumAdapterByLuid(luid) }.ok()?;
    // SAFETY: reads the adapter's description into a value of ours.
    let description = unsafe { adapter.GetDesc1() }.ok()?;
    let mut info = DXGI_QUERY_VIDEO_MEMORY_INFO::default();
    // SAFETY: node 0 (the only one of a single-GPU adapter) and the local segment; `info` is a
    // valid place for the answer and outlives the call.
    unsafe { adapter.QueryVideoMemoryInfo(0, DXGI_MEMORY_SEGMENT_GROUP_LOCAL, &raw mut info) }
        .ok()?;
    // An integrated GPU's dedicated memory is a small carve-out; its local segment's budget
    // is what it may use.
    let total = (description.DedicatedVideoMemory as u64).max(info.Budget);
    let free = info.Budget.saturating_sub(info.CurrentUsage);
    (total > 0).then_some(DeviceMemory { total, free: Some(free) })
}

#[cfg(target_vendor = "apple")]
#[expect(unsafe_code, reason = "the working-set size is only reachable through Metal")]
fn metal(device: &wgpu::Device) -> Option<DeviceMemory> {
    use objc2_metal::MTLDevice;

    // SAFETY: as for Vulkan: we only read two properties of the raw device, which Metal allows
    // from any thread, and keep nothing past the guard's life. `None` on any other backend.
    let hal = unsafe { device.as_hal::<wgpu::hal::api::Metal>() }?;
    let raw = hal.raw_device();
    // What Metal recommends this process keep resident on the GPU (on Apple silicon's unified
    // memory, about two thirds to three quarters of the RAM), and what it has allocated.
    let total = raw.recommendedMaxWorkingSetSize();
    let used = raw.currentAllocatedSize() as u64;
    (total > 0).then_some(DeviceMemory { total, free: Some(total.saturating_sub(used)) })
}
