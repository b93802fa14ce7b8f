//! The few wall-clock conversions imports need: naive date-times as written by Python's
//! `datetime.isoformat()` and `strftime("%Y%m%d-%H%M%S")`, read as UTC.
//!
//! Both tools write naive local time; the hosts they run on are normally on UTC, and where
//! they are not the manifest says the wall clock is approximate.

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Nanoseconds since the epoch of a UTC date-time, `None` when out of range.
fn to_ns(year: i64, month: u32, day: u32, h: u32, mi: u32, s: u32, nanos: u64) -> Option<u64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + i64::from(h * 3600 + mi * 60 + s);
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos)
}

fn num(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.ffffff]` (a trailing `Z` or `+00:00` is accepted).
pub(crate) fn parse_iso(text: &str) -> Option<u64> {
    let text = text.trim().trim_end_matches('Z').trim_end_matches("+00:00");
    let (date, clock) = text.split_once(['T', ' '])?;
    let mut d = date.split('-');
    let (year, month, day) = (num(d.next()?)?, num(d.next()?)?, num(d.next()?)?);
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut c = hms.split(':');
    let (h, mi, s) = (num(c.next()?)?, num(c.next()?)?, num(c.next()?)?);
    let nanos = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().take(9).collect();
        u64::from(num(&digits)?) * 10u64.pow(9 - digits.len() as u32)
    };
    to_ns(i64::from(year), month, day, h, mi, s, nanos)
}

/// Parses `YYYYMMDD-HHMMSS` (vLLM's result `date`).
pub(crate) fn parse_compact(text: &str) -> Option<u64> {
    let (date, clock) = text.trim().split_once('-')?;
    // ASCII digits only: a byte length alone lets a multi-byte character through, and slicing
    // inside it would panic.
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(date, 8) || !digits(clock, 6) {
        return None;
    }
    let year = num(&date[..4])?;
    to_ns(
        i64::from(year),
        num(&date[4..6])?,
        num(&date[6..])?,
        num(&clock[..2])?,
        num(&clock[2..4])?,
        num(&clock[4..])?,
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compact_date_with_non_ascii_is_refused_not_a_panic() {
        // "é" is two bytes: eight (and six) bytes in all, as a real date has, with a character
        // across the cut after the year (and the hour).
        assert_eq!(parse_compact("202é1111-221005"), None);
        assert_eq!(parse_compact("20261129-2é005"), None);
        assert_eq!(
            parse_compact("20261129-221005"),
            Some(1_795_990_205_000_000_000)
        );
    }

    #[test]
    fn iso_with_microseconds() {
        // 1795990205 s is 2026-11-29T22:10:05Z.
        assert_eq!(
            parse_iso("2026-11-29T22:10:05.546442"),
            Some(1_795_990_205_546_442_000)
        );
        assert_eq!(parse_iso("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_iso("2024-02-29T12:00:00"),
            Some(1_709_208_000_000_000_000)
        );
        assert_eq!(parse_iso("yesterday"), None);
        assert_eq!(parse_iso("2026-13-01T00:00:00"), None);
    }

    #[test]
    fn compact_date() {
        assert_eq!(
            parse_compact("20261129-221005"),
            Some(1_795_990_205_000_000_000)
        );
        assert_eq!(parse_compact("2026112-221005"), None);
    }
}
