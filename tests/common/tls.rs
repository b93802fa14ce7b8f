//! TLS on loopback for the end-to-end tests: a self-signed certificate made on the spot and a
//! small rustls proxy that serves it in front of a plain-HTTP backend such as the simulator.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;

/// A self-signed certificate for `localhost` and `127.0.0.1`: its PEM (to pass as a CA), its
/// DER and its private key.
pub struct SelfSigned {
    /// The certificate in PEM, as `--ca-cert` reads it.
    pub pem: String,
    /// The certificate in DER, as the proxy serves it.
    pub der: CertificateDer<'static>,
    /// The certificate's private key.
    pub key: PrivateKeyDer<'static>,
    /// The same key in PEM, as `tokentrace sim --tls-key` reads it.
    pub key_pem: String,
}

/// Makes a fresh self-signed certificate.
pub fn self_signed() -> SelfSigned {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    SelfSigned {
        pem: certified.cert.pem(),
        der: certified.cert.der().clone(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der())),
        key_pem: certified.key_pair.serialize_pem(),
    }
}

/// Serves TLS with `cert` on a free loopback port, offering `alpn`, and forwards the plain
/// bytes to `backend`; returns the port.
pub fn tls_proxy(
    runtime: &tokio::runtime::Runtime,
    backend: SocketAddr,
    cert: SelfSigned,
    alpn: &[&[u8]],
) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der], cert.key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

/// A simulator behind [`tls_proxy`] with a fresh [`self_signed`] certificate, whose PEM is
/// written to `ca` in a temporary folder (`dir`, also there for the test's own files).
pub struct ProxiedSim {
    /// `https://127.0.0.1:PORT/v1`, the proxy's address.
    pub url: String,
    /// The certificate's PEM, to pass as `--ca-cert`.
    pub ca: std::path::PathBuf,
    /// The temporary folder holding `ca`.
    pub dir: tempfile::TempDir,
    _proxy: tokio::runtime::Runtime,
    _server: tokentrace_sim::SimHandle,
}

/// Starts a simulator with `config` and a TLS proxy in front of it offering `alpn`.
pub fn proxied_sim(config: tokentrace_sim::SimConfig, alpn: &[&[u8]]) -> ProxiedSim {
    let server = tokentrace_sim::SimServer::spawn_background(config).unwrap();
    let cert = self_signed();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert.pem).unwrap();
    let proxy = tokio::runtime::Runtime::new().unwrap();
    let port = tls_proxy(&proxy, server.addr(), cert, alpn);
    ProxiedSim {
        url: format!("https://127.0.0.1:{port}/v1"),
        ca,
        dir,
        _proxy: proxy,
        _server: server,
    }
}
