//! The request ids a recorder sends to the server, derived from the run and the trace's request
//! id, so a server's logs join the trace without the trace storing one string per request.
//!
//! Servers differ in what they accept as `X-Request-ID`: llama-cpp-python refuses anything
//! that is not a UUID (HTTP 400 with an empty body), others take any token. A UUID suits all of
//! them, so the id is shaped as one: RFC 9562's version-4 layout (version nibble 4, variant
//! bits 10), whose 122 free bits hold 60 bits of a random per-run prefix and the low 62 bits of
//! the request id. docs/FORMAT.md gives the bit layout.

use serde::{Deserialize, Serialize};

/// The header that carried each request's id, and how its value was derived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestIdHeader {
    /// Lower-case header name, e.g. `x-request-id`.
    pub name: String,
    /// The run's prefix (60 bits used), shared by every request of the run.
    pub run_prefix: u64,
}

impl RequestIdHeader {
    /// The header value sent for request `id`.
    pub fn value(&self, id: u64) -> String {
        request_uuid(self.run_prefix, id)
    }
}

/// Request ids above this do not fit the UUID's 62 id bits (they would wrap).
pub const MAX_REQUEST_ID: u64 = (1 << 62) - 1;

/// The UUID text for request `id` of the run with `run_prefix`.
pub fn request_uuid(run_prefix: u64, id: u64) -> String {
    let mut out = [0u8; 36];
    write_uuid(run_prefix, id, &mut out);
    // Only ASCII hex digits and dashes were written.
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes the 36 ASCII bytes of the UUID for (`run_prefix`, `id`) into `out`.
pub fn write_uuid(run_prefix: u64, id: u64, out: &mut [u8; 36]) {
    let prefix = run_prefix & ((1 << 60) - 1);
    // time_low (32) and time_mid (16): the prefix's top 48 bits; then version 4 and 12 more.
    let high = ((prefix >> 12) << 16) | (0x4 << 12) | (prefix & 0xfff);
    // Variant 10, then 62 bits of the id.
    let low = (0b10 << 62) | (id & MAX_REQUEST_ID);
    let value = (u128::from(high) << 64) | u128::from(low);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut pos = 0;
    for nibble in (0..32).rev() {
        if matches!(pos, 8 | 13 | 18 | 23) {
            out[pos] = b'-';
            pos += 1;
        }
        out[pos] = HEX[((value >> (nibble * 4)) & 0xf) as usize];
        pos += 1;
    }
}

/// The request id a UUID of this layout carries, when `text` is one (any prefix).
pub fn id_of_uuid(text: &str) -> Option<u64> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || text.len() != 36 {
        return None;
    }
    let value = u128::from_str_radix(&hex, 16).ok()?;
    let low = value as u64;
    (low >> 62 == 0b10).then_some(low & MAX_REQUEST_ID)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shaped_as_a_version_4_uuid() {
        let text = request_uuid(0x0123_4567_89ab_cdef, 42);
        assert_eq!(text.len(), 36);
        let parts: Vec<&str> = text.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{text}");
        assert!(
            matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
            "{text}"
        );
        assert_eq!(text, "12345678-9abc-4def-8000-00000000002a");
    }

    #[test]
    fn distinct_per_request_and_per_run_and_reversible() {
        let a = request_uuid(7, 1);
        assert_ne!(a, request_uuid(7, 2));
        assert_ne!(a, request_uuid(8, 1));
        for id in [0, 1, 12_345, MAX_REQUEST_ID] {
            assert_eq!(id_of_uuid(&request_uuid(99, id)), Some(id));
        }
        assert_eq!(id_of_uuid("not-a-uuid"), None);
    }
}
