//! TLS beyond tests/record_tls.rs (which covers refusal without the CA, `--ca-cert`, and
//! `tls_insecure` in the manifest): a refused handshake starts no trace and leaks no key, and an
//! `--insecure` run says so in the manifest's argv as well as in `extra.tls_insecure`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::records_of;
use common::tls::{self_signed, tls_proxy};

#[test]
fn refused_certificate_starts_no_trace_and_insecure_is_recorded() {
    let key = format!("sk-ttmarker-tls-{}", std::process::id());
    let server = sim(fast_sim());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let port = tls_proxy(&runtime, server.addr(), self_signed(), &[b"http/1.1"]);
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
    let (reader, records) = records_of(&out);
    assert_eq!(records.len(), 2);
    let manifest = reader.manifest();
    assert_eq!(manifest.extra["tls_insecure"], true);
    assert!(manifest.argv.iter().any(|a| a == "--insecure"));
    assert!(!serde_json::to_string(manifest).unwrap().contains(&key));
}
