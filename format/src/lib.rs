//! The tokentrace trace file, format version 1: record types, a writer thread fed through a
//! bounded channel, an mmap reader that verifies and recovers, and the clock anchor.
//!
//! Nothing here speaks to the network. docs/FORMAT.md specifies every byte.

pub mod types;

pub use types::*;
