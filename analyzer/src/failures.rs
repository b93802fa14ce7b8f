//! Failed requests grouped by reason (outcome, HTTP status, the error's first line), the one
//! grouping that the terminal table and the HTML report both show.

use crate::analysis::Analysis;

/// Longest error text kept for a reason; longer ones are cut, since a reason is for seeing
/// what went wrong at a glance and the JSON report keeps every error whole.
pub const ERROR_CHARS: usize = 72;

/// One reason and how many failed requests share it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureGroup {
    /// The outcome class (`http_error`, `stream_error`, …).
    pub outcome: &'static str,
    /// The HTTP status (0: none arrived).
    pub http_status: u16,
    /// The error's first line, whitespace collapsed, at most [`ERROR_CHARS`] characters;
    /// `-` when the request carried none.
    pub error: String,
    /// Failed requests with this reason.
    pub count: u64,
}

/// The failed requests of an analysis by reason, most frequent first (ties in the order first
/// seen).
pub fn groups(analysis: &Analysis<'_>) -> Vec<FailureGroup> {
    let mut groups: Vec<FailureGroup> = Vec::new();
    for &i in &analysis.failed {
        let r = &analysis.dataset.requests[i];
        let error = condensed(r.error.as_deref());
        let same = |g: &&mut FailureGroup| {
            g.outcome == r.outcome.name() && g.http_status == r.http_status && g.error == error
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.count += 1,
            None => groups.push(FailureGroup {
                outcome: r.outcome.name(),
                http_status: r.http_status,
                error,
                count: 1,
            }),
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.count));
    groups
}

/// An error's first non-blank line with its whitespace collapsed, cut to [`ERROR_CHARS`].
pub fn condensed(error: Option<&str>) -> String {
    let Some(text) = error.filter(|e| !e.trim().is_empty()) else {
        return "-".to_string();
    };
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let joined = line.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= ERROR_CHARS {
        joined
    } else {
        let cut: String = joined.chars().take(ERROR_CHARS - 1).collect();
        format!("{}…", cut.trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_condensed_to_one_short_line() {
        assert_eq!(condensed(None), "-");
        assert_eq!(condensed(Some("  ")), "-");
        assert_eq!(
            condensed(Some("\n  connection   reset\nby peer")),
            "connection reset"
        );
        let long = "x ".repeat(100);
        let shown = condensed(Some(&long));
        assert!(shown.chars().count() <= ERROR_CHARS, "{shown}");
        assert!(shown.ends_with('…'));
    }
}
