//! The recorder's own per-event work, for the `epoll-parse` floor: the epoll floor's reads fed
//! through the recorder's SSE parser and chunk classifier into packed chunk columns, as
//! `tokentrace record` does after its clock read, with no runtime and no HTTP framing. Its CPU
//! against the plain epoll floor is what the parse itself costs; the recorder against it is
//! what the runtime, the request's state machine and the HTTP framing cost on top.

use tokentrace_format::{Channel, ChunkRecord, PackedChunks};
use tokentrace_sse::classify::{classify_event, OutputSink};
use tokentrace_sse::parser::{SseParser, DEFAULT_LINE_LIMIT};

/// One response's parse state and chunks.
pub struct Parse {
    parser: SseParser,
    sink: OutputSink,
    chunks: PackedChunks,
    reads: u32,
}

impl Parse {
    /// A fresh response expecting about `events` events.
    pub fn new(events: usize) -> Box<Parse> {
        Box::new(Parse {
            parser: SseParser::new(DEFAULT_LINE_LIMIT),
            sink: OutputSink::new(false),
            chunks: PackedChunks::with_capacity(events),
            reads: 0,
        })
    }

    /// Feed one read's bytes, stamped `at`. The response head and the chunked framing go
    /// through the parser too, as lines it ignores (a status line or chunk size without a
    /// colon, header lines as unknown fields, blank lines that end no event), so only the
    /// `data:` events become chunks; the framing costs a little more parse than the recorder,
    /// which strips it first, pays.
    pub fn feed(&mut self, bytes: &[u8], at: u64) {
        let Parse {
            parser,
            sink,
            chunks,
            reads,
        } = self;
        let read_index = *reads;
        *reads += 1;
        // An oversize line cannot come from the simulator; the floor does not handle it.
        let _ = parser.feed(bytes, |event| {
            let mut chunk = ChunkRecord::unclassified(at, read_index, event.wire_bytes);
            if let Ok(c) = classify_event(event.data, event.event_type, sink) {
                chunk.channel = c.channel;
                chunk.text_len = c.text_len;
                chunk.tokens = c.usage.and_then(|u| u.completion_tokens);
            }
            chunks.push(chunk);
        });
    }

    /// Chunks so far.
    pub fn chunks(&self) -> &PackedChunks {
        &self.chunks
    }
}

/// Check the parse on a response the way the floor reads it: head, chunked framing, events
/// split across reads.
pub fn self_check() -> std::io::Result<()> {
    let chunk = |data: String| format!("{:x}\r\n{data}\r\n", data.len());
    let content = |text: &str| {
        format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n")
    };
    let wire = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
         transfer-encoding: chunked\r\n\r\n{}{}{}0\r\n\r\n",
        chunk(content("a")),
        chunk(content("bc")),
        chunk("data: [DONE]\n\n".into()),
    );
    let mut parse = Parse::new(4);
    // The first read ends just after the first event, inside the second chunk's framing.
    let first_end = wire
        .find("}]}\n\n")
        .ok_or_else(|| std::io::Error::other("floor parse self-check: no event"))?;
    let (one, two) = wire.as_bytes().split_at(first_end + 9);
    parse.feed(one, 10);
    parse.feed(two, 20);
    let seen: Vec<(Channel, u32, u64)> = parse
        .chunks()
        .iter()
        .map(|c| (c.channel, c.text_len, c.arrival_ns))
        .collect();
    let expected = [
        (Channel::Content, 1, 10),
        (Channel::Content, 2, 20),
        (Channel::Done, 0, 20),
    ];
    if seen != expected {
        return Err(std::io::Error::other(format!(
            "floor parse self-check: {seen:?}, expected {expected:?}"
        )));
    }
    Ok(())
}
