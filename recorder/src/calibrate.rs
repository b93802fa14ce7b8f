//! Synthetic prompt calibration: the server's own `usage.prompt_tokens` decides how many words
//! a prompt needs, since local token estimates differ between tokenizers and chat templates.

use crate::body;
use crate::config::RecordConfig;
use crate::error::RecordError;
use crate::prompts::{synthetic, Prompt};
use crate::stream::{execute, RequestSpec, StreamContext};
use bytes::Bytes;
use tokentrace_format::{Outcome, Phase};

/// Probe requests use ids from here on, far from any trace id, so server logs tell them apart.
pub const PROBE_ID_BASE: u64 = 1 << 62;

/// Whole-request limit of one probe.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// At most this many probes.
const MAX_PROBES: usize = 5;

/// The result of calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Words per synthetic prompt.
    pub words: u32,
    /// Prompt tokens the server counted for the last probe of that length (None: no usage).
    pub measured_tokens: Option<u32>,
    /// (words, prompt_tokens) of every probe.
    pub probes: Vec<(u32, u32)>,
}

/// Find the word count whose prompt the server counts as `target` tokens (within 1%).
pub async fn calibrate(
    ctx: &StreamContext,
    config: &RecordConfig,
    target: u32,
) -> Result<Calibration, RecordError> {
    // Probes are not measured: the run's TTFT limit would only make them fail on a slow
    // prefill, so they get a generous whole-request limit instead.
    let mut probe_ctx = ctx.clone();
    probe_ctx.ttft_timeout = None;
    probe_ctx.timeout = Some(PROBE_TIMEOUT.max(ctx.timeout.unwrap_or_default()));
    let ctx = &probe_ctx;
    let tolerance = (f64::from(target) * 0.01).max(1.0);
    let mut words = target.max(1);
    let mut probes: Vec<(u32, u32)> = Vec::new();
    for attempt in 0..MAX_PROBES {
        let id = PROBE_ID_BASE + attempt as u64;
        let tokens = match probe(ctx, config, id, words).await? {
            Some(tokens) => tokens,
            None if probes.is_empty() => {
                // The server sends no usage: keep one word per token, say so in the manifest.
                return Ok(Calibration {
                    words,
                    measured_tokens: None,
                    probes,
                });
            }
            None => break,
        };
        probes.push((words, tokens));
        if (f64::from(tokens) - f64::from(target)).abs() <= tolerance {
            return Ok(Calibration {
                words,
                measured_tokens: Some(tokens),
                probes,
            });
        }
        words = next_guess(&probes, target);
    }
    let best = probes
        .iter()
        .min_by_key(|(_, t)| t.abs_diff(target))
        .copied()
        .ok_or_else(|| RecordError::Calibration("no probe succeeded".into()))?;
    Ok(Calibration {
        words: best.0,
        measured_tokens: Some(best.1),
        probes,
    })
}

/// Next word count: a line through the last two probes, or a ratio after the first.
fn next_guess(probes: &[(u32, u32)], target: u32) -> u32 {
    let target = f64::from(target);
    let guess = match probes {
        [.., (w0, t0), (w1, t1)] if w0 != w1 && t0 != t1 => {
            let slope = (f64::from(*t1) - f64::from(*t0)) / (f64::from(*w1) - f64::from(*w0));
            let intercept = f64::from(*t1) - slope * f64::from(*w1);
            if slope > 0.0 {
                (target - intercept) / slope
            } else {
                f64::from(*w1) * target / f64::from((*t1).max(1))
            }
        }
        [.., (w, t)] => f64::from(*w) * target / f64::from((*t).max(1)),
        [] => target,
    };
    guess.round().clamp(1.0, target * 10.0 + 10.0) as u32
}

/// One probe: a streamed request for one token; returns the server's prompt token count.
async fn probe(
    ctx: &StreamContext,
    config: &RecordConfig,
    id: u64,
    words: u32,
) -> Result<Option<u32>, RecordError> {
    let prompt = Prompt::Text(synthetic(config.seed, id, words));
    let spec = RequestSpec {
        id,
        phase: Phase::Warmup,
        intended_ns: ctx.now_ns(),
        body: Bytes::from(body::build(config, &prompt, Some(1))),
        prompt_hash: 0,
        prompt_bytes: 0,
        planned_input_tokens: None,
    };
    // Never cancelled: the sender lives until the probe ends.
    let (_keep, cancel) = tokio::sync::oneshot::channel();
    let record = execute(ctx, spec, cancel).await;
    match record.outcome {
        Outcome::Ok | Outcome::MissingDone => Ok(record.usage.prompt_tokens),
        Outcome::ConnectError => Err(RecordError::Unreachable(record.error.unwrap_or_default())),
        other => Err(RecordError::Calibration(format!(
            "probe request failed ({}): {}",
            other.name(),
            record.error.unwrap_or_default()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_converge_on_a_linear_tokenizer() {
        // A tokenizer counting 1.3 tokens per word plus a 17-token template.
        let count = |w: u32| (f64::from(w) * 1.3 + 17.0).round() as u32;
        let mut probes = vec![(4096, count(4096))];
        let w = next_guess(&probes, 4096);
        probes.push((w, count(w)));
        let w = next_guess(&probes, 4096);
        assert!(count(w).abs_diff(4096) <= 2, "{w} -> {}", count(w));
    }

    #[test]
    fn guess_never_zero() {
        // 10 words for 5000 tokens asks for 0.002 words: rounded up to the smallest prompt.
        assert_eq!(next_guess(&[(10, 5000)], 1), 1);
    }
}
