//! Correctness counts of a trial: did the server do what was asked, request by request?
//!
//! Uniqueness comes from the prompt and output hashes in the trace, so the counts need no
//! captured text. Uniqueness is counted within each trial (`uniqueness_scope`).

use crate::definitions::AiperfDefinitions;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};
use tokentrace_format::{Outcome, Phase, RequestRecord};

/// The fixture's `correctness` block of one trial, or the sum of several (`correctness_total`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Correctness {
    /// Warmup requests.
    pub warmup_records: u64,
    /// Distinct warmup prompts.
    pub unique_warmup_prompts: u64,
    /// Distinct measured prompts also sent during warmup (a warm cache would flatter TTFT).
    pub warmup_profile_prompt_overlap: u64,
    /// Measured requests.
    pub profiling_records: u64,
    /// Measured requests answered with HTTP 200.
    pub http_200: u64,
    /// Distinct measured prompts.
    pub unique_prompts: u64,
    /// Distinct measured outputs (identical outputs hint at a cache or a broken sampler).
    pub unique_outputs: u64,
    /// Output deltas of measured requests: non-empty reasoning, content or tool-call text.
    pub generated_chunks: u64,
    /// UTF-8 bytes of those deltas.
    pub generated_utf8_bytes: u64,
    /// Sum of the server's `usage.completion_tokens` over measured requests.
    pub completion_tokens_total: u64,
    /// Measured requests per finish reason (`length` is expected with `ignore_eos`).
    pub finish_reasons: BTreeMap<String, u64>,
    /// Requests of either phase that did not succeed under AIPerf's definitions.
    pub errors: u64,
    /// Requests of either phase whose stream ended after its `finish_reason` without
    /// `[DONE]`: successes (AIPerf reads a stream to its end), counted so a reader sees them.
    pub missing_done: u64,
    /// True if any request was cancelled or the trace was not finished cleanly.
    pub cancelled: bool,
    /// Measured requests whose completion tokens differ from the configured output length.
    pub output_length_mismatches: u64,
}

impl Correctness {
    /// Counts one trial under AIPerf's definitions `defs` (which outcomes succeed, which
    /// chunks are output). `configured_osl` is the output length the workload forced;
    /// `finished_cleanly` is false when the trace has no run end or ended interrupted.
    pub fn of_trial(
        records: &[RequestRecord],
        configured_osl: u32,
        finished_cleanly: bool,
        defs: &AiperfDefinitions,
    ) -> Correctness {
        let mut c = Correctness {
            cancelled: !finished_cleanly,
            ..Correctness::default()
        };
        let mut warmup_prompts = HashSet::new();
        let mut prompts = HashSet::new();
        let mut outputs = HashSet::new();
        for record in records {
            if !defs.is_success(record.meta.outcome) {
                c.errors += 1;
            }
            if record.meta.outcome == Outcome::MissingDone {
                c.missing_done += 1;
            }
            if record.meta.outcome == Outcome::Cancelled {
                c.cancelled = true;
            }
            if record.meta.phase == Phase::Warmup {
                c.warmup_records += 1;
                warmup_prompts.insert(record.meta.prompt_hash);
                continue;
            }
            c.profiling_records += 1;
            c.http_200 += u64::from(record.meta.http_status == 200);
            prompts.insert(record.meta.prompt_hash);
            outputs.insert(record.meta.output_hash);
            for chunk in &record.chunks {
                if defs.is_generated(chunk) {
                    c.generated_chunks += 1;
                    c.generated_utf8_bytes += u64::from(chunk.text_len);
                }
            }
            let completion = record.meta.usage.completion_tokens;
            c.completion_tokens_total += completion.map_or(0, u64::from);
            if completion != Some(configured_osl) {
                c.output_length_mismatches += 1;
            }
            let reason = record.meta.finish_reason.as_deref().unwrap_or("none");
            *c.finish_reasons.entry(reason.to_string()).or_default() += 1;
        }
        c.unique_warmup_prompts = warmup_prompts.len() as u64;
        c.unique_prompts = prompts.len() as u64;
        c.unique_outputs = outputs.len() as u64;
        c.warmup_profile_prompt_overlap = prompts.intersection(&warmup_prompts).count() as u64;
        c
    }

