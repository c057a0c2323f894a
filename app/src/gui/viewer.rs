//! The viewport renderer: a named thread (`splat-viewer`) that renders the splats the UI asks
//! for, from the camera it asks for, into a texture egui draws. The UI thread only writes a
//! request and reads the last result; the rasterizer's read-back (the frame's counts)
//! blocks this thread, never the UI.
//!
//! Everything here is owned by [`Owner::Viewer`] in the ledger: the rasterizer scratch, the
//! texture, and the splats of a file being viewed. The run's splats come through the trainer
//! task's [`ViewerSlot`] (a viewer-owned copy), taken for one frame and dropped after it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use eframe::egui_wgpu::RenderState;
use splat_trainer::formats::filter::Filter;
use splat_trainer::render::kernels::present::Presenter;
use splat_trainer::render::{
    Camera, FrameScratch, GpuContext, GpuError, GpuSplats, GpuTexture, Owner, RenderSettings,
    Renderer,
};
use splat_trainer::task::ViewerSlot;

/// How often the thread looks for newer training splats while it shows a run.
const RUN_POLL: Duration = Duration::from_millis(50);

/// Which splats to show.
#[derive(Clone, Debug, Default)]
pub enum Source {
    #[default]
    Nothing,
    /// The current training run (through the trainer's viewer slot).
    Run,
    /// Splats read from a file.
    File(Arc<GpuSplats>),
}

impl Source {
    fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Nothing, Self::Nothing) | (Self::Run, Self::Run) => true,
            (Self::File(a), Self::File(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// What the UI asks for.
#[derive(Clone, Debug)]
pub struct Request {
    pub source: Source,
    pub camera: Camera,
    pub background: [f32; 3],
    /// Which splats to draw (the crop).
    pub keep: Filter,
}

/// The last frame drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    pub texture: egui::TextureId,
    pub width: u32,
    pub height: u32,
    /// The run and step of the splats drawn (`None` for a file).
    pub run_step: Option<(u64, u32)>,
    pub splats: u32,
    pub milliseconds: f32,
    /// The camera it was drawn from.
    pub camera: Camera,
}

#[derive(Default)]
struct State {
    request: Option<Request>,
    frame: Option<Frame>,
    error: Option<String>,
    /// A request came since the thread last looked.
    dirty: bool,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The UI's handle on the viewer thread.
pub struct Viewer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Viewer {
    pub fn spawn(
        gpu: GpuContext,
        render_state: RenderState,
        egui_ctx: egui::Context,
        slot: ViewerSlot,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::default(), wake: Condvar::new() });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new().name("splat-viewer".into()).spawn(move || {
            let mut worker = Worker::new(gpu, render_state, egui_ctx, slot);
            worker.run(&thread_shared);
        })?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Asks for a frame; the thread draws it when it can (the newest request wins).
    pub fn request(&self, request: Request) {
        let mut state = self.shared.lock();
        state.request = Some(request);
        state.dirty = true;
        drop(state);
        self.shared.wake.notify_one();
    }

    /// The last frame drawn, if any.
    #[must_use]
    pub fn frame(&self) -> Option<Frame> {
        self.shared.lock().frame
    }

    /// A rendering error not yet shown.
    #[must_use]
    pub fn take_error(&self) -> Option<String> {
        self.shared.lock().error.take()
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            log::error!("the viewer thread panicked");
        }
    }
}

/// What the thread owns.
struct Worker {
    gpu: GpuContext,
    render_state: RenderState,
    egui_ctx: egui::Context,
    slot: ViewerSlot,
    /// Built on the first frame (compiling the kernels takes a moment; the window opens
    /// first).
    pipelines: Option<(Renderer, Presenter, FrameScratch)>,
    /// Most splats the scratch has been grown for since it was made.
    scratch_splats: u32,
    target: Option<(GpuTexture, egui::TextureId)>,
    /// What the last frame showed, to skip identical frames.
    last: Option<(Request, Option<(u64, u32)>)>,
}

impl Worker {
    fn new(
        gpu: GpuContext,
        render_state: RenderState,
        egui_ctx: egui::Context,
        slot: ViewerSlot,
    ) -> Self {
        Self {
            gpu,
            render_state,
            egui_ctx,
            slot,
            pipelines: None,
            scratch_splats: 0,
            target: None,
            last: None,
        }
    }

