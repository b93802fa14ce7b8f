//! Sharded runs: one seeded plan recorded by N processes (docs/SCALE.md). Each shard's manifest
//! names the run, its place in it and its host's clock state ([`ShardInfo`]); [`ShardSet`]
//! checks that a set of traces is one run and puts every shard's times on one clock through
//! the shards' real-time anchors.

use crate::types::{Header, Manifest, RunEnd};
use serde::{Deserialize, Serialize};

/// The split of the plan's requests among shards: request `k` goes to shard `k mod N`.
pub const SPLIT_INTERLEAVED: &str = "interleaved";

/// A shard's place in a sharded run (manifest key `shard`, format 1.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// The run every shard belongs to (given, or derived from the plan).
    pub run_id: String,
    /// This shard, from 0.
    pub index: u32,
    /// Shards in the run.
    pub count: u32,
    /// XXH3 of the plan every shard derives its share from, 16 hex digits.
    pub plan_hash: String,
    /// How requests are split ([`SPLIT_INTERLEAVED`]).
    pub split: String,
    /// The agreed start (`--start-at`), ns since the Unix epoch.
    pub start_at_realtime_ns: u64,
    /// How late this shard's load began after the agreed start, ns (how long its runtime
    /// took to wake up; larger when the start had passed before the shard was ready).
    pub start_lateness_ns: u64,
    /// The host's clock synchronization when the shard started.
    pub clock: ClockSync,
}

/// What the kernel says about the real-time clock's synchronization (`adjtimex(2)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSync {
    /// Whether the clock is synchronized (an NTP/PTP daemon disciplines it); None when the
    /// kernel could not be asked.
    pub synchronized: Option<bool>,
    /// The kernel's bound on the clock's error, ns (`timex.maxerror`).
    pub max_error_ns: Option<u64>,
    /// The kernel's estimate of the clock's error, ns (`timex.esterror`).
    pub est_error_ns: Option<u64>,
}

impl ClockSync {
    /// Asks the kernel (a read-only `adjtimex`).
    pub fn read() -> ClockSync {
        // SAFETY: a zeroed timex with modes 0 asks adjtimex to change nothing and fill it in.
        let mut tx: libc::timex = unsafe { std::mem::zeroed() };
        // SAFETY: `tx` is a valid, writable timex.
        let state = unsafe { libc::adjtimex(&mut tx) };
        if state < 0 {
            return ClockSync::default();
        }
        let micros = |v: libc::c_long| u64::try_from(v).ok().map(|us| us.saturating_mul(1000));
        ClockSync {
            synchronized: Some(state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0),
            max_error_ns: micros(tx.maxerror),
            est_error_ns: micros(tx.esterror),
        }
    }
}

/// A shard the merge could not take whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncompleteShard {
    /// The shard.
    pub index: u32,
    /// Why (no run end: killed; the recorder's own reason otherwise).
    pub why: String,
}

/// A run made of shard traces (manifest key `shards` of a merged trace, format 1.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedShards {
    /// The run.
    pub run_id: String,
    /// Shards the plan had.
    pub count: u32,
    /// Shards present, ascending.
    pub present: Vec<u32>,
    /// Shards absent from the set, ascending.
    pub missing: Vec<u32>,
    /// Present shards that did not finish.
    pub incomplete: Vec<IncompleteShard>,
    /// The largest error two shards' clocks may have between them, ns (the sum of the two
    /// largest `max_error_ns`); None when a shard's host could not say.
    pub clock_uncertainty_ns: Option<u64>,
    /// Present shards whose host said its clock was not synchronized.
    #[serde(default)]
    pub unsynchronized: Vec<u32>,
    /// Each present shard's start lateness, ns, in `present` order.
    pub start_lateness_ns: Vec<u64>,
    /// Each present shard's host, in `present` order.
    pub hosts: Vec<String>,
}

impl MergedShards {
    /// Whether shards are missing or unfinished.
    pub fn is_partial(&self) -> bool {
        !self.missing.is_empty() || !self.incomplete.is_empty()
    }

    /// One sentence for a warning: what is missing and what the clocks allow.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "run {}: {} of {} shards",
            self.run_id,
            self.present.len(),
            self.count
        );
        if !self.missing.is_empty() {
            let list: Vec<String> = self.missing.iter().map(u32::to_string).collect();
            text.push_str(&format!("; missing shard {}", list.join(", ")));
        }
        for s in &self.incomplete {
            text.push_str(&format!("; shard {} incomplete ({})", s.index, s.why));
        }
        if !self.unsynchronized.is_empty() {
            let list: Vec<String> = self.unsynchronized.iter().map(u32::to_string).collect();
            text.push_str(&format!(
                "; the clock of shard {} was not synchronized",
                list.join(", ")
            ));
        }
        match self.clock_uncertainty_ns {
            Some(ns) => text.push_str(&format!(
                "; shard clocks may disagree by up to {:.3} ms",
                ns as f64 / 1e6
            )),
            None => text.push_str("; how far shard clocks may disagree is unknown"),
        }
        text
    }
}

