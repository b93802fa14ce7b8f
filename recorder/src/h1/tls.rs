//! TLS for the own HTTP/1.1 client: rustls's unbuffered connection over the connection's
//! socket. The buffered `ClientConnection` (and tokio-rustls over it) keeps a read buffer of
//! 4 KiB or more per connection, grown by doubling whenever a read ends inside a record; with
//! a thousand streams that buffer was the largest part of TLS's memory per stream
//! (docs/performance/2026-12-02-to-03.md, *TLS without rustls's read buffer*). Here every read goes
//! into the thread's read buffer (`SPACE` in [`super`]), the whole records in it are decrypted and
//! their plaintext copied to the thread's plaintext buffer, and only the bytes of a record the read
//! ended inside of stay with the connection (its *tail*): none at all between events that arrive
//! whole.

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::pki_types::ServerName;
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, EncryptError, InsufficientSizeError,
    UnbufferedStatus,
};
use rustls::ClientConfig;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest TLS record on the wire: a 5-byte header and at most 2^14 bytes of plaintext
/// plus 2,048 of expansion (TLS 1.2's limit; TLS 1.3 allows 256).
const RECORD_MAX: usize = 5 + 16384 + 2048;

/// The most bytes a connection keeps between reads (its tail), and the most the handshake
/// buffers. A tail is usually part of one record, but rustls keeps the records of a
/// handshake message split across several in the caller's buffer until the message is whole
/// (a session ticket after the handshake, a certificate chain during it), and it accepts such
/// messages up to 64 KiB: room for that and the record it ends in.
pub const TAIL_MAX: usize = 0x10000 + RECORD_MAX;

/// A tail kept between reads keeps its allocation up to this size (so that a stream whose
/// reads keep ending inside records does not allocate for each); a larger one is freed once
/// it has been used.
const TAIL_KEEP: usize = 1024;

/// One TLS connection's state beside its socket.
pub struct TlsLink {
    session: UnbufferedClientConnection,
    /// The bytes after the last whole record read: the start of a record a read ended inside
    /// of (and, after the handshake, whatever came with its last flight).
    tail: Vec<u8>,
    /// Bytes rustls asked to send after the handshake (an alert, say); they go out before
    /// the next request. (A key update's answer is not among them: rustls writes it ahead of
    /// the next request's records itself.)
    unsent: Vec<u8>,
    /// The server's close_notify was read: no more plaintext follows.
    closed: bool,
    /// An error met after a read's first records gave plaintext: that plaintext is handed on
    /// first and the error after it, as a buffered TLS stream reports it on the next read.
    failure: Option<io::Error>,
}

/// A TLS failure as an I/O error (rustls's text says what it was).
fn tls_error(err: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err)
}

/// A state of rustls's no request or response of ours can lead to (early data is a server's
/// state; later versions may add others).
fn unexpected(state: &ConnectionState<'_, '_, ClientConnectionData>) -> io::Error {
    io::Error::other(format!("unexpected TLS state {state:?}"))
}

/// Appends what `write` puts in a buffer to `out`, giving it the room rustls says it needs
/// when the first guess (`guess` bytes) is too small.
fn write_into<E: std::error::Error + Send + Sync + 'static>(
    out: &mut Vec<u8>,
    guess: usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, E>,
    too_small: impl Fn(&E) -> Option<InsufficientSizeError>,
) -> io::Result<()> {
    let at = out.len();
    out.resize(at + guess, 0);
    let written = match write(&mut out[at..]) {
        Ok(n) => n,
        Err(e) => match too_small(&e) {
            Some(InsufficientSizeError { required_size }) => {
                out.resize(at + required_size, 0);
                write(&mut out[at..]).map_err(io::Error::other)?
            }
            None => return Err(io::Error::other(e)),
        },
    };
    out.truncate(at + written);
    Ok(())
}

/// Room for one handshake message or alert (rustls asks for more when it needs it).
const ENCODE_GUESS: usize = 512;

/// Appends the handshake message or alert rustls has ready to `out`.
fn encode_into(
    out: &mut Vec<u8>,
    encode: &mut EncodeTlsData<'_, ClientConnectionData>,
) -> io::Result<()> {
    let too_small = |e: &EncodeError| match e {
        EncodeError::InsufficientSize(size) => Some(*size),
        _ => None,
    };
    write_into(out, ENCODE_GUESS, |o| encode.encode(o), too_small)
}

fn encrypt_too_small(e: &EncryptError) -> Option<InsufficientSizeError> {
    match e {
        EncryptError::InsufficientSize(size) => Some(*size),
        _ => None,
    }
}

