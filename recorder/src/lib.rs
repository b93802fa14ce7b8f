//! The recorder: a minimal-overhead load generator for OpenAI-compatible streaming endpoints.
//! It timestamps every body read before parsing anything, classifies SSE events, and hands
//! whole requests to the trace writer thread.
//!
//! In-process callers build a [`RecordConfig`] and call [`run()`] (or [`run_async`] from inside
//! a tokio runtime); the command line only maps its arguments onto the config.

pub mod body;
pub mod calibrate;
pub mod config;
pub mod epoll;
pub mod error;
pub mod h1;
pub mod health;
pub mod http;
pub mod load;
pub mod manifest;
pub mod progress;
pub mod prompts;
pub mod read_clock;
pub mod reader;
pub mod run;
pub mod schedule;
pub mod scheduling;
pub mod server_info;
pub mod shard;
pub mod shard_start;
pub mod stream;

pub use config::{
    Api, Arrival, Capture, ClientKind, HttpVersion, Load, ProgressMode, PromptSource, RecordConfig,
    DEFAULT_ZSTD_LEVEL,
};
pub use error::RecordError;
pub use run::{run, run_async, RunSummary};
