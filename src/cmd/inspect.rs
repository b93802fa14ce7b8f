//! `tokentrace inspect`: what a trace holds and whether it is intact.
//!
//! Every block is decoded (not just checksummed), so a block that passes its checksum but does
//! not decode is reported too. Exit status: 0 when the trace is ok or recovered, 1 when corrupt.

use anyhow::Context;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
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
        let m = reader.manifest();
        println!("file:        {} ({file_bytes} bytes)", args.file.display());
        println!("format:      {}.{}", header.major, header.minor);
        // Imported runs know neither the client host nor (vLLM) the server URL.
        let or_unknown = |s: &str| {
            if s.is_empty() {
                "unknown".to_string()
            } else {
                s.to_string()
            }
        };
        println!(
            "host:        {} (shard {})",
            or_unknown(&header.host),
            header.shard
        );
        println!(
            "clock:       monotonic {} ns = realtime {} ns",
            header.anchor.mono_ns, header.anchor.realtime_ns
        );
        println!("tool:        {}", m.tool_version);
        println!(
            "target:      {} {} model {}",
            m.api,
            or_unknown(&m.base_url),
            m.model
        );
        println!("seed:        {}", m.seed);
        if !m.argv.is_empty() {
            println!("command:     {}", m.argv.join(" "));
        }
        for (key, value) in &m.labels {
            println!("label:       {key}={value}");
        }
        match reader.run_end() {
            Some(end) => println!("run end:     {} at {} ns", end.reason, end.end_ns),
            None => println!("run end:     none (the writer did not finish)"),
        }
        println!("blocks:      {}", reader.block_count());
        println!(
            "requests:    {} ({} measured, {} retried on a fresh connection)",
            totals.requests, totals.measured, totals.retried
        );
        if totals.interrupted > 0 {
            println!(
                "interrupted: {} still streaming when the recorder stopped (from checkpoints)",
                totals.interrupted
            );
        }
        println!("chunks:      {}", totals.chunks);
        if let (Some(a), Some(b), Some(s)) = (totals.first_send_ns, totals.last_end_ns, span_s) {
            println!("time span:   {a} .. {b} ns ({s:.3} s)");
        }
        println!("integrity:   {summary}");
        for s in reader.integrity().skipped() {
            let kind = if s.corrupt { "damage" } else { "incomplete" };
            println!(
                "  skipped:   offset {}, {} bytes, block {} ({kind}): {}",
                s.offset, s.len, s.block, s.reason
            );
        }
        for (block, err) in &totals.undecodable {
            println!("  skipped:   block {block} (damage): {err}");
        }
    }
    Ok(if word == "corrupt" {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
