//! An OpenAI-compatible streaming server that behaves like an LLM inference engine, so clients
//! can be developed, tested and benchmarked without a GPU.
//!
//! # Endpoints
//! `POST /v1/chat/completions`, `POST /v1/completions` (both streaming with `"stream": true`,
//! or whole), `GET /v1/models`, `GET /health`. HTTP/1.1 and HTTP/2 without TLS (h2c, prior
//! knowledge) on the same port.
//!
//! # Engine model
//! Requests take one of `slots` batch slots, or wait for one in arrival order. An admitted
//! request is prefilled after the prefills admitted before it, taking
//! `prefill_base_ms + (prompt_tokens - cached_tokens) / prefill_tok_s`. Prefilled sequences
//! then advance together in decode steps of `step_base_ms + step_per_seq_ms * active` ms; the
//! first step of a sequence carries its first token. Each step yields `1 + accepted` tokens,
//! where speculative decoding accepts each of `spec_draft_tokens` drafts in turn with the
//! probability that makes the mean `spec_tokens_mean`; one step is one SSE event. Reasoning
//! (`reasoning_tokens`, chat only, unless the request sets
//! `chat_template_kwargs.enable_thinking: false`) is streamed before the content; a step never
//! mixes reasoning and content tokens. Output length: reasoning + a content length drawn
//! uniformly in `eos_tokens_mean * (1 ± eos_tokens_spread)`, capped at `max_tokens`
//! (`finish_reason` `length`); with `ignore_eos` exactly `max_tokens`.
//!
//! # Streamed events
//! Chat: a role event (`{"role":"assistant","content":""}`), then one event per decode step
//! (`reasoning_content` — or `reasoning` with `--reasoning-field reasoning` — then `content`
//! deltas; the last carries `finish_reason`), then, when `stream_options.include_usage`, a
//! usage event with empty `choices`, then `data: [DONE]`. Completions: the same without the
//! role event and with `text` instead of deltas. With `stream_options.continuous_usage_stats`
//! every event carries cumulative usage. Usage reports `prompt_tokens`, `completion_tokens`
//! (reasoning included), `total_tokens`, `prompt_tokens_details.cached_tokens` and
//! `completion_tokens_details.reasoning_tokens`. With `logprobs` (chat: `true`; completions: a
//! number) every token event lists its tokens with made-up log probabilities (chat:
//! `logprobs.content[]`; completions: `tokens`, `token_logprobs`, `text_offset`), so a client
//! can count the tokens of each event; whole responses carry no logprobs.
//!
//! # Prompt token rule
//! One token per whitespace-separated word; see [`request`] for every prompt form. Generated
//! text follows the same rule (each token is a space and a word).
//!
//! # Determinism
//! Every random draw of a request (output length, text, speculative steps, faults, response
//! id) comes from a generator seeded with `seed`, the request body and its `X-Request-ID`
//! header (or, without one, its arrival number). Timing is not deterministic.
//!
//! # Faults
//! See [`FaultConfig`]. Stream faults are extra events (malformed JSON, non-UTF-8 bytes, an
//! oversize line), a stall, or a TCP reset, injected after `after_chunks` token events. A reset
//! comes 10 ms after the last event was handed over, so the events before it reach the client.
//!
//! # Truth log
//! With `truth_log` set, one JSON line per SSE event handed to the connection:
//! `{"request_id":…,"chunk_index":…,"mono_ns":…}`; `request_id` is the `X-Request-ID` header
//! (else `sim-N`), `chunk_index` counts every event of the response from 0 (role, usage,
//! `[DONE]` and injected events included), `mono_ns` is CLOCK_MONOTONIC read just before the
//! event is handed over for writing. Whole (non-streaming) responses are not logged.

mod body;
mod chunk;
mod config;
mod engine;
mod fault;
mod job;
mod prefix;
pub mod request;
mod routes;
mod sequence;
mod server;
mod tls;
mod truth;

pub use config::{FaultConfig, ReasoningField, SimConfig};
pub use request::{count_tokens, Api};
pub use server::{SimHandle, SimServer};
pub use truth::{mono_now_ns, raise_open_file_limit};
