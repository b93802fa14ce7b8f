//! What the `tokentrace` and `tokentrace-record` programs share: their allocator, signal
//! dispositions set before any work, and how a command's result becomes the exit status.

use std::process::ExitCode;

/// Both programs allocate through mimalloc: at 2,048 streams × 2 ms it took about 8% off the
/// recorder's CPU per chunk, where glibc's per-thread arenas grew a few pages at a time
/// (about 12,000 `mprotect` calls in a run). Built without transparent huge pages, which put
/// 2 MiB pages under a few KiB of use (docs/performance/2026-12-04-to-05.md, *mimalloc for both
/// programs*).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Has each thread of a recording's runtime hand its empty pages back to mimalloc's arenas as
/// it goes idle ([`tokentrace_recorder::run::on_runtime_idle`]); the arenas return them to the
/// system after mimalloc's 10 ms delay, from whichever thread allocates next. A thread keeps
/// the pages it emptied until it allocates again: a runtime thread frees a TLS handshake's
/// buffers and may then sleep for the rest of the run (about 10 KiB of peak RSS per stream at
/// 1,024 TLS streams held that way). The threads that keep allocating (the stream reader, the
/// trace writer) reuse their pages within the delay instead of faulting fresh ones in, which
/// a delay of 0 made them do (docs/performance/2026-12-04-to-05.md, *Freed memory kept for reuse*).
pub fn tune_allocator() {
    tokentrace_recorder::run::on_runtime_idle(release_freed_memory);
}

/// At most one collection per thread in this long: a runtime thread of an open loop parks
/// between most arrivals, and a collection walks the thread's pages.
const COLLECT_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// Collects the calling thread's heap (not forced: nothing is purged before its delay),
/// unless it did so less than [`COLLECT_EVERY`] ago.
fn release_freed_memory() {
    use std::cell::Cell;
    use std::time::Instant;
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    if LAST
        .get()
        .is_some_and(|last| now.duration_since(last) < COLLECT_EVERY)
    {
        return;
    }
    LAST.set(Some(now));
    // SAFETY: mi_collect has no preconditions; it collects the calling thread's heap.
    unsafe { libmimalloc_sys::mi_collect(false) }
}

/// The error and its causes joined by ": ", leaving out a cause whose text the message before
/// it already ends with (library errors that print their source, e.g. `{path}: {source}`).
pub fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let line = cause.to_string();
        if text.is_empty() {
            text = line;
        } else if !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
    }
    text
}

/// Sets the signal dispositions; call it before any thread starts.
///
/// SIGXFSZ is ignored, so a file-size limit (`ulimit -f`) makes a write fail with "File too
/// large", reported and handled like a full disk, instead of killing the process mid-trace.
/// With `default_sigpipe` SIGPIPE gets its default back (for commands that only print);
/// without it SIGPIPE stays as the Rust runtime leaves it (ignored), so a command that writes
/// to sockets sees a closed peer as an error instead of dying of it.
pub fn set_signals(default_sigpipe: bool) {
    // SAFETY: setting dispositions before any thread starts; SIG_IGN and SIG_DFL are valid
    // handlers for these signals.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        if default_sigpipe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

/// The exit status of a command's result: its own on success; on error, `error: …` with the
/// causes on stderr and status 2.
pub fn exit_code(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", error_text(&err));
            ExitCode::from(2)
        }
    }
}
