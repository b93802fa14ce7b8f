//! The two clocks of a trace. Event times are CLOCK_MONOTONIC (immune to NTP steps) relative to
//! the anchor; CLOCK_REALTIME read right next to it lets a reader map them to wall-clock time.

use crate::types::ClockAnchor;

fn read_clock(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        // CLOCK_MONOTONIC and CLOCK_REALTIME are always available on Linux and macOS; a failure
        // would mean a broken libc, and 0 is a visible, harmless value in that case.
        return 0;
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Absolute CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn mono_now_ns() -> u64 {
    read_clock(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch.
#[inline]
pub fn realtime_now_ns() -> u64 {
    read_clock(libc::CLOCK_REALTIME)
}

/// CPU time consumed by this process (all threads), in nanoseconds: what a benchmark or a
/// health report should quote on a shared host, where wall time includes other tenants' work.
pub fn process_cpu_ns() -> u64 {
    read_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    read_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

impl ClockAnchor {
    /// Reads both clocks back to back. The monotonic clock is read on both sides of the
    /// real-time read and averaged, which halves the pairing error.
    pub fn now() -> ClockAnchor {
        let before = mono_now_ns();
        let realtime_ns = realtime_now_ns();
        let after = mono_now_ns();
        ClockAnchor {
            mono_ns: before + (after.saturating_sub(before)) / 2,
            realtime_ns,
        }
    }

    /// Nanoseconds from this anchor to now on the monotonic clock (the unit of event times).
    #[inline]
    pub fn elapsed_ns(&self) -> u64 {
        mono_now_ns().saturating_sub(self.mono_ns)
    }

    /// Wall-clock time (ns since the epoch) of an event time relative to this anchor.
    pub fn to_realtime_ns(&self, event_ns: u64) -> u64 {
        self.realtime_ns.saturating_add(event_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_does_not_go_back() {
        let a = mono_now_ns();
        let b = mono_now_ns();
        assert!(a > 0);
        assert!(b >= a);
    }

    #[test]
    fn cpu_clocks_advance_with_work() {
        let (p, t) = (process_cpu_ns(), thread_cpu_ns());
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > t);
        assert!(process_cpu_ns() > p);
    }

    #[test]
    fn anchor_pairs_clocks() {
        let anchor = ClockAnchor::now();
        // The realtime clock is past 2020-01-01 on any machine that records traces.
        assert!(anchor.realtime_ns > 1_577_836_800_000_000_000);
        assert!(anchor.elapsed_ns() < 10_000_000_000);
    }
}

/// `2026-09-05T03:46:17Z` from ns since the Unix epoch (whole seconds, UTC).
pub fn utc_iso8601(realtime_ns: u64) -> String {
    let secs = realtime_ns / 1_000_000_000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (never negative here).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// `realtime_ns` as `YYYY-MM-DD HH:MM:SS UTC`, for people.
pub fn utc_text(realtime_ns: u64) -> String {
    utc_iso8601(realtime_ns)
        .replace('T', " ")
        .replace('Z', " UTC")
}

#[cfg(test)]
mod utc_tests {
    use super::utc_text;

    #[test]
    fn dates_as_python_prints_them() {
        // datetime.fromtimestamp(t, timezone.utc) for each t.
        assert_eq!(utc_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            utc_text(1_764_374_400_000_000_000),
            "2025-11-29 00:00:00 UTC"
        );
        assert_eq!(utc_text(951_782_400_000_000_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(
            utc_text(1_796_111_714_790_201_628),
            "2026-12-01 07:55:14 UTC"
        );
    }
}
