//! An OpenAI-compatible streaming server that behaves like an inference engine (batch slots,
//! prefill, decode, speculative steps, reasoning, faults), with a truth log of every write.
