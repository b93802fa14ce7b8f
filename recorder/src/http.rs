//! The HTTP client: hyper 1.x pooled client over rustls (ring), HTTP/1.1 and HTTP/2.
//! Certificates are verified against the web PKI roots plus `--ca-cert`; only an explicit
//! `insecure` skips verification.

use crate::config::{HttpVersion, RecordConfig};
use crate::error::RecordError;
use crate::manifest::is_secret_header;
use crate::read_clock::{CloseWatch, TimedConnector};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;
use std::time::Duration;

/// Read buffer of each HTTP/1.1 connection.
const HTTP1_READ_BUF: usize = 4096;

/// The pooled client every request goes through.
/// Its TCP streams stamp a [`crate::read_clock::ReadClock`] on every read.
pub type HttpClient = Client<HttpsConnector<TimedConnector>, Full<Bytes>>;

/// How long an idle keep-alive connection is kept for reuse. Below the 5 s that uvicorn
/// (vLLM, SGLang, llama-cpp-python, LiteLLM) and cpp-httplib (llama.cpp) keep an idle
/// connection open, so the client gives a connection up before the server closes it under
/// a request.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Build the client for `config` (TLS roots, ALPN and pool sized for the load).
pub fn build_client(config: &RecordConfig) -> Result<HttpClient, RecordError> {
    build(config, true, CloseWatch::default())
}

/// [`build_client`] whose connections report to `closes` when the server closes them right
/// after a response.
pub fn build_watched_client(
    config: &RecordConfig,
    closes: CloseWatch,
) -> Result<HttpClient, RecordError> {
    build(config, true, closes)
}

/// A client that opens a new connection for every request: for the one retry of a request
/// whose reused connection turned out to be closed, and for every request to a server that
/// closes its connections after each response.
pub fn build_fresh_client(config: &RecordConfig) -> Result<HttpClient, RecordError> {
    build(config, false, CloseWatch::default())
}

fn build(
    config: &RecordConfig,
    pooled: bool,
    closes: CloseWatch,
) -> Result<HttpClient, RecordError> {
    let tls = tls_config(config)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let http = TimedConnector(http, closes);
    let connector = match config.http {
        HttpVersion::Http1 => builder.enable_http1().wrap_connector(http),
        HttpVersion::Http2 => builder.enable_http2().wrap_connector(http),
        HttpVersion::Auto => builder.enable_all_versions().wrap_connector(http),
    };
    let mut client = Client::builder(TokioExecutor::new());
    client
        .pool_max_idle_per_host(if pooled { usize::MAX } else { 0 })
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        // SSE events are small; a fixed read buffer keeps per-connection memory low at
        // thousands of streams (larger events simply span several reads).
        .http1_read_buf_exact_size(HTTP1_READ_BUF)
        .http2_only(config.http == HttpVersion::Http2)
        .http2_initial_stream_window_size(4 << 20)
        .http2_initial_connection_window_size(16 << 20);
    Ok(client.build(connector))
}

pub(crate) fn tls_config(config: &RecordConfig) -> Result<ClientConfig, RecordError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| RecordError::Tls(e.to_string()))?;
    if config.insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
            .with_no_client_auth());
    }
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = &config.ca_cert {
        let pem = std::fs::read(path)
            .map_err(|e| RecordError::Tls(format!("reading {}: {e}", path.display())))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| RecordError::Tls(format!("{}: {e}", path.display())))?;
            roots
                .add(cert)
                .map_err(|e| RecordError::Tls(format!("{}: {e}", path.display())))?;
            added += 1;
        }
        if added == 0 {
            return Err(RecordError::Tls(format!(
                "{} holds no PEM certificate",
                path.display()
            )));
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// Verifier for `--insecure`: accepts any certificate but still checks handshake signatures.
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Full error chain of a client error, one cause after another (hyper hides the useful part,
/// e.g. "connection refused" or the TLS alert, in its sources).
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The headers every request of a run carries: JSON in, SSE out, `Authorization: Bearer KEY`
/// and every `--header` (secret ones marked sensitive, so they are scrubbed from what a server
/// echoes). Preflight, probes, tokenizer and server-info calls send them too.
pub fn request_headers(config: &RecordConfig) -> Result<HeaderMap, RecordError> {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("accept", HeaderValue::from_static("text/event-stream"));
    if let Some(key) = &config.api_key {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| RecordError::Config("the API key is not a valid header value".into()))?;
        value.set_sensitive(true);
        headers.insert("authorization", value);
    }
    for (name, value) in &config.headers {
        let header_name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| RecordError::Config(format!("invalid header name {name:?}")))?;
        let mut header_value = HeaderValue::from_str(value.trim())
            .map_err(|_| RecordError::Config(format!("invalid value for header {name:?}")))?;
        if is_secret_header(name) {
            header_value.set_sensitive(true);
        }
        headers.insert(header_name, header_value);
    }
    Ok(headers)
}

/// At most `limit` bytes of a response body, and the error that cut it short, if one did.
pub async fn read_body(
    body: &mut hyper::body::Incoming,
    limit: usize,
) -> (Vec<u8>, Option<hyper::Error>) {
    use http_body_util::BodyExt;
    let mut collected = Vec::new();
    while collected.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    collected.extend_from_slice(data);
                }
            }
            Some(Err(err)) => return (collected, Some(err)),
            None => break,
        }
    }
    collected.truncate(limit);
    (collected, None)
}

/// A small request outside the measured load (a tokenizer call, a server-info page): the
/// status and at most `limit` bytes of the body, or what went wrong, within `timeout`.
pub async fn fetch(
    client: &HttpClient,
    request: hyper::Request<Full<Bytes>>,
    timeout: Duration,
    limit: usize,
) -> Result<(u16, Vec<u8>), String> {
    let uri = request.uri().clone();
    let exchange = async {
        let response = client.request(request).await.map_err(|e| error_chain(&e))?;
        let status = response.status().as_u16();
        match read_body(&mut response.into_body(), limit).await {
            (body, None) => Ok((status, body)),
            (_, Some(err)) => Err(format!("reading the body: {err}")),
        }
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result.map_err(|e| format!("{uri}: {e}")),
        Err(_) => Err(format!(
            "{uri}: no answer within {} s",
            timeout.as_secs_f64()
        )),
    }
}
