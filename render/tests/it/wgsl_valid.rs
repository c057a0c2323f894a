//! Every WGSL composition the crate builds parses and validates with naga, on any machine,
//! GPU or not. The capabilities are the ones the kernels may use (subgroup operations only in
//! the subgroup variant of the backward rasterizer, which also needs the adapter feature at run
//! time); the portable variant validates without them.

use splat_render::kernels::shader_sources;
use splat_render::wgpu::naga;

#[test]
fn every_kernel_validates() {
    let sources = shader_sources();
    assert!(sources.len() >= 6, "expected the rasterizer, scan and sort kernels");
    for (label, source) in sources {
        let module = naga::front::wgsl::parse_str(&source)
            .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&source)));
        let caps = if label.contains("subgroups") {
            naga::valid::Capabilities::SUBGROUP
        } else {
            naga::valid::Capabilities::empty()
        };
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&source)));
    }
}