/// Why a set of traces is not one sharded run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShardError {
    /// A trace was not recorded as a shard.
    #[error("trace {0} is not a shard (it has no `shard` in its manifest)")]
    NotAShard(usize),
    /// Two traces belong to different runs or plans.
    #[error("trace {other} belongs to {found}, not {expected}")]
    OtherRun {
        /// The trace that differs.
        other: usize,
        /// What the first trace says.
        expected: String,
        /// What this one says.
        found: String,
    },
    /// Two traces claim the same shard.
    #[error("shard {0} is given twice")]
    Duplicate(u32),
    /// A shard index past the count.
    #[error("shard {index} of a run of {count}")]
    OutOfRange {
        /// The index.
        index: u32,
        /// The count.
        count: u32,
    },
}

/// A checked set of shard traces: one run, every shard's clock offset to the base's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSet {
    /// The input whose clock the run is placed on (the lowest shard present).
    pub base: usize,
    /// Per input: ns to add to its times to place them on the base's clock.
    pub offsets_ns: Vec<i64>,
    /// What the set holds.
    pub merged: MergedShards,
}

/// One trace's part in a set: its header, manifest, run end and interrupted requests.
pub struct ShardTrace<'a> {
    /// The header (its anchor).
    pub header: &'a Header,
    /// The manifest (its `shard`).
    pub manifest: &'a Manifest,
    /// The run end, None when the recorder was killed.
    pub run_end: Option<&'a RunEnd>,
    /// Requests only checkpoints describe.
    pub interrupted: usize,
}

