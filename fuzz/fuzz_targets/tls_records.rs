//! The recorder's TLS read path (`TlsLink` in recorder/src/h1/tls.rs) against a real rustls
//! server: any writes of the server's, TLS 1.2 or 1.3 (with session tickets and a key update
//! after any write), close_notify at the end or not, the bytes cut into reads of any length
//! (as `Conn::read_with` and `Conn::read_ready` in recorder/src/h1/mod.rs hand them over) and,
//! when asked, one byte of them damaged.
//!
//! Undamaged, the plaintext handed on must be exactly what the server wrote, the close must be
//! seen when it was sent, and no bytes may be left with the connection. Damaged, no byte may be
//! wrong or extra (the plaintext is a prefix of what was written), and every write whose
//! records all ended before the damaged byte must still be handed on (`TlsLink::open` hands on
//! the plaintext before a failure first). Where the damage failed the connection, nothing
//! written after the damaged byte may have come through; where it did not, either a record
//! still waits for bytes that will not come or the damage changed nothing rustls checks, and
//! then all of it must have come through, and the close.
//! See docs/RELIABILITY.md.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ServerConfig, SupportedProtocolVersion};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokentrace_fuzz::cut_by_lengths;
use tokentrace_recorder::h1::tls::{TlsLink, TAIL_MAX};
use tokentrace_recorder::h1::READ_BUF;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};

/// What one input asks of the server.
struct Plan {
    tls12: bool,
    close_notify: bool,
    /// Session tickets the server sends after a TLS 1.3 handshake (0 to 3).
    tickets: usize,
    /// The wire byte to damage, as a fraction of the wire in 65,536ths (so that any byte of a
    /// wire up to 64 KiB long can be chosen, and every other one of a longer one), and its XOR.
    damage: Option<(u16, u8)>,
    /// The write after which the server updates its keys (TLS 1.3).
    key_update_after: Option<usize>,
    /// The client's read lengths, cycled.
    read_lengths: Vec<usize>,
    /// The server's writes, in order.
    writes: Vec<Vec<u8>>,
}

/// An input read as a plan: byte 0 the flags (bit 0 TLS 1.2, bit 1 close_notify, bit 2 a
/// damaged byte, bits 3–4 the TLS 1.3 session tickets), bytes 1–3 the read lengths (under
/// 128: 1 to 128 bytes; from 128: steps of 128 up to 16 KiB), bytes 4–5 the damaged byte's
/// place (as a fraction of the wire, in 65,536ths) and byte 6 its XOR (0 taken as 1), byte 7
/// the write a key update follows (255: none; TLS 1.3 only); the rest the writes, split at each
/// 0xFF, each write its first byte's low five bits plus one times the bytes after it (so that
/// a write may span several records).
fn plan(input: &[u8]) -> Option<Plan> {
    let head = input.get(..8)?;
    let length = |b: u8| match b {
        0..=127 => usize::from(b) + 1,
        _ => usize::from(b - 127) * 128,
    };
    let writes = input[8..]
        .split(|&b| b == 0xFF)
        .filter_map(|piece| {
            let (&repeat, bytes) = piece.split_first()?;
            Some(bytes.repeat(usize::from(repeat & 31) + 1))
        })
        .collect();
    Some(Plan {
        tls12: head[0] & 1 != 0,
        close_notify: head[0] & 2 != 0,
        tickets: usize::from((head[0] >> 3) & 3),
        damage: (head[0] & 4 != 0).then(|| {
            let place = u16::from_le_bytes([head[4], head[5]]);
            // An XOR of 0 would damage nothing.
            (place, head[6].max(1))
        }),
        // TLS 1.2 has no key update.
        key_update_after: (head[0] & 1 == 0 && head[7] != 255).then_some(usize::from(head[7])),
        read_lengths: head[1..4].iter().map(|&b| length(b)).collect(),
        writes,
    })
}

/// The client's config and the server's for each protocol version and number of tickets,
/// made once (a certificate per input would cost more than the handshake).
struct Configs {
    client: Arc<ClientConfig>,
    tls12: Arc<ServerConfig>,
    tls13: [Arc<ServerConfig>; 4],
}

