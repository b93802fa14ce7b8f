//! Redaction: a copy of a trace that can be shared without the text it captured.
//!
//! What is removed, and why (docs/RELIABILITY.md has the same list):
//! - every chunk's `text` (the captured delta text with `--capture text`, or the whole event
//!   payload with `--capture raw`): it is the model's output and may quote the prompt;
//! - the value of every response header that is not on [`KEPT_HEADER_VALUES`]: a header
//!   kept by a recorder or importer may carry a login cookie or a signed token, so only
//!   headers known to hold timings, counters and request ids keep their values; the name stays
//!   so the reader still sees that the header was present;
//! - with [`RedactOptions::strip_errors`], error texts (they may hold the first KiB of a
//!   server's error body, which can echo the request); the outcome class and HTTP status stay.
//!
//! Everything else (timestamps, lengths, hashes, usage, outcomes, ids, order, manifest, header,
//! run end) is copied unchanged. The manifest gains one entry, `extra.redaction`, so a reader
//! can tell a redacted copy from the original.

use crate::error::FormatError;
use crate::reader::TraceReader;
use crate::types::{Manifest, RequestRecord, RunEnd};
use crate::writer::{TraceWriter, WriterConfig};
use std::path::Path;

/// Response headers whose values are timings, counters or request ids, never credentials.
pub const KEPT_HEADER_VALUES: [&str; 6] = [
    "x-request-id",
    "server-timing",
    "openai-processing-ms",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "retry-after",
];

/// What replaces a removed header value or error text.
pub const REDACTED: &str = "<redacted>";

/// Run-end reason written when the input trace had none (its writer was killed).
pub const UNFINISHED_REASON: &str = "unfinished: redacted copy of a trace without a run end";

/// Choices of a redaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedactOptions {
    /// Replace error texts by `<redacted>` too (outcome and HTTP status are kept).
    pub strip_errors: bool,
}

/// What a redaction changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedactStats {
    /// Requests copied.
    pub requests: u64,
    /// Chunks whose text or payload was removed.
    pub texts_removed: u64,
    /// Response header values replaced.
    pub header_values_removed: u64,
    /// Error texts replaced (only with `strip_errors`).
    pub errors_removed: u64,
    /// Blocks of the input that could not be decoded and were left out.
    pub blocks_skipped: u64,
}

/// Removes text, payloads and unsafe header values from one request, in place.
pub fn redact_record(record: &mut RequestRecord, options: RedactOptions, stats: &mut RedactStats) {
    for chunk in &mut record.chunks {
        if chunk.text.take().is_some() {
            stats.texts_removed += 1;
        }
    }
    for (name, value) in &mut record.meta.response_headers {
        let kept = KEPT_HEADER_VALUES
            .iter()
            .any(|k| name.eq_ignore_ascii_case(k));
        if !kept && value != REDACTED {
            *value = REDACTED.to_string();
            stats.header_values_removed += 1;
        }
    }
    if options.strip_errors {
        if let Some(error) = &mut record.meta.error {
            if error != REDACTED {
                *error = REDACTED.to_string();
                stats.errors_removed += 1;
            }
        }
    }
}

/// Marks the manifest as a redacted copy (`extra.redaction`).
pub fn mark_manifest(manifest: &mut Manifest, options: RedactOptions) {
    manifest.extra.insert(
        "redaction".into(),
        serde_json::json!({
            "chunk_text": "removed",
            "response_header_values": format!("removed except {}", KEPT_HEADER_VALUES.join(", ")),
            "error_text": if options.strip_errors { "removed" } else { "kept" },
        }),
    );
}

/// What is damaged in a trace: its corrupt frames (found when it was opened) and the blocks
/// that pass their checksums but do not decode. None for an undamaged trace; a trace a killed
/// writer left (no footer, an incomplete last frame) is not damaged.
pub fn damage(reader: &TraceReader) -> Option<Damage> {
    let mut lost = 0u64;
    let mut first = None;
    if let crate::Integrity::Corrupt { skipped, .. } = reader.integrity() {
        for s in skipped.iter().filter(|s| s.corrupt) {
            lost += 1;
            first.get_or_insert_with(|| {
                format!("block {} at byte {}: {}", s.block, s.offset, s.reason)
            });
        }
    }
    for i in 0..reader.block_count() {
        if let Err(err) = reader.decode_block(i) {
            lost += 1;
            first.get_or_insert_with(|| format!("block {i}: {err}"));
        }
    }
    first.map(|first| Damage { lost, first })
}

/// Damage found in a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Damaged frames and undecodable blocks.
    pub lost: u64,
    /// The first of them, described.
    pub first: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} damaged block(s), the first {}",
            self.lost, self.first
        )
    }
}

