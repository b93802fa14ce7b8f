//! Fixed-layout parts of the file: the file header, frame headers, the index and the footer.
//! All integers are little-endian; checksums are XXH3-64 with seed 0. See docs/FORMAT.md.

use crate::types::{ClockAnchor, Header};
use xxhash_rust::xxh3::xxh3_64;

/// First 8 bytes of every trace.
pub const FILE_MAGIC: [u8; 8] = *b"TOKTRACE";
/// The format major version this crate writes and reads.
pub const FORMAT_MAJOR: u16 = 1;
/// The format minor version this crate writes.
pub const FORMAT_MINOR: u16 = 3;
/// First 4 bytes of every frame.
pub const FRAME_MAGIC: [u8; 4] = *b"TTFR";
/// Size of a frame header.
pub const FRAME_HEADER_LEN: usize = 32;
/// Last 8 bytes of a finished trace.
pub const FOOTER_MAGIC: [u8; 8] = *b"TTFOOTER";
/// Size of the footer.
pub const FOOTER_LEN: usize = 24;
/// Size of one index entry.
pub const INDEX_ENTRY_LEN: usize = 40;
/// Largest decompressed block payload a reader accepts (and a writer produces).
pub const MAX_RAW_LEN: u32 = 256 << 20;
/// Fixed part of the file header before the host name.
const FILE_HEADER_FIXED: usize = 38;
/// Longest host name stored (longer names are cut at a UTF-8 boundary).
const MAX_HOST_LEN: usize = 255;

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// The run manifest (JSON).
    Manifest = 1,
    /// A data block (columnar requests and chunks, zstd).
    Block = 2,
    /// The run end (JSON).
    RunEnd = 3,
    /// The block index.
    Index = 4,
}

impl FrameKind {
    fn from_code(code: u8) -> Option<FrameKind> {
        match code {
            1 => Some(FrameKind::Manifest),
            2 => Some(FrameKind::Block),
            3 => Some(FrameKind::RunEnd),
            4 => Some(FrameKind::Index),
            _ => None,
        }
    }
}

/// Payload compression of a frame.
pub const CODEC_NONE: u8 = 0;
/// Payload is one zstd frame.
pub const CODEC_ZSTD: u8 = 1;

/// A parsed, checked frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame holds.
    pub kind: FrameKind,
    /// [`CODEC_NONE`] or [`CODEC_ZSTD`].
    pub codec: u8,
    /// Sequence number (data blocks count 0, 1, 2, …; other frames 0).
    pub seq: u32,
    /// Payload bytes stored after the header.
    pub stored_len: u32,
    /// Payload bytes after decompression.
    pub raw_len: u32,
    /// XXH3-64 of the stored payload.
    pub payload_check: u64,
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Encodes the file header.
pub fn encode_file_header(header: &Header) -> Vec<u8> {
    let mut host_end = header.host.len().min(MAX_HOST_LEN);
    while !header.host.is_char_boundary(host_end) {
        host_end -= 1;
    }
    let host = &header.host.as_bytes()[..host_end];
    let total = FILE_HEADER_FIXED + host.len() + 8;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&FILE_MAGIC);
    out.extend_from_slice(&header.major.to_le_bytes());
    out.extend_from_slice(&header.minor.to_le_bytes());
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out.extend_from_slice(&header.anchor.mono_ns.to_le_bytes());
    out.extend_from_slice(&header.anchor.realtime_ns.to_le_bytes());
    out.extend_from_slice(&header.shard.to_le_bytes());
    out.extend_from_slice(&(host.len() as u16).to_le_bytes());
    out.extend_from_slice(host);
    let check = xxh3_64(&out);
    out.extend_from_slice(&check.to_le_bytes());
    out
}

