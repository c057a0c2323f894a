//! What the kernels need of a device, read off every kernel of the project (the rasterizer's,
//! the scan's and sort's, the loss's, Adam's and densification's) with naga, must be what
//! `GpuContext` checks an adapter against at start-up (`render::KERNEL_NEEDS`): the most
//! storage buffers one entry point binds and the most workgroup memory one uses. A kernel
//! that grows past them fails here, not on a user's GPU.
#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use splat_render::wgpu::naga;
use splat_trainer::densify::Densifier;
use splat_trainer::optim::Adam;

/// Every WGSL composition of the project, labelled.
fn all_sources() -> Vec<(String, String)> {
    let mut all = splat_render::kernels::shader_sources();
    all.extend(splat_trainer::loss::shader_sources());
    all.extend(Densifier::shader_sources());
    all.push(("adam".into(), Adam::source()));
    all
}

/// (storage buffers, workgroup bytes, invocations in a workgroup) of each entry point of
/// `source`.
fn entry_needs(label: &str, source: &str) -> Vec<(String, u32, u32, u32)> {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(source)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(source)));
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).unwrap();
    module
        .entry_points
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let uses = info.get_entry_point(index);
            let mut storage = 0;
            let mut workgroup = 0;
            for (handle, global) in module.global_variables.iter() {
                if uses[handle].is_empty() {
                    continue;
                }
                match global.space {
                    naga::AddressSpace::Storage { .. } => storage += 1,
                    naga::AddressSpace::WorkGroup => workgroup += layouter[global.ty].size,
                    _ => {}
                }
            }
            let invocations = entry.workgroup_size.iter().product();
            (format!("{label}: {}", entry.name), storage, workgroup, invocations)
        })
        .collect()
}

#[test]
fn the_start_up_check_asks_what_the_kernels_need() {
    let needs: Vec<(String, u32, u32, u32)> =
        all_sources().iter().flat_map(|(label, source)| entry_needs(label, source)).collect();
    assert!(needs.len() > 20, "found only {} entry points", needs.len());
    let most_storage = needs.iter().max_by_key(|n| n.1).unwrap();
    let most_workgroup = needs.iter().max_by_key(|n| n.2).unwrap();
    eprintln!(
        "most storage buffers: {} ({}); most workgroup memory: {} bytes ({})",
        most_storage.1, most_storage.0, most_workgroup.2, most_workgroup.0
    );
    let most_invocations = needs.iter().max_by_key(|n| n.3).unwrap();
    let checked = splat_render::KERNEL_NEEDS;
    assert_eq!(checked.storage_buffers_per_stage, most_storage.1, "{}", most_storage.0);
    assert_eq!(checked.workgroup_storage_bytes, most_workgroup.2, "{}", most_workgroup.0);
    assert_eq!(checked.invocations_per_workgroup, most_invocations.3, "{}", most_invocations.0);
}