fn configs() -> &'static Configs {
    static CONFIGS: OnceLock<Configs> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .expect("a certificate");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(made.cert.der().clone()).expect("a root");
        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server = |versions: &[&'static SupportedProtocolVersion], tickets: usize| {
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.key_pair.serialize_der()));
            let mut config = ServerConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(versions)
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(vec![made.cert.der().clone()], key)
                .expect("a server config");
            config.send_tls13_tickets = tickets;
            Arc::new(config)
        };
        let tls13 = |tickets| server(&[&rustls::version::TLS13], tickets);
        Configs {
            client: Arc::new(client),
            tls12: server(&[&rustls::version::TLS12], 0),
            tls13: [tls13(0), tls13(1), tls13(2), tls13(3)],
        }
    })
}

/// The server's side of the pipe, counting the bytes written to it, so that each write's
/// records can be placed on the wire.
struct Counted {
    inner: DuplexStream,
    written: Arc<AtomicUsize>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.written.fetch_add(n, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What the client got to read after its handshake and request.
struct Conversation {
    link: TlsLink,
    /// Every byte the server sent that the handshake did not read.
    wire: Vec<u8>,
    /// Where each write began and ended among all the bytes the server sent.
    spans: Vec<(usize, usize)>,
    /// All the bytes the server sent.
    sent: usize,
}

/// A handshake over an in-memory pipe, a one-byte request, and the server's answer as the plan
/// says.
fn converse(plan: &Plan) -> Conversation {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
    }
    let configs = configs();
    let server_config = if plan.tls12 {
        configs.tls12.clone()
    } else {
        configs.tls13[plan.tickets].clone()
    };
    let writes = plan.writes.clone();
    let (key_update_after, close_notify) = (plan.key_update_after, plan.close_notify);
    RUNTIME.with(|runtime| {
        runtime.block_on(async move {
            let (mut near, far) = tokio::io::duplex(64 << 10);
            let written = Arc::new(AtomicUsize::new(0));
            let far = Counted {
                inner: far,
                written: written.clone(),
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(server_config);
            let server = tokio::spawn(async move {
                let mut tls = acceptor.accept(far).await.expect("the handshake");
                let mut request = [0u8; 1];
                tls.read_exact(&mut request).await.expect("the request");
                let mut spans = Vec::with_capacity(writes.len());
                for (k, bytes) in writes.iter().enumerate() {
                    let start = written.load(Ordering::Relaxed);
                    tls.write_all(bytes).await.expect("a write");
                    tls.flush().await.expect("a flush");
                    spans.push((start, written.load(Ordering::Relaxed)));
                    if key_update_after == Some(k) {
                        tls.get_mut()
                            .1
                            .refresh_traffic_keys()
                            .expect("a key update");
                    }
                }
                if close_notify {
                    tls.shutdown().await.expect("close_notify");
                }
                (spans, written.load(Ordering::Relaxed))
            });
            let name = ServerName::try_from("localhost").expect("a name");
            let mut link = TlsLink::connect(&mut near, configs.client.clone(), name)
                .await
                .expect("the client's handshake");
            let sealed = link.seal(b"x").expect("the request sealed");
            near.write_all(&sealed).await.expect("the request sent");
            // Read while the server writes (it may send more than the pipe holds); the end
            // comes when the server is done and its side of the pipe is dropped.
            let mut wire = Vec::new();
            near.read_to_end(&mut wire).await.expect("the wire");
            let (spans, sent) = server.await.expect("the server");
            Conversation {
                link,
                wire,
                spans,
                sent,
            }
        })
    })
}

/// What the link made of the wire.
struct Fed {
    plaintext: Vec<u8>,
    /// A failure ended it.
    failed: bool,
    /// Bytes left with the connection at the end (when it did not fail).
    left: usize,
}

/// The wire fed to the link in reads of `lengths`, as `Conn::read_with` and `Conn::read_ready`
/// do.
fn feed(link: &mut TlsLink, wire: &[u8], lengths: &[usize]) -> Fed {
    let mut cipher = vec![0u8; TAIL_MAX + READ_BUF];
    let mut plain = vec![0u8; TAIL_MAX + READ_BUF];
    let mut plaintext = Vec::new();
    let failed = |plaintext| Fed {
        plaintext,
        failed: true,
        left: 0,
    };
    for read in cut_by_lengths(wire, lengths) {
        if link.closed() {
            break;
        }
        let held = link.load_tail(&mut cipher);
        cipher[held..held + read.len()].copy_from_slice(read);
        match link.open(&mut cipher[..held + read.len()], &mut plain) {
            Ok(len) => plaintext.extend_from_slice(&plain[..len]),
            Err(_) => return failed(plaintext),
        }
        if link.take_failure().is_some() {
            return failed(plaintext);
        }
    }
    let left = link.load_tail(&mut cipher);
    Fed {
        plaintext,
        failed: false,
        left,
    }
}

/// The plaintext bytes of the writes whose span (start and end among the bytes the server
/// sent) `keep` takes.
fn plaintext_of(
    spans: &[(usize, usize)],
    writes: &[Vec<u8>],
    keep: impl Fn(usize, usize) -> bool,
) -> usize {
    spans
        .iter()
        .zip(writes)
        .filter(|(&(start, end), _)| keep(start, end))
        .map(|(_, bytes)| bytes.len())
        .sum()
}

fuzz_target!(|input: &[u8]| {
    let Some(plan) = plan(input) else {
        return;
    };
    let Conversation {
        mut link,
        mut wire,
        spans,
        sent,
    } = converse(&plan);
    let lengths: Vec<usize> = plan.read_lengths.iter().map(|&n| n.min(READ_BUF)).collect();
    let all = plan.writes.concat();
    match plan.damage {
        None => {
            let fed = feed(&mut link, &wire, &lengths);
            assert!(!fed.failed, "an undamaged wire failed");
            assert!(
                fed.plaintext == all,
                "the plaintext differs from what was written"
            );
            assert_eq!(link.closed(), plan.close_notify, "the close");
            assert_eq!(fed.left, 0, "bytes left with the connection");
            // The next request goes out after whatever rustls owes the server (its answer to a
            // key update), unless the server closed.
            if !plan.close_notify {
                link.seal(b"next").expect("the next request sealed");
            }
        }
        Some(_) if wire.is_empty() => {}
        Some((place, xor)) => {
            let at = (usize::from(place) * wire.len()) >> 16;
            wire[at] ^= xor;
            // The damaged byte among all the bytes the server sent: the handshake read a
            // prefix of them, and the wire is the rest.
            let damaged = sent - wire.len() + at;
            let fed = feed(&mut link, &wire, &lengths);
            let got = fed.plaintext.len();
            let before = plaintext_of(&spans, &plan.writes, |_, end| end <= damaged);
            let begun = plaintext_of(&spans, &plan.writes, |start, _| start <= damaged);
            assert!(
                all.starts_with(&fed.plaintext),
                "plaintext that was not written"
            );
            assert!(
                got >= before,
                "{got} bytes of plaintext, where the {before} before the damaged byte {damaged} (of {sent}) were due"
            );
            if fed.failed {
                assert!(
                    got <= begun,
                    "{got} bytes of plaintext before the failure, where at most {begun} began before the damaged byte {damaged} (of {sent})"
                );
            } else if fed.left == 0 {
                // rustls checks a TLS 1.3 record against a header rebuilt from its length
                // alone (`make_tls13_aad`), so a damaged type or version byte can go unnoticed;
                // then nothing else may have changed.
                assert!(
                    got == all.len(),
                    "{got} of {} bytes of plaintext, with no failure and no bytes left (byte {damaged} of {sent} damaged)",
                    all.len()
                );
                assert_eq!(
                    link.closed(),
                    plan.close_notify,
                    "the close, damage unnoticed"
                );
            }
        }
    }
});
