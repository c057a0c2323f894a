//! Present: copies a rendered image (`[H, W]` of rgb + alpha, f32) into an `Rgba8Unorm`
//! storage texture, on the GPU, so a viewer can show the render without reading it back.

use bytemuck::{Pod, Zeroable};

use crate::kernels::compute::{Binding, Compile, ComputeKernel, KernelDecl, shader_module};
use crate::{Category, GpuBuffer, GpuContext, GpuError, GpuTexture, Owner};

/// Format of the textures [`Presenter`] writes.
pub const PRESENT_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct PresentParams {
    size: [u32; 2],
    _pad: [u32; 2],
}

/// The kernel: the parameters, the image, the texture it writes.
const PRESENT: KernelDecl = KernelDecl {
    label: "present",
    entry: "main",
    bindings: &[(0, Binding::Read), (1, Binding::Read), (2, Binding::WriteRgba8)],
};

/// The present pipeline and its parameter block. Build once per viewer.
#[derive(Debug)]
pub struct Presenter {
    kernel: ComputeKernel,
    params: GpuBuffer,
}

impl Presenter {
    /// Builds the pipeline inside error scopes, so a driver that cannot compile it says so
    /// here rather than as an invalid pipeline at the first frame.
    pub fn new(ctx: &GpuContext, owner: Owner) -> Result<Self, GpuError> {
        let kernel = ctx.checked("the present pipeline", || {
            let module = shader_module(&ctx.device, "present", include_str!("present.wgsl"));
            Ok(ComputeKernel::new(&ctx.device, &module, &PRESENT, &Compile::default()))
        })?;
        // Read-only storage rather than a uniform: see the note on PARAMS in renderer/mod.rs.
        let params = ctx.create_buffer(
            "present params",
            size_of::<PresentParams>() as u64,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            Category::Viewer,
            owner,
        )?;
        Ok(Self { kernel, params })
    }

    /// A texture [`Presenter::present`] can write and a UI can sample (and tests copy from).
    pub fn create_target(
        ctx: &GpuContext,
        width: u32,
        height: u32,
        owner: Owner,
    ) -> Result<GpuTexture, GpuError> {
        ctx.create_texture(
            &wgpu::TextureDescriptor {
                label: Some("viewport"),
                size: wgpu::Extent3d {
                    width: width.max(1),
                    height: height.max(1),
                    depth_or_array_layers: 1,
                },
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: PRESENT_FORMAT,
                usage: wgpu::TextureUsages::STORAGE_BINDING
                    | wgpu::TextureUsages::TEXTURE_BINDING
                    | wgpu::TextureUsages::COPY_SRC,
                view_formats: &[],
            },
            Category::Viewer,
            owner,
        )
    }

    /// Writes `image` (`width × height` pixels) into the top-left of `target` (submitted).
    pub fn present(
        &self,
        ctx: &GpuContext,
        image: &wgpu::Buffer,
        width: u32,
        height: u32,
        target: &wgpu::Texture,
    ) -> Result<(), GpuError> {
        if width > target.width() || height > target.height() {
            return Err(GpuError::Validation {
                label: "present".into(),
                message: format!(
                    "a {width}×{height} image does not fit a {}×{} texture",
                    target.width(),
                    target.height()
                ),
            });
        }
        if width == 0 || height == 0 {
            return Ok(());
        }
        ctx.checked("present", || {
            let params = PresentParams { size: [width, height], _pad: [0; 2] };
            ctx.queue.write_buffer(&self.params, 0, bytemuck::bytes_of(&params));
            let view = target.create_view(&wgpu::TextureViewDescriptor::default());
            let bind = self.kernel.bind(
                &ctx.device,
                &[
                    self.params.as_entire_binding(),
                    image.as_entire_binding(),
                    wgpu::BindingResource::TextureView(&view),
                ],
            );
            let mut encoder = ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("present") });
            {
                let timer = ctx.pass_timer();
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("present"),
                    timestamp_writes: timer.as_ref().map(crate::PassTimer::writes),
                });
                pass.set_pipeline(self.kernel.pipeline());
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(width.div_ceil(16), height.div_ceil(16), 1);
            }
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })
    }
}

/// CPU reference of the kernel for one pixel. The GPU's float → unorm8 conversion rounds to
/// nearest but may differ by one step at exact halves, so tests allow ±1.
#[must_use]
pub fn present_reference(pixel: [f32; 4]) -> [u8; 4] {
    let channel = |v: f32| (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    [channel(pixel[0]), channel(pixel[1]), channel(pixel[2]), 255]
}
