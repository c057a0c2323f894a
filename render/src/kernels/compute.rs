//! The one way a compute kernel is built. A kernel is declared once, in a [`KernelDecl`]: its
//! label, entry point and the bindings of its group 0 (number and kind, as its WGSL declares
//! them); [`ComputeKernel::new`] makes its bind group layout, pipeline layout and pipeline from
//! that, and [`ComputeKernel::bind`] a bind group of resources given in the declaration's
//! order. Every wrapper goes through it: the rasterizer, scan, sort, k-means and present here,
//! and the trainer's loss, Adam, densification and appearance kernels.
//!
//! There are no uniform bindings: parameters are read-only storage (ARCHITECTURE.md: lavapipe
//! compiled a shader variant per uniform value and kept them all).

use std::num::NonZeroU64;

use crate::wgpu;

/// What one binding of a kernel's group 0 is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`.
    ReadWrite,
    /// A `var<storage, read>` block of this many bytes, one of several slots of a buffer: the
    /// slot's offset is given when the group is set (a dynamic offset).
    Slot(u64),
    /// A `texture_storage_2d<rgba8unorm, write>`.
    WriteRgba8,
}

/// A compute kernel, declared once: what [`ComputeKernel::new`] builds.
#[derive(Clone, Copy, Debug)]
pub struct KernelDecl {
    /// Names the pipeline and its layouts in wgpu's messages and GPU captures.
    pub label: &'static str,
    pub entry: &'static str,
    /// `(@binding number, kind)` of every binding of group 0 the entry point uses.
    pub bindings: &'static [(u32, Binding)],
}

/// How the module is compiled for one pipeline.
#[derive(Clone, Copy, Debug)]
pub struct Compile<'a> {
    /// Values of the module's pipeline-overridable constants.
    pub constants: &'a [(&'a str, f64)],
    /// False where the kernel writes all its workgroup memory before reading it (saves the
    /// zeroing wgpu would otherwise add).
    pub zero_workgroup_memory: bool,
}

impl Default for Compile<'_> {
    fn default() -> Self {
        Self { constants: &[], zero_workgroup_memory: true }
    }
}

/// A WGSL module, for one or more [`ComputeKernel`]s.
#[must_use]
pub fn shader_module(device: &wgpu::Device, label: &str, source: &str) -> wgpu::ShaderModule {
    device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    })
}

/// A built kernel: its pipeline and the layout of its group 0.
#[derive(Debug)]
pub struct ComputeKernel {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    label: &'static str,
    bindings: Vec<u32>,
}

impl ComputeKernel {
    /// Builds `decl` from `module`. A kernel the device refuses shows in the device's error
    /// scope or uncaptured errors, as any pipeline does (callers build inside
    /// `GpuContext::checked`, or check the uncaptured errors).
    #[must_use]
    pub fn new(
        device: &wgpu::Device,
        module: &wgpu::ShaderModule,
        decl: &KernelDecl,
        compile: &Compile<'_>,
    ) -> Self {
        let entries: Vec<wgpu::BindGroupLayoutEntry> =
            decl.bindings.iter().map(|&(binding, kind)| layout_entry(binding, kind)).collect();
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(decl.label),
            entries: &entries,
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(decl.label),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(decl.label),
            layout: Some(&pipeline_layout),
            module,
            entry_point: Some(decl.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: compile.constants,
                zero_initialize_workgroup_memory: compile.zero_workgroup_memory,
            },
            cache: None,
        });
        let bindings = decl.bindings.iter().map(|&(binding, _)| binding).collect();
        Self { pipeline, layout, label: decl.label, bindings }
    }

    #[must_use]
    pub fn pipeline(&self) -> &wgpu::ComputePipeline {
        &self.pipeline
    }

    #[must_use]
    pub fn label(&self) -> &'static str {
        self.label
    }

    /// The `@binding` numbers of group 0, in the declaration's order.
    #[must_use]
    pub fn bindings(&self) -> &[u32] {
        &self.bindings
    }

    /// A bind group of `resources`, one for each declared binding, in the declaration's order
    /// (labelled as the kernel).
    ///
    /// # Panics
    /// When `resources` has another length than the declaration's bindings (a wrapper's bug).
    #[must_use]
    pub fn bind(
        &self,
        device: &wgpu::Device,
        resources: &[wgpu::BindingResource<'_>],
    ) -> wgpu::BindGroup {
        let label = self.label;
        assert_eq!(resources.len(), self.bindings.len(), "{label}: one resource a binding");
        let entries: Vec<wgpu::BindGroupEntry<'_>> = self
            .bindings
            .iter()
            .zip(resources)
            .map(|(&binding, resource)| wgpu::BindGroupEntry {
                binding,
                resource: resource.clone(),
            })
            .collect();
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout: &self.layout,
            entries: &entries,
        })
    }
}

fn layout_entry(binding: u32, kind: Binding) -> wgpu::BindGroupLayoutEntry {
    let buffer = |read_only, has_dynamic_offset, min_binding_size| wgpu::BindingType::Buffer {
        ty: wgpu::BufferBindingType::Storage { read_only },
        has_dynamic_offset,
        min_binding_size,
    };
    let ty = match kind {
        Binding::Read => buffer(true, false, None),
        Binding::ReadWrite => buffer(false, false, None),
        Binding::Slot(size) => buffer(true, true, NonZeroU64::new(size)),
        Binding::WriteRgba8 => wgpu::BindingType::StorageTexture {
            access: wgpu::StorageTextureAccess::WriteOnly,
            format: wgpu::TextureFormat::Rgba8Unorm,
            view_dimension: wgpu::TextureViewDimension::D2,
        },
    };
    wgpu::BindGroupLayoutEntry { binding, visibility: wgpu::ShaderStages::COMPUTE, ty, count: None }
}
