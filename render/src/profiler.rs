//! Per-pass GPU timings from timestamp queries.
//!
//! When profiling is on ([`GpuContext::start_profiling`]), every compute pass of ours asks
//! [`GpuContext::pass_timer`] for timestamp writes at its beginning and end, and is filed under
//! the current stage ([`GpuContext::profile_stage`]: "projection", "depth sort", "loss", …).
//! A frame (a training step) ends at [`GpuContext::profile_frame`], which resolves the frame's
//! queries into a small ring of read-back buffers inside the caller's encoder; they are mapped
//! a frame later and read when ready, so profiling adds no wait to a step. When profiling is
//! off, `pass_timer` is `None` and nothing else happens: a pass costs what it did.
//!
//! Needs the adapter feature `TIMESTAMP_QUERY` (every desktop GPU, and lavapipe).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::buffer::GpuBuffer;
use crate::error::GpuError;

/// Timestamps per frame at most (two per pass). A frame with more passes times the first
/// [`MAX_QUERIES`] / 2 and counts the rest in [`Profile::untimed_passes`].
pub const MAX_QUERIES: u32 = 512;
/// Frames in flight between resolving and reading. A frame that finds no free slot is not
/// timed (counted in [`Profile::untimed_frames`]).
const SLOTS: usize = 4;

/// Timestamp writes for one compute pass: put [`PassTimer::writes`] in its descriptor.
#[derive(Debug)]
pub struct PassTimer {
    query_set: wgpu::QuerySet,
    index: u32,
}

impl PassTimer {
    #[must_use]
    pub fn writes(&self) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.query_set,
            beginning_of_pass_write_index: Some(self.index),
            end_of_pass_write_index: Some(self.index + 1),
        }
    }
}

/// One timed compute pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PassTiming {
    pub stage: &'static str,
    /// When it began, in milliseconds after the frame's first pass began.
    pub start_ms: f64,
    /// How long it ran on the GPU.
    pub ms: f64,
}

/// The passes of one frame, in the order they were encoded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameTimings {
    pub passes: Vec<PassTiming>,
}

impl FrameTimings {
    /// Milliseconds of all passes of `stage` in this frame.
    #[must_use]
    pub fn stage_ms(&self, stage: &str) -> f64 {
        self.passes.iter().filter(|p| p.stage == stage).map(|p| p.ms).sum()
    }

    /// Milliseconds of all passes: the GPU's busy time in this frame.
    #[must_use]
    pub fn total_ms(&self) -> f64 {
        self.passes.iter().map(|p| p.ms).sum()
    }

    /// Milliseconds the GPU waited between the end of the pass before the first `stage` pass
    /// and that pass's start (the cost of a wait for the CPU there); `None` without one.
    #[must_use]
    pub fn gap_before_ms(&self, stage: &str) -> Option<f64> {
        let at = self.passes.iter().position(|p| p.stage == stage)?;
        let before = self.passes.get(at.checked_sub(1)?)?;
        Some((self.passes[at].start_ms - before.start_ms - before.ms).max(0.0))
    }
}

/// What a profiling session measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub frames: Vec<FrameTimings>,
    /// Frames not timed because every read-back slot was still in flight.
    pub untimed_frames: u64,
    /// Passes past [`MAX_QUERIES`] / 2 in a frame.
    pub untimed_passes: u64,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum SlotState {
    Free,
    /// Resolved into by a frame's encoder; mapped at the next frame boundary (after the
    /// caller has submitted that encoder).
    Copied,
    /// Map requested; `ready` turns true in the callback.
    Mapping,
}

#[derive(Debug)]
struct Slot {
    buffer: GpuBuffer,
    state: SlotState,
    ready: Arc<AtomicBool>,
    passes: Vec<&'static str>,
}

#[derive(Debug)]
pub(crate) struct Profiler {
    query_set: wgpu::QuerySet,
    resolve: GpuBuffer,
    slots: Vec<Slot>,
    /// Stage of each pass of the current frame.
    passes: Vec<&'static str>,
    stage: &'static str,
    period_ns: f64,
    profile: Profile,
}

