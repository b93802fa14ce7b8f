//! What the engine and a sequence share: a planned request ([`Job`]), where its output goes
//! ([`Sink`], [`Frame`]), and the engine's timing parameters. Kept below both so that neither
//! depends on the other for them.

use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::Rng;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::chunk::ChunkTemplate;
use crate::config::SimConfig;
use crate::fault::FaultPlan;
use crate::request::Api;

/// What a streaming response body receives from the engine.
pub(crate) enum Frame {
    /// One complete SSE event.
    Event(Bytes),
    /// Write nothing for this long (a fault).
    Stall(Duration),
    /// Reset the connection (a fault); nothing follows.
    Reset,
}

/// Where a sequence's output goes.
pub(crate) enum Sink {
    Stream(tmpsc::UnboundedSender<Frame>),
    /// Taken when the whole response is sent.
    Whole(Option<oneshot::Sender<Bytes>>),
}

/// A request, fully planned (lengths, faults, envelope), handed to the engine.
pub(crate) struct Job {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub template: ChunkTemplate,
    pub reasoning_key: &'static str,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    /// Reasoning tokens to emit first (already capped by `completion_target`).
    pub reasoning_target: u32,
    /// Completion tokens in total, reasoning included.
    pub completion_target: u32,
    pub finish_reason: &'static str,
    pub include_usage: bool,
    pub continuous_usage: bool,
    /// Token logprobs in every token event.
    pub logprobs: bool,
    pub faults: FaultPlan,
    pub rng: StdRng,
    pub sink: Sink,
}

/// Engine timing parameters derived from the configuration.
#[derive(Clone, Debug)]
pub(crate) struct EngineParams {
    pub(crate) slots: usize,
    pub(crate) prefill_ns_per_token: f64,
    pub(crate) prefill_base: Duration,
    pub(crate) step_base_ns: f64,
    pub(crate) step_per_seq_ns: f64,
    pub(crate) spec_accept: f64,
    pub(crate) spec_draft_tokens: u32,
}

impl EngineParams {
    pub(crate) fn from_config(config: &SimConfig) -> Self {
        EngineParams {
            slots: config.slots.max(1),
            prefill_ns_per_token: 1e9 / config.prefill_tok_s.max(1e-3),
            prefill_base: Duration::from_secs_f64(config.prefill_base_ms.max(0.0) / 1e3),
            step_base_ns: config.step_base_ms.max(0.0) * 1e6,
            step_per_seq_ns: config.step_per_seq_ms.max(0.0) * 1e6,
            spec_accept: acceptance_for_mean(config.spec_tokens_mean, config.spec_draft_tokens),
            spec_draft_tokens: config.spec_draft_tokens,
        }
    }

    /// Tokens one decode step yields: drafts are accepted in order until the first rejection.
    pub(crate) fn draw_step_tokens(&self, rng: &mut impl Rng) -> u32 {
        let mut n = 1;
        while n <= self.spec_draft_tokens && rng.gen::<f64>() < self.spec_accept {
            n += 1;
        }
        n
    }

    pub(crate) fn step_time(&self, active: usize) -> Duration {
        Duration::from_nanos((self.step_base_ns + self.step_per_seq_ns * active as f64) as u64)
    }
}

/// Per-draft-token acceptance probability `a` such that a step's expected token count,
/// `1 + a + a^2 + … + a^k` (drafts accepted in order until the first rejection), equals `mean`.
pub(crate) fn acceptance_for_mean(mean: f64, draft_tokens: u32) -> f64 {
    let expected = |a: f64| (0..=draft_tokens).map(|j| a.powi(j as i32)).sum::<f64>();
    if draft_tokens == 0 || mean <= 1.0 {
        return 0.0;
    }
    if mean >= expected(1.0) {
        return 1.0;
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..64 {
        let mid = (lo + hi) / 2.0;
        if expected(mid) < mean {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}
