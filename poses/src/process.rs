//! The engines we drive (COLMAP, ffmpeg) as child processes: each in a process group of its
//! own, so that cancelling stops everything it started; stdin closed; stdout and stderr read
//! line by line on named threads into one bounded channel; stopped when the run is cancelled.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use crate::{Cancel, PosesError};

/// Lines of output kept for an error message.
const TAIL_LINES: usize = 20;
/// Lines in flight between the reader threads and the run (a slow reader of progress slows
/// the engine's writes, never loses them).
const LINE_CAPACITY: usize = 256;
/// How often a run looks at its cancel flag while the engine is quiet.
const CANCEL_POLL: Duration = Duration::from_millis(100);
/// How long a cancelled engine has to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// An engine we run: which program, where, and how to install it.
#[derive(Clone, Debug)]
pub(crate) struct Engine {
    pub program: &'static str,
    pub path: PathBuf,
    /// How to get the program, said when it is missing.
    pub advice: &'static str,
}

/// An engine's run that ended by itself.
pub(crate) struct Finished {
    pub status: ExitStatus,
    /// Its last lines of output, oldest first.
    pub tail: VecDeque<String>,
}

impl Finished {
    /// The error for a run that failed: what it was, its exit status and its last lines.
    pub fn failure(&self, what: &str) -> PosesError {
        PosesError::Failed {
            what: what.to_owned(),
            status: self.status.to_string(),
            tail: self
                .tail
                .iter()
                .map(|line| line.trim())
                // Banners and blank lines say nothing.
                .filter(|line| !line.is_empty() && !line.chars().all(|c| c == '=' || c == '-'))
                .map(|line| format!("  {line}"))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

impl Engine {
    pub fn new(program: &'static str, path: Option<&Path>, advice: &'static str) -> Self {
        let path = path.map_or_else(|| PathBuf::from(program), Path::to_path_buf);
        Self { program, path, advice }
    }

    /// Runs the engine with `args` to its end, handing each line it prints (stdout and
    /// stderr, as they arrive) to `on_line`. Returns early with [`PosesError::Cancelled`]
    /// once `cancel` is set, the engine's process group stopped.
    pub fn run<S: AsRef<std::ffi::OsStr>>(
        &self,
        args: &[S],
        cancel: &Cancel,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<Finished, PosesError> {
        let mut command = Command::new(&self.path);
        command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        log::debug!("running {command:?}");
        let mut child = command.spawn().map_err(|cause| {
            if cause.kind() == std::io::ErrorKind::NotFound {
                PosesError::Missing {
                    program: self.program,
                    tried: self.path.clone(),
                    advice: self.advice,
                }
            } else {
                PosesError::io(&self.path, cause)
            }
        })?;
        let (tx, lines) = sync_channel(LINE_CAPACITY);
        let pipes: [(Option<Box<dyn Read + Send>>, &str); 2] = [
            (child.stdout.take().map(|out| Box::new(out) as _), "out"),
            (child.stderr.take().map(|err| Box::new(err) as _), "err"),
        ];
        let mut readers = Vec::with_capacity(2);
        let mut result = Ok(());
        for (pipe, stream) in pipes {
            if let Some(pipe) = pipe {
                match spawn_reader(pipe, self.program, stream, tx.clone()) {
                    Ok(reader) => readers.push(reader),
                    Err(cause) => {
                        result = Err(PosesError::io("a thread to read its output", cause));
                    }
                }
            }
        }
        drop(tx);
        let result = result.and_then(|()| pump(&mut child, &lines, cancel, on_line));
        if result.is_err() {
            stop(&mut child);
        }
        // The readers end when the pipes close (the process and its group are gone); drain
        // the channel so none of them is left blocked on a full one.
        while lines.recv().is_ok() {}
        for reader in readers {
            let _ = reader.join();
        }
        result
    }
}

/// Hands lines to `on_line` until the process has exited and both pipes are closed.
fn pump(
    child: &mut Child,
    lines: &Receiver<String>,
    cancel: &Cancel,
    on_line: &mut dyn FnMut(&str),
) -> Result<Finished, PosesError> {
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    let mut pipes_open = true;
    loop {
        if cancel.is_cancelled() {
            return Err(PosesError::Cancelled);
        }
        if pipes_open {
            match lines.recv_timeout(CANCEL_POLL) {
                Ok(line) => {
                    on_line(&line);
                    if tail.len() == TAIL_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => pipes_open = false,
            }
        } else {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(Finished { status, tail }),
                Ok(None) => std::thread::sleep(CANCEL_POLL),
                Err(cause) => return Err(PosesError::io("child process", cause)),
            }
        }
    }
}

/// Reads `pipe` line by line (bytes that are not UTF-8 replaced, `\r` dropped) into `tx`.
fn spawn_reader(
    pipe: Box<dyn Read + Send>,
    program: &str,
    stream: &str,
    tx: SyncSender<String>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name(format!("{program}-{stream}")).spawn(move || {
        let mut pipe = BufReader::new(pipe);
        let mut bytes = Vec::new();
        loop {
            bytes.clear();
            match pipe.read_until(b'\n', &mut bytes) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&bytes);
                    let line = line.trim_end_matches(['\n', '\r']);
                    // Progress bars redraw with `\r`: the last redraw is the line.
                    let line = line.rsplit('\r').next().unwrap_or(line);
                    if tx.send(line.to_owned()).is_err() {
                        break;
                    }
                }
            }
        }
    })
}

/// Stops a child and everything in its process group: SIGTERM, a grace period, SIGKILL
/// (on Windows, `taskkill /T` of its tree).
fn stop(child: &mut Child) {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, kill_process_group};
        let group = Pid::from_child(child);
        // Errors here mean the group is already gone.
        let _ = kill_process_group(group, Signal::TERM);
        let deadline = Instant::now() + TERM_GRACE;
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = kill_process_group(group, Signal::KILL);
    }
    #[cfg(windows)]
    {
        // No process groups: end the engine's whole tree (COLMAP.bat starts colmap.exe).
        let _ = Command::new("taskkill")
            .args(["/T", "/F", "/PID", &child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let _ = child.kill();
    let _ = child.wait();
}
