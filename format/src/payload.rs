//! A frame's payload as a reader uses it: decompressed to exactly its stated size, or parsed as
//! JSON. Used both by the reader and by the layout search below it.

use crate::frame::{FrameHeader, CODEC_ZSTD};

pub(crate) fn frame_payload(header: &FrameHeader, payload: &[u8]) -> Result<Vec<u8>, String> {
    if header.codec != CODEC_ZSTD {
        return Ok(payload.to_vec());
    }
    // Check the size the zstd frame itself states before reserving `raw_len` bytes: a hostile
    // raw length (up to MAX_RAW_LEN) must not make a tiny file reserve hundreds of MiB.
    let raw = match zstd::zstd_safe::get_frame_content_size(payload) {
        Ok(Some(size)) if size == u64::from(header.raw_len) => {
            zstd::bulk::decompress(payload, header.raw_len as usize)
                .map_err(|e| format!("zstd: {e}"))?
        }
        Ok(Some(size)) => {
            return Err(format!(
                "zstd frame holds {size} bytes, frame says {}",
                header.raw_len
            ))
        }
        // No stated size (a streaming writer): grow the buffer only as output really arrives.
        Ok(None) => {
            use std::io::Read;
            let mut raw = Vec::new();
            zstd::stream::read::Decoder::new(payload)
                .and_then(|d| d.take(u64::from(header.raw_len) + 1).read_to_end(&mut raw))
                .map_err(|e| format!("zstd: {e}"))?;
            raw
        }
        Err(_) => return Err("zstd: not a valid zstd frame".into()),
    };
    if raw.len() != header.raw_len as usize {
        return Err(format!(
            "decompressed {} bytes, frame says {}",
            raw.len(),
            header.raw_len
        ));
    }
    Ok(raw)
}

pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    header: &FrameHeader,
    payload: &[u8],
) -> Result<T, String> {
    let raw = frame_payload(header, payload)?;
    serde_json::from_slice(&raw).map_err(|e| format!("JSON: {e}"))
}
