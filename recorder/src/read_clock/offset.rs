//! CLOCK_REALTIME − CLOCK_MONOTONIC, for moving the kernel's receive times (CLOCK_REALTIME)
//! onto the monotonic clock every other time in a trace is on.
//!
//! Measuring it takes three clock reads (monotonic, realtime, monotonic), up to three times;
//! with one conversion per read that was three of the four clock reads each read cost. The
//! offset moves only when the realtime clock is slewed or stepped, so each thread keeps the
//! last good measurement for [`REUSE_NS`] and measures again after it.

use std::cell::Cell;
use tokentrace_format::clock::{mono_now_ns, realtime_now_ns};

/// How long a measured offset is reused. NTP slews CLOCK_REALTIME by at most 500 ppm, so in
/// 1 ms the offset moves by at most 0.5 µs, under the measurement's own width; a step of the
/// clock is seen within 1 ms.
const REUSE_NS: u64 = 1_000_000;

/// A measurement is kept for reuse only when its two monotonic reads were this close: a
/// wider one (the thread was preempted between them) is used once and measured again.
const KEEP_WIDTH_NS: u64 = 1_000;

thread_local! {
    static CACHE: Cell<Cached> = const { Cell::new(Cached::EMPTY) };
}

/// The current offset, in ns: measured again when this thread's last good measurement is
/// more than [`REUSE_NS`] old.
pub(super) fn realtime_minus_mono_ns() -> u64 {
    let now = mono_now_ns();
    CACHE.with(|cache| {
        let mut cached = cache.get();
        let offset = cached.get(now, measure);
        cache.set(cached);
        offset
    })
}

/// One thread's kept measurement.
#[derive(Clone, Copy, Debug)]
struct Cached {
    /// Monotonic ns when it was measured (0: none kept).
    at: u64,
    offset: u64,
}

impl Cached {
    const EMPTY: Cached = Cached { at: 0, offset: 0 };

    /// The offset at monotonic time `now`: the kept one while it is young enough, else a new
    /// one from `measure` (its width and offset), kept only when it is narrow.
    fn get(&mut self, now: u64, measure: impl FnOnce() -> (u64, u64)) -> u64 {
        if self.at != 0 && now >= self.at && now - self.at < REUSE_NS {
            return self.offset;
        }
        let (width, offset) = measure();
        *self = if width < KEEP_WIDTH_NS {
            Cached { at: now, offset }
        } else {
            Cached::EMPTY
        };
        offset
    }
}

/// The offset from the tightest of up to three bracketed readings, so a preemption between two
/// clock reads cannot shift a converted timestamp by its length; with the width it was read in.
fn measure() -> (u64, u64) {
    let mut best = (u64::MAX, 0u64);
    for _ in 0..3 {
        let before = mono_now_ns();
        let real = realtime_now_ns();
        let after = mono_now_ns();
        let width = after.saturating_sub(before);
        if width < best.0 {
            best = (width, real.saturating_sub(before + width / 2));
        }
        if width < KEEP_WIDTH_NS {
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_measurement_is_reused_for_a_millisecond_then_taken_again() {
        let mut cached = Cached::EMPTY;
        let mut calls = 0;
        let mut offset_at = |offset: u64, now: u64, cached: &mut Cached| {
            cached.get(now, || {
                calls += 1;
                (200, offset)
            })
        };
        assert_eq!(offset_at(7, 5_000_000, &mut cached), 7);
        assert_eq!(
            offset_at(8, 5_999_999, &mut cached),
            7,
            "reused within the window"
        );
        assert_eq!(
            offset_at(9, 6_000_000, &mut cached),
            9,
            "measured again after it"
        );
        assert_eq!(offset_at(10, 6_000_001, &mut cached), 9);
        assert_eq!(calls, 2);
    }

    #[test]
    fn a_wide_measurement_is_used_once_and_not_kept() {
        let mut cached = Cached::EMPTY;
        let mut calls = 0;
        let mut offset_at = |width: u64, offset: u64, now: u64, cached: &mut Cached| {
            cached.get(now, || {
                calls += 1;
                (width, offset)
            })
        };
        assert_eq!(offset_at(50_000, 3, 1_000, &mut cached), 3);
        assert_eq!(
            offset_at(200, 4, 1_001, &mut cached),
            4,
            "not reused: measured"
        );
        assert_eq!(
            offset_at(200, 5, 1_002, &mut cached),
            4,
            "the narrow one is"
        );
        assert_eq!(calls, 2);
    }

    #[test]
    fn a_clock_that_went_back_is_measured_again() {
        // A cache from another thread's clock reading cannot happen (thread-local), but a
        // kept time after `now` must never be trusted.
        let mut cached = Cached {
            at: 9_000_000,
            offset: 1,
        };
        assert_eq!(cached.get(8_000_000, || (100, 2)), 2);
    }

    #[test]
    fn the_offset_matches_a_fresh_measurement() {
        let (_, fresh) = measure();
        let cached = realtime_minus_mono_ns();
        let again = realtime_minus_mono_ns();
        // Slack for the clocks' own disagreement (an NTP slew in progress) and a preempted
        // measurement: 1 ms.
        assert!(cached.abs_diff(fresh) < 1_000_000, "{cached} vs {fresh}");
        assert!(again.abs_diff(fresh) < 1_000_000, "{again} vs {fresh}");
    }
}
