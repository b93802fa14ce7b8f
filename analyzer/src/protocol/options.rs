//! Protocol options for the arithmetic of a tool whose numbers a protocol reproduces: the unit
//! statistics of times are taken in, what a negative time becomes, the span throughputs divide
//! by, and how a rate is computed. Each default is tokentrace's own arithmetic, so a protocol
//! that names none of them computes exactly as before they existed.

use super::Anchor;
use serde::{Deserialize, Serialize};

/// The unit the statistics of a time metric are taken in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeStatistics {
    /// Each request's time is converted to the metric's unit (ms, or s) and the statistics
    /// are taken of those values; the wall clock is kept in ms.
    #[default]
    Converted,
    /// The statistics are taken of the integer-ns values and each result but `samples` is
    /// multiplied by 1e-6 for ms (1e-9 for s); the wall clock in seconds is its ns span times
    /// 1e-9. AIPerf keeps its times in ns and converts only its results this way, so its
    /// percentiles are only reproduced to the last bit from ns values.
    Ns,
}

/// What a time whose end anchor comes before its start anchor becomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NegativeTimes {
    /// It stays negative, so an anchor out of order is visible in the statistics.
    #[default]
    Keep,
    /// It is clamped to 0 and the request stays counted (a tool that refuses such a record
    /// would otherwise lose it, where one monotonic clock can only have rounded it).
    Clamp,
}

/// Which requests the wall clock spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WallClockRequests {
    /// Every request of the counted phases, failed ones included.
    #[default]
    All,
    /// Only the requests that enter the metrics.
    Counted,
}

/// The span run-level rates divide by (`wall_clock_ms`, `wall_clock_s`, `per_wall_second`,
/// `request_throughput`, goodput): from the earliest `from` to the latest `to` among the
/// `requests` that reached both anchors, each time mapped to the realtime clock through its
/// trace's anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WallClock {
    /// Where the span starts (the earliest of these among the requests).
    #[serde(default = "send")]
    pub from: Anchor,
    /// Where the span ends (the latest of these among the requests).
    #[serde(default = "end")]
    pub to: Anchor,
    /// Which requests it spans.
    #[serde(default)]
    pub requests: WallClockRequests,
    /// Whether a run imported as one trace uses the window its tool divided by (kept by the
    /// importer in the manifest) instead; false when that window is not the protocol's span.
    #[serde(default = "yes")]
    pub imported_window: bool,
}

fn send() -> Anchor {
    Anchor::Send
}

fn end() -> Anchor {
    Anchor::End
}

fn yes() -> bool {
    true
}

impl Default for WallClock {
    fn default() -> Self {
        WallClock {
            from: send(),
            to: end(),
            requests: WallClockRequests::default(),
            imported_window: true,
        }
    }
}

/// How a `rate` quantity is computed from its count `n = count - minus` and its interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateForm {
    /// `n / (interval ms / 1000)`; undefined for an interval that is not positive (0 for
    /// n = 0).
    #[default]
    CountPerSecond,
    /// `1 / ((interval ns / n) × 1e-9)`: the reciprocal of the time per unit in seconds,
    /// undefined for n = 0 or a time per unit that is not positive. AIPerf derives its
    /// per-user throughput so, inverting its ITL converted to seconds; the two forms differ
    /// only in rounding where both are defined.
    ReciprocalPerUnit,
}

/// Whether a value is its type's default (options left at their default are not printed, so
/// `tokentrace protocols NAME` shows only what a protocol chose).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
