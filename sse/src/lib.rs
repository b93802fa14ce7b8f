//! What one server-sent event of an OpenAI-compatible stream is: the incremental SSE parser
//! ([`parser`]) and the one classifier of event payloads ([`classify`]).
//!
//! The recorder runs both on its receive path; the importers run the classifier on the payloads
//! other tools saved. Keeping a single copy is what makes a recorded and an imported trace mean
//! the same by each channel.

pub mod classify;
pub mod parser;
