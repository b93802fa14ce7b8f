//! TLS on loopback: a self-signed certificate made here, served by a small rustls proxy in
//! front of the simulator, or by the simulator itself (`--tls-cert`, as the benchmark's TLS
//! ladder runs it). Verification refuses it without the CA and accepts it with `--ca-cert`;
//! `--insecure` is recorded in the manifest.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::tls::{proxied_sim, self_signed};
use tokentrace_format::Outcome;

#[test]
fn tls_verification_refuses_unknown_ca_and_accepts_ca_cert() {
    // The simulator speaks both on one port, so ALPN may pick either.
    let tls = proxied_sim(fast_sim(), &[b"h2", b"http/1.1"]);
    let (url, ca, dir) = (tls.url.as_str(), &tls.ca, &tls.dir);
    let args = [
        "--requests",
        "3",
        "--max-tokens",
        "4",
        "--input-tokens",
        "40",
    ];

    let out = dir.path().join("refused.tt");
    let refused = record(url, &out, &args)
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
        let (reader, records) = record_ok(url, &out, &with_ca);
        assert_eq!(records.len(), 3);
        assert!(records.iter().all(|r| r.meta.outcome == Outcome::Ok));
        assert_eq!(reader.manifest().extra["tls_insecure"], false);
    }

    let out = dir.path().join("insecure.tt");
    let mut insecure = args.to_vec();
    insecure.push("--insecure");
    let (reader, records) = record_ok(url, &out, &insecure);
    assert_eq!(records.len(), 3);
    assert_eq!(reader.manifest().extra["tls_insecure"], true);
}

/// The simulator's own TLS, over both clients: every request streams, and the manifest names
/// the path each run took.
#[test]
fn the_simulator_serves_tls_itself_to_both_clients() {
    let cert = self_signed();
    let dir = tempfile::tempdir().unwrap();
    let (ca, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&ca, &cert.pem).unwrap();
    std::fs::write(&key, &cert.key_pem).unwrap();
    let server = sim(tokentrace_sim::SimConfig {
        tls_cert: Some(ca.clone()),
        tls_key: Some(key),
        ..fast_sim()
    });
    let url = server.base_url();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    // The own client offers only HTTP/1.1 by ALPN; `--http 2` is hyper's.
    for (client, http, path) in [
        ("own", "auto", "own-http1"),
        ("own", "1", "own-http1"),
        ("hyper", "1", "hyper"),
        ("own", "2", "hyper"),
    ] {
        let out = dir.path().join(format!("{client}-{http}.tt"));
        let args = [
            "--requests",
            "4",
            "--concurrency",
            "2",
            "--max-tokens",
            "6",
            "--input-tokens",
            "40",
            "--ca-cert",
            ca.to_str().unwrap(),
            "--client",
            client,
            "--http",
            http,
        ];
        let (reader, records) = record_ok(&url, &out, &args);
        assert_eq!(records.len(), 4);
        for r in &records {
            assert_ok(r);
            assert!(r.chunks.len() >= 6, "{} chunks", r.chunks.len());
        }
        assert_eq!(
            reader.manifest().extra["http_client"],
            path,
            "--client {client} --http {http}"
        );
    }
}
