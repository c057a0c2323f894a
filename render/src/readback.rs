//! Awaiting the GPU without blocking the thread that waits.
//!
//! wgpu reports that a buffer is mapped, or that submitted work is done, through callbacks
//! that run inside `device.poll`. One named thread per context, `gpu-poller`, does the
//! polling: a read-back asks it to poll ([`Poller::wake`]) and then awaits a oneshot channel
//! that the callback completes. So an async task (the trainer's) awaits GPU results without
//! ever calling a blocking poll itself, and a synchronous caller can `pollster::block_on` the
//! same future from any thread.
//!
//! The poller waits for all work submitted so far (`PollType::wait_indefinitely`) each time it
//! is woken; wakes that arrive while it polls are folded into one more poll, so it never
//! spins and never misses work submitted after it started.
//!
//! wgpu 30 can drop a callback it has resolved without calling it: configuring a surface waits
//! for the GPU and collects the finished work's callbacks, and when another thread submitted
//! meanwhile it gives up with `GpuWaitTimeout` and drops them (wgpu-core 30.0.1,
//! `Device::configure_surface`). A window resized while a run trains does exactly that. So a
//! read-back whose callback was dropped reads the buffer anyway (it was mapped; if not, reading
//! the range says so), and a work-done wait whose callback was dropped counts as done.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::error::GpuError;

/// The `gpu-poller` thread of one context. Started on first use; when the last clone of its
/// context is dropped, its wake channel closes and the thread is joined, so the device is
/// released there and then, never by a thread still running while the process exits.
#[derive(Debug, Default)]
pub(crate) struct Poller {
    thread: Mutex<PollerThread>,
}

#[derive(Debug, Default)]
enum PollerThread {
    #[default]
    NotStarted,
    Running(SyncSender<()>, JoinHandle<()>),
    /// No thread could be started: waiters poll themselves (blocking only them).
    Failed,
}

impl Poller {
    /// Asks the poller thread to poll until everything submitted so far is done.
    pub(crate) fn wake(&self, device: &wgpu::Device) {
        let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*thread, PollerThread::NotStarted) {
            *thread = spawn(device.clone());
        }
        let woken = match &*thread {
            // Full: a poll is already due, and it covers this request too.
            PollerThread::Running(sender, _) => {
                !matches!(sender.try_send(()), Err(TrySendError::Disconnected(())))
            }
            PollerThread::NotStarted | PollerThread::Failed => false,
        };
        drop(thread);
        if !woken {
            blocking_poll(device);
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        let thread = std::mem::take(self.thread.get_mut().unwrap_or_else(PoisonError::into_inner));
        if let PollerThread::Running(sender, handle) = thread {
            drop(sender);
            if handle.join().is_err() {
                log::error!("the gpu-poller thread panicked");
            }
        }
    }
}

fn spawn(device: wgpu::Device) -> PollerThread {
    let (sender, wakes): (SyncSender<()>, Receiver<()>) = sync_channel(1);
    let spawned = std::thread::Builder::new().name("gpu-poller".into()).spawn(move || {
        while wakes.recv().is_ok() {
            blocking_poll(&device);
        }
    });
    match spawned {
        Ok(handle) => PollerThread::Running(sender, handle),
        Err(e) => {
            log::warn!("could not start the gpu-poller thread ({e}); read-backs will block");
            PollerThread::Failed
        }
    }
}

fn blocking_poll(device: &wgpu::Device) {
    if let Err(e) = device.poll(wgpu::PollType::wait_indefinitely()) {
        // The waiting futures see their channel closed or the map fail and report it.
        log::warn!("polling the GPU failed: {e}");
    }
}

/// Sets its flag when dropped. Moved into a `map_async` callback, the flag is set when the
/// callback has run or has been dropped uncalled (the module docs): either way the mapping is
/// settled and the buffer can be read (if it mapped) and unmapped.
#[derive(Debug)]
pub struct SetOnDrop(pub Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Unmaps a buffer whose mapping was requested, when the read is dropped before it finished
/// (a pending mapping is cancelled) or after it has read (so the buffer can be written again).
struct MapGuard<'a> {
    buffer: &'a wgpu::Buffer,
    armed: bool,
}

impl Drop for MapGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.buffer.unmap();
        }
    }
}

impl crate::GpuContext {
    /// Maps the first `bytes` of `buffer` (which needs `MAP_READ`) once the GPU has finished
    /// the work submitted so far that writes it, and returns `read` of them. Awaiting never
    /// blocks the thread: the `gpu-poller` thread polls. Dropping the future before it
    /// resolves cancels the mapping, so the buffer stays usable.
    pub async fn read_mapped<T>(
        &self,
        buffer: &wgpu::Buffer,
        bytes: u64,
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, GpuError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let slice = buffer.slice(..bytes);
        slice.map_async(wgpu::MapMode::Read, move |result| {
            // The receiver is gone only if the read was dropped; then nobody needs the result.
            let _ = sender.send(result);
        });
        let mut guard = MapGuard { buffer, armed: true };
        self.poller().wake(&self.device);
        // A callback dropped uncalled (`Err` here; the module docs) leaves the buffer mapped
        // all the same when its work was done; if not, reading the range says so.
        if let Ok(Err(e)) = receiver.await {
            // A failed mapping leaves the buffer unmapped.
            guard.armed = false;
            return Err(GpuError::Poll(e.to_string()));
        }
        let view = slice.get_mapped_range().map_err(|e| GpuError::Poll(e.to_string()))?;
        Ok(read(&view))
    }

    /// Has the `gpu-poller` thread poll soon, so the callbacks of mappings requested with a
    /// plain `map_async` (read later, without awaiting) run without anyone waiting for them.
    pub fn poll_soon(&self) {
        self.poller().wake(&self.device);
    }

    /// Resolves once the GPU has finished every piece of work submitted before the call, and
    /// freed what was dropped by then. Never blocks the thread; see [`GpuContext::wait_idle`]
    /// for the blocking form.
    pub async fn idle(&self) -> Result<(), GpuError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.queue.on_submitted_work_done(move || {
            let _ = sender.send(());
        });
        self.poller().wake(&self.device);
        // Dropped uncalled only once wgpu found the work done (the module docs).
        let _done_or_dropped = receiver.await;
        Ok(())
    }
}
