//! TLS beyond tests/record_tls.rs (which covers refusal without the CA, `--ca-cert`, and
//! `tls_insecure` in the manifest): a refused handshake starts no trace and leaks no key, and an
//! `--insecure` run says so in the manifest's argv as well as in `extra.tls_insecure`.

mod reliability_common;

use reliability_common::*;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;

/// A self-signed TLS front for `backend` on a free loopback port.
fn self_signed_proxy(runtime: &tokio::runtime::Runtime, backend: std::net::SocketAddr) -> u16 {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".into()])
            .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
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

#[test]
fn refused_certificate_starts_no_trace_and_insecure_is_recorded() {
    let key = format!("sk-ttmarker-tls-{}", std::process::id());
    let server = sim(fast_sim());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let port = self_signed_proxy(&runtime, server.addr());
    let url = format!("https://127.0.0.1:{port}/v1");
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--requests",
        "2",
        "--max-tokens",
        "4",
        "--input-tokens",
        "30",
    ];

    // Verification is the default: no flag, no environment variable needed to get it.
    let out = dir.path().join("refused.tt");
    let refused = record(&url, &out, &args)
        .env("OPENAI_API_KEY", &key)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    assert!(
        !stderr.contains(&key) && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert!(!out.exists(), "a refused target starts no trace");

    let out = dir.path().join("insecure.tt");
    let insecure = record(&url, &out, &args)
        .arg("--insecure")
        .env("OPENAI_API_KEY", &key)
        .output()
        .unwrap();
    assert!(insecure.status.success(), "{insecure:?}");
    let (reader, records) = requests(&out);
    assert_eq!(records.len(), 2);
    let manifest = reader.manifest();
    assert_eq!(manifest.extra["tls_insecure"], true);
    assert!(manifest.argv.iter().any(|a| a == "--insecure"));
    assert!(!serde_json::to_string(manifest).unwrap().contains(&key));
}
