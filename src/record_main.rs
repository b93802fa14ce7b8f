//! `tokentrace-record`: `tokentrace record` as a program of its own, for small load hosts.
//!
//! It takes the same flags as `tokentrace record`, behaves the same and exits with the same
//! codes (2 on error), but is built from the format, sse and recorder crates only:
//! `cargo build --release --no-default-features --bin tokentrace-record`.

#[path = "cmd/record.rs"]
mod record;

mod common;

use clap::Parser;

/// Record a load run against an OpenAI-compatible endpoint into a trace (what `tokentrace
/// record` does, without the rest of tokentrace).
#[derive(Parser)]
#[command(name = "tokentrace-record", version)]
struct Cli {
    #[command(flatten)]
    args: record::Args,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Record writes to sockets: SIGPIPE stays ignored, as for `tokentrace record`.
    common::set_signals(false);
    common::tune_allocator();
    common::exit_code(record::run(cli.args))
}
