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
    pub fn start(bin: &Path, args: &[String], log: &Path, cpu: Option<usize>) -> io::Result<Sim> {
        let mut command = Command::new(bin);
        command
            .arg("sim")
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?);
        place(&mut command, cpu, None);
        let mut child = command.spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        // "tokentrace sim listening on http://127.0.0.1:PORT/v1" (https with TLS)
        let addr = line
            .split("://")
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

/// Run `command` (and every thread and process it starts) on CPU `cpu` only (`--pin`), and at
/// nice value `nice` (`--client-nice`) when given.
pub fn place(command: &mut Command, cpu: Option<usize>, nice: Option<i32>) {
    if cpu.is_none() && nice.is_none() {
        return;
    }
    let placed = move || {
        if let Some(cpu) = cpu {
            // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET stays inside it (cpu is
            // 0 or 1 here), and sched_setaffinity reads exactly its size.
            let rc = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(nice) = nice {
            // SAFETY: setpriority on the child itself, before exec; threads it starts inherit it.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: between fork and exec the closure makes only system calls on the child itself,
    // through libc's thin wrappers (no lock, no allocation; the error reads errno).
    unsafe { std::os::unix::process::CommandExt::pre_exec(command, placed) };
}

/// Whether this process may start its clients at nice value `nice` (`--client-nice`), tried on
/// a thread of its own that then ends: a value below the bench's own needs root,
/// `CAP_SYS_NICE` or an `RLIMIT_NICE` that allows it, and without them the clients' spawn would
/// fail with a bare "Permission denied" after the simulator had started.
pub fn check_nice(nice: i32) -> io::Result<()> {
    let tried = std::thread::spawn(move || {
        // SAFETY: on Linux, PRIO_PROCESS with 0 is the calling thread alone, which ends here.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
        (rc == 0).then_some(()).ok_or_else(io::Error::last_os_error)
    })
    .join()
    .map_err(|_| io::Error::other("the thread trying --client-nice panicked"))?;
    tried.map_err(|err| {
        io::Error::other(format!(
            "--client-nice {nice}: this process may not run its clients at that priority \
             ({err}); a value below the bench's own needs root, CAP_SYS_NICE or an \
             RLIMIT_NICE of at least {} (ulimit -e)",
            20 - nice
        ))
    })
}

/// Run `command` to completion and reap it with wait4 (std's `wait` discards the rusage);
/// SIGKILL and an error after `limit`.
///
/// Peak RSS is the child's `VmHWM` from /proc, sampled every 10 ms while it runs, not wait4's
/// `ru_maxrss`: Linux carries the parent's RSS at spawn time into the child's `ru_maxrss`, and
/// this process holds whole truth logs in memory.
pub fn run_measured(command: Command, limit: Duration) -> io::Result<Reaped> {
    run_measured_inner(command, limit, false)
}

/// Like [`run_measured`] for a client made of several processes (a Python tool and its
/// services): it runs in its own process group, this process is made a child subreaper so
/// that descendants orphaned on the way are reparented here, and once the child has exited
/// every remaining member of its group is reaped too (SIGKILLed after 10 s), their CPU time
/// added. wait4 of the child already includes every descendant the child itself reaped.
/// On timeout the whole group is SIGKILLed. Peak RSS is the main process's only.
pub fn run_measured_tree(command: Command, limit: Duration) -> io::Result<Reaped> {
    // SAFETY: plain prctl; makes orphaned descendants our children instead of init's.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    run_measured_inner(command, limit, true)
}

fn run_measured_inner(mut command: Command, limit: Duration, tree: bool) -> io::Result<Reaped> {
    if tree {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
    }
    let child = command.spawn()?;
    let pid = child.id() as libc::pid_t;
    // The Child handle is not waited on again: wait4 below reaps the process.
    std::mem::forget(child);
    let status_path = format!("/proc/{pid}/status");
    let deadline = Instant::now() + limit;
    let mut peak_kib = 0u64;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes into it and into `status`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
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
        if !timed_out && Instant::now() >= deadline {
            timed_out = true;
            let target = if tree { -pid } else { pid };
            // SAFETY: kill(2) of our own child (or of the process group it leads).
            unsafe { libc::kill(target, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut cpu = crate::cpu_ns(&usage);
    if tree {
        cpu += reap_group(pid);
    }
    if timed_out {
        return Err(io::Error::other(format!(
            "killed after {} s",
            limit.as_secs()
        )));
    }
    Ok(Reaped {
        status,
        cpu_ns: cpu,
        max_rss_bytes: peak_kib * 1024,
    })
}

/// Reap what is left of process group `pgid` among our children (orphans reparented to this
/// subreaper); SIGKILL the group after 10 s. Returns their CPU ns.
fn reap_group(pgid: libc::pid_t) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut cpu = 0;
    let mut killed = false;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 writes into it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits only for our children in group `pgid`; pointers are valid.
        let rc = unsafe { libc::wait4(-pgid, &mut status, libc::WNOHANG, &mut usage) };
        if rc > 0 {
            cpu += crate::cpu_ns(&usage);
            continue;
        }
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return cpu; // ECHILD: none left
        }
        if !killed && Instant::now() >= deadline {
            killed = true;
            // SAFETY: kill(2) of the process group our child led.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `VmHWM` (peak resident set of the current address space) in KiB from a /proc status file.
pub fn vm_hwm_kib(status_path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(status_path).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
