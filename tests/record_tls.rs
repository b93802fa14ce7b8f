//! TLS on loopback: a self-signed certificate made here, served by a small rustls proxy in
//! front of the simulator. Verification refuses it without the CA and accepts it with
//! `--ca-cert`; `--insecure` is recorded in the manifest.

mod record_common;

use record_common::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use tokentrace_format::Outcome;

/// Serve TLS on a free loopback port, forwarding plain bytes to `backend`.
fn tls_proxy(
    runtime: &tokio::runtime::Runtime,
    backend: SocketAddr,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    // The simulator speaks both on one port, so ALPN may pick either.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
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

#[test]
fn tls_verification_refuses_unknown_ca_and_accepts_ca_cert() {
    let server = sim(fast_sim());
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, certified.cert.pem()).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let port = tls_proxy(&runtime, server.addr(), certified.cert.der().clone(), key);
    let url = format!("https://127.0.0.1:{port}/v1");
    let args = [
        "--requests",
        "3",
        "--max-tokens",
        "4",
        "--input-tokens",
        "40",
    ];

    let out = dir.path().join("refused.tt");
    let refused = record(&url, &out, &args)
        .assert()
        .failure()
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(
        stderr.contains("unreachable") && stderr.contains("certificate"),
        "{stderr}"
    );

    for http in ["auto", "1"] {
        let out = dir.path().join(format!("ok-{http}.tt"));
        let mut with_ca = args.to_vec();
        with_ca.extend(["--ca-cert", ca.to_str().unwrap(), "--http", http]);
        record(&url, &out, &with_ca).assert().success();
        let (reader, records) = requests(&out);
        assert_eq!(records.len(), 3);
        assert!(records.iter().all(|r| r.outcome == Outcome::Ok));
        assert_eq!(reader.manifest().extra["tls_insecure"], false);
    }

    let out = dir.path().join("insecure.tt");
    let mut insecure = args.to_vec();
    insecure.push("--insecure");
    record(&url, &out, &insecure).assert().success();
    let (reader, records) = requests(&out);
    assert_eq!(records.len(), 3);
    assert_eq!(reader.manifest().extra["tls_insecure"], true);
}