/// Decodes and checks the file header; returns it and its length in bytes.
pub fn decode_file_header(data: &[u8]) -> Result<(Header, usize), String> {
    if data.len() < FILE_HEADER_FIXED + 8 {
        return Err(format!(
            "file is {} bytes, shorter than a header",
            data.len()
        ));
    }
    if data[..8] != FILE_MAGIC {
        return Err("not a tokentrace file (magic mismatch)".into());
    }
    let total = le_u32(data, 12) as usize;
    let host_len = le_u16(data, 36) as usize;
    if total < FILE_HEADER_FIXED + host_len + 8 || total > data.len() {
        return Err(format!(
            "header length {total} is inconsistent (file {} bytes)",
            data.len()
        ));
    }
    let expected = le_u64(data, total - 8);
    if xxh3_64(&data[..total - 8]) != expected {
        return Err("header checksum mismatch".into());
    }
    let host = std::str::from_utf8(&data[FILE_HEADER_FIXED..FILE_HEADER_FIXED + host_len])
        .map_err(|_| "host name is not UTF-8".to_string())?;
    let header = Header {
        major: le_u16(data, 8),
        minor: le_u16(data, 10),
        anchor: ClockAnchor {
            mono_ns: le_u64(data, 16),
            realtime_ns: le_u64(data, 24),
        },
        host: host.to_string(),
        shard: le_u32(data, 32),
    };
    Ok((header, total))
}

/// Builds a whole frame (header and payload) in one buffer, ready for a single write.
pub fn encode_frame(kind: FrameKind, codec: u8, seq: u32, raw_len: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame_into(&mut out, kind, codec, seq, raw_len, payload);
    out
}

