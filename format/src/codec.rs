//! The columnar block payload (before zstd): the only module that uses bincode. The chunk
//! columns, where the chunks are, are read and written by hand against the same bytes
//! (`chunk_columns.rs`, `chunk_columns_write.rs`).
//!
//! A block payload is a sequence of bincode 2 values, one per column, encoded with
//! `bincode::config::standard()` (little-endian, variable-length integers). docs/FORMAT.md
//! spells out the resulting bytes so that no reader needs bincode; keep the two in step.
//!
//! Times are delta-encoded so that the common values are small: a chunk's arrival is relative to
//! the previous chunk of its request (the first chunk: to the request's send time). Deltas use
//! wrapping arithmetic reinterpreted as i64, so every u64 round-trips exactly.

use crate::block::{BlockRequest, CheckpointSection, DecodedBlock};
use crate::chunk_columns::{read_chunk_columns, ByteReader};
use crate::chunk_columns_write::{Column, ColumnItem};
use crate::packed::PackedRecord;
use crate::types::{Outcome, Phase, RequestMeta, Usage};
use bincode::config::{self, Configuration};
use bincode::{Decode, Encode};

/// Upper bound on the memory bincode may claim while decoding one column; protects against a
/// hostile length prefix asking for a huge allocation (each claim is checked before allocating).
const DECODE_LIMIT: usize = 1 << 30;

fn encode_config() -> Configuration {
    config::standard()
}

fn decode_config(
) -> Configuration<config::LittleEndian, config::Varint, config::Limit<DECODE_LIMIT>> {
    config::standard().with_limit::<DECODE_LIMIT>()
}

/// Encodes one request column: `value` of every request's facts.
fn column<'m, T: Encode>(
    out: &mut Vec<u8>,
    metas: &[&'m RequestMeta],
    value: impl Fn(&'m RequestMeta) -> T,
) -> Result<(), String> {
    put(out, &metas.iter().map(|m| value(m)).collect::<Vec<T>>())
}

/// Encodes one chunk column, straight from the packed records (a column collected first would
/// cost up to 16 bytes a chunk, the text column, on top of the payload, and a checkpoint block
/// holds the tails of every stream in flight): `m` elements, each request's from `of`, request
/// by request (a `flat_map` over the requests checked for the next request at every element).
fn chunk_column<'r, T: ColumnItem, I: Iterator<Item = T>>(
    out: &mut Vec<u8>,
    m: usize,
    requests: &[&'r PackedRecord],
    of: impl Fn(&'r PackedRecord) -> I,
) -> Result<(), String> {
    let mut col = Column::new(out, m);
    for r in requests {
        col.extend(of(r));
    }
    col.finish()
}

fn put<T: Encode>(out: &mut Vec<u8>, value: &T) -> Result<(), String> {
    bincode::encode_into_std_write(value, out, encode_config())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Reads columns one after another from a block payload.
struct ColumnReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl ColumnReader<'_> {
    fn take<T: Decode<()>>(&mut self, name: &str) -> Result<T, String> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        // Every element takes at least one byte, so a count above the bytes left is damage;
        // refusing it here keeps a bad count from reserving memory for entries that cannot exist.
        let (count, _) = bincode::decode_from_slice::<u64, _>(rest, decode_config())
            .map_err(|e| format!("column `{name}`: {e}"))?;
        if count > rest.len() as u64 {
            return Err(format!(
                "column `{name}` claims {count} entries in {} bytes",
                rest.len()
            ));
        }
        let (value, used) = bincode::decode_from_slice::<T, _>(rest, decode_config())
            .map_err(|e| format!("column `{name}`: {e}"))?;
        self.pos += used;
        Ok(value)
    }

    /// Reads a column's entry count, refusing one larger than the bytes left.
    fn count(&mut self, name: &str) -> Result<usize, String> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let (count, used) = bincode::decode_from_slice::<u64, _>(rest, decode_config())
            .map_err(|e| format!("column `{name}`: {e}"))?;
        if count > (rest.len() - used) as u64 {
            return Err(format!(
                "column `{name}` claims {count} entries in {} bytes",
                rest.len() - used
            ));
        }
        self.pos += used;
        Ok(count as usize)
    }

    /// Takes a column that must have exactly `len` entries.
    fn take_n<T: Decode<()>>(&mut self, name: &str, len: usize) -> Result<Vec<T>, String> {
        let column: Vec<T> = self.take(name)?;
        if column.len() != len {
            return Err(format!(
                "column `{name}` has {} entries, expected {len}",
                column.len()
            ));
        }
        Ok(column)
    }
}