/// What to do after one step of the handshake.
enum Then {
    Send,
    Receive,
    Done,
}

impl TlsLink {
    /// The TLS handshake on `tcp` (the connection's [`crate::read_clock::TimedTcp`]; the
    /// caller bounds its time). The buffers it needs are
    /// freed when it ends.
    pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
        tcp: &mut S,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> io::Result<TlsLink> {
        let mut session = UnbufferedClientConnection::new(config, name).map_err(tls_error)?;
        let mut incoming = vec![0u8; RECORD_MAX];
        let mut used = 0;
        let mut outgoing = Vec::new();
        loop {
            let UnbufferedStatus { discard, state } =
                session.process_tls_records(&mut incoming[..used]);
            let then = match state.map_err(tls_error)? {
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut outgoing, &mut encode)?;
                    None
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    // Sent right below, before rustls is asked anything else.
                    transmit.done();
                    Some(Then::Send)
                }
                ConnectionState::BlockedHandshake => Some(Then::Receive),
                ConnectionState::WriteTraffic(_) => Some(Then::Done),
                ConnectionState::ReadTraffic(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the server sent data before the request",
                    ))
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the server closed TLS during the handshake",
                    ))
                }
                other => return Err(unexpected(&other)),
            };
            incoming.copy_within(discard..used, 0);
            used -= discard;
            match then {
                None => {}
                Some(Then::Send) => {
                    tcp.write_all(&outgoing).await?;
                    outgoing.clear();
                }
                Some(Then::Receive) => {
                    if used == incoming.len() {
                        if incoming.len() >= TAIL_MAX {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "TLS handshake message over 64 KiB",
                            ));
                        }
                        incoming.resize((incoming.len() * 2).min(TAIL_MAX), 0);
                    }
                    let n = tcp.read(&mut incoming[used..]).await?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the server closed the connection during the TLS handshake",
                        ));
                    }
                    used += n;
                }
                Some(Then::Done) => break,
            }
        }
        // `used` is at most `incoming.len()`, which is at most TAIL_MAX.
        Ok(TlsLink {
            session,
            tail: incoming[..used].to_vec(),
            unsent: outgoing,
            closed: false,
            failure: None,
        })
    }

    /// Copies the tail to the front of `cipher` (which has room for a whole record and a
    /// read after it) and returns its length: a read's bytes go after it.
    pub fn load_tail(&self, cipher: &mut [u8]) -> usize {
        // At most TAIL_MAX bytes (`open`, `connect`), which the thread's buffer has room for.
        let n = self.tail.len();
        cipher[..n].copy_from_slice(&self.tail);
        n
    }

    /// Decrypts the whole records at the front of `cipher` (the tail and a read's bytes
    /// after it), their plaintext, in order, into `plain` (at least as long as `cipher`:
    /// plaintext is never longer than its record); what follows the last whole record becomes
    /// the tail. The plaintext's length. An error after some plaintext waits for
    /// [`TlsLink::take_failure`].
    pub fn open(&mut self, cipher: &mut [u8], plain: &mut [u8]) -> io::Result<usize> {
        let mut at = 0;
        let mut out = 0;
        match self.open_records(cipher, plain, &mut at, &mut out) {
            Ok(()) => {}
            Err(e) if out > 0 => {
                // The connection is over; its plaintext so far still counts.
                self.failure = Some(e);
                self.tail = Vec::new();
                return Ok(out);
            }
            Err(e) => return Err(e),
        }
        let rest = &cipher[at..];
        if rest.len() > TAIL_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS handshake message over 64 KiB",
            ));
        }
        if rest.is_empty() && self.tail.capacity() > TAIL_KEEP {
            self.tail = Vec::new();
        } else {
            self.tail.clear();
            self.tail.extend_from_slice(rest);
        }
        Ok(out)
    }

    /// [`TlsLink::open`]'s loop: `at` counts the bytes of `cipher` used up, `out` the
    /// plaintext written to `plain`.
    fn open_records(
        &mut self,
        cipher: &mut [u8],
        plain: &mut [u8],
        at: &mut usize,
        out: &mut usize,
    ) -> io::Result<()> {
        while !self.closed {
            let UnbufferedStatus { discard, state } =
                self.session.process_tls_records(&mut cipher[*at..]);
            let mut more = true;
            match state.map_err(tls_error)? {
                ConnectionState::ReadTraffic(mut traffic) => {
                    while let Some(record) = traffic.next_record() {
                        let record = record.map_err(tls_error)?;
                        let to = *out + record.payload.len();
                        let Some(space) = plain.get_mut(*out..to) else {
                            return Err(io::Error::other("TLS plaintext over its buffer"));
                        };
                        space.copy_from_slice(record.payload);
                        *out = to;
                        *at += record.discard;
                    }
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut self.unsent, &mut encode)?
                }
                // The bytes wait in `unsent` and go out before the next request; nothing
                // waits on them.
                ConnectionState::TransmitTlsData(transmit) => transmit.done(),
                ConnectionState::WriteTraffic(_) | ConnectionState::BlockedHandshake => {
                    more = false
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => self.closed = true,
                other => return Err(unexpected(&other)),
            }
            *at += discard;
            if !more {
                break;
            }
        }
        Ok(())
    }

    /// The error [`TlsLink::open`] set aside after handing on plaintext, if any.
    pub fn take_failure(&mut self) -> Option<io::Error> {
        self.failure.take()
    }

    /// Whether an error is set aside: the connection cannot carry another request.
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }

    /// Whether the server's close_notify was read.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// The request's records, after anything rustls still had to send.
    pub fn seal(&mut self, request: &[u8]) -> io::Result<Vec<u8>> {
        if self.closed {
            return Err(closed_by_server());
        }
        let mut out = std::mem::take(&mut self.unsent);
        loop {
            let UnbufferedStatus { discard, state } =
                self.session.process_tls_records(&mut self.tail);
            let sealed = match state.map_err(tls_error)? {
                ConnectionState::WriteTraffic(mut traffic) => {
                    // A record per 16 KiB, each with at most a few dozen bytes of overhead.
                    let guess = request.len() + 64 * (1 + request.len() / 16384);
                    write_into(
                        &mut out,
                        guess,
                        |out| traffic.encrypt(request, out),
                        encrypt_too_small,
                    )?;
                    true
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut out, &mut encode)?;
                    false
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    false
                }
                ConnectionState::ReadTraffic(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the server sent data before the request",
                    ))
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    self.closed = true;
                    return Err(closed_by_server());
                }
                other => return Err(unexpected(&other)),
            };
            self.tail.drain(..discard);
            if sealed {
                return Ok(out);
            }
        }
    }
}

