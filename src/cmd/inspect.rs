//! `tokentrace inspect`: what a trace holds and whether it is intact.
//!
//! Every block is decoded (not just checksummed), so a block that passes its checksum but does
//! not decode is reported too. Exit status: 0 when the trace is ok or recovered, 1 when corrupt.

use anyhow::Context;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_analyzer::report::table::{number, terminal_width, Align, Grid};
use tokentrace_format::clock::utc_iso8601;
use tokentrace_format::{DecodedBlock, Integrity, Phase, TraceReader};

/// Arguments of `tokentrace inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace file.
    pub file: PathBuf,
    /// Print one JSON object (format_version, requests, chunks, blocks, integrity, …).
    #[arg(long)]
    pub json: bool,
}

/// Totals gathered by decoding every block.
#[derive(Default)]
struct Totals {
    requests: u64,
    measured: u64,
    /// Requests sent again after their reused connection turned out closed.
    retried: u64,
    /// Requests only checkpoints describe (still streaming when a recorder was killed);
    /// included in `requests`.
    interrupted: u64,
    chunks: u64,
    /// Chunks in checkpoint sections: copies of chunks that their requests' final records hold
    /// again, or, for an interrupted request, all that is left of it.
    checkpointed_chunks: u64,
    first_send_ns: Option<u64>,
    last_end_ns: Option<u64>,
    /// Blocks that passed their checksums but failed to decode: (block, error).
    undecodable: Vec<(usize, String)>,
}

fn gather(reader: &TraceReader) -> Totals {
    let mut totals = Totals::default();
    let mut block = DecodedBlock::default();
    let mut merge = reader
        .may_have_interrupted()
        .then(tokentrace_format::checkpoint::Interrupted::default);
    for i in 0..reader.block_count() {
        if let Err(err) = reader.decode_block_into(i, &mut block) {
            totals.undecodable.push((i, err.to_string()));
            continue;
        }
        if let Some(merge) = merge.as_mut() {
            merge.add_block(&block);
        }
        totals.checkpointed_chunks +=
            (block.checkpoints.as_ref()).map_or(0, |section| section.block.chunk_count() as u64);
        totals.add(&block);
    }
    let interrupted = merge.map(|m| m.finish()).unwrap_or_default();
    totals.interrupted = interrupted.len() as u64;
    totals.add(&DecodedBlock::from_records(&interrupted));
    totals
}

impl Totals {
    fn add(&mut self, block: &DecodedBlock) {
        let totals = self;
        totals.chunks += block.chunk_count() as u64;
        for r in &block.requests {
            totals.requests += 1;
            totals.measured += u64::from(r.meta.phase == Phase::Measured);
            totals.retried += u64::from(r.meta.retries > 0);
            totals.first_send_ns = Some(
                totals
                    .first_send_ns
                    .map_or(r.meta.send_ns, |t| t.min(r.meta.send_ns)),
            );
            totals.last_end_ns = Some(
                totals
                    .last_end_ns
                    .map_or(r.meta.end_ns, |t| t.max(r.meta.end_ns)),
            );
        }
    }
}

/// The verdict word and its one-line summary, counting undecodable blocks as corruption.
fn verdict(integrity: &Integrity, totals: &Totals) -> (&'static str, String) {
    match (integrity, totals.undecodable.first()) {
        (Integrity::Corrupt { .. }, _) | (_, None) => (integrity.verdict(), integrity.to_string()),
        (_, Some((block, err))) => ("corrupt", format!("corrupt block {block}: {err}")),
    }
}