#[inline]
fn delta(from: u64, to: u64) -> i64 {
    to.wrapping_sub(from) as i64
}

#[inline]
fn undelta(from: u64, d: i64) -> u64 {
    from.wrapping_add(d as u64)
}

/// The highest outcome code column 9 may hold: the classes of format 1.0.
const LAST_LEGACY_OUTCOME: u8 = Outcome::Other as u8;

/// Encodes final records (with their chunks) and the checkpoints of requests still streaming
/// into an uncompressed block payload (the writer uses [`encode_block_into`]).
#[cfg(test)]
pub fn encode_block(
    requests: &[PackedRecord],
    checkpoints: &[(&PackedRecord, u64)],
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    encode_block_into(requests, checkpoints, &mut out)?;
    Ok(out)
}

/// Encodes final records (with their chunks) and the checkpoints of requests still streaming
/// into an uncompressed block payload, in `out` (cleared first), so that a writer can keep
/// one buffer for every block: a fresh megabyte per block is a fresh set of pages for the
/// kernel to fault in.
pub fn encode_block_into(
    requests: &[PackedRecord],
    checkpoints: &[(&PackedRecord, u64)],
    out: &mut Vec<u8>,
) -> Result<(), String> {
    // Sized up front (an estimate a little over the usual encoding), so the buffers rarely
    // grow by copying as the columns are written; 9 bytes is the longest varint (a
    // checkpoint's offset, the section's length).
    let section_len = encoded_estimate(checkpoints.iter().map(|c| c.0)) + 9 * checkpoints.len();
    out.clear();
    out.reserve(encoded_estimate(requests.iter()) + section_len + 9);
    encode_records(requests.iter(), out)?;
    // Minor 2: the checkpoint section, one byte string (a single 0 byte when empty).
    let mut section = Vec::with_capacity(section_len);
    if !checkpoints.is_empty() {
        encode_records(checkpoints.iter().map(|c| c.0), &mut section)?;
        put(
            &mut section,
            &checkpoints.iter().map(|c| c.1).collect::<Vec<u64>>(),
        )?;
    }
    put(out, &section)?;
    Ok(())
}

/// A little more than the columns of `records` usually take: 64 bytes a request, 16 a chunk,
/// and the captured text (a request's strings, which are rare and short, are left out).
fn encoded_estimate<'a>(records: impl Iterator<Item = &'a PackedRecord>) -> usize {
    records
        .map(|r| 64 + 16 * r.chunks.len() + r.chunks.text_bytes())
        .sum()
}