/// Writes a redacted copy of `input` to `output`. Blocks of the input that cannot be read are
/// left out and counted in [`RedactStats::blocks_skipped`]; the copy then says so, in its
/// manifest (`extra.redaction.input_damage`) and its run end's reason, so it never claims more
/// than its input had. A trace without a run end gets one whose reason is
/// [`UNFINISHED_REASON`].
pub fn redact_trace(
    input: &Path,
    output: &Path,
    options: RedactOptions,
) -> Result<RedactStats, FormatError> {
    let same_file = match (input.canonicalize(), output.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same_file {
        return Err(FormatError::io(
            "redacting into",
            output,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output is the input file",
            ),
        ));
    }
    let reader = TraceReader::open(input)?;
    let damage = damage(&reader);
    let mut manifest = reader.manifest().clone();
    mark_manifest(&mut manifest, options);
    if let (Some(damage), Some(marker)) = (&damage, manifest.extra.get_mut("redaction")) {
        marker["input_damage"] = serde_json::json!(damage.to_string());
    }
    let writer = TraceWriter::create(
        output,
        reader.header().clone(),
        &manifest,
        WriterConfig::default(),
    )?;
    let sender = writer.sender();
    let mut stats = RedactStats::default();
    let mut last_end_ns = 0;
    for i in 0..reader.block_count() {
        // Counted by `damage` above.
        let Ok(block) = reader.decode_block(i) else {
            continue;
        };
        for r in 0..block.requests.len() {
            let mut record = block.record(r);
            redact_record(&mut record, options, &mut stats);
            last_end_ns = last_end_ns.max(record.meta.end_ns);
            stats.requests += 1;
            sender.send(record)?;
        }
    }
    // Requests a killed recorder left streaming become final `interrupted` records of the
    // copy: what its checkpoints held, and no more.
    for mut record in reader.interrupted() {
        redact_record(&mut record, options, &mut stats);
        last_end_ns = last_end_ns.max(record.meta.end_ns);
        stats.requests += 1;
        sender.send(record)?;
    }
    drop(sender);
    let mut end = match reader.run_end() {
        Some(end) => end.clone(),
        None => RunEnd {
            end_ns: last_end_ns,
            reason: UNFINISHED_REASON.to_string(),
            ..RunEnd::default()
        },
    };
    if let Some(damage) = &damage {
        stats.blocks_skipped = damage.lost;
        end.reason = format!(
            "{} (a redacted copy of a damaged trace: {} block(s) lost)",
            end.reason, damage.lost
        );
    }
    writer.finish(end)?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Channel, ChunkRecord, Outcome, Phase, RequestMeta, Usage};

    fn record() -> RequestRecord {
        RequestRecord {
            meta: RequestMeta {
                id: 7,
                phase: Phase::Measured,
                trial: 0,
                intended_ns: 1,
                send_ns: 2,
                headers_ns: Some(3),
                end_ns: 9,
                http_status: 500,
                outcome: Outcome::HttpError,
                error: Some("HTTP 500: your prompt was: secret words".into()),
                usage: Usage::default(),
                finish_reason: None,
                prompt_hash: 11,
                prompt_bytes: 12,
                output_hash: 13,
                output_bytes: 14,
                planned_input_tokens: Some(5),
                response_headers: vec![
                    ("x-request-id".into(), "7".into()),
                    ("set-cookie".into(), "login=abc".into()),
                ],
                retries: 0,
            },
            chunks: vec![ChunkRecord {
                arrival_ns: 4,
                read_index: 0,
                bytes: 30,
                channel: Channel::Content,
                text_len: 5,
                tokens: Some(1),
                text: Some("hello".into()),
            }],
        }
    }

    #[test]
    fn removes_text_and_unknown_header_values_only() {
        let original = record();
        let mut redacted = original.clone();
        let mut stats = RedactStats::default();
        redact_record(&mut redacted, RedactOptions::default(), &mut stats);
        assert_eq!(redacted.chunks[0].text, None);
        assert_eq!(redacted.chunks[0].text_len, 5);
        assert_eq!(redacted.meta.response_headers[0].1, "7");
        assert_eq!(redacted.meta.response_headers[1].1, REDACTED);
        assert_eq!(redacted.meta.error, original.meta.error);
        let mut expected = original.clone();
        expected.chunks[0].text = None;
        expected.meta.response_headers[1].1 = REDACTED.into();
        assert_eq!(redacted, expected);
        assert_eq!(stats.texts_removed, 1);
        assert_eq!(stats.header_values_removed, 1);
    }

    #[test]
    fn strip_errors_keeps_outcome_and_status() {
        let mut redacted = record();
        let mut stats = RedactStats::default();
        let options = RedactOptions { strip_errors: true };
        redact_record(&mut redacted, options, &mut stats);
        assert_eq!(redacted.meta.error.as_deref(), Some(REDACTED));
        assert_eq!(redacted.meta.outcome, Outcome::HttpError);
        assert_eq!(redacted.meta.http_status, 500);
        // Redacting twice changes nothing more.
        let again = redacted.clone();
        redact_record(&mut redacted, options, &mut stats);
        assert_eq!(redacted, again);
        assert_eq!(stats.errors_removed, 1);
    }
}