impl Profiler {
    /// A profiler on `device`, its resolve and read-back buffers made by `create` (label,
    /// usages, bytes: the context registers them in the ledger).
    pub(crate) fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        create: impl Fn(&'static str, wgpu::BufferUsages, u64) -> Result<GpuBuffer, GpuError>,
    ) -> Result<Self, GpuError> {
        if !device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(GpuError::Validation {
                label: "profiler".into(),
                message: "this GPU offers no timestamp queries".into(),
            });
        }
        let bytes = u64::from(MAX_QUERIES) * 8;
        let query_set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("pass timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: MAX_QUERIES,
        });
        let resolve = create(
            "pass timestamps resolved",
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            bytes,
        )?;
        let slots = (0..SLOTS)
            .map(|_| {
                Ok(Slot {
                    buffer: create(
                        "pass timestamps readback",
                        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        bytes,
                    )?,
                    state: SlotState::Free,
                    ready: Arc::default(),
                    passes: Vec::new(),
                })
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(Self {
            query_set,
            resolve,
            slots,
            passes: Vec::with_capacity(MAX_QUERIES as usize / 2),
            stage: "other",
            period_ns: f64::from(queue.get_timestamp_period()),
            profile: Profile::default(),
        })
    }

    /// Files the passes encoded from now on under `stage`.
    pub(crate) fn set_stage(&mut self, stage: &'static str) {
        self.stage = stage;
    }

    /// Whether a frame's timings are still being mapped (another thread may be the one
    /// running the mapping callbacks).
    pub(crate) fn pending(&self) -> bool {
        self.slots.iter().any(|s| s.state == SlotState::Mapping && !s.ready.load(Ordering::Acquire))
    }

    /// Everything measured, once nothing is [`Profiler::pending`].
    pub(crate) fn finish(mut self) -> Profile {
        self.collect_ready();
        self.profile
    }

    pub(crate) fn pass_timer(&mut self) -> Option<PassTimer> {
        let index = self.passes.len() as u32 * 2;
        if index + 2 > MAX_QUERIES {
            self.profile.untimed_passes += 1;
            return None;
        }
        self.passes.push(self.stage);
        Some(PassTimer { query_set: self.query_set.clone(), index })
    }

    /// Reads the slots whose mapping finished, maps the ones the last frame resolved into,
    /// and resolves this frame's queries into a free slot.
    pub(crate) fn frame(&mut self, encoder: &mut wgpu::CommandEncoder) -> bool {
        self.collect_ready();
        let mut woke = false;
        for slot in &mut self.slots {
            if slot.state == SlotState::Copied {
                map_slot(slot);
                woke = true;
            }
        }
        if !self.passes.is_empty() {
            if let Some(slot) = self.slots.iter_mut().find(|s| s.state == SlotState::Free) {
                let queries = self.passes.len() as u32 * 2;
                encoder.resolve_query_set(&self.query_set, 0..queries, &self.resolve, 0);
                encoder.copy_buffer_to_buffer(
                    &self.resolve,
                    0,
                    &slot.buffer,
                    0,
                    u64::from(queries) * 8,
                );
                // The slot's list was emptied when it was read: swapping keeps both lists'
                // capacity, so a frame allocates nothing.
                std::mem::swap(&mut slot.passes, &mut self.passes);
                self.passes.clear();
                slot.state = SlotState::Copied;
            } else {
                self.passes.clear();
                self.profile.untimed_frames += 1;
            }
        }
        woke
    }

    fn collect_ready(&mut self) {
        for slot in &mut self.slots {
            if slot.state != SlotState::Mapping || !slot.ready.load(Ordering::Acquire) {
                continue;
            }
            let queries = slot.passes.len() * 2;
            let ticks: Vec<u64> = match slot.buffer.slice(..queries as u64 * 8).get_mapped_range() {
                Ok(view) => view
                    .chunks_exact(8)
                    .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect(),
                Err(e) => {
                    log::warn!("profiler read-back failed: {e}");
                    Vec::new()
                }
            };
            slot.buffer.unmap();
            if ticks.len() == queries {
                let origin = ticks.first().copied().unwrap_or(0);
                let ms = |ticks: u64| ticks as f64 * self.period_ns * 1e-6;
                let passes = slot
                    .passes
                    .iter()
                    .zip(ticks.chunks_exact(2))
                    .map(|(stage, t)| PassTiming {
                        stage,
                        start_ms: ms(t[0].saturating_sub(origin)),
                        ms: ms(t[1].saturating_sub(t[0])),
                    })
                    .collect();
                self.profile.frames.push(FrameTimings { passes });
            }
            slot.passes.clear();
            slot.ready.store(false, Ordering::Release);
            slot.state = SlotState::Free;
        }
    }
}

fn map_slot(slot: &mut Slot) {
    let ready = crate::SetOnDrop(Arc::clone(&slot.ready));
    let queries = slot.passes.len() as u64 * 2;
    slot.buffer.slice(..queries * 8).map_async(wgpu::MapMode::Read, move |result| {
        let _ready = ready;
        if let Err(e) = result {
            log::warn!("profiler read-back failed: {e}");
        }
    });
    slot.state = SlotState::Mapping;
}
