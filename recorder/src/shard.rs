//! One shard's share of a plan that N recorders run together with no coordinator
//! (docs/SCALE.md): every shard derives the same seeded plan, and shard `I` of `N` sends the
//! plan's requests `k ≡ I (mod N)` — interleaved, so each shard's load has the shape of the
//! whole (a contiguous split would give shard 0 the start of a ramp and shard N-1 its end).

use crate::config::{Load, PromptSource, RecordConfig};
use xxhash_rust::xxh3::xxh3_64;

/// This process's place among the shards of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardPlan {
    /// This shard, from 0.
    pub index: u32,
    /// Shards in the run (1: not sharded).
    pub count: u32,
}

impl Default for ShardPlan {
    fn default() -> Self {
        ShardPlan::SINGLE
    }
}

impl ShardPlan {
    /// A run recorded by one process.
    pub const SINGLE: ShardPlan = ShardPlan { index: 0, count: 1 };

    /// `I/N`, with `0 <= I < N`.
    pub fn parse(text: &str) -> Result<ShardPlan, String> {
        let bad = || format!("--shard {text}: expected I/N with 0 <= I < N, e.g. 0/4");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<u32>().map_err(|_| bad())?,
            n.trim().parse::<u32>().map_err(|_| bad())?,
        );
        ShardPlan::new(index, count).ok_or_else(bad)
    }

    /// Shard `index` of `count`, None unless `index < count`.
    pub fn new(index: u32, count: u32) -> Option<ShardPlan> {
        (index < count).then_some(ShardPlan { index, count })
    }

    /// Whether the run is split at all.
    pub fn is_sharded(&self) -> bool {
        self.count > 1
    }

    /// The plan's request id of this shard's `j`-th request.
    pub fn id(&self, j: u64) -> u64 {
        u64::from(self.index) + u64::from(self.count) * j
    }

    /// How many of the plan's first `total` requests are this shard's.
    pub fn share(&self, total: u64) -> u64 {
        let (i, n) = (u64::from(self.index), u64::from(self.count));
        if total <= i {
            0
        } else {
            (total - i).div_ceil(n)
        }
    }

    /// This shard's part of a closed loop's concurrency: as even as integers allow, the
    /// first `total mod N` shards taking one more.
    pub fn concurrency(&self, total: usize) -> usize {
        let (i, n) = (self.index as usize, self.count as usize);
        total / n + usize::from(i < total % n)
    }
}

/// The hash of what every shard must agree on: target, workload, load, seed, start and shard
/// count (not the shard index, nor anything a host decides for itself such as calibration).
pub fn plan_hash(config: &RecordConfig, start_at_realtime_ns: u64) -> u64 {
    let prompts = match &config.prompts {
        PromptSource::Synthetic { input_tokens } => format!("synthetic:{input_tokens}"),
        PromptSource::File(path) => format!("file:{}", path.display()),
    };
    let load = match config.load {
        Load::Closed { concurrency } => format!("closed:{concurrency}"),
        Load::Open { rate, arrival } => format!("open:{rate}:{arrival:?}"),
    };
    let text = format!(
        "{}|{:?}|{}|{:?}|{}|{:?}|{prompts}|{:?}|{}|{load}|{}|{start_at_realtime_ns}|{}",
        config.base_url,
        config.api,
        config.model,
        config.requests,
        config.warmup,
        config.duration,
        config.max_tokens,
        config.ignore_eos,
        config.seed,
        config.shard.count,
    );
    xxh3_64(text.as_bytes())
}

/// Parses `--start-at`: RFC 3339 in UTC or with an offset (`2026-12-01T15:00:00Z`,
/// `2026-12-01T16:00:00.250+01:00`) or Unix milliseconds; ns since the Unix epoch.
pub fn parse_start_at(text: &str) -> Result<u64, String> {
    let bad = || {
        format!("--start-at {text}: expected RFC 3339 (2026-12-01T15:00:00Z) or Unix milliseconds")
    };
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u64>()
            .ok()
            .and_then(|ms| ms.checked_mul(1_000_000))
            .ok_or_else(bad);
    }
    rfc3339_ns(t).ok_or_else(bad)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` as ns since the Unix epoch.
fn rfc3339_ns(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = t.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &t[19..];
    let mut nanos: i64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        nanos = frac[..digits].parse::<i64>().ok()? * 10i64.pow(9 - digits as u32);
        rest = &frac[digits..];
    }
    let offset_s: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hm = rest.get(1..)?;
            let (h, m) = hm.split_once(':')?;
            if h.len() != 2 || m.len() != 2 {
                return None;
            }
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
    };
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(nanos).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_together_send_every_request_once() {
        for n in 1..=5u32 {
            for total in [0u64, 1, 7, 40, 41] {
                let mut ids: Vec<u64> = (0..n)
                    .flat_map(|i| {
                        let s = ShardPlan::new(i, n).unwrap();
                        (0..s.share(total)).map(move |j| s.id(j))
                    })
                    .collect();
                ids.sort_unstable();
                assert_eq!(ids, (0..total).collect::<Vec<_>>(), "n={n} total={total}");
            }
        }
    }

    #[test]
    fn concurrency_splits_as_evenly_as_integers_allow() {
        let shares: Vec<usize> = (0..4)
            .map(|i| ShardPlan::new(i, 4).unwrap().concurrency(10))
            .collect();
        assert_eq!(shares, vec![3, 3, 2, 2]);
        assert_eq!(shares.iter().sum::<usize>(), 10);
    }

    #[test]
    fn shard_specs_are_checked() {
        assert_eq!(
            ShardPlan::parse("2/4"),
            Ok(ShardPlan { index: 2, count: 4 })
        );
        assert!(ShardPlan::parse("4/4").is_err());
        assert!(ShardPlan::parse("x/4").is_err());
        assert!(ShardPlan::parse("3").is_err());
    }

    #[test]
    fn start_times_parse_as_rfc3339_or_unix_ms() {
        // date -u -d 2026-12-01T15:00:00Z +%s → 1796137200
        assert_eq!(
            parse_start_at("2026-12-01T15:00:00Z"),
            Ok(1_796_137_200_000_000_000)
        );
        assert_eq!(
            parse_start_at("2026-12-01T16:00:00.25+01:00"),
            Ok(1_796_137_200_250_000_000)
        );
        assert_eq!(
            parse_start_at("1796137200000"),
            Ok(1_796_137_200_000_000_000)
        );
        assert!(parse_start_at("2026-13-01T15:00:00Z").is_err());
        assert!(parse_start_at("tomorrow").is_err());
        assert!(
            parse_start_at("2026-12-01T15:00:00").is_err(),
            "a zone is required"
        );
    }
}
