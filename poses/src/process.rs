//! The engines we drive (COLMAP, ffmpeg) as child processes: each in a process group of its
//! own, so that cancelling stops everything it started; stdin closed; stdout and stderr read
//! line by line on named threads into one bounded channel; stopped when the run is cancelled,
//! and stopped when it has been idle too long — no line of output and no CPU time used by any
//! process of its group (a COLMAP waiting on a display or a lock at 0% CPU would otherwise
//! hold the run, and CI, for good).

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
/// How often a quiet engine's CPU time is read (a walk over `/proc`).
const CPU_LOOK: Duration = Duration::from_millis(500);

/// An engine we run: which program, where, and how to install it.
#[derive(Clone, Debug)]
pub(crate) struct Engine {
    pub program: &'static str,
    pub path: PathBuf,
    /// How to get the program, said when it is missing.
    pub advice: &'static str,
    /// How long it may print nothing and use no CPU time before it is stopped.
    pub idle_limit: Duration,
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
    pub fn new(
        program: &'static str,
        path: Option<&Path>,
        advice: &'static str,
        idle_limit: Duration,
    ) -> Self {
        let path = path.map_or_else(|| PathBuf::from(program), Path::to_path_buf);
        Self { program, path, advice, idle_limit }
    }

    /// Runs the engine with `args` to its end, handing each line it prints (stdout and
    /// stderr, as they arrive) to `on_line`. Returns early with [`PosesError::Cancelled`]
    /// once `cancel` is set, and with [`PosesError::Stalled`] once it has been idle for
    /// [`Self::idle_limit`] (`what` names the stage there), its process group stopped.
    pub fn run<S: AsRef<std::ffi::OsStr>>(
        &self,
        what: &str,
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
        let command = command_line(&self.path, args);
        let mut watchdog = Watchdog::new(what, command, child.id(), self.idle_limit);
        let result = result.and_then(|()| pump(&mut child, &lines, cancel, &mut watchdog, on_line));
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
    watchdog: &mut Watchdog<'_>,
    on_line: &mut dyn FnMut(&str),
) -> Result<Finished, PosesError> {
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    let mut pipes_open = true;
    loop {
        if cancel.is_cancelled() {
            return Err(PosesError::Cancelled);
        }
        watchdog.check()?;
        if pipes_open {
            match lines.recv_timeout(CANCEL_POLL) {
                Ok(line) => {
                    watchdog.heard();
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

/// Tells an engine that is working from one that waits for nothing: it is idle while it
/// prints nothing and no process of its group uses CPU time. Where the system does not tell
/// a process group's CPU time (everywhere but Linux), an engine is never taken for idle: a
/// long silent computation (a bundle adjustment) must not be stopped.
struct Watchdog<'a> {
    /// What the engine is doing, and the command that does it alone, for the error.
    stage: &'a str,
    command: String,
    group: u32,
    limit: Duration,
    /// When it last printed a line or used CPU time.
    active_at: Instant,
    /// The group's CPU time at the last look, in clock ticks (none before the first).
    cpu: Option<u64>,
    next_look: Instant,
}

impl<'a> Watchdog<'a> {
    fn new(stage: &'a str, command: String, group: u32, limit: Duration) -> Self {
        let now = Instant::now();
        Self { stage, command, group, limit, active_at: now, cpu: None, next_look: now }
    }

    /// It printed a line.
    fn heard(&mut self) {
        self.active_at = Instant::now();
    }

    /// [`PosesError::Stalled`] once it has been idle for the limit. Its CPU time is read only
    /// while it is quiet, at most every [`CPU_LOOK`]; any clock tick counts as work.
    fn check(&mut self) -> Result<(), PosesError> {
        let now = Instant::now();
        if now < self.next_look || now.duration_since(self.active_at) < CPU_LOOK {
            return Ok(());
        }
        self.next_look = now + CPU_LOOK;
        let cpu = group_cpu_ticks(self.group);
        if cpu.is_none() || cpu != self.cpu {
            self.cpu = cpu;
            self.active_at = now;
        }
        if now.duration_since(self.active_at) < self.limit {
            return Ok(());
        }
        Err(PosesError::Stalled {
            what: self.stage.to_owned(),
            command: self.command.clone(),
            idle: self.limit,
        })
    }
}

/// The CPU time (user and system, its reaped children's included) of every process in group
/// `group`, in clock ticks, from `/proc/PID/stat`; `None` when no process of it was found.
#[cfg(target_os = "linux")]
fn group_cpu_ticks(group: u32) -> Option<u64> {
    let mut total = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        if !entry.file_name().as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        // Gone since the listing, or not ours to read: not in the group for this look.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name, in parentheses, may hold spaces and parentheses: the fields
        // after its last `)` start at the third, the state.
        let Some((_, fields)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = fields.split_whitespace().collect();
        // Field 5 is the process group; 14 to 17 utime, stime, cutime, cstime.
        if fields.get(2).and_then(|f| f.parse::<u32>().ok()) != Some(group) {
            continue;
        }
        let ticks: u64 =
            fields.get(11..15).into_iter().flatten().filter_map(|f| f.parse::<u64>().ok()).sum();
        total = Some(total.unwrap_or(0) + ticks);
    }
    total
}

#[cfg(not(target_os = "linux"))]
fn group_cpu_ticks(_group: u32) -> Option<u64> {
    None
}

/// The engine and its first argument, as a user would type them to try the stage alone.
fn command_line<S: AsRef<std::ffi::OsStr>>(path: &Path, args: &[S]) -> String {
    let first = args.first().map(|a| a.as_ref().to_string_lossy().into_owned());
    let mut line = path.display().to_string();
    if let Some(first) = first.filter(|a| !a.starts_with('-')) {
        line.push(' ');
        line.push_str(&first);
    }
    line
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn shell(script: &str, idle_limit: Duration) -> Result<Finished, PosesError> {
        let engine = Engine::new("sh", None, "", idle_limit);
        engine.run("a test shell", &["-c", script], &Cancel::default(), &mut |_| {})
    }

    /// Silent for three times the idle limit but busy all along (a bundle adjustment prints
    /// nothing for minutes): it runs to its end.
    #[test]
    fn a_silent_engine_that_computes_is_left_to_finish() {
        let busy = "end=$(( $(date +%s) + 3 )); while [ \"$(date +%s)\" -lt \"$end\" ]; do :; done";
        let finished = shell(busy, Duration::from_secs(1)).expect("a working engine was stopped");
        assert!(finished.status.success());
    }

    /// Silent and idle: stopped after about the limit, named, its group gone.
    #[test]
    fn a_silent_idle_engine_is_stopped_after_the_limit() {
        let started = Instant::now();
        let Err(PosesError::Stalled { what, command, idle }) =
            shell("sleep 60", Duration::from_secs(1))
        else {
            panic!("an idle engine was not stopped");
        };
        let seconds = started.elapsed().as_secs_f64();
        assert!((1.0..10.0).contains(&seconds), "stopped after {seconds:.1} s");
        assert_eq!(
            (what.as_str(), command.as_str(), idle),
            ("a test shell", "sh", Duration::from_secs(1))
        );
    }

    /// An engine that talks is never idle, even with no CPU time between its lines.
    #[test]
    fn lines_keep_an_engine_alive() {
        let talks = "for i in 1 2 3 4 5 6; do echo $i; sleep 0.5; done";
        let finished = shell(talks, Duration::from_secs(1)).expect("a talking engine was stopped");
        assert!(finished.status.success());
    }
}