impl ShardSet {
    /// Checks `traces` are shards of one run and plan, and places them on one clock.
    pub fn of(traces: &[ShardTrace<'_>]) -> Result<ShardSet, ShardError> {
        let infos: Vec<&ShardInfo> = traces
            .iter()
            .enumerate()
            .map(|(i, t)| t.manifest.shard.as_ref().ok_or(ShardError::NotAShard(i)))
            .collect::<Result<_, _>>()?;
        let Some(first) = infos.first() else {
            return Err(ShardError::NotAShard(0));
        };
        let identity = |s: &ShardInfo| {
            format!(
                "run {} (plan {}, {} shards, start {})",
                s.run_id, s.plan_hash, s.count, s.start_at_realtime_ns
            )
        };
        let mut seen = Vec::new();
        for (i, s) in infos.iter().enumerate() {
            if identity(s) != identity(first) {
                return Err(ShardError::OtherRun {
                    other: i,
                    expected: identity(first),
                    found: identity(s),
                });
            }
            if s.index >= s.count {
                return Err(ShardError::OutOfRange {
                    index: s.index,
                    count: s.count,
                });
            }
            if seen.contains(&s.index) {
                return Err(ShardError::Duplicate(s.index));
            }
            seen.push(s.index);
        }
        let base = (0..infos.len())
            .min_by_key(|&i| infos[i].index)
            .unwrap_or(0);
        let base_realtime = i128::from(traces[base].header.anchor.realtime_ns);
        // A time t of trace i is at real time anchor_i + t, which is t + (anchor_i - anchor_b)
        // on the base's clock.
        let offsets_ns = traces
            .iter()
            .map(|t| {
                let d = i128::from(t.header.anchor.realtime_ns) - base_realtime;
                i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
            })
            .collect();
        let mut order: Vec<usize> = (0..infos.len()).collect();
        order.sort_by_key(|&i| infos[i].index);
        let present: Vec<u32> = order.iter().map(|&i| infos[i].index).collect();
        let missing = (0..first.count).filter(|i| !present.contains(i)).collect();
        let incomplete = order
            .iter()
            .filter_map(|&i| {
                let why = match traces[i].run_end {
                    None => Some("no run end: the recorder was killed".to_string()),
                    Some(end) if !matches!(end.reason.as_str(), "completed" | "duration") => {
                        Some(format!("ended: {}", end.reason))
                    }
                    Some(_) if traces[i].interrupted > 0 => {
                        Some(format!("{} interrupted requests", traces[i].interrupted))
                    }
                    Some(_) => None,
                };
                why.map(|why| IncompleteShard {
                    index: infos[i].index,
                    why,
                })
            })
            .collect();
        let mut errors: Vec<Option<u64>> =
            order.iter().map(|&i| infos[i].clock.max_error_ns).collect();
        let clock_uncertainty_ns = if errors.iter().all(Option::is_some) {
            let mut known: Vec<u64> = errors.drain(..).flatten().collect();
            known.sort_unstable_by(|a, b| b.cmp(a));
            Some(known.iter().take(2).sum())
        } else {
            None
        };
        Ok(ShardSet {
            base,
            offsets_ns,
            merged: MergedShards {
                run_id: first.run_id.clone(),
                count: first.count,
                present,
                missing,
                incomplete,
                clock_uncertainty_ns,
                unsynchronized: order
                    .iter()
                    .filter(|&&i| infos[i].clock.synchronized == Some(false))
                    .map(|&i| infos[i].index)
                    .collect(),
                start_lateness_ns: order.iter().map(|&i| infos[i].start_lateness_ns).collect(),
                hosts: order
                    .iter()
                    .map(|&i| traces[i].header.host.clone())
                    .collect(),
            },
        })
    }
}

/// `t + offset`, kept at 0 when a bad anchor would push it below the base's clock origin.
pub fn shift(t: u64, offset_ns: i64) -> u64 {
    u64::try_from(i128::from(t) + i128::from(offset_ns)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ClockAnchor;

    fn header(realtime_ns: u64, host: &str) -> Header {
        Header {
            major: 1,
            minor: 3,
            anchor: ClockAnchor {
                mono_ns: 5,
                realtime_ns,
            },
            host: host.into(),
            shard: 0,
        }
    }

    fn manifest(index: u32, max_error_us: u64) -> Manifest {
        Manifest {
            shard: Some(ShardInfo {
                run_id: "r".into(),
                index,
                count: 3,
                plan_hash: "00000000000000ab".into(),
                split: SPLIT_INTERLEAVED.into(),
                start_at_realtime_ns: 1_000,
                start_lateness_ns: 7,
                clock: ClockSync {
                    synchronized: Some(true),
                    max_error_ns: Some(max_error_us * 1000),
                    est_error_ns: None,
                },
            }),
            ..Manifest::default()
        }
    }

    #[test]
    fn offsets_come_from_the_real_time_anchors_and_missing_shards_are_named() {
        let (h2, h0) = (header(3_000_000_000, "b"), header(1_000_000_000, "a"));
        let (m2, m0) = (manifest(2, 500), manifest(0, 200));
        let end = RunEnd {
            reason: "completed".into(),
            ..RunEnd::default()
        };
        let set = ShardSet::of(&[
            ShardTrace {
                header: &h2,
                manifest: &m2,
                run_end: None,
                interrupted: 3,
            },
            ShardTrace {
                header: &h0,
                manifest: &m0,
                run_end: Some(&end),
                interrupted: 0,
            },
        ])
        .unwrap();
        assert_eq!(set.base, 1, "the lowest shard's clock");
        assert_eq!(set.offsets_ns, vec![2_000_000_000, 0]);
        assert_eq!(set.merged.present, vec![0, 2]);
        assert_eq!(set.merged.missing, vec![1]);
        assert_eq!(set.merged.incomplete.len(), 1);
        assert_eq!(set.merged.incomplete[0].index, 2);
        assert_eq!(set.merged.clock_uncertainty_ns, Some(700_000));
        assert_eq!(set.merged.hosts, vec!["a", "b"]);
        assert!(set.merged.is_partial());
        assert!(set.merged.describe().contains("missing shard 1"));
        assert_eq!(shift(10, -20), 0);
        assert_eq!(shift(10, 5), 15);
    }

    #[test]
    fn traces_of_other_runs_or_the_same_shard_twice_are_refused() {
        let h = header(1, "a");
        let (a, b) = (manifest(0, 1), manifest(0, 1));
        let mut other = manifest(1, 1);
        if let Some(s) = other.shard.as_mut() {
            s.run_id = "another".into();
        }
        let t = |m| ShardTrace {
            header: &h,
            manifest: m,
            run_end: None,
            interrupted: 0,
        };
        assert_eq!(
            ShardSet::of(&[t(&a), t(&b)]).unwrap_err(),
            ShardError::Duplicate(0)
        );
        assert!(matches!(
            ShardSet::of(&[t(&a), t(&other)]).unwrap_err(),
            ShardError::OtherRun { other: 1, .. }
        ));
        let plain = Manifest::default();
        assert_eq!(
            ShardSet::of(&[t(&a), t(&plain)]).unwrap_err(),
            ShardError::NotAShard(1)
        );
    }
}
