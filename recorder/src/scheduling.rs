//! How the kernel schedules the recorder: its nice value, its scheduling policy and the CPUs it
//! may run on, as the manifest records them (`extra.scheduling`, docs/FORMAT.md section 3.1).
//!
//! Why a trace keeps this: each read is stamped with the kernel's receive time, so a reader that
//! comes late does not move an event's time, unless the server writes again on that connection
//! before the read. The kernel then hands both writes over in one read, stamped with the later
//! one's time. How late the stream reader comes is a matter of scheduling on a busy host, and
//! `nice -n -5 tokentrace record …` changes it (docs/PERFORMANCE.md, *The reader's place in
//! the scheduler*). Two traces recorded at different priorities are not alike, and the
//! manifest says so.
//!
//! Read on the thread that builds the manifest: on Linux a thread's nice value is its own, and
//! threads started later (the stream reader, the writer) inherit it from the one that starts
//! them.

use serde_json::{json, Value};

/// The calling thread's scheduling as a JSON object: `nice` (integer), `policy` (`other`,
/// `batch`, `idle`, `fifo`, `rr`, `deadline`, or the kernel's number for one it does not name),
/// `rt_priority` (integer; 0 outside the real-time policies) and `cpus` (how many CPUs it may
/// run on). A value the kernel would not give is left out.
pub fn describe() -> Value {
    let mut out = serde_json::Map::new();
    if let Some(nice) = nice() {
        out.insert("nice".into(), json!(nice));
    }
    if let Some((policy, rt_priority)) = policy() {
        out.insert("policy".into(), policy);
        out.insert("rt_priority".into(), json!(rt_priority));
    }
    if let Ok(cpus) = std::thread::available_parallelism() {
        out.insert("cpus".into(), json!(cpus.get()));
    }
    Value::Object(out)
}

/// The calling thread's nice value (-20 to 19).
#[cfg(target_os = "linux")]
fn nice() -> Option<i32> {
    // getpriority returns -1 both as a nice value and on failure; errno tells them apart.
    // SAFETY: errno is this thread's own; getpriority reads nothing from us.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    };
    let failed = nice == -1 && std::io::Error::last_os_error().raw_os_error() != Some(0);
    (!failed).then_some(nice)
}

#[cfg(not(target_os = "linux"))]
fn nice() -> Option<i32> {
    None
}

/// The calling thread's scheduling policy and real-time priority.
#[cfg(target_os = "linux")]
fn policy() -> Option<(Value, i32)> {
    // SAFETY: both calls only write into the zeroed sched_param we own.
    let (policy, param) = unsafe {
        let mut param: libc::sched_param = std::mem::zeroed();
        let policy = libc::sched_getscheduler(0);
        let rc = libc::sched_getparam(0, &mut param);
        (policy, (rc == 0).then_some(param))
    };
    let name = match policy {
        -1 => return None,
        libc::SCHED_OTHER => json!("other"),
        libc::SCHED_BATCH => json!("batch"),
        libc::SCHED_IDLE => json!("idle"),
        libc::SCHED_FIFO => json!("fifo"),
        libc::SCHED_RR => json!("rr"),
        // SCHED_DEADLINE, which the libc crate does not name.
        6 => json!("deadline"),
        other => json!(other),
    };
    Some((name, param.map_or(0, |p| p.sched_priority)))
}

#[cfg(not(target_os = "linux"))]
fn policy() -> Option<(Value, i32)> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A thread made nicer than it was reports the new value (raising one's own nice value
    /// needs no privilege), and its policy and CPUs come with it.
    #[test]
    fn reports_the_calling_threads_nice_value() {
        let seen = std::thread::spawn(|| {
            let before = describe()["nice"].as_i64().expect("nice of a fresh thread");
            let wanted = (before + 3).min(19);
            // SAFETY: on Linux, PRIO_PROCESS with 0 is the calling thread alone.
            let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, wanted as i32) };
            assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
            (before, wanted, describe())
        })
        .join()
        .expect("thread");
        let (before, wanted, after) = seen;
        assert_eq!(after["nice"], json!(wanted), "{after}");
        assert!(after["policy"].is_string(), "{after}");
        assert!(after["cpus"].as_u64().is_some_and(|n| n >= 1), "{after}");
        // The value is the thread's own: the one that started it kept what it had.
        assert_eq!(describe()["nice"], json!(before));
    }
}