    fn run(&mut self, shared: &Shared) {
        loop {
            let request = {
                let state = shared.lock();
                // Wake for a new request, or every RUN_POLL to look for newer training
                // splats (a cheap comparison when nothing changed).
                let (mut state, _) = shared
                    .wake
                    .wait_timeout_while(state, RUN_POLL, |s| !s.stop && !s.dirty)
                    .unwrap_or_else(PoisonError::into_inner);
                if state.stop {
                    break;
                }
                state.dirty = false;
                state.request.clone()
            };
            let Some(request) = request else { continue };
            match self.draw(&request) {
                Ok(Some(frame)) => {
                    shared.lock().frame = Some(frame);
                    self.egui_ctx.request_repaint();
                }
                Ok(None) => {}
                Err(e) => {
                    // Not retried until something changes (`last` is set before drawing).
                    shared.lock().error = Some(format!("viewport: {e}"));
                    self.egui_ctx.request_repaint();
                }
            }
        }
        // Free the egui texture slot; the GPU resources drop with `self`.
        if let Some((_, id)) = self.target.take() {
            self.render_state.renderer.write().free_texture(&id);
        }
    }

    /// Draws the request if it shows something new; `None` when the last frame stands.
    fn draw(&mut self, request: &Request) -> Result<Option<Frame>, GpuError> {
        let (splats, run_step) = match &request.source {
            Source::Nothing => return Ok(None),
            Source::File(splats) => (Arc::clone(splats), None),
            Source::Run => match self.slot.latest() {
                Some(latest) => (latest.splats, Some((latest.run, latest.step))),
                None => return Ok(None),
            },
        };
        if let Some((last, last_run_step)) = &self.last
            && same_request(last, request)
            && *last_run_step == run_step
        {
            return Ok(None);
        }
        self.last = Some((request.clone(), run_step));
        let started = Instant::now();
        let camera = request.camera;
        if camera.width == 0 || camera.height == 0 {
            return Ok(None);
        }
        if self.pipelines.is_none() {
            let renderer = Renderer::new(&self.gpu)?;
            let presenter = Presenter::new(&self.gpu, Owner::Viewer)?;
            let scratch = FrameScratch::new(&self.gpu, &renderer, Owner::Viewer)?;
            self.pipelines = Some((renderer, presenter, scratch));
        }
        let Some((renderer, presenter, scratch)) = self.pipelines.as_mut() else {
            return Ok(None);
        };
        // The scratch only grows; after a big scene, a much smaller one gets a fresh scratch,
        // so viewing a small file after a large one gives the memory back.
        if splats.count.saturating_mul(4) < self.scratch_splats {
            *scratch = FrameScratch::new(&self.gpu, renderer, Owner::Viewer)?;
            self.scratch_splats = 0;
        }
        self.scratch_splats = self.scratch_splats.max(splats.count);
        let settings = RenderSettings {
            background: request.background,
            keep: request.keep.clone(),
            ..Default::default()
        };
        renderer.forward(&self.gpu, &splats, &camera, &settings, scratch)?;
        // The splats are the run's or a file's, and go when the viewer lets them go: keep no
        // handle to them in the scratch's bind groups (a frame here is on demand, not per step).
        scratch.forget_bindings();
        let texture_id = ensure_target(
            &self.gpu,
            &self.render_state,
            &mut self.target,
            camera.width,
            camera.height,
        )?;
        if let Some((texture, _)) = &self.target {
            presenter.present(&self.gpu, &scratch.image, camera.width, camera.height, texture)?;
        }
        let splat_count = splats.count;
        drop(splats);
        Ok(Some(Frame {
            texture: texture_id,
            width: camera.width,
            height: camera.height,
            run_step,
            splats: splat_count,
            milliseconds: started.elapsed().as_secs_f32() * 1000.0,
            camera,
        }))
    }
}

/// The viewport texture, exactly `width × height`, registered with egui (re-made on resize).
fn ensure_target(
    gpu: &GpuContext,
    render_state: &RenderState,
    target: &mut Option<(GpuTexture, egui::TextureId)>,
    width: u32,
    height: u32,
) -> Result<egui::TextureId, GpuError> {
    if let Some((texture, id)) = target
        && texture.width() == width
        && texture.height() == height
    {
        return Ok(*id);
    }
    let texture = Presenter::create_target(gpu, width, height, Owner::Viewer)?;
    let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
    let mut renderer = render_state.renderer.write();
    let id = match target.take() {
        Some((_, id)) => {
            renderer.update_egui_texture_from_wgpu_texture(
                &gpu.device,
                &view,
                wgpu::FilterMode::Linear,
                id,
            );
            id
        }
        None => renderer.register_native_texture(&gpu.device, &view, wgpu::FilterMode::Linear),
    };
    *target = Some((texture, id));
    Ok(id)
}

fn same_request(a: &Request, b: &Request) -> bool {
    // Bit patterns: a request is the same only if nothing about it changed.
    a.source.same(&b.source)
        && a.camera == b.camera
        && a.background.map(f32::to_bits) == b.background.map(f32::to_bits)
        && a.keep == b.keep
}
