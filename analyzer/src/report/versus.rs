//! The terminal view of [`crate::versus::Versus`]: per metric pair, both definitions and each
//! statistic under both protocols with the change.

use super::table::number;
use crate::protocol::Protocol;
use crate::versus::Versus;
use std::fmt::Write;

/// Renders the comparison of protocol `a` (the baseline) with `b`.
pub fn render(v: &Versus, a: &Protocol, b: &Protocol) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} (A) versus {} (B)", v.protocol_a, v.protocol_b);
    let _ = writeln!(
        out,
        "requests counted: A {}, B {} · failed: A {}, B {}",
        v.counted.0, v.counted.1, v.failed.0, v.failed.1
    );
    for rule in &v.rules {
        if rule.a == rule.b {
            let _ = writeln!(out, "{}: same rule", rule.topic);
        } else {
            let _ = writeln!(out, "{}:\n  A: {}\n  B: {}", rule.topic, rule.a, rule.b);
        }
    }
    for pair in &v.metrics {
        let (na, nb) = v.names(pair, a, b);
        let title = pair.concept.map_or("", |c| c.title());
        out.push('\n');
        let _ = writeln!(
            out,
            "{}{}A {} · B {}",
            title,
            if title.is_empty() { "" } else { ": " },
            na.unwrap_or("(none)"),
            nb.unwrap_or("(none)")
        );
        if pair.same_definition() {
            let _ = writeln!(
                out,
                "  same definition: {}",
                pair.definition_a.as_deref().unwrap_or("")
            );
        } else {
            if let Some(d) = &pair.definition_a {
                let _ = writeln!(out, "  A: {d}");
            }
            if let Some(d) = &pair.definition_b {
                let _ = writeln!(out, "  B: {d}");
            }
        }
        if pair.stats.is_empty() {
            continue;
        }
        let rows: Vec<[String; 4]> = pair
            .stats
            .iter()
            .map(|s| {
                [
                    a.stat_key(s.stat),
                    value(s.a, &pair.unit),
                    value(s.b, &pair.unit),
                    percent(s.change_pct()),
                ]
            })
            .collect();
        columns(&mut out, ["stat", "A", "B", "change"], &rows);
    }
    if !v.aggregates.is_empty() {
        out.push_str(
            "\nrun-level values computed alike (each over its own requests and wall clock)\n",
        );
        let rows: Vec<[String; 4]> = v
            .aggregates
            .iter()
            .map(|g| {
                [
                    if g.key_a == g.key_b {
                        g.key_a.clone()
                    } else {
                        format!("{} · {}", g.key_a, g.key_b)
                    },
                    aggregate_value(g.a, g.unit),
                    aggregate_value(g.b, g.unit),
                    percent(g.change_pct()),
                ]
            })
            .collect();
        columns(&mut out, ["A · B", "A", "B", "change"], &rows);
    }
    out
}

/// A run-level value: counts exact, measured values as every table shows them.
fn aggregate_value(v: Option<f64>, unit: &str) -> String {
    match unit {
        "requests" | "tokens" | "chunks" if v.is_some_and(|v| v.fract() == 0.0) => {
            format!("{} {unit}", number::count(v))
        }
        _ => value(v, unit),
    }
}

/// A change in percent with its sign, `-` when there is none.
fn percent(p: Option<f64>) -> String {
    p.map_or(number::MISSING.to_string(), |c| format!("{c:+.2}%"))
}

/// Writes aligned rows under a header: the first column left, the others right.
fn columns(out: &mut String, header: [&str; 4], rows: &[[String; 4]]) {
    let header = header.map(str::to_string);
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            rows.iter()
                .chain([&header])
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&header).chain(rows) {
        let _ = writeln!(
            out,
            "  {:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
    }
}

/// The value as every table shows it, and the unit.
fn value(v: Option<f64>, unit: &str) -> String {
    match v.filter(|v| v.is_finite()) {
        None => number::MISSING.into(),
        Some(_) => format!("{} {unit}", number::value(v)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_carry_their_unit() {
        assert_eq!(super::value(Some(123.456), "ms"), "123.5 ms");
        assert_eq!(super::value(Some(0.012345), "s"), "0.01235 s");
        assert_eq!(super::value(None, "ms"), "-");
    }
}