    /// Adds another trial's counts (uniqueness stays per trial, so distinct counts add up).
    pub fn add(&mut self, other: &Correctness) {
        self.warmup_records += other.warmup_records;
        self.unique_warmup_prompts += other.unique_warmup_prompts;
        self.warmup_profile_prompt_overlap += other.warmup_profile_prompt_overlap;
        self.profiling_records += other.profiling_records;
        self.http_200 += other.http_200;
        self.unique_prompts += other.unique_prompts;
        self.unique_outputs += other.unique_outputs;
        self.generated_chunks += other.generated_chunks;
        self.generated_utf8_bytes += other.generated_utf8_bytes;
        self.completion_tokens_total += other.completion_tokens_total;
        for (reason, n) in &other.finish_reasons {
            *self.finish_reasons.entry(reason.clone()).or_default() += n;
        }
        self.errors += other.errors;
        self.missing_done += other.missing_done;
        self.cancelled |= other.cancelled;
        self.output_length_mismatches += other.output_length_mismatches;
    }

    /// `finish_reason_length` always (the fixture's key), then one key per other reason seen.
    fn insert_finish_reasons(&self, block: &mut Map<String, Value>) {
        let length = self.finish_reasons.get("length").copied().unwrap_or(0);
        block.insert("finish_reason_length".into(), json!(length));
        for (reason, n) in &self.finish_reasons {
            if reason != "length" {
                block.insert(format!("finish_reason_{reason}"), json!(n));
            }
        }
    }

    fn insert_common(&self, block: &mut Map<String, Value>) {
        block.insert("warmup_records".into(), json!(self.warmup_records));
        block.insert(
            "unique_warmup_prompts".into(),
            json!(self.unique_warmup_prompts),
        );
        block.insert(
            "warmup_profile_prompt_overlap".into(),
            json!(self.warmup_profile_prompt_overlap),
        );
        block.insert("profiling_records".into(), json!(self.profiling_records));
        block.insert("http_200".into(), json!(self.http_200));
        block.insert("unique_prompts".into(), json!(self.unique_prompts));
        block.insert("unique_outputs".into(), json!(self.unique_outputs));
        block.insert("generated_chunks".into(), json!(self.generated_chunks));
        block.insert(
            "generated_utf8_bytes".into(),
            json!(self.generated_utf8_bytes),
        );
        block.insert(
            "completion_tokens_total".into(),
            json!(self.completion_tokens_total),
        );
        self.insert_finish_reasons(block);
        block.insert("errors".into(), json!(self.errors));
        // Only when there were some, so a clean trial keeps the fixture's keys.
        if self.missing_done > 0 {
            block.insert("missing_done".into(), json!(self.missing_done));
        }
    }

    /// The per-trial block, keys in the fixture's order (the mismatch count is a float there).
    pub fn trial_json(&self) -> Value {
        let mut block = Map::new();
        self.insert_common(&mut block);
        block.insert("cancelled".into(), json!(self.cancelled));
        block.insert(
            "output_length_mismatches".into(),
            json!(self.output_length_mismatches as f64),
        );
        Value::Object(block)
    }

