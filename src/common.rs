//! What the `tokentrace` and `tokentrace-record` programs share: signal dispositions set
//! before any work, and how a command's result becomes the exit status.

use std::process::ExitCode;

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
