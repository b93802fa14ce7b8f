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

/// A fresh self-signed certificate and its key as PEM files (`--tls-cert`, `--tls-key`; the
/// certificate is also the `--ca-cert`), in a temporary folder for the test's other files.
fn certificate_files() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let cert = self_signed();
    let dir = tempfile::tempdir().unwrap();
    let (ca, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&ca, &cert.pem).unwrap();
    std::fs::write(&key, &cert.key_pem).unwrap();
    (dir, ca, key)
}

/// The simulator's own TLS, over both clients: every request streams, the manifest names the
/// path each run took, and the run end counts the responses that came over HTTP/2 (the
/// simulator offers h2 and HTTP/1.1 by ALPN: hyper's client takes h2 unless told `--http 1`).
#[test]
fn the_simulator_serves_tls_itself_to_both_clients() {
    let (dir, ca, key) = certificate_files();
    let server = sim(tokentrace_sim::SimConfig {
        tls_cert: Some(ca.clone()),
        tls_key: Some(key),
        ..fast_sim()
    });
    let url = server.base_url();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    // The own client offers only HTTP/1.1 by ALPN; `--http 2` is hyper's.
    for (client, http, path, over_h2) in [
        ("own", "auto", "own-http1", 0),
        ("own", "1", "own-http1", 0),
        ("hyper", "1", "hyper", 0),
        ("hyper", "auto", "hyper", 4),
        ("own", "2", "hyper", 4),
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
        assert_eq!(
            reader.run_end().unwrap().client_health.http2_responses,
            Some(over_h2),
            "--client {client} --http {http}"
        );
    }
}

/// The fault matrix over the simulator's own TLS: a reset, an error status, a cut stream, a
/// malformed and an oversize event each get the outcome they get over plain HTTP, on every
/// client (the own client's TLS keeps only a record's bytes between reads, so a fault in
/// the middle of one must still end the request, not hang it).
#[test]
fn faults_over_tls_get_the_same_outcomes_on_every_client() {
    let (dir, ca, key) = certificate_files();
    let prompts = prompt_file(dir.path(), 4);
    let mut outcomes = Vec::new();
    for client in ["hyper", "own", "own-task"] {
        // Faults fire on arrival numbers: a fresh simulator for each client, one request at
        // a time, a prompt file (no calibration probes): arrival n is request n-1.
        let server = sim(tokentrace_sim::SimConfig {
            tls_cert: Some(ca.clone()),
            tls_key: Some(key.clone()),
            ..fault_matrix_sim()
        });
        let out = dir.path().join(format!("faults-{client}.tt"));
        let mut args = FAULT_MATRIX_ARGS.to_vec();
        args.extend([prompts.to_str().unwrap(), "--ca-cert", ca.to_str().unwrap()]);
        args.extend(["--client", client]);
        let (_, records) = record_ok(&server.base_url(), &out, &args);
        let mut by_id: Vec<_> = records
            .iter()
            .map(|r| (r.meta.id, r.meta.outcome))
            .collect();
        by_id.sort_by_key(|(id, _)| *id);
        outcomes.push((client, by_id));
    }
    for (client, by_id) in outcomes {
        assert_eq!(by_id, FAULT_MATRIX_OUTCOMES, "--client {client}");
    }
}
