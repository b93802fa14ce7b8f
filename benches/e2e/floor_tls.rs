//! TLS for the epoll floor (`--tls`): the same reader with rustls between the socket and the
//! scan. The handshake is made blocking when a stream connects (it is counted in the floor's
//! CPU, as the recorder's handshakes are in its own); after it the socket is non-blocking, and
//! each readable event makes exactly one `read()` (rustls's `read_tls`), one clock read right
//! after it, a decrypt of the records it completed, and the scan of their plaintext.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

/// A client configuration trusting only the certificate (PEM) at `ca`, offering HTTP/1.1.
pub fn client_config(ca: &Path) -> io::Result<Arc<ClientConfig>> {
    let pem = std::fs::read(ca)?;
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert: CertificateDer<'static> = cert?;
        roots.add(cert).map_err(io::Error::other)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Connect to `addr` and complete the TLS handshake (blocking); the stream is returned
/// non-blocking, with `TCP_NODELAY`.
pub fn connect(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
) -> io::Result<(TcpStream, ClientConnection)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let name = ServerName::IpAddress(addr.ip().into());
    let mut tls = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
    while tls.is_handshaking() {
        tls.complete_io(&mut stream)?;
    }
    stream.set_nonblocking(true)?;
    Ok((stream, tls))
}

/// Encrypt `bytes` and write them all (waiting, bounded, when the send buffer is full).
pub fn send(stream: &TcpStream, tls: &mut ClientConnection, bytes: &[u8]) -> io::Result<()> {
    tls.writer().write_all(bytes)?;
    flush(stream, tls)
}

/// Write whatever rustls has queued for the peer.
fn flush(stream: &TcpStream, tls: &mut ClientConnection) -> io::Result<()> {
    while tls.wants_write() {
        let mut out = Vec::new();
        tls.write_tls(&mut out)?;
        crate::floor_epoll::send_all(stream, &out)?;
    }
    Ok(())
}

/// What one readable event gave.
pub enum Read1 {
    /// Bytes arrived at this clock read (maybe no whole record yet); plaintext went to
    /// `on_plain`.
    Data(u64),
    /// The peer closed.
    Eof,
    /// Nothing to read after all.
    WouldBlock,
}

/// One `read()` of the socket into rustls, the clock read after it (`now`), then every byte
/// of plaintext it completed, passed to `on_plain` with that time.
pub fn read_once(
    stream: &TcpStream,
    tls: &mut ClientConnection,
    buf: &mut [u8],
    now: impl FnOnce() -> u64,
    mut on_plain: impl FnMut(&[u8], u64),
) -> io::Result<Read1> {
    let mut reader = stream;
    let n = match tls.read_tls(&mut reader) {
        Ok(n) => n,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            return Ok(Read1::WouldBlock)
        }
        Err(e) => return Err(e),
    };
    let at = now();
    if n == 0 {
        return Ok(Read1::Eof);
    }
    tls.process_new_packets().map_err(io::Error::other)?;
    loop {
        match tls.reader().read(buf) {
            Ok(0) => return Ok(Read1::Eof),
            Ok(k) => on_plain(&buf[..k], at),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    flush(stream, tls)?;
    Ok(Read1::Data(at))
}
