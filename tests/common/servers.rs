//! Plain-TCP HTTP/1.1 servers on 127.0.0.1 that behave the way real engines were seen to
//! behave with their connections: one configurable server, so each test names only the
//! behaviour it needs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A complete chat stream: one content event, a finish event, `[DONE]`.
pub const COMPLETE_STREAM: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";

/// When a connection closes once a request on it has been answered.
#[derive(Debug, Clone, Copy)]
pub enum Close {
    /// Keeps the connection, then closes it without a byte when the next request arrives: a
    /// keep-alive connection the server has already given up.
    OnNextRequest,
    /// As `OnNextRequest`, counting POSTs only: a GET (the recorder's preflight) is answered
    /// and the connection kept, so only a connection that carried a stream is closed.
    OnNextPost,
    /// Keeps serving while requests follow closely; a request arriving after the connection
    /// idled longer than this is met with a close and no answer (an idle close, shortened).
    WhenIdle(Duration),
    /// Closes this long after the response, though the response says nothing of it
    /// (llama.cpp's server after every stream).
    After(Duration),
}

/// How a test server answers.
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    /// The body of every POST (GET gets an empty model list).
    pub stream: &'static str,
    /// Body bytes announced in `content-length` beyond those sent: the body stays open.
    pub unsent: usize,
    /// What happens to the connection after an answer.
    pub close: Close,
    /// False: requests are read and never answered.
    pub answers: bool,
    /// Status line and headers (each ending in CRLF, without content-length) of every POST
    /// answer.
    pub head: &'static str,
    /// The first this many POSTs of the server's life are answered `503` with `Retry-After:
    /// 1` (an engine still loading, a gateway shedding load).
    pub busy_first: usize,
}

/// The head of a streamed answer.
pub const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n";

impl Behaviour {
    /// Answers the first request of each connection with `stream`, closes on the next.
    pub fn one_per_connection(stream: &'static str) -> Behaviour {
        Behaviour {
            stream,
            unsent: 0,
            close: Close::OnNextRequest,
            answers: true,
            head: STREAM_HEAD,
            busy_first: 0,
        }
    }
}

/// Starts a server with `behaviour` (at most 200 connections); returns its `…/v1` base URL.
pub fn serve(behaviour: Behaviour) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let posts = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming().take(200) {
            let Ok(conn) = conn else { continue };
            let posts = posts.clone();
            std::thread::spawn(move || connection(conn, behaviour, &posts));
        }
    });
    format!("http://{addr}/v1")
}

fn connection(mut conn: TcpStream, b: Behaviour, posts: &AtomicUsize) {
    conn.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut answered: Option<Instant> = None;
    let mut streamed = false;
    while let Some(head) = read_request(&mut conn) {
        if !b.answers {
            continue;
        }
        let post = !head.starts_with("GET");
        let closes = match b.close {
            Close::OnNextRequest => answered.is_some(),
            Close::OnNextPost => post && streamed,
            Close::WhenIdle(limit) => answered.is_some_and(|t| t.elapsed() > limit),
            Close::After(_) => false,
        };
        if closes {
            return;
        }
        let (reply_head, body, unsent) = if head.starts_with("GET") {
            (
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n",
                r#"{"object":"list","data":[]}"#,
                0,
            )
        } else if posts.fetch_add(1, Ordering::SeqCst) < b.busy_first {
            (
                "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: text/plain\r\n",
                "loading model",
                0,
            )
        } else {
            (b.head, b.stream, b.unsent)
        };
        let reply = format!(
            "{reply_head}content-length: {}\r\n\r\n{body}",
            body.len() + unsent
        );
        if conn.write_all(reply.as_bytes()).is_err() {
            return;
        }
        answered = Some(Instant::now());
        streamed |= post;
        if let Close::After(delay) = b.close {
            std::thread::sleep(delay);
            return;
        }
    }
}

/// Reads one request (head and a content-length body); None at EOF, on error or timeout.
fn read_request(conn: &mut TcpStream) -> Option<String> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let l = l.to_ascii_lowercase();
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return Some(text);
            }
        }
    }
}
