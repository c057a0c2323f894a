//! The WGSL binary16 conversions (render/src/kernels/binary16.wgsl) against the `half` crate
//! on every one of the 65,536 bit patterns: decoding is exact, and packing a decoded value
//! gives its bits back (NaNs come back as NaNs).

#![allow(clippy::unwrap_used, reason = "test helpers: any error should stop the test")]

use splat_render::gpu_splats::read_bytes;
use splat_render::kernels::BINARY16;
use splat_render::wgpu::{self, BufferUsages};
use splat_render::{Category, Owner};

use crate::helpers::context;

const KERNEL: &str = "
@group(0) @binding(0) var<storage, read> input: array<u32>;
@group(0) @binding(1) var<storage, read_write> decoded: array<f32>;
@group(0) @binding(2) var<storage, read_write> repacked: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let w = id.x;
    if w >= arrayLength(&input) {
        return;
    }
    let v = unpack_halves(input[w]);
    decoded[2u * w] = v.x;
    decoded[2u * w + 1u] = v.y;
    repacked[w] = pack_halves(v);
}
";

#[test]
fn every_binary16_decodes_exactly_and_packs_back() {
    let ctx = context();
    let words: Vec<u32> = (0..1_u32 << 15).map(|w| (2 * w) | ((2 * w + 1) << 16)).collect();
    let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("binary16 test"),
        source: wgpu::ShaderSource::Wgsl([BINARY16, KERNEL].join("\n").into()),
    });
    let pipeline = ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("binary16 test"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions::default(),
        cache: None,
    });
    let usage = BufferUsages::STORAGE | BufferUsages::COPY_SRC;
    let buffer = |label: &str, bytes: u64| {
        ctx.create_buffer(label, bytes, usage, Category::Other, Owner::Shared).unwrap()
    };
    let input = ctx
        .create_buffer_init(
            "input",
            bytemuck::cast_slice(&words),
            usage,
            Category::Other,
            Owner::Shared,
        )
        .unwrap();
    let decoded = buffer("decoded", 4 << 16);
    let repacked = buffer("repacked", 4 << 15);
    let bind = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: input.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: decoded.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: repacked.as_entire_binding() },
        ],
    });
    let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups((1 << 15) / 256, 1, 1);
    }
    ctx.queue.submit([encoder.finish()]);
    let decoded: Vec<f32> =
        bytemuck::pod_collect_to_vec(&read_bytes(&ctx, &decoded, 4 << 16).unwrap());
    let repacked: Vec<u32> =
        bytemuck::pod_collect_to_vec(&read_bytes(&ctx, &repacked, 4 << 15).unwrap());
    for bits in 0..=u16::MAX {
        let want = half::f16::from_bits(bits).to_f32();
        let got = decoded[usize::from(bits)];
        let back = (repacked[usize::from(bits / 2)] >> (16 * u32::from(bits % 2))) as u16;
        if want.is_nan() {
            assert!(got.is_nan(), "{bits:#06x}: {got}");
            assert!(half::f16::from_bits(back).is_nan(), "{bits:#06x} packs to {back:#06x}");
        } else {
            assert_eq!(got.to_bits(), want.to_bits(), "{bits:#06x}: {got} for {want}");
            assert_eq!(back, bits, "{bits:#06x} packs to {back:#06x}");
        }
    }
    assert!(ctx.take_uncaptured_errors().is_empty());
}
