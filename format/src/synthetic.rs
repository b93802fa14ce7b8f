//! Deterministic, realistic synthetic requests for tests, benchmarks and golden files.
//!
//! The shape follows a chat stream from an OpenAI-compatible server: a role event, content
//! events about 10 ms apart with microsecond jitter (ns resolution, as the clock gives), one to
//! three events per body read, then finish, usage and `[DONE]` events. Same seed, same records.

use crate::types::{Channel, ChunkRecord, Outcome, Phase, RequestMeta, RequestRecord, Usage};

/// A small deterministic generator (SplitMix64); not for anything but test data.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_u64() % (hi - lo)
        }
    }
}

/// A realistic streamed request: `id`, starting at `start_ns`, with about `output_chunks`
/// content events; `with_text` fills `text` of content events.
pub fn request(
    rng: &mut SplitMix,
    id: u64,
    start_ns: u64,
    output_chunks: usize,
    with_text: bool,
) -> RequestRecord {
    let intended_ns = start_ns;
    let send_ns = intended_ns + rng.range(2_000, 40_000);
    let headers_ns = send_ns + rng.range(20_000_000, 80_000_000);
    let mut chunks = Vec::with_capacity(output_chunks + 4);
    let mut now = headers_ns + rng.range(50_000, 500_000);
    let mut read_index = 0u32;
    let push = |chunks: &mut Vec<ChunkRecord>,
                now: u64,
                read: u32,
                channel: Channel,
                rng: &mut SplitMix| {
        let text_len = if channel == Channel::Content {
            rng.range(1, 12) as u32
        } else {
            0
        };
        let text = (with_text && text_len > 0)
            .then(|| "ab cdé fghij".chars().take(text_len as usize).collect());
        let bytes = match channel {
            Channel::Done => 14,
            Channel::Usage => 260 + rng.range(0, 20) as u32,
            _ => 150 + text_len + rng.range(0, 3) as u32,
        };
        let tokens = (channel == Channel::Content).then_some(1);
        chunks.push(ChunkRecord {
            arrival_ns: now,
            read_index: read,
            bytes,
            channel,
            text_len,
            tokens,
            text,
        });
    };
    push(&mut chunks, now, read_index, Channel::Role, rng);
    let mut emitted = 0;
    while emitted < output_chunks {
        now += rng.range(9_500_000, 10_500_000);
        read_index += 1;
        let in_this_read = rng.range(1, 4) as usize;
        for _ in 0..in_this_read.min(output_chunks - emitted) {
            push(&mut chunks, now, read_index, Channel::Content, rng);
            emitted += 1;
        }
    }
    now += rng.range(5_000, 50_000);
    read_index += 1;
    for channel in [Channel::Finish, Channel::Usage, Channel::Done] {
        push(&mut chunks, now, read_index, channel, rng);
    }
    let end_ns = now + rng.range(1_000, 10_000);
    let prompt_tokens = rng.range(100, 2000) as u32;
    RequestRecord {
        meta: RequestMeta {
            id,
            phase: if id < 2 {
                Phase::Warmup
            } else {
                Phase::Measured
            },
            trial: 0,
            intended_ns,
            send_ns,
            headers_ns: Some(headers_ns),
            end_ns,
            http_status: 200,
            outcome: Outcome::Ok,
            error: None,
            usage: Usage {
                prompt_tokens: Some(prompt_tokens),
                completion_tokens: Some(output_chunks as u32),
                reasoning_tokens: None,
                cached_tokens: Some(0),
            },
            finish_reason: Some("length".into()),
            prompt_hash: rng.next_u64(),
            prompt_bytes: prompt_tokens * 4,
            output_hash: rng.next_u64(),
            output_bytes: chunks.iter().map(|c| c.text_len).sum(),
            planned_input_tokens: Some(prompt_tokens),
            response_headers: vec![("x-request-id".into(), format!("req-{id}"))],
            retries: 0,
        },
        chunks,
    }
}

/// `count` requests with `output_chunks / 2 ..= 3 * output_chunks / 2` content events each,
/// started 137 ms apart and returned in completion order.
pub fn requests(
    seed: u64,
    count: usize,
    output_chunks: usize,
    with_text: bool,
) -> Vec<RequestRecord> {
    let mut rng = SplitMix::new(seed);
    let mut out: Vec<RequestRecord> = (0..count as u64)
        .map(|id| {
            let start = 1_000_000_000 + id * 137_000_000 + rng.range(0, 1_000_000);
            let chunks = output_chunks / 2 + rng.range(0, output_chunks as u64 + 1) as usize;
            request(&mut rng, id, start, chunks, with_text)
        })
        .collect();
    out.sort_by_key(|r| r.meta.end_ns);
    out
}
