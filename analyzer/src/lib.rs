//! The analyzer: replays traces offline and derives per-request facts, then metrics and
//! reports under a named protocol (capacity-v3, AIPerf, vLLM, …).
