//! One module per subcommand: its arguments and a `run` that calls the library crates.

pub mod analyze;
pub mod capacity;
pub mod demo;
pub mod diff;
pub mod import;
pub mod inspect;
pub mod protocols;
pub mod record;
pub mod redact;
pub mod sim;