/// Columns 1-31 of `requests`: every column a block and a checkpoint section share.
fn encode_records<'a, I>(records: I, out: &mut Vec<u8>) -> Result<(), String>
where
    I: Iterator<Item = &'a PackedRecord>,
{
    let requests: Vec<&PackedRecord> = records.collect();
    let metas: Vec<&RequestMeta> = requests.iter().map(|r| &r.meta).collect();
    let n = requests.len();
    let m: usize = requests.iter().map(|r| r.chunks.len()).sum();

    let mut prev_id = 0u64;
    let mut prev_intended = 0u64;
    let mut ids = Vec::with_capacity(n);
    let mut intended = Vec::with_capacity(n);
    for r in &requests {
        ids.push(delta(prev_id, r.meta.id));
        intended.push(delta(prev_intended, r.meta.intended_ns));
        prev_id = r.meta.id;
        prev_intended = r.meta.intended_ns;
    }
    put(out, &ids)?;
    column(out, &metas, |m| m.phase as u8)?;
    column(out, &metas, |m| m.trial)?;
    put(out, &intended)?;
    let send: Vec<i64> = requests
        .iter()
        .map(|r| delta(r.meta.intended_ns, r.meta.send_ns))
        .collect();
    put(out, &send)?;
    let headers: Vec<Option<i64>> = requests
        .iter()
        .map(|r| r.meta.headers_ns.map(|h| delta(r.meta.send_ns, h)))
        .collect();
    put(out, &headers)?;
    column(out, &metas, |m| delta(m.send_ns, m.end_ns))?;
    column(out, &metas, |m| m.http_status)?;
    column(out, &metas, |m| m.outcome.legacy_code())?;
    column(out, &metas, |m| m.error.as_deref())?;
    let usage_columns: [fn(&Usage) -> Option<u32>; 4] = [
        |u| u.prompt_tokens,
        |u| u.completion_tokens,
        |u| u.reasoning_tokens,
        |u| u.cached_tokens,
    ];
    for usage_of in usage_columns {
        column(out, &metas, |m| usage_of(&m.usage))?;
    }
    column(out, &metas, |m| m.finish_reason.as_deref())?;
    column(out, &metas, |m| m.prompt_hash)?;
    column(out, &metas, |m| m.prompt_bytes)?;
    column(out, &metas, |m| m.output_hash)?;
    column(out, &metas, |m| m.output_bytes)?;
    column(out, &metas, |m| m.planned_input_tokens)?;
    let headers_lists: Vec<&[(String, String)]> = requests
        .iter()
        .map(|r| r.meta.response_headers.as_slice())
        .collect();
    put(out, &headers_lists)?;
    let counts: Vec<u64> = requests.iter().map(|r| r.chunks.len() as u64).collect();
    put(out, &counts)?;

    chunk_column(out, m, &requests, |r| {
        let mut prev = r.meta.send_ns;
        r.chunks.arrival_ns().map(move |at| {
            let d = delta(prev, at);
            prev = at;
            d
        })
    })?;
    chunk_column(out, m, &requests, |r| {
        let mut prev = 0u32;
        r.chunks.read_index().map(move |index| {
            let d = index.wrapping_sub(prev);
            prev = index;
            d
        })
    })?;
    chunk_column(out, m, &requests, |r| r.chunks.bytes())?;
    chunk_column(out, m, &requests, |r| {
        r.chunks.channels().map(|channel| channel as u8)
    })?;
    chunk_column(out, m, &requests, |r| r.chunks.text_len())?;
    chunk_column(out, m, &requests, |r| r.chunks.token_counts())?;
    chunk_column(out, m, &requests, |r| {
        (0..r.chunks.len()).map(|i| r.chunks.text(i))
    })?;
    // Minor 1 appends columns after the chunk columns, where a 1.0 reader stops reading.
    column(out, &metas, |m| m.retries)?;
    // Minor 2: the outcome a 1.1 reader cannot name, where column 9 holds its nearest class.
    put(
        out,
        &requests
            .iter()
            .map(|r| {
                let code = r.meta.outcome as u8;
                if code == r.meta.outcome.legacy_code() {
                    0
                } else {
                    code
                }
            })
            .collect::<Vec<u8>>(),
    )?;
    Ok(())
}

/// Decodes an uncompressed block payload. Errors describe the first column that is wrong.
#[cfg(test)]
pub fn decode_block(data: &[u8]) -> Result<DecodedBlock, String> {
    let mut block = DecodedBlock::default();
    decode_block_into(data, &mut block)?;
    Ok(block)
}

/// Decodes an uncompressed block payload into `out`, reusing its vectors' memory. On error
/// `out` is left empty.
pub fn decode_block_into(data: &[u8], out: &mut DecodedBlock) -> Result<(), String> {
    let result = decode_into(data, out);
    if result.is_err() {
        out.clear();
    }
    result
}

fn decode_into(data: &[u8], out: &mut DecodedBlock) -> Result<(), String> {
    let pos = decode_records(data, out)?;
    // Minor 2: the checkpoint section, absent from blocks written by 1.0 and 1.1.
    if pos >= data.len() {
        return Ok(());
    }
    let mut rd = ColumnReader { data, pos };
    let section: Vec<u8> = rd.take("checkpoints")?;
    if section.is_empty() {
        return Ok(());
    }
    let mut checkpoints = Box::<CheckpointSection>::default();
    let pos = decode_records(&section, &mut checkpoints.block)
        .map_err(|e| format!("checkpoints: {e}"))?;
    let mut rd = ColumnReader {
        data: &section,
        pos,
    };
    let n = checkpoints.block.requests.len();
    checkpoints.chunk_offset = rd.take_n("checkpoint chunk_offset", n)?;
    out.checkpoints = Some(checkpoints);
    Ok(())
}

