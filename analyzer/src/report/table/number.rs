//! How numbers look in tables made for people: a fixed count of significant digits, so every
//! cell of a column follows one rule whatever its magnitude, and `-` for a value that is
//! absent or not a number.

/// Significant digits of every measured value in a table: enough to tell 19.25 from 19.30,
/// few enough that a column of them stays narrow.
pub const DIGITS: usize = 4;

/// What a table shows for a value that is absent or not finite.
pub const MISSING: &str = "-";

/// `v` with `digits` significant digits: fixed notation from 0.001 up to a million,
/// scientific outside (`1.235e6`, `4.500e-5`), `0` for zero and [`MISSING`] for NaN or an
/// infinity. Trailing zeros are kept, since they are significant (`110.0`).
pub fn significant(v: f64, digits: usize) -> String {
    let digits = digits.max(1);
    if !v.is_finite() {
        return MISSING.to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let magnitude = v.abs();
    if !(1e-3..1e6).contains(&magnitude) {
        return format!("{:.*e}", digits - 1, v);
    }
    let mut exponent = magnitude.log10().floor() as i32;
    // Rounding may carry into the next power of ten (9.9996 → 10.00), which then needs one
    // decimal fewer to keep the count of digits.
    let decimals = |e: i32| (digits as i32 - 1 - e).max(0) as usize;
    let rounded: f64 = format!("{:.*}", decimals(exponent), magnitude)
        .parse()
        .unwrap_or(magnitude);
    if rounded >= 10f64.powi(exponent + 1) {
        exponent += 1;
        if exponent >= 6 {
            return format!("{:.*e}", digits - 1, v);
        }
    }
    format!("{:.*}", decimals(exponent), v)
}

/// An optional value with [`DIGITS`] significant digits, [`MISSING`] when absent.
pub fn value(v: Option<f64>) -> String {
    v.map_or_else(|| MISSING.to_string(), |v| significant(v, DIGITS))
}

/// A count, exact (counts are not measurements, so they are never rounded); [`MISSING`] when
/// absent or not a whole non-negative number.
pub fn count(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 9.0e15 => {
            format!("{}", v as u64)
        }
        _ => MISSING.to_string(),
    }
}

/// A JSON value as a table cell: integers exact, other numbers with [`DIGITS`] significant
/// digits, strings as they are, null as [`MISSING`], anything else as compact JSON.
pub fn json(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => MISSING.to_string(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (None, Some(i), _) => i.to_string(),
            (None, None, f) => value(f),
        },
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) if items.is_empty() => "none".to_string(),
        Value::Array(items) => items.iter().map(json).collect::<Vec<_>>().join(", "),
        Value::Object(_) => v.to_string(),
    }
}

/// A span of nanoseconds in the largest unit that keeps it at 1 or more (ns, µs, ms, s),
/// with [`DIGITS`] significant digits: (number, unit).
pub fn duration_ns(ns: f64) -> (String, &'static str) {
    const UNITS: [(f64, &str); 4] = [(1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns")];
    let magnitude = ns.abs();
    let (scale, unit) = UNITS
        .into_iter()
        .find(|&(scale, _)| magnitude >= scale)
        .unwrap_or((1.0, "ns"));
    (significant(ns / scale, DIGITS), unit)
}

/// [`duration_ns`] as one piece of text: `30.00 ms`.
pub fn duration_text(ns: f64) -> String {
    let (n, unit) = duration_ns(ns);
    format!("{n} {unit}")
}

/// A size in bytes in binary units (B, KiB, MiB, GiB, TiB): (number, unit). Bytes are exact;
/// larger units have [`DIGITS`] significant digits.
pub fn bytes(n: u64) -> (String, &'static str) {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return (n.to_string(), "B");
    }
    let mut size = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if size < 1024.0 {
            break;
        }
        size /= 1024.0;
        unit = u;
    }
    (significant(size, DIGITS), unit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn four_significant_digits_at_every_magnitude() {
        let cases = [
            (34.0, "34.00"),
            (19.25, "19.25"),
            (1.2247, "1.225"),
            (0.5, "0.5000"),
            (0.035356, "0.03536"),
            (110.0, "110.0"),
            (5777.78, "5778"),
            (69.6203, "69.62"),
            (123_456.7, "123457"),
            (-14.1421, "-14.14"),
            (0.001, "0.001000"),
        ];
        for (v, shown) in cases {
            assert_eq!(significant(v, 4), shown, "{v}");
        }
    }

    #[test]
    fn rounding_up_to_a_power_of_ten_keeps_the_count_of_digits() {
        assert_eq!(significant(9.99996, 4), "10.00");
        assert_eq!(significant(999.96, 4), "1000");
        assert_eq!(significant(0.099996, 4), "0.1000");
        assert_eq!(significant(999_999.7, 4), "1.000e6");
    }

    #[test]
    fn very_large_and_very_small_values_are_scientific() {
        assert_eq!(significant(1_234_567.0, 4), "1.235e6");
        assert_eq!(significant(6.02e23, 4), "6.020e23");
        assert_eq!(significant(0.000_045, 4), "4.500e-5");
        assert_eq!(significant(-2.5e-9, 4), "-2.500e-9");
        assert_eq!(significant(1e300, 2), "1.0e300");
    }

    #[test]
    fn nothing_to_show_is_a_dash() {
        assert_eq!(significant(f64::NAN, 4), "-");
        assert_eq!(significant(f64::INFINITY, 4), "-");
        assert_eq!(significant(f64::NEG_INFINITY, 4), "-");
        assert_eq!(value(None), "-");
        assert_eq!(value(Some(f64::NAN)), "-");
        assert_eq!(count(None), "-");
        assert_eq!(count(Some(f64::NAN)), "-");
        assert_eq!(json(&serde_json::Value::Null), "-");
        assert_eq!(significant(0.0, 4), "0");
    }

    #[test]
    fn counts_are_exact_and_json_integers_stay_integers() {
        assert_eq!(count(Some(7.0)), "7");
        assert_eq!(count(Some(12_345_678.0)), "12345678");
        assert_eq!(count(Some(2.5)), "-");
        assert_eq!(json(&json!(220)), "220");
        assert_eq!(json(&json!(-3)), "-3");
        assert_eq!(json(&json!(69.620253)), "69.62");
        assert_eq!(json(&json!(["a", "b"])), "a, b");
        assert_eq!(json(&json!([])), "none");
        assert_eq!(json(&json!("usage")), "usage");
    }

    #[test]
    fn durations_take_the_unit_that_reads_best() {
        assert_eq!(duration_text(30_000_000.0), "30.00 ms");
        assert_eq!(duration_text(158_000_000.0), "158.0 ms");
        assert_eq!(duration_text(2_500.0), "2.500 µs");
        assert_eq!(duration_text(12.0), "12.00 ns");
        assert_eq!(duration_text(3_683_411_306.0), "3.683 s");
        assert_eq!(duration_text(0.0), "0 ns");
        assert_eq!(duration_text(86_400e9), "86400 s");
    }

    #[test]
    fn sizes_are_binary() {
        assert_eq!(bytes(512), ("512".to_string(), "B"));
        assert_eq!(bytes(2048), ("2.000".to_string(), "KiB"));
        assert_eq!(bytes(15 * 1024 * 1024 + 1), ("15.00".to_string(), "MiB"));
    }
}