    /// The `correctness_total` block, keys in the fixture's order.
    pub fn total_json(&self) -> Value {
        let mut block = Map::new();
        self.insert_common(&mut block);
        block.insert(
            "output_length_mismatches".into(),
            json!(self.output_length_mismatches as f64),
        );
        block.insert("cancelled".into(), json!(self.cancelled));
        block.insert("uniqueness_scope".into(), json!("within_each_trial"));
        Value::Object(block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::record;
    use tokentrace_format::Channel;

    fn defs() -> &'static AiperfDefinitions {
        AiperfDefinitions::builtin().unwrap()
    }

    #[test]
    fn counts_a_trial_from_hashes() {
        let mut records = vec![
            record(0, Phase::Warmup, 0, &[10, 20], 2),
            record(1, Phase::Warmup, 0, &[10, 20], 2),
            record(2, Phase::Measured, 100, &[10, 20, 30], 3),
            record(3, Phase::Measured, 100, &[10, 20, 30], 3),
            record(4, Phase::Measured, 100, &[10, 20], 2),
        ];
        // Request 3 repeats a warmup prompt and request 2's output; request 4 stops early.
        records[3].meta.prompt_hash = records[1].meta.prompt_hash;
        records[3].meta.output_hash = records[2].meta.output_hash;
        records[4].meta.finish_reason = Some("stop".into());
        let mut broken = record(5, Phase::Measured, 100, &[], 0);
        broken.meta.outcome = Outcome::StreamError;
        broken.meta.http_status = 200;
        broken.meta.usage.completion_tokens = None;
        broken.meta.finish_reason = None;
        records.push(broken);

        let c = Correctness::of_trial(&records, 3, true, defs());
        assert_eq!(c.warmup_records, 2);
        assert_eq!(c.unique_warmup_prompts, 2);
        assert_eq!(c.profiling_records, 4);
        assert_eq!(c.http_200, 4);
        assert_eq!(c.unique_prompts, 4);
        assert_eq!(c.warmup_profile_prompt_overlap, 1);
        assert_eq!(c.unique_outputs, 3);
        assert_eq!(c.generated_chunks, 8);
        assert_eq!(c.generated_utf8_bytes, 32);
        assert_eq!(c.completion_tokens_total, 8);
        assert_eq!(c.errors, 1);
        assert!(!c.cancelled);
        // Request 4 (2 tokens) and the broken one (no usage) differ from the configured 3.
        assert_eq!(c.output_length_mismatches, 2);
        let block = c.trial_json();
        assert_eq!(block["finish_reason_length"], json!(2));
        assert_eq!(block["finish_reason_stop"], json!(1));
        assert_eq!(block["finish_reason_none"], json!(1));
        assert_eq!(block["output_length_mismatches"], json!(2.0));
    }

    #[test]
    fn a_stream_without_done_is_no_error_but_is_counted_and_shown() {
        let mut records = vec![
            record(1, Phase::Measured, 0, &[10, 20], 2),
            record(2, Phase::Measured, 100, &[10, 20], 2),
        ];
        // Ended after its finish_reason without [DONE]: AIPerf reads to the end, a success.
        records[1].meta.outcome = Outcome::MissingDone;
        records[1].chunks.retain(|c| c.channel != Channel::Done);
        let c = Correctness::of_trial(&records, 2, true, defs());
        assert_eq!((c.errors, c.missing_done), (0, 1));
        assert_eq!(c.trial_json()["missing_done"], json!(1));
        let mut total = Correctness::default();
        total.add(&c);
        assert_eq!(total.total_json()["missing_done"], json!(1));
        // A clean trial keeps the fixture's keys.
        let clean = Correctness::of_trial(&records[..1], 2, true, defs());
        assert!(clean.trial_json().get("missing_done").is_none());
        // A cut stream is still an error.
        records[1].meta.outcome = Outcome::StreamError;
        assert_eq!(Correctness::of_trial(&records, 2, true, defs()).errors, 1);
    }

    #[test]
    fn tool_call_text_is_generated_output() {
        let mut r = record(1, Phase::Measured, 0, &[10, 20], 2);
        for chunk in r
            .chunks
            .iter_mut()
            .filter(|c| c.channel == Channel::Content)
        {
            chunk.channel = Channel::Tool;
        }
        let c = Correctness::of_trial(&[r], 2, true, defs());
        assert_eq!((c.generated_chunks, c.generated_utf8_bytes), (2, 8));
    }

    #[test]
    fn totals_add_up_and_cancellation_sticks() {
        let records = vec![record(1, Phase::Measured, 0, &[10, 20], 2)];
        let one = Correctness::of_trial(&records, 2, true, defs());
        let unfinished = Correctness::of_trial(&records, 2, false, defs());
        assert!(unfinished.cancelled);
        let mut total = Correctness::default();
        total.add(&one);
        total.add(&one);
        assert_eq!(total.profiling_records, 2);
        assert_eq!(total.unique_prompts, 2);
        assert!(!total.cancelled);
        total.add(&unfinished);
        assert!(total.cancelled);
        let json = total.total_json();
        assert_eq!(json["uniqueness_scope"], json!("within_each_trial"));
        assert_eq!(json["finish_reason_length"], json!(3));
    }
}
