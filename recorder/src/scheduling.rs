//! How the kernel schedules the recorder: its nice value, its scheduling policy and the CPUs it
//! may use, as the manifest records them (`extra.scheduling`, docs/FORMAT.md section 3.1).
//!
//! Why a trace keeps this: each read is stamped with the kernel's receive time, so a reader that
//! comes late does not move an event's time, unless the server writes again on that connection
//! before the read. The kernel then hands both writes over in one read, stamped with the later
//! one's time. How late the stream reader comes is a matter of scheduling on a busy host, and
//! `nice -n -5 tokentrace record …` changes it (docs/performance/2026-12-07.md, *The reader's place
//! in the scheduler*). Two traces recorded at different priorities are not alike, and the manifest
//! says so.
//!
//! Read on the thread that builds the manifest: on Linux a thread's nice value is its own, and
//! threads started later (the stream reader, the writer) inherit it from the one that starts
//! them, unless the policy carries `SCHED_RESET_ON_FORK` (recorded as `reset_on_fork`).

use serde_json::{json, Value};

/// The calling thread's scheduling as a JSON object: `nice` (integer), `policy` (`other`,
/// `batch`, `idle`, `fifo`, `rr`, `deadline`, or the kernel's number for one it does not name),
/// `reset_on_fork` (true when the threads it starts fall back to `other` and nice 0),
/// `rt_priority` (integer; 0 outside the real-time policies) and `cpus` (the CPUs it may use:
/// the affinity mask, lowered to the cgroup's CPU quota). A value the kernel would not give is
/// left out.
pub fn describe() -> Value {
    let mut out = serde_json::Map::new();
    if let Some(nice) = nice() {
        out.insert("nice".into(), json!(nice));
    }
    // SAFETY: sched_getscheduler only reads the calling thread's policy.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy != -1 {
        let (name, reset_on_fork) = named_policy(policy);
        out.insert("policy".into(), name);
        if reset_on_fork {
            out.insert("reset_on_fork".into(), json!(true));
        }
    }
    if let Some(rt_priority) = rt_priority() {
        out.insert("rt_priority".into(), json!(rt_priority));
    }
    if let Ok(cpus) = std::thread::available_parallelism() {
        out.insert("cpus".into(), json!(cpus.get()));
    }
    Value::Object(out)
}

/// The calling thread's nice value (-20 to 19).
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

/// The name of a policy as `sched_getscheduler` gives it, and whether it carries
/// `SCHED_RESET_ON_FORK` (which the kernel ORs into the number, as rtkit and `chrt -R` set it).
fn named_policy(raw: i32) -> (Value, bool) {
    let name = match raw & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_OTHER => json!("other"),
        libc::SCHED_BATCH => json!("batch"),
        libc::SCHED_IDLE => json!("idle"),
        libc::SCHED_FIFO => json!("fifo"),
        libc::SCHED_RR => json!("rr"),
        libc::SCHED_DEADLINE => json!("deadline"),
        other => json!(other),
    };
    (name, raw & libc::SCHED_RESET_ON_FORK != 0)
}

/// The calling thread's real-time priority (0 outside `fifo` and `rr`).
fn rt_priority() -> Option<i32> {
    // SAFETY: sched_getparam only writes into the zeroed sched_param we own.
    let (rc, param) = unsafe {
        let mut param: libc::sched_param = std::mem::zeroed();
        (libc::sched_getparam(0, &mut param), param)
    };
    (rc == 0).then_some(param.sched_priority)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread made nicer than it was reports the new value (raising one's own nice value
    /// needs no privilege), and its policy and CPUs come with it.
    #[test]
    fn reports_the_calling_threads_nice_value() {
        let seen = std::thread::spawn(|| {
            let before = describe()["nice"].as_i64().expect("nice of a fresh thread");
            if before == 19 {
                return None;
            }
            let wanted = (before + 3).min(19);
            // SAFETY: on Linux, PRIO_PROCESS with 0 is the calling thread alone.
            let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, wanted as i32) };
            assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
            Some((before, wanted, describe()))
        })
        .join()
        .expect("thread");
        let Some((before, wanted, after)) = seen else {
            eprintln!("skipped: this test already runs at nice 19, so it cannot be made nicer");
            return;
        };
        assert_eq!(after["nice"], json!(wanted), "{after}");
        assert!(after["policy"].is_string(), "{after}");
        assert!(after["cpus"].as_u64().is_some_and(|n| n >= 1), "{after}");
        // The value is the thread's own: the one that started it kept what it had.
        assert_eq!(describe()["nice"], json!(before));
    }

    #[test]
    fn policies_are_named_apart_from_the_reset_on_fork_flag() {
        assert_eq!(named_policy(libc::SCHED_BATCH), (json!("batch"), false));
        assert_eq!(
            named_policy(libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK),
            (json!("fifo"), true)
        );
        assert_eq!(
            named_policy(libc::SCHED_DEADLINE),
            (json!("deadline"), false)
        );
        assert_eq!(named_policy(99), (json!(99), false));
    }
}