/// [`encode_frame`] into `out` (cleared first), for a writer that keeps one buffer for every
/// frame.
pub fn encode_frame_into(
    out: &mut Vec<u8>,
    kind: FrameKind,
    codec: u8,
    seq: u32,
    raw_len: u32,
    payload: &[u8],
) {
    out.clear();
    out.reserve(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(&FRAME_MAGIC);
    out.push(kind as u8);
    out.push(codec);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&raw_len.to_le_bytes());
    let header_check = xxh3_64(&out[..20]) as u32;
    out.extend_from_slice(&header_check.to_le_bytes());
    out.extend_from_slice(&xxh3_64(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Parses and checks the 32-byte frame header at the start of `data` (payload not checked).
pub fn decode_frame_header(data: &[u8]) -> Result<FrameHeader, String> {
    if data.len() < FRAME_HEADER_LEN {
        return Err(format!(
            "only {} bytes left, a frame header needs 32",
            data.len()
        ));
    }
    if data[..4] != FRAME_MAGIC {
        return Err("frame magic mismatch".into());
    }
    if xxh3_64(&data[..20]) as u32 != le_u32(data, 20) {
        return Err("frame header checksum mismatch".into());
    }
    let kind =
        FrameKind::from_code(data[4]).ok_or_else(|| format!("unknown frame kind {}", data[4]))?;
    let codec = data[5];
    if codec != CODEC_NONE && codec != CODEC_ZSTD {
        return Err(format!("unknown codec {codec}"));
    }
    if le_u16(data, 6) != 0 {
        return Err("reserved frame header bytes are not zero".into());
    }
    let header = FrameHeader {
        kind,
        codec,
        seq: le_u32(data, 8),
        stored_len: le_u32(data, 12),
        raw_len: le_u32(data, 16),
        payload_check: le_u64(data, 24),
    };
    if header.raw_len > MAX_RAW_LEN {
        return Err(format!(
            "raw length {} exceeds the {MAX_RAW_LEN} limit",
            header.raw_len
        ));
    }
    if codec == CODEC_NONE && header.raw_len != header.stored_len {
        return Err("uncompressed frame with raw length != stored length".into());
    }
    Ok(header)
}

/// One index entry: where a block is and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Byte offset of the block's frame header.
    pub offset: u64,
    /// The block's sequence number.
    pub seq: u32,
    /// Requests in the block.
    pub requests: u32,
    /// Chunks in the block.
    pub chunks: u64,
    /// Smallest `send_ns` in the block (0 when empty).
    pub first_send_ns: u64,
    /// Largest `end_ns` in the block (0 when empty).
    pub last_end_ns: u64,
}

/// Encodes the index payload: the run end frame's offset (u64), the entry count (u32), then
/// 40-byte entries.
pub fn encode_index(run_end_offset: u64, entries: &[IndexEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + entries.len() * INDEX_ENTRY_LEN);
    out.extend_from_slice(&run_end_offset.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.seq.to_le_bytes());
        out.extend_from_slice(&e.requests.to_le_bytes());
        out.extend_from_slice(&e.chunks.to_le_bytes());
        out.extend_from_slice(&e.first_send_ns.to_le_bytes());
        out.extend_from_slice(&e.last_end_ns.to_le_bytes());
    }
    out
}

/// Decodes an index payload: the run end frame's offset and the entries.
pub fn decode_index(data: &[u8]) -> Result<(u64, Vec<IndexEntry>), String> {
    if data.len() < 12 {
        return Err("index shorter than its fixed part".into());
    }
    let run_end_offset = le_u64(data, 0);
    let count = le_u32(data, 8) as usize;
    if data.len() != 12 + count.saturating_mul(INDEX_ENTRY_LEN) {
        return Err(format!(
            "index of {} bytes cannot hold {count} entries",
            data.len()
        ));
    }
    let entries = (0..count)
        .map(|i| {
            let at = 12 + i * INDEX_ENTRY_LEN;
            IndexEntry {
                offset: le_u64(data, at),
                seq: le_u32(data, at + 8),
                requests: le_u32(data, at + 12),
                chunks: le_u64(data, at + 16),
                first_send_ns: le_u64(data, at + 24),
                last_end_ns: le_u64(data, at + 32),
            }
        })
        .collect();
    Ok((run_end_offset, entries))
}

/// Encodes the footer pointing at the index frame.
pub fn encode_footer(index_offset: u64) -> [u8; FOOTER_LEN] {
    let mut out = [0u8; FOOTER_LEN];
    out[..8].copy_from_slice(&index_offset.to_le_bytes());
    let check = xxh3_64(&out[..8]);
    out[8..16].copy_from_slice(&check.to_le_bytes());
    out[16..].copy_from_slice(&FOOTER_MAGIC);
    out
}

/// Reads the footer at the end of `data`, if there is a valid one: the index frame offset.
pub fn decode_footer(data: &[u8]) -> Option<u64> {
    let start = data.len().checked_sub(FOOTER_LEN)?;
    let f = &data[start..];
    if f[16..] != FOOTER_MAGIC || xxh3_64(&f[..8]) != le_u64(f, 8) {
        return None;
    }
    Some(le_u64(f, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_header_round_trips_and_cuts_long_hosts() {
        let header = Header {
            major: 1,
            minor: 0,
            anchor: ClockAnchor {
                mono_ns: 5,
                realtime_ns: 7,
            },
            host: "é".repeat(200),
            shard: 3,
        };
        let bytes = encode_file_header(&header);
        let (back, len) = decode_file_header(&bytes).unwrap();
        assert_eq!(len, bytes.len());
        assert_eq!(back.host.len(), 254);
        assert_eq!(back.anchor, header.anchor);
        assert_eq!(back.shard, 3);
    }

    #[test]
    fn frame_header_detects_flips() {
        let frame = encode_frame(FrameKind::Block, CODEC_NONE, 9, 3, b"abc");
        let h = decode_frame_header(&frame).unwrap();
        assert_eq!((h.seq, h.stored_len, h.raw_len), (9, 3, 3));
        for i in 0..FRAME_HEADER_LEN {
            let mut bad = frame.clone();
            bad[i] ^= 0x10;
            assert!(decode_frame_header(&bad).is_err() || i >= 24, "byte {i}");
        }
    }

    #[test]
    fn footer_and_index_round_trip() {
        let entries = vec![IndexEntry {
            offset: 1,
            seq: 2,
            requests: 3,
            chunks: 4,
            first_send_ns: 5,
            last_end_ns: 6,
        }];
        assert_eq!(
            decode_index(&encode_index(9, &entries)).unwrap(),
            (9, entries)
        );
        let mut file = vec![0u8; 10];
        file.extend_from_slice(&encode_footer(77));
        assert_eq!(decode_footer(&file), Some(77));
        file[12] ^= 1;
        assert_eq!(decode_footer(&file), None);
    }
}
