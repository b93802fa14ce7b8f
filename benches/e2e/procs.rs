//! Child processes of the benchmark: the simulator (stopped with SIGINT so it flushes its truth
//! log) and measured clients (reaped with wait4 for their own CPU time and peak RSS).

use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running simulator; dropping it stops it.
pub struct Sim {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Sim {
    /// Start `bin sim` on a free port with `args`, and wait for its address line.
    pub fn start(bin: &Path, args: &[String], log: &Path) -> io::Result<Sim> {
        let mut child = Command::new(bin)
            .arg("sim")
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        // "tokentrace sim listening on http://127.0.0.1:PORT/v1"
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.trim().strip_suffix("/v1"))
            .and_then(|a| a.parse().ok());
        match addr {
            Some(addr) => Ok(Sim { child, addr }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(io::Error::other(format!("unexpected sim output {line:?}")))
            }
        }
    }

    /// SIGINT, then wait (SIGKILL after 60 s): the truth log is complete once this returns.
    pub fn stop(mut self) -> io::Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> io::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        // SAFETY: plain kill(2) on the pid of a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()?;
        Err(io::Error::other("simulator did not stop on SIGINT"))
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// What wait4 reports about a finished child.
pub struct Reaped {
    /// Exit status as waitpid encodes it.
    pub status: i32,
    /// User + system CPU ns of the child (all its threads).
    pub cpu_ns: u64,
    /// Peak RSS of the child in bytes (VmHWM).
    pub max_rss_bytes: u64,
}

/// Run `command` to completion and reap it with wait4 (std's `wait` discards the rusage).
///
/// Peak RSS is the child's `VmHWM` from /proc, sampled every 10 ms while it runs, not wait4's
/// `ru_maxrss`: Linux carries the parent's RSS at spawn time into the child's `ru_maxrss`, and
/// this process holds whole truth logs in memory.
pub fn run_measured(mut command: Command) -> io::Result<Reaped> {
    let child = command.spawn()?;
    let pid = child.id() as libc::pid_t;
    // The Child handle is not waited on again: wait4 below reaps the process.
    std::mem::forget(child);
    let status_path = format!("/proc/{pid}/status");
    let mut peak_kib = 0u64;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes into it and into `status`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        if let Some(hwm) = vm_hwm_kib(&status_path) {
            peak_kib = peak_kib.max(hwm);
        }
        // SAFETY: `pid` is our unreaped child; both pointers are valid and writable.
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if rc == pid {
            break;
        }
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Reaped {
        status,
        cpu_ns: crate::cpu_ns(&usage),
        max_rss_bytes: peak_kib * 1024,
    })
}

/// `VmHWM` (peak resident set of the current address space) in KiB from a /proc status file.
pub fn vm_hwm_kib(status_path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(status_path).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
