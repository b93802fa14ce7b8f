//! What runs before every trial so each starts from the same server state: a shell command
//! (`--before-trial 'CMD'`) and/or an HTTP POST (`--flush-url URL`, e.g. SGLang's
//! `/flush_cache`).

use crate::search::TrialSpec;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Uri};
use std::process::Command;
use std::time::Duration;
use tokentrace_recorder::http::{build_client, error_chain};
use tokentrace_recorder::RecordConfig;

/// How long a flush POST may take before the trial is abandoned.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// The hooks run before every trial.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrialHooks {
    /// A command for `sh -c`, with `TOKENTRACE_WORKLOAD`, `TOKENTRACE_CONCURRENCY` and
    /// `TOKENTRACE_TRIAL` in its environment; a non-zero exit stops the search.
    pub before_trial: Option<String>,
    /// A URL to POST (empty body) before every trial; a status >= 400 stops the search.
    pub flush_url: Option<String>,
}

impl TrialHooks {
    /// A sentence for the report's `cache_policy`.
    pub fn describe(&self) -> String {
        match (&self.before_trial, &self.flush_url) {
            (None, None) => "not flushed between trials".into(),
            (Some(cmd), None) => format!("`{cmd}` run before every trial"),
            (None, Some(url)) => format!("flushed before every trial (POST {url})"),
            (Some(cmd), Some(url)) => {
                format!("`{cmd}` run and flushed (POST {url}) before every trial")
            }
        }
    }

    /// Runs the hooks for `spec`; `target` supplies the TLS settings for the POST.
    pub fn run(&self, spec: &TrialSpec, target: &RecordConfig) -> Result<(), String> {
        if let Some(cmd) = &self.before_trial {
            let status = Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .env("TOKENTRACE_WORKLOAD", spec.workload.to_string())
                .env("TOKENTRACE_CONCURRENCY", spec.concurrency.to_string())
                .env("TOKENTRACE_TRIAL", spec.trial.to_string())
                .status()
                .map_err(|e| format!("--before-trial `{cmd}` could not start: {e}"))?;
            if !status.success() {
                return Err(format!("--before-trial `{cmd}` failed ({status})"));
            }
        }
        if let Some(url) = &self.flush_url {
            post_empty(url, target)?;
        }
        Ok(())
    }
}

/// POSTs an empty body to `url` with the target's TLS settings.
fn post_empty(url: &str, target: &RecordConfig) -> Result<(), String> {
    let uri: Uri = url.parse().map_err(|e| format!("--flush-url {url}: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("--flush-url: runtime: {e}"))?;
    runtime.block_on(async {
        let client = build_client(target).map_err(|e| format!("--flush-url: {e}"))?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Full::default())
            .map_err(|e| format!("--flush-url {url}: {e}"))?;
        let response = tokio::time::timeout(FLUSH_TIMEOUT, client.request(request))
            .await
            .map_err(|_| format!("--flush-url {url}: no answer within {FLUSH_TIMEOUT:?}"))?
            .map_err(|e| format!("--flush-url {url}: {}", error_chain(&e)))?;
        let status = response.status();
        // Drain the body so the connection closes cleanly.
        let _ = tokio::time::timeout(FLUSH_TIMEOUT, response.into_body().collect()).await;
        if status.as_u16() >= 400 {
            return Err(format!("--flush-url {url}: HTTP {status}"));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    fn spec() -> TrialSpec {
        TrialSpec {
            workload: Workload { isl: 64, osl: 8 },
            concurrency: 3,
            trial: 2,
        }
    }

    #[test]
    fn before_trial_sees_the_trial_and_failures_stop() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("seen");
        let hooks = TrialHooks {
            before_trial: Some(format!(
                "echo $TOKENTRACE_WORKLOAD c$TOKENTRACE_CONCURRENCY t$TOKENTRACE_TRIAL > {}",
                out.display()
            )),
            flush_url: None,
        };
        let target = RecordConfig::new("http://127.0.0.1:1/v1", "m", dir.path().join("x"));
        hooks.run(&spec(), &target).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "64/8 c3 t2\n");
        let failing = TrialHooks {
            before_trial: Some("exit 3".into()),
            flush_url: None,
        };
        assert!(failing
            .run(&spec(), &target)
            .unwrap_err()
            .contains("failed"));
    }

    #[test]
    fn flush_to_a_closed_port_is_an_error() {
        // Bind then drop a listener to get a port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let hooks = TrialHooks {
            before_trial: None,
            flush_url: Some(format!("http://127.0.0.1:{port}/flush_cache")),
        };
        let dir = tempfile::tempdir().unwrap();
        let target = RecordConfig::new("http://127.0.0.1:1/v1", "m", dir.path().join("x"));
        let err = hooks.run(&spec(), &target).unwrap_err();
        assert!(err.contains("--flush-url"), "{err}");
        assert!(hooks.describe().contains("POST"));
    }

    #[test]
    fn flush_posts_to_the_url() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap();
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let hooks = TrialHooks {
            before_trial: None,
            flush_url: Some(format!("http://127.0.0.1:{port}/flush_cache")),
        };
        let dir = tempfile::tempdir().unwrap();
        let target = RecordConfig::new("http://127.0.0.1:1/v1", "m", dir.path().join("x"));
        hooks.run(&spec(), &target).unwrap();
        let request = server.join().unwrap();
        assert!(
            request.starts_with("POST /flush_cache HTTP/1.1"),
            "{request}"
        );
    }
}