/// Runs `tokentrace inspect`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let reader = TraceReader::open(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let file_bytes = std::fs::metadata(&args.file).map(|m| m.len()).unwrap_or(0);
    let totals = gather(&reader);
    let (word, summary) = verdict(reader.integrity(), &totals);
    let header = reader.header();
    let span_s = match (totals.first_send_ns, totals.last_end_ns) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e9),
        _ => None,
    };
    let skipped: Vec<Value> = reader
        .integrity()
        .skipped()
        .iter()
        .map(|s| json!({"offset": s.offset, "len": s.len, "block": s.block, "reason": s.reason, "corrupt": s.corrupt}))
        .chain(totals.undecodable.iter().map(|(b, e)| json!({"block": b, "reason": e, "corrupt": true})))
        .collect();

    if args.json {
        let out = json!({
            "file": args.file.display().to_string(),
            "format_version": format!("{}.{}", header.major, header.minor),
            "host": header.host,
            "shard": header.shard,
            "clock_anchor": {"mono_ns": header.anchor.mono_ns, "realtime_ns": header.anchor.realtime_ns},
            "manifest": serde_json::to_value(reader.manifest())?,
            "run_end": reader.run_end().map(serde_json::to_value).transpose()?,
            "blocks": reader.block_count(),
            "requests": totals.requests,
            "measured_requests": totals.measured,
            "retried_requests": totals.retried,
            "interrupted_requests": totals.interrupted,
            "chunks": totals.chunks,
            "checkpointed_chunks": totals.checkpointed_chunks,
            "first_send_ns": totals.first_send_ns,
            "last_end_ns": totals.last_end_ns,
            "span_s": span_s,
            "file_bytes": file_bytes,
            "integrity": word,
            "integrity_detail": summary,
            "skipped": skipped,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!(
            "{}",
            text(&args.file, file_bytes, &reader, &totals, &summary)
        );
    }
    Ok(if word == "corrupt" {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The text report: one fact per line, named in the first column; counts stand right-aligned
/// in the second so their digits line up, everything else (dates in UTC, durations and
/// sizes with units) in the third.
fn text(
    file: &std::path::Path,
    file_bytes: u64,
    reader: &TraceReader,
    totals: &Totals,
    integrity: &str,
) -> String {
    let header = reader.header();
    let m = reader.manifest();
    let anchor = header.anchor;
    let mut grid = Grid::headless(&[Align::Left, Align::Right, Align::Left]);
    let mut fact = |key: &str, value: String| grid.push(vec![key.into(), String::new(), value]);
    let (size, unit) = number::bytes(file_bytes);
    fact("file:", format!("{} ({size} {unit})", file.display()));
    fact("format:", format!("{}.{}", header.major, header.minor));
    // Imported runs know neither the client host nor (vLLM) the server URL.
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "unknown".to_string()
        } else {
            s.to_string()
        }
    };
    fact(
        "host:",
        format!("{} (shard {})", or_unknown(&header.host), header.shard),
    );
    fact(
        "clock:",
        format!(
            "event times count from {} (monotonic clock at {})",
            utc_iso8601(anchor.realtime_ns),
            number::duration_text(anchor.mono_ns as f64)
        ),
    );
    if let Some(shard) = &m.shard {
        let clock = match (shard.clock.synchronized, shard.clock.max_error_ns) {
            (Some(true), Some(e)) => format!(
                "clock synchronized, within {}",
                number::duration_text(e as f64)
            ),
            (Some(false), _) => "clock not synchronized".to_string(),
            _ => "clock state unknown".to_string(),
        };
        fact(
            "shard:",
            format!(
                "{} of {} of run {} (agreed start {}, began {} after it; {clock})",
                shard.index,
                shard.count,
                shard.run_id,
                utc_iso8601(shard.start_at_realtime_ns),
                number::duration_text(shard.start_lateness_ns as f64)
            ),
        );
    }
    if let Some(shards) = &m.shards {
        fact("shards:", shards.describe());
    }
    fact("tool:", m.tool_version.clone());
    fact(
        "target:",
        format!("{} {} model {}", m.api, or_unknown(&m.base_url), m.model),
    );
    fact("seed:", m.seed.to_string());
    if !m.argv.is_empty() {
        fact("command:", m.argv.join(" "));
    }
    for (key, value) in &m.labels {
        fact("label:", format!("{key}={value}"));
    }
    if m.start_realtime_ns > 0 {
        fact("started:", utc_iso8601(m.start_realtime_ns));
    }
    match reader.run_end() {
        Some(end) => {
            let at = match end.end_realtime_ns {
                0 => anchor.to_realtime_ns(end.end_ns),
                ns => ns,
            };
            fact(
                "run end:",
                format!(
                    "{} at {} ({} after the clock anchor)",
                    end.reason,
                    utc_iso8601(at),
                    number::duration_text(end.end_ns as f64)
                ),
            );
        }
        None => fact("run end:", "none (the writer did not finish)".into()),
    }
    if let (Some(a), Some(b)) = (totals.first_send_ns, totals.last_end_ns) {
        fact(
            "time span:",
            format!(
                "{}, {} to {} (first send to last end)",
                number::duration_text(b.saturating_sub(a) as f64),
                utc_iso8601(anchor.to_realtime_ns(a)),
                utc_iso8601(anchor.to_realtime_ns(b))
            ),
        );
    }
    let mut count = |key: &str, n: u64, detail: String| {
        grid.push(vec![key.into(), n.to_string(), detail]);
    };
    count("blocks:", reader.block_count() as u64, String::new());
    count(
        "requests:",
        totals.requests,
        format!(
            "{} measured, {} retried on a fresh connection",
            totals.measured, totals.retried
        ),
    );
    if totals.interrupted > 0 {
        count(
            "interrupted:",
            totals.interrupted,
            "still streaming when the recorder stopped (from checkpoints)".into(),
        );
    }
    count("chunks:", totals.chunks, String::new());
    if totals.checkpointed_chunks > 0 {
        count(
            "checkpointed:",
            totals.checkpointed_chunks,
            "chunks also written in checkpoints while their requests streamed".into(),
        );
    }
    let mut fact = |key: &str, value: String| grid.push(vec![key.into(), String::new(), value]);
    fact("integrity:", integrity.to_string());
    for s in reader.integrity().skipped() {
        let kind = if s.corrupt { "damage" } else { "incomplete" };
        let (len, unit) = number::bytes(s.len);
        fact(
            "skipped:",
            format!(
                "block {} ({kind}), {len} {unit} at offset {}: {}",
                s.block, s.offset, s.reason
            ),
        );
    }
    for (block, err) in &totals.undecodable {
        fact("skipped:", format!("block {block} (damage): {err}"));
    }
    let mut out = grid.render(terminal_width());
    out.push('\n');
    out
}
