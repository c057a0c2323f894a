//! How much memory the GPU has, and has free, as its driver says: the device-local heaps and
//! `VK_EXT_memory_budget` on Vulkan. DX12 (DXGI's `QueryVideoMemoryInfo`) and Metal
//! (`recommendedMaxWorkingSetSize`) are not read yet: there [`device_memory`] says nothing and
//! the memory budget says it assumed one.
//!
//! The one module of the crate with unsafe code: reading the driver means reaching through
//! wgpu to the Vulkan handles (`as_hal`) and calling Vulkan; each block says why it is sound.

/// The device's memory as its driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes in the device-local heaps.
    pub total: u64,
    /// What the driver says this process may still allocate in them (each heap's budget less
    /// its usage, other processes' use included), where it says (`VK_EXT_memory_budget`).
    pub free: Option<u64>,
}

/// What the driver of `device` says about its memory; `None` where the backend cannot say.
#[must_use]
pub fn device_memory(device: &wgpu::Device) -> Option<DeviceMemory> {
    #[cfg(not(any(target_vendor = "apple", target_arch = "wasm32")))]
    {
        vulkan(device)
    }
    #[cfg(any(target_vendor = "apple", target_arch = "wasm32"))]
    {
        let _ = device;
        None
    }
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
