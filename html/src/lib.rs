//! One self-contained HTML report of one or more analyzed traces, or of a capacity search: no
//! network, no CDN. Charts are inline SVG drawn by plotters; the request timeline is a canvas
//! drawn by a small script inlined from `assets/`, zoomable, over at most
//! [`model::TIMELINE_ROWS`] rows per run, so the page stays a few hundred KiB whatever the
//! run's size.
//!
//! Every panel is a `<section data-panel="NAME">`; the script marks the page
//! `data-ready="1"` once the timeline is drawn, and any script error is written into
//! `#report-errors`, so a browser test can check the page by its DOM.

pub mod capacity;
pub mod charts;
pub mod model;
mod page;
mod panels;

use std::path::PathBuf;
use tokentrace_analyzer::analysis::Analysis;
use tokentrace_analyzer::protocol::Protocol;
use tokentrace_analyzer::versus::Versus;

pub use page::Page;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    /// A chart could not be drawn.
    #[error("drawing a chart: {0}")]
    Chart(String),
    /// A trace could not be read again for its chunks.
    #[error("{path}: {source}")]
    Trace {
        /// The trace.
        path: PathBuf,
        /// What went wrong.
        source: tokentrace_format::FormatError,
    },
}

/// One trace analyzed under the report's protocol.
pub struct Run<'a> {
    /// How the page names it.
    pub label: String,
    /// Its analysis (of exactly one trace).
    pub analysis: Analysis<'a>,
}

/// The same runs under a second protocol, for the methodology panel.
pub struct VersusInput<'a> {
    /// The comparison of the first run under both protocols.
    pub versus: Versus,
    /// The report's protocol (A).
    pub a: &'a Protocol,
    /// The second protocol (B).
    pub b: &'a Protocol,
}

/// The report of traces: summary, failures, distributions, timeline, throughput over time,
/// and with two or more runs the `diff` of each against the first.
pub fn traces_report(
    title: &str,
    runs: &[Run<'_>],
    versus: Option<&VersusInput<'_>>,
) -> Result<String, HtmlError> {
    let mut page = Page::new(title);
    if let Some(first) = runs.first() {
        let p = first.analysis.protocol;
        page.subtitle(&format!(
            "protocol {} v{} · {} run{}",
            p.name,
            p.version,
            runs.len(),
            if runs.len() == 1 { "" } else { "s" }
        ));
    }
    panels::summary(&mut page, runs);
    panels::failures(&mut page, runs);
    panels::distributions(&mut page, runs)?;
    panels::timeline(&mut page, runs);
    panels::over_time(&mut page, runs)?;
    if runs.len() > 1 {
        panels::diff(&mut page, runs);
    }
    if let Some(v) = versus {
        panels::versus(&mut page, v);
    }
    Ok(page.finish())
}
