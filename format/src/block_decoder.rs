//! Decompress-and-decode of one block payload, reusing a per-thread zstd context and output
//! buffer: allocating a fresh megabyte for every block costs page faults that show up as a
//! quarter of the decode time.

use crate::block::DecodedBlock;
use crate::codec;
use crate::frame::{FrameHeader, CODEC_ZSTD};
use std::cell::RefCell;

/// Larger scratch buffers are released after use rather than kept for the thread's lifetime.
const KEEP_SCRATCH_BYTES: usize = 16 << 20;

#[derive(Default)]
struct Scratch {
    context: Option<zstd::bulk::Decompressor<'static>>,
    raw: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Decodes a checked block frame's payload into `out`. `fallback` handles every frame the fast
/// path does not (no stated content size, a size that disagrees with the frame, codec 0): it is
/// the reader's careful general path.
pub(crate) fn decode_payload_into(
    frame: &FrameHeader,
    payload: &[u8],
    out: &mut DecodedBlock,
    fallback: impl FnOnce(&FrameHeader, &[u8]) -> Result<Vec<u8>, String>,
) -> Result<(), String> {
    let raw_len = frame.raw_len as usize;
    let fast = frame.codec == CODEC_ZSTD
        && matches!(zstd::zstd_safe::get_frame_content_size(payload), Ok(Some(size)) if size == raw_len as u64);
    if !fast {
        let raw = fallback(frame, payload)?;
        return codec::decode_block_into(&raw, out);
    }
    SCRATCH.with(|cell| {
        let Ok(mut scratch) = cell.try_borrow_mut() else {
            // Re-entered on this thread (cannot happen today): decode without the scratch.
            let raw = fallback(frame, payload)?;
            return codec::decode_block_into(&raw, out);
        };
        let scratch = &mut *scratch;
        if scratch.context.is_none() {
            scratch.context =
                Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
        }
        let Some(context) = scratch.context.as_mut() else {
            return Err("zstd: no decompression context".into());
        };
        scratch.raw.clear();
        scratch.raw.reserve(raw_len);
        let result = context
            .decompress_to_buffer(payload, &mut scratch.raw)
            .map_err(|e| format!("zstd: {e}"))
            .and_then(|n| {
                if n == raw_len {
                    Ok(())
                } else {
                    Err(format!("decompressed {n} bytes, frame says {raw_len}"))
                }
            })
            .and_then(|()| codec::decode_block_into(&scratch.raw, out));
        if scratch.raw.capacity() > KEEP_SCRATCH_BYTES {
            scratch.raw = Vec::new();
        }
        result
    })
}