/// The error of a request on a connection whose server sent close_notify.
fn closed_by_server() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the server closed TLS (close_notify)",
    )
}

/// The error of a TCP close that TLS did not announce (no close_notify), as tokio-rustls
/// words it: the response may have been cut short.
pub fn unannounced_close() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "peer closed connection without sending TLS close_notify",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::DuplexStream;

    /// A client and a server config that trusts each other, the server's certificate made on
    /// the spot.
    fn configs(
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> (Arc<ClientConfig>, Arc<rustls::ServerConfig>) {
        let made =
            rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(made.cert.der().clone()).expect("root");
        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.key_pair.serialize_der()));
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![made.cert.der().clone()], key)
            .expect("server config");
        (Arc::new(client), Arc::new(server))
    }

    /// A handshake over an in-memory pipe; the server answers `request` (which it checks it
    /// received whole) with `records`, one TLS record each, then closes with close_notify
    /// when `close_notify`, or drops the TCP side without it. The client's link and every
    /// byte the server sent after the handshake.
    fn converse(request: &[u8], records: &[Vec<u8>], close_notify: bool) -> (TlsLink, Vec<u8>) {
        converse_with(rustls::ALL_VERSIONS, request, records, close_notify)
    }

    /// [`converse`] with the server's protocol `versions`.
    fn converse_with(
        versions: &[&'static rustls::SupportedProtocolVersion],
        request: &[u8],
        records: &[Vec<u8>],
        close_notify: bool,
    ) -> (TlsLink, Vec<u8>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (client_config, server_config) = configs(versions);
        let records = records.to_vec();
        let request = request.to_vec();
        runtime.block_on(async move {
            let (mut near, far): (DuplexStream, DuplexStream) = tokio::io::duplex(1 << 20);
            let acceptor = tokio_rustls::TlsAcceptor::from(server_config);
            let want = request.len();
            let server = tokio::spawn(async move {
                let mut tls = acceptor.accept(far).await.expect("accept");
                let mut got = vec![0u8; want];
                tls.read_exact(&mut got).await.expect("request");
                for record in &records {
                    tls.write_all(record).await.expect("write");
                    tls.flush().await.expect("flush");
                }
                if close_notify {
                    tls.shutdown().await.expect("close_notify");
                }
                got
            });
            let link = handshake_and_send(&mut near, client_config, &request).await;
            let got = server.await.expect("server");
            assert_eq!(got, request, "the server read the request whole");
            let mut wire = Vec::new();
            near.read_to_end(&mut wire).await.expect("wire");
            (link, wire)
        })
    }

    /// The client's side: a handshake on `near`, then `request` sent.
    async fn handshake_and_send(
        near: &mut DuplexStream,
        config: Arc<ClientConfig>,
        request: &[u8],
    ) -> TlsLink {
        let name = ServerName::try_from("localhost").expect("name");
        let mut link = TlsLink::connect(near, config, name)
            .await
            .expect("handshake");
        let sealed = link.seal(request).expect("seal");
        near.write_all(&sealed).await.expect("send");
        link
    }

    /// Feeds `wire` to `link` in reads of the given sizes, as the read path does; the
    /// plaintext, and the first error.
    fn feed(link: &mut TlsLink, wire: &[u8], sizes: &[usize]) -> (Vec<u8>, Option<io::Error>) {
        let mut cipher = vec![0u8; TAIL_MAX + 16384];
        let mut plain = vec![0u8; TAIL_MAX + 16384];
        let mut got = Vec::new();
        let mut at = 0;
        let mut turn = 0;
        while at < wire.len() && !link.closed() {
            let n = sizes[turn % sizes.len()]
                .clamp(1, 16384)
                .min(wire.len() - at);
            turn += 1;
            let held = link.load_tail(&mut cipher);
            cipher[held..held + n].copy_from_slice(&wire[at..at + n]);
            at += n;
            match link.open(&mut cipher[..held + n], &mut plain) {
                Ok(len) => got.extend_from_slice(&plain[..len]),
                Err(e) => return (got, Some(e)),
            }
            if let Some(e) = link.take_failure() {
                return (got, Some(e));
            }
        }
        (got, None)
    }

    fn events(count: usize, size: usize) -> Vec<Vec<u8>> {
        (0..count)
            .map(|i| format!("data: {}\n\n", "x".repeat(size + i % 7)).into_bytes())
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Any split of the records into reads gives the same plaintext, and the close.
        #[test]
        fn any_split_into_reads_gives_the_same_plaintext(
            sizes in prop::collection::vec(1usize..3000, 1..12),
            count in 1usize..40,
            size in 0usize..700,
        ) {
            let records = events(count, size);
            let (mut link, wire) = converse(b"POST / HTTP/1.1\r\n\r\n", &records, true);
            let (got, err) = feed(&mut link, &wire, &sizes);
            prop_assert!(err.is_none(), "{err:?}");
            prop_assert_eq!(got, records.concat());
            prop_assert!(link.closed());
            prop_assert!(link.tail.is_empty());
        }
    }

    #[test]
    fn a_record_longer_than_a_read_is_kept_until_it_is_whole() {
        let records = vec![vec![b'a'; 16384], vec![b'b'; 9000], vec![b'c'; 3]];
        let (mut link, wire) = converse(&vec![b'r'; 40000], &records, true);
        let (got, err) = feed(&mut link, &wire, &[1000, 16384, 7]);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got, records.concat());
        assert!(link.closed());
    }

    #[test]
    fn a_tail_that_grew_large_is_freed_once_used() {
        let records = vec![vec![b'a'; 12000], b"data: 1\n\n".to_vec()];
        let (mut link, wire) = converse(b"x", &records, false);
        let (got, err) = feed(&mut link, &wire, &[5000, 9000]);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got, records.concat());
        assert_eq!(
            link.tail.capacity(),
            0,
            "no allocation left once the record is whole"
        );
        assert!(!link.closed(), "no close_notify was sent");
    }

    /// The records before the damaged one in the same read are handed on, then the error;
    /// the damaged record's bytes never are.
    #[test]
    fn a_damaged_record_is_an_error_after_the_plaintext_before_it() {
        let records = events(3, 50);
        let (mut link, mut wire) = converse(b"x", &records, true);
        // The last 24 bytes are the close_notify record; 40 from the end is in the third
        // event's record.
        let last = wire.len() - 40;
        wire[last] ^= 0x40;
        let (got, err) = feed(&mut link, &wire, &[16384]);
        let err = err.expect("a damaged record fails");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert_eq!(got, records[..2].concat());
    }

    /// A session ticket over several records after the handshake (rustls keeps a handshake
    /// message's records in the caller's buffer until it is whole): the tail grows past one
    /// record, and the events after it still come through.
    #[test]
    fn a_handshake_message_over_several_records_is_kept_whole() {
        #[derive(Debug)]
        struct LongTickets;
        impl rustls::server::ProducesTickets for LongTickets {
            fn enabled(&self) -> bool {
                true
            }
            fn lifetime(&self) -> u32 {
                60
            }
            fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
                let mut ticket = plain.to_vec();
                ticket.resize(30000, 7);
                Some(ticket)
            }
            fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
                None
            }
        }
        let (client_config, server_config) = configs(&[&rustls::version::TLS13]);
        let mut server_config = Arc::into_inner(server_config).expect("one owner");
        server_config.ticketer = Arc::new(LongTickets);
        server_config.send_tls13_tickets = 1;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let records = events(4, 80);
        let expected = records.concat();
        runtime.block_on(async move {
            let (mut near, far) = tokio::io::duplex(1 << 20);
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
            let server = tokio::spawn(async move {
                let mut tls = acceptor.accept(far).await.expect("accept");
                let mut request = [0u8; 1];
                tls.read_exact(&mut request).await.expect("request");
                for record in &records {
                    tls.write_all(record).await.expect("write");
                    tls.flush().await.expect("flush");
                }
                tls.shutdown().await.expect("close_notify");
            });
            let mut link = handshake_and_send(&mut near, client_config, b"x").await;
            server.await.expect("server");
            let mut wire = Vec::new();
            near.read_to_end(&mut wire).await.expect("wire");
            let mut most = 0;
            let mut cipher = vec![0u8; TAIL_MAX + 16384];
            let mut plain = vec![0u8; TAIL_MAX + 16384];
            let mut got = Vec::new();
            // 16 KiB then 6,000 bytes: the ticket's first record whole, its second not yet.
            let mut rest = &wire[..];
            for size in [16384, 6000].into_iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, after) = rest.split_at(size.min(rest.len()));
                rest = after;
                let held = link.load_tail(&mut cipher);
                cipher[held..held + piece.len()].copy_from_slice(piece);
                let len = link
                    .open(&mut cipher[..held + piece.len()], &mut plain)
                    .expect("open");
                got.extend_from_slice(&plain[..len]);
                most = most.max(link.tail.len());
            }
            assert!(most > RECORD_MAX, "the ticket spans records: tail {most}");
            assert_eq!(got, expected);
            assert!(link.closed());
        });
    }

    #[test]
    fn tls_1_2_takes_the_same_path() {
        let records = events(5, 120);
        let (mut link, wire) = converse_with(&[&rustls::version::TLS12], b"x", &records, true);
        let (got, err) = feed(&mut link, &wire, &[77, 500]);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got, records.concat());
        assert!(link.closed());
    }

    /// A server that updates its keys midway and asks the client to: the records after it
    /// decrypt, and the client's next request (rustls puts its own update first) is read.
    #[test]
    fn a_key_update_midway_is_followed_and_answered() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (client_config, server_config) = configs(&[&rustls::version::TLS13]);
        runtime.block_on(async move {
            let (mut near, far) = tokio::io::duplex(1 << 20);
            let acceptor = tokio_rustls::TlsAcceptor::from(server_config);
            let server = tokio::spawn(async move {
                let mut tls = acceptor.accept(far).await.expect("accept");
                let mut first = [0u8; 5];
                tls.read_exact(&mut first).await.expect("first request");
                tls.write_all(b"before").await.expect("write");
                tls.flush().await.expect("flush");
                tls.get_mut().1.refresh_traffic_keys().expect("key update");
                tls.write_all(b"after").await.expect("write");
                tls.flush().await.expect("flush");
                let mut second = [0u8; 6];
                tls.read_exact(&mut second).await.expect("second request");
                second
            });
            let mut link = handshake_and_send(&mut near, client_config, b"first").await;
            let mut cipher = vec![0u8; TAIL_MAX + 16384];
            let mut plain = vec![0u8; TAIL_MAX + 16384];
            let mut got = Vec::new();
            while got.len() < b"beforeafter".len() {
                let held = link.load_tail(&mut cipher);
                let n = near.read(&mut cipher[held..]).await.expect("read");
                assert!(n > 0, "the server closed early");
                let len = link
                    .open(&mut cipher[..held + n], &mut plain)
                    .expect("open");
                got.extend_from_slice(&plain[..len]);
            }
            assert_eq!(got, b"beforeafter");
            let sealed = link.seal(b"second").expect("seal");
            near.write_all(&sealed).await.expect("send");
            assert_eq!(&server.await.expect("server"), b"second");
        });
    }
}
