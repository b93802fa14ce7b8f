//! Typed reads of JSON fields that name the file, line and field path when they fail.

use crate::error::Issue;
use serde_json::Value;
use std::path::Path;

/// The input position a value came from, used to build [`Issue`]s.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// The input file.
    pub file: &'a Path,
    /// 1-based line, when the input is line-oriented.
    pub line: Option<usize>,
}

impl<'a> Ctx<'a> {
    /// A problem with `field` at this position.
    pub fn issue(&self, field: &str, message: impl Into<String>) -> Issue {
        Issue::new(self.file, self.line, field, message)
    }
}

/// The JSON values of a JSON-lines `text` read from `file`, each with its position; blank
/// lines are skipped and lines that are not JSON become issues.
pub(crate) fn json_lines<'a>(
    file: &'a Path,
    text: &str,
    issues: &mut Vec<Issue>,
) -> Vec<(Ctx<'a>, Value)> {
    let mut values = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let ctx = Ctx {
            file,
            line: Some(i + 1),
        };
        match serde_json::from_str(line) {
            Ok(value) => values.push((ctx, value)),
            Err(e) => issues.push(ctx.issue("(line)", format!("invalid JSON: {e}"))),
        }
    }
    values
}

/// Walks a dotted path (`metadata.request_start_ns`); `None` when a step is missing or null.
pub(crate) fn lookup<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    let mut current = value;
    for step in path.split('.') {
        current = current.get(step)?;
    }
    (!current.is_null()).then_some(current)
}

/// A required non-negative integer.
pub(crate) fn u64_at(value: &Value, path: &str, ctx: Ctx<'_>) -> Result<u64, Issue> {
    opt_u64(value, path, ctx)?.ok_or_else(|| ctx.issue(path, "missing"))
}

/// An optional non-negative integer: absent or null is `None`, anything else must be one.
pub(crate) fn opt_u64(value: &Value, path: &str, ctx: Ctx<'_>) -> Result<Option<u64>, Issue> {
    match lookup(value, path) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ctx.issue(
                path,
                format!("expected a non-negative integer, found {}", describe(v)),
            )
        }),
    }
}

/// An optional string.
pub(crate) fn opt_str<'v>(
    value: &'v Value,
    path: &str,
    ctx: Ctx<'_>,
) -> Result<Option<&'v str>, Issue> {
    match lookup(value, path) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| ctx.issue(path, format!("expected a string, found {}", describe(v)))),
    }
}

/// A required array.
pub(crate) fn array_at<'v>(
    value: &'v Value,
    path: &str,
    ctx: Ctx<'_>,
) -> Result<&'v [Value], Issue> {
    match lookup(value, path) {
        None => Err(ctx.issue(path, "missing")),
        Some(v) => v
            .as_array()
            .map(Vec::as_slice)
            .ok_or_else(|| ctx.issue(path, format!("expected an array, found {}", describe(v)))),
    }
}

/// A finite number (integer or float) read as seconds or a count.
pub(crate) fn f64_value(value: &Value, path: &str, ctx: Ctx<'_>) -> Result<f64, Issue> {
    value.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
        ctx.issue(
            path,
            format!("expected a number, found {}", describe(value)),
        )
    })
}

/// A short description of a JSON value for error messages (never the whole of a big value).
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.len() <= 40 => format!("{s:?}"),
        Value::String(s) => format!("a string of {} bytes", s.len()),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// `u64` to `u32`, saturating: counts above 4 G do not occur in practice.
pub(crate) fn sat_u32(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// `usize` to `u32`, saturating.
pub(crate) fn len_u32(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Ctx<'static> {
        Ctx {
            file: Path::new("f.jsonl"),
            line: Some(3),
        }
    }

    #[test]
    fn reads_nested_integers_and_reports_wrong_types() {
        let v = json!({"metadata": {"a": 5, "b": "x", "c": null}});
        assert_eq!(u64_at(&v, "metadata.a", ctx()).unwrap(), 5);
        assert_eq!(opt_u64(&v, "metadata.c", ctx()).unwrap(), None);
        let err = u64_at(&v, "metadata.b", ctx()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "f.jsonl:3: field `metadata.b`: expected a non-negative integer, found \"x\""
        );
        let err = u64_at(&v, "metadata.zz", ctx()).unwrap_err();
        assert_eq!(err.message, "missing");
    }

    #[test]
    fn numbers_must_be_finite() {
        assert_eq!(f64_value(&json!(1.5), "x", ctx()).unwrap(), 1.5);
        assert!(f64_value(&json!("1.5"), "x", ctx()).is_err());
    }
}
