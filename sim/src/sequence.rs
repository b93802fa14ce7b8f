//! One sequence's output: each decode step becomes an SSE event (or text for a whole
//! response), with role, usage, `[DONE]` and injected faults around the tokens.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::chunk::{done_event, Channel, EventLogprobs, StepText, UsageCounts, WholeResponse};
use crate::job::{EngineParams, Frame, Job, Sink};
use crate::request::Api;

/// A sequence holding a batch slot.
pub(crate) struct Running {
    pub(crate) job: Job,
    pub(crate) ready_at: Instant,
    pub(crate) emitted: u32,
    pub(crate) token_events: u32,
    pub(crate) started: bool,
    pub(crate) faulted: bool,
    pub(crate) reasoning_text: Vec<u8>,
    pub(crate) content_text: Vec<u8>,
    /// Bytes of content streamed so far (completions logprobs `text_offset`).
    pub(crate) content_bytes: usize,
}

/// Whether a sequence goes on after a step.
pub(crate) enum Outcome {
    Continue,
    Done,
}

/// Emits one decode step of a sequence.
pub(crate) fn advance(params: &EngineParams, seq: &mut Running, scratch: &mut StepText) -> Outcome {
    let job = &mut seq.job;
    let streaming = matches!(job.sink, Sink::Stream(_));
    if let Sink::Whole(tx) = &job.sink {
        if tx.as_ref().is_none_or(oneshot::Sender::is_closed) {
            return Outcome::Done;
        }
    }
    if !seq.started {
        seq.started = true;
        if streaming && job.api == Api::Chat {
            let usage = job.continuous_usage.then(|| usage_at(job, 0));
            if !send(job, Frame::Event(job.template.role(usage))) {
                return Outcome::Done;
            }
        }
        // `after_chunks = 0`: the faults strike before the first token event (a stall here is
        // a server that never produces a first token).
        if streaming && job.faults.after_chunks == 0 && job.faults.has_mid_stream() {
            seq.faulted = true;
            if inject_faults(job) {
                return Outcome::Done;
            }
        }
    }
    let n = params.draw_step_tokens(&mut job.rng);
    let (channel, n) = if seq.emitted < job.reasoning_target {
        (
            Channel::Reasoning,
            n.min(job.reasoning_target - seq.emitted),
        )
    } else {
        (Channel::Content, n.min(job.completion_target - seq.emitted))
    };
    scratch.generate(&mut job.rng, n);
    seq.emitted += n;
    seq.token_events += 1;
    let finished = seq.emitted >= job.completion_target;
    if !streaming {
        let text = match channel {
            Channel::Reasoning => &mut seq.reasoning_text,
            Channel::Content => &mut seq.content_text,
        };
        text.extend_from_slice(&scratch.text);
        if finished {
            finish_whole(seq);
            return Outcome::Done;
        }
        return Outcome::Continue;
    }
    let usage = job.continuous_usage.then(|| usage_at(job, seq.emitted));
    let reason = finished.then_some(job.finish_reason);
    let logprobs = job.logprobs.then_some(EventLogprobs {
        tokens: &scratch.tokens,
        text_offset: seq.content_bytes,
    });
    let event = job
        .template
        .delta(channel, &scratch.text, reason, usage, logprobs);
    seq.content_bytes += scratch.text.len();
    if !send(job, Frame::Event(event)) {
        return Outcome::Done;
    }
    let strike = job.faults.has_mid_stream()
        && !seq.faulted
        && (seq.token_events >= job.faults.after_chunks || finished);
    if strike {
        seq.faulted = true;
        if inject_faults(job) {
            return Outcome::Done;
        }
    }
    if !finished {
        return Outcome::Continue;
    }
    if job.include_usage && !job.faults.no_usage {
        let event = job.template.usage(usage_at(job, seq.emitted));
        send(job, Frame::Event(event));
    }
    if !job.faults.no_done {
        send(job, Frame::Event(done_event()));
    }
    Outcome::Done
}

/// Sends the mid-stream faults; true when the stream ends here (reset).
fn inject_faults(job: &Job) -> bool {
    let faults = &job.faults;
    if faults.malformed {
        send(job, Frame::Event(job.template.malformed()));
    }
    if faults.non_utf8 {
        send(
            job,
            Frame::Event(
                job.template
                    .delta(Channel::Content, b" \xff\xfe", None, None, None),
            ),
        );
    }
    if let Some(size) = faults.oversize_bytes {
        let text = vec![b'x'; size];
        send(
            job,
            Frame::Event(
                job.template
                    .delta(Channel::Content, &text, None, None, None),
            ),
        );
    }
    if let Some(ms) = faults.stall_ms {
        send(job, Frame::Stall(Duration::from_millis(ms)));
    }
    if faults.reset {
        send(job, Frame::Reset);
        return true;
    }
    false
}

fn usage_at(job: &Job, emitted: u32) -> UsageCounts {
    UsageCounts {
        prompt: job.prompt_tokens,
        completion: emitted,
        reasoning: emitted.min(job.reasoning_target),
        cached: job.cached_tokens,
    }
}

/// False when the client has gone (the sequence is then aborted, freeing its slot).
fn send(job: &Job, frame: Frame) -> bool {
    match &job.sink {
        Sink::Stream(tx) => tx.send(frame).is_ok(),
        Sink::Whole(_) => true,
    }
}

fn finish_whole(seq: &mut Running) {
    let job = &mut seq.job;
    let body = WholeResponse {
        api: job.api,
        id: &job.id,
        created: job.created,
        model: &job.model,
        reasoning_key: job.reasoning_key,
        reasoning: &String::from_utf8_lossy(&seq.reasoning_text),
        content: &String::from_utf8_lossy(&seq.content_text),
        finish_reason: job.finish_reason,
        usage: usage_at(job, seq.emitted),
    }
    .to_bytes();
    if let Sink::Whole(tx) = &mut job.sink {
        if let Some(tx) = tx.take() {
            let _ = tx.send(body);
        }
    }
}
