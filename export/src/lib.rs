//! Exports of tokentrace traces for the tools people already use: a Parquet dataset
//! (`requests.parquet`, `chunks.parquet`) for DuckDB, pandas, polars or Spark, and a Chrome
//! trace-event timeline that opens in ui.perfetto.dev. docs/EXPORT.md describes both.

pub mod error;
pub mod parquet;
pub mod perfetto;
pub mod run;
pub mod walk;

pub use error::ExportError;
