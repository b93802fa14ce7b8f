//! One module per subcommand: its arguments and a `run` that calls the library crates.

pub mod analyze;
pub mod capacity;
pub mod capacity_table;
pub mod demo;
pub mod diff;
pub mod export;
pub mod import;
pub mod inspect;
pub mod merge;
pub mod protocols;
pub mod record;
pub mod redact;
pub mod report;
pub mod sim;
