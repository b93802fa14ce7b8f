//! Writes the Chrome trace-event "JSON Object Format" one event at a time, so a timeline of
//! millions of events never exists as one value in memory.

use std::io::{self, Write};

/// An argument value of an event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    /// An unsigned integer.
    U64(u64),
    /// A float (written as null when not finite, which JSON cannot hold).
    F64(f64),
    /// A string.
    Str(&'a str),
    /// null.
    Null,
}

/// One trace event. Times are in ns on the export's time line; the writer turns them into the
/// format's microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event<'a> {
    /// Phase: `X` complete, `i` instant, `C` counter, `M` metadata.
    pub ph: char,
    /// Name.
    pub name: &'a str,
    /// Category (omitted when empty).
    pub cat: &'a str,
    /// Process id.
    pub pid: u64,
    /// Thread id.
    pub tid: u64,
    /// Start, ns.
    pub ts_ns: i64,
    /// Duration of an `X` event, ns.
    pub dur_ns: Option<u64>,
    /// Scope of an `i` event (`t` thread, `p` process, `g` global).
    pub scope: Option<char>,
}

/// Writes `{"displayTimeUnit":"ms","traceEvents":[ … ],"otherData":{…}}`.
pub struct EventWriter<W: Write> {
    out: W,
    events: u64,
}

impl<W: Write> EventWriter<W> {
    /// Starts the object and its event array.
    pub fn start(mut out: W) -> io::Result<EventWriter<W>> {
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(EventWriter { out, events: 0 })
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Writes one event with its arguments. `ts` comes before `args`, and the names before it
    /// are the exporter's own ASCII words: older trace processors find `ts` by scanning the
    /// top-level keys with a small parser that rejects arrays and `\u` escapes, so anything
    /// taken from a trace (labels, error texts) belongs in `args`.
    pub fn event(&mut self, e: &Event<'_>, args: &[(&str, Arg<'_>)]) -> io::Result<()> {
        let out = &mut self.out;
        if self.events > 0 {
            out.write_all(b",\n")?;
        }
        self.events += 1;
        write!(out, "{{\"ph\":\"{}\",\"name\":", e.ph)?;
        serde_json::to_writer(&mut *out, e.name)?;
        if !e.cat.is_empty() {
            out.write_all(b",\"cat\":")?;
            serde_json::to_writer(&mut *out, e.cat)?;
        }
        write!(out, ",\"pid\":{},\"tid\":{},\"ts\":", e.pid, e.tid)?;
        write_micros(out, e.ts_ns)?;
        if let Some(dur) = e.dur_ns {
            out.write_all(b",\"dur\":")?;
            write_micros(out, i64::try_from(dur).unwrap_or(i64::MAX))?;
        }
        if let Some(scope) = e.scope {
            write!(out, ",\"s\":\"{scope}\"")?;
        }
        if !args.is_empty() {
            out.write_all(b",\"args\":{")?;
            for (i, (key, value)) in args.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, key)?;
                out.write_all(b":")?;
                write_arg(out, *value)?;
            }
            out.write_all(b"}")?;
        }
        out.write_all(b"}")
    }

    /// Ends the event array, writes `otherData` and closes the object; returns the output.
    pub fn finish(mut self, other_data: &serde_json::Value) -> io::Result<W> {
        self.out.write_all(b"\n],\"otherData\":")?;
        serde_json::to_writer(&mut self.out, other_data)?;
        self.out.write_all(b"}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn write_arg(out: &mut impl Write, value: Arg<'_>) -> io::Result<()> {
    match value {
        Arg::U64(v) => write!(out, "{v}"),
        Arg::F64(v) if v.is_finite() => serde_json::to_writer(out, &v).map_err(io::Error::from),
        Arg::F64(_) | Arg::Null => out.write_all(b"null"),
        Arg::Str(s) => serde_json::to_writer(out, s).map_err(io::Error::from),
    }
}

/// Writes `ns` as microseconds, exactly: the integer part, then up to three decimals without
/// trailing zeros (1 234 567 ns is `1234.567`, 2 000 ns is `2`). Decimal text keeps every
/// nanosecond that a float of microseconds could round away on long runs.
pub fn write_micros(out: &mut impl Write, ns: i64) -> io::Result<()> {
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    let (whole, frac) = (abs / 1000, abs % 1000);
    if frac == 0 {
        return write!(out, "{sign}{whole}");
    }
    let mut digits = format!("{frac:03}");
    while digits.ends_with('0') {
        digits.pop();
    }
    write!(out, "{sign}{whole}.{digits}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(ns: i64) -> String {
        let mut out = Vec::new();
        write_micros(&mut out, ns).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn microseconds_keep_every_nanosecond() {
        assert_eq!(micros(0), "0");
        assert_eq!(micros(2_000), "2");
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(1_500), "1.5");
        assert_eq!(micros(7), "0.007");
        assert_eq!(micros(-1_250), "-1.25");
        assert_eq!(micros(3_600_000_000_123), "3600000000.123");
    }

    #[test]
    fn events_make_one_json_object() {
        let mut w = EventWriter::start(Vec::new()).unwrap();
        let slice = Event {
            ph: 'X',
            name: "prefill \"quoted\"",
            cat: "request",
            pid: 1,
            tid: 8,
            ts_ns: 1_500,
            dur_ns: Some(2_000_001),
            scope: None,
        };
        w.event(&slice, &[("id", Arg::U64(7)), ("error", Arg::Null)])
            .unwrap();
        let instant = Event {
            ph: 'i',
            name: "content",
            cat: "",
            scope: Some('t'),
            dur_ns: None,
            ..slice
        };
        w.event(
            &instant,
            &[
                ("rate", Arg::F64(f64::NAN)),
                ("channel", Arg::Str("content")),
            ],
        )
        .unwrap();
        assert_eq!(w.events(), 2);
        let out = w.finish(&serde_json::json!({"dropped": 0})).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["displayTimeUnit"], "ms");
        let events = v["traceEvents"].as_array().unwrap();
        assert_eq!(events[0]["name"], "prefill \"quoted\"");
        assert_eq!(events[0]["ts"], 1.5);
        assert_eq!(events[0]["dur"], 2000.001);
        assert_eq!(events[0]["args"]["id"], 7);
        assert!(events[0]["args"]["error"].is_null());
        assert_eq!(events[1]["s"], "t");
        assert!(events[1].get("cat").is_none());
        assert!(events[1].get("dur").is_none());
        assert!(events[1]["args"]["rate"].is_null());
        assert_eq!(v["otherData"]["dropped"], 0);
    }
}
