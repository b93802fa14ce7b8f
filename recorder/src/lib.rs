//! The recorder: a minimal-overhead load generator for OpenAI-compatible streaming endpoints.
//! It timestamps every body read before parsing anything, classifies SSE events, and hands
//! whole requests to the trace writer thread.
