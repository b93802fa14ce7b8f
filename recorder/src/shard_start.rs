//! Starting a shard: the clock anchor, the wait for the agreed instant (`--start-at`), and
//! what the shard's manifest says about its place in the run.

use crate::config::{Load, RecordConfig};
use crate::shard::plan_hash;
use crate::stream::StreamContext;
use std::time::Duration;
use tokentrace_format::clock::realtime_now_ns;
use tokentrace_format::shards::{ClockSync, ShardInfo, SPLIT_INTERLEAVED};
use tokentrace_format::ClockAnchor;

/// The furthest ahead a start may be: a typo in a date should not park a recorder for a year.
const LONGEST_WAIT: Duration = Duration::from_secs(24 * 3600);

/// Checks the sharding options.
pub fn validate(config: &RecordConfig) -> Result<(), String> {
    let shard = config.shard;
    if shard.is_sharded() && config.start_at_realtime_ns.is_none() {
        return Err(format!(
            "a sharded run needs --start-at: shard {}/{} must start its schedule at the same \
             instant as the others",
            shard.index, shard.count
        ));
    }
    if let Load::Closed { concurrency } = config.load {
        if shard.concurrency(concurrency) == 0 {
            return Err(format!(
                "--concurrency {concurrency} leaves shard {} of {} without a stream: give at \
                 least one per shard",
                shard.index, shard.count
            ));
        }
    }
    if let Some(at) = config.start_at_realtime_ns {
        let limit = realtime_now_ns().saturating_add(LONGEST_WAIT.as_nanos() as u64);
        if at > limit {
            return Err("--start-at is more than 24 hours away".into());
        }
    }
    if config
        .run_id
        .as_deref()
        .is_some_and(|id| id.trim().is_empty())
    {
        return Err("--run-id must not be empty".into());
    }
    Ok(())
}

/// The run id: given, or derived from the plan for a sharded run; None for a single process
/// that was given none.
pub fn run_id(config: &RecordConfig) -> Option<String> {
    if let Some(id) = &config.run_id {
        return Some(id.clone());
    }
    let at = config.start_at_realtime_ns?;
    config
        .shard
        .is_sharded()
        .then(|| format!("run-{:016x}", plan_hash(config, at)))
}

/// The clock anchor. When the agreed start has already passed, the anchor is placed at it (the
/// monotonic reading moved back by as much), so that every time of the run, which can only
/// come later, stays a non-negative offset and the schedule still starts at the agreed instant.
pub fn anchor(start_at_realtime_ns: Option<u64>) -> ClockAnchor {
    let now = ClockAnchor::now();
    match start_at_realtime_ns {
        Some(at) if at < now.realtime_ns => {
            let back = now.realtime_ns - at;
            match now.mono_ns.checked_sub(back) {
                Some(mono_ns) => ClockAnchor {
                    mono_ns,
                    realtime_ns: at,
                },
                None => now,
            }
        }
        _ => now,
    }
}

/// When the load began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The schedule's origin on the run's clock (the agreed instant when there is one).
    pub start_ns: u64,
    /// How late the load began after it, ns.
    pub lateness_ns: u64,
}

/// Waits for the agreed start (none: starts now).
pub async fn wait(ctx: &StreamContext, start_at: Option<u64>, anchor: &ClockAnchor) -> Started {
    let Some(at) = start_at else {
        return Started {
            start_ns: ctx.now_ns(),
            lateness_ns: 0,
        };
    };
    let target = at.saturating_sub(anchor.realtime_ns);
    let now = ctx.now_ns();
    if target > now {
        tokio::time::sleep(Duration::from_nanos(target - now)).await;
    }
    Started {
        start_ns: target,
        lateness_ns: ctx.now_ns().saturating_sub(target),
    }
}

/// The manifest's `shard` of a sharded run.
pub fn info(config: &RecordConfig, started: &Started) -> Option<ShardInfo> {
    let at = config.start_at_realtime_ns?;
    let run_id = run_id(config)?;
    config.shard.is_sharded().then(|| ShardInfo {
        run_id,
        index: config.shard.index,
        count: config.shard.count,
        plan_hash: format!("{:016x}", plan_hash(config, at)),
        split: SPLIT_INTERLEAVED.into(),
        start_at_realtime_ns: at,
        start_lateness_ns: started.lateness_ns,
        clock: ClockSync::read(),
    })
}