/// Decodes columns 1-31 (those present) of `data` into `out`; returns where they end.
fn decode_records(data: &[u8], out: &mut DecodedBlock) -> Result<usize, String> {
    let mut rd = ColumnReader { data, pos: 0 };
    let ids: Vec<i64> = rd.take("id")?;
    let n = ids.len();
    let phase: Vec<u8> = rd.take_n("phase", n)?;
    let trial: Vec<u32> = rd.take_n("trial", n)?;
    let intended: Vec<i64> = rd.take_n("intended", n)?;
    let send: Vec<i64> = rd.take_n("send", n)?;
    let headers: Vec<Option<i64>> = rd.take_n("headers", n)?;
    let end: Vec<i64> = rd.take_n("end", n)?;
    let http_status: Vec<u16> = rd.take_n("http_status", n)?;
    let outcome: Vec<u8> = rd.take_n("outcome", n)?;
    let mut error: Vec<Option<String>> = rd.take_n("error", n)?;
    let prompt_tokens: Vec<Option<u32>> = rd.take_n("prompt_tokens", n)?;
    let completion_tokens: Vec<Option<u32>> = rd.take_n("completion_tokens", n)?;
    let reasoning_tokens: Vec<Option<u32>> = rd.take_n("reasoning_tokens", n)?;
    let cached_tokens: Vec<Option<u32>> = rd.take_n("cached_tokens", n)?;
    let mut finish: Vec<Option<String>> = rd.take_n("finish_reason", n)?;
    let prompt_hash: Vec<u64> = rd.take_n("prompt_hash", n)?;
    let prompt_bytes: Vec<u32> = rd.take_n("prompt_bytes", n)?;
    let output_hash: Vec<u64> = rd.take_n("output_hash", n)?;
    let output_bytes: Vec<u32> = rd.take_n("output_bytes", n)?;
    let planned: Vec<Option<u32>> = rd.take_n("planned_input_tokens", n)?;
    let mut response_headers: Vec<Vec<(String, String)>> = rd.take_n("response_headers", n)?;
    let counts: Vec<u64> = rd.take_n("chunk_count", n)?;

    let m = rd.count("arrival")?;
    let total = counts
        .iter()
        .try_fold(0u64, |acc, &c| acc.checked_add(c))
        .ok_or("chunk counts overflow")?;
    if total != m as u64 {
        return Err(format!(
            "chunk counts add up to {total}, but the arrival column has {m} entries"
        ));
    }

    let requests = &mut out.requests;
    requests.clear();
    requests.reserve(n);
    let mut prev_id = 0u64;
    let mut prev_intended = 0u64;
    let mut chunk_start = 0usize;
    for i in 0..n {
        let id = undelta(prev_id, ids[i]);
        let intended_ns = undelta(prev_intended, intended[i]);
        prev_id = id;
        prev_intended = intended_ns;
        let send_ns = undelta(intended_ns, send[i]);
        let phase = match phase[i] {
            0 => Phase::Warmup,
            1 => Phase::Measured,
            code => return Err(format!("request {i}: phase code {code}")),
        };
        let outcome = Outcome::from_code(outcome[i])
            .filter(|_| outcome[i] <= LAST_LEGACY_OUTCOME)
            .ok_or_else(|| format!("request {i}: outcome code {}", outcome[i]))?;
        // `total == m` was checked above, so every count fits in usize and in the columns.
        let chunk_len = counts[i] as usize;
        requests.push(BlockRequest {
            meta: RequestMeta {
                id,
                phase,
                trial: trial[i],
                intended_ns,
                send_ns,
                headers_ns: headers[i].map(|d| undelta(send_ns, d)),
                end_ns: undelta(send_ns, end[i]),
                http_status: http_status[i],
                outcome,
                error: error[i].take(),
                usage: Usage {
                    prompt_tokens: prompt_tokens[i],
                    completion_tokens: completion_tokens[i],
                    reasoning_tokens: reasoning_tokens[i],
                    cached_tokens: cached_tokens[i],
                },
                finish_reason: finish[i].take(),
                prompt_hash: prompt_hash[i],
                prompt_bytes: prompt_bytes[i],
                output_hash: output_hash[i],
                output_bytes: output_bytes[i],
                planned_input_tokens: planned[i],
                response_headers: std::mem::take(&mut response_headers[i]),
                retries: 0,
            },
            chunk_start,
            chunk_len,
        });
        chunk_start += chunk_len;
    }

    let mut chunks = ByteReader { data, pos: rd.pos };
    read_chunk_columns(&mut chunks, requests, m, &mut out.chunks)?;

    // Columns of minor 1, absent from blocks written by 1.0.
    let mut rd = ColumnReader {
        data,
        pos: chunks.pos,
    };
    if rd.pos < data.len() {
        let retries: Vec<u8> = rd.take_n("retries", n)?;
        for (request, retries) in requests.iter_mut().zip(retries) {
            request.meta.retries = retries;
        }
    }
    // Column of minor 2: outcomes a 1.1 reader cannot name.
    if rd.pos < data.len() {
        let detail: Vec<u8> = rd.take_n("outcome_detail", n)?;
        for (i, (request, code)) in requests.iter_mut().zip(detail).enumerate() {
            if code == 0 {
                continue;
            }
            match Outcome::from_code(code) {
                Some(o)
                    if o.legacy_code() == request.meta.outcome as u8 && code != o.legacy_code() =>
                {
                    request.meta.outcome = o
                }
                _ => {
                    return Err(format!(
                        "request {i}: outcome detail {code} with outcome code {}",
                        request.meta.outcome as u8
                    ))
                }
            }
        }
    }
    Ok(rd.pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::RequestRecord;

    fn packed(records: &[RequestRecord]) -> Vec<PackedRecord> {
        records.iter().cloned().map(PackedRecord::from).collect()
    }

    /// The hand-written reader of the chunk columns agrees with bincode at every width.
    #[test]
    fn hand_written_varints_match_bincode() {
        let unsigned = [
            0u64,
            250,
            251,
            65_535,
            65_536,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            u64::MAX,
        ];
        for v in unsigned {
            let mut out = Vec::new();
            put(&mut out, &v).unwrap();
            let mut rd = ByteReader { data: &out, pos: 0 };
            assert_eq!(rd.varint().unwrap(), v);
            assert_eq!(rd.pos, out.len());
        }
        let signed = [
            0i64,
            1,
            -1,
            125,
            -126,
            10_000_000,
            -10_000_000,
            i64::MAX,
            i64::MIN,
        ];
        for v in signed {
            let mut out = Vec::new();
            put(&mut out, &v).unwrap();
            let mut rd = ByteReader { data: &out, pos: 0 };
            assert_eq!(rd.zvarint().unwrap(), v);
        }
    }

    #[test]
    fn a_column_count_larger_than_the_payload_is_refused() {
        let mut out = Vec::new();
        put(&mut out, &(1u64 << 40)).unwrap();
        let err = decode_block(&out).unwrap_err();
        assert!(err.contains("claims"), "{err}");
    }

    #[test]
    fn every_truncation_of_a_payload_is_an_error() {
        let mut records = crate::synthetic::requests(3, 3, 5, true);
        records[1].meta.retries = 1;
        records[2].meta.outcome = Outcome::Redirect;
        let raw = encode_block(&packed(&records), &[]).unwrap();
        let block = decode_block(&raw).unwrap();
        assert_eq!(block.records(), records);
        // Where the columns of each minor start, the payload is a whole payload of the one
        // before: 1.2 ends with column 31 and an empty section byte, 1.1 with column 30.
        let n = records.len();
        let minor_2 = raw.len() - (1 + n) - 1;
        let minor_1 = minor_2 - (1 + n);
        for cut in 0..raw.len() {
            if cut == minor_1 || cut == minor_2 {
                let old = decode_block(&raw[..cut]).unwrap();
                assert_eq!(old.requests[1].meta.retries, u8::from(cut == minor_2));
                assert_eq!(old.requests[2].meta.outcome, Outcome::HttpError);
            } else if cut == minor_2 + (1 + n) {
                let old = decode_block(&raw[..cut]).unwrap();
                assert_eq!(old.requests[2].meta.outcome, Outcome::Redirect);
            } else {
                assert!(decode_block(&raw[..cut]).is_err(), "cut {cut}");
            }
        }
    }

    #[test]
    fn an_outcome_detail_must_match_its_legacy_class() {
        let mut records = crate::synthetic::requests(1, 1, 5, false);
        records[0].meta.outcome = Outcome::NotEventStream;
        let mut raw = encode_block(&packed(&records), &[]).unwrap();
        // Column 31 is the two bytes before the empty section: `01 0b`.
        let at = raw.len() - 2;
        assert_eq!(raw[at], Outcome::NotEventStream as u8);
        raw[at] = Outcome::Redirect as u8;
        let err = decode_block(&raw).unwrap_err();
        assert!(
            err.contains("outcome detail 13 with outcome code 6"),
            "{err}"
        );
        raw[at] = Outcome::Ok as u8;
        assert_eq!(
            decode_block(&raw).unwrap().requests[0].meta.outcome,
            Outcome::Malformed
        );
    }
}
