//! What the `tokentrace` and `tokentrace-record` programs share: their allocator, signal
//! dispositions set before any work, and how a command's result becomes the exit status.

use std::process::ExitCode;

/// Both programs allocate through mimalloc: at 2,048 streams × 2 ms it took about 8% off the
/// recorder's CPU per chunk, where glibc's per-thread arenas grew a few pages at a time
/// (about 12,000 `mprotect` calls in a run). Built without transparent huge pages, which put
/// 2 MiB pages under a few KiB of use (docs/PERFORMANCE.md, *mimalloc for both programs*).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h (the same number in its v2 and v3 headers).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory a thread frees goes back to the system at once rather than after mimalloc's default
/// 10 ms. A TLS handshake's buffers are freed on the runtime's threads while the stream reader
/// keeps allocating chunks on its own, and neither can reuse the other's free pages: held, they
/// added about 10 KiB of peak RSS per stream at 1,024 TLS streams; purged at once, about 1.
pub fn tune_allocator() {
    // SAFETY: sets one of mimalloc's integer options; any value is valid for it.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
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
