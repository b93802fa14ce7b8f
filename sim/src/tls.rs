//! TLS for the simulator (`--tls-cert`, `--tls-key`): a rustls acceptor in front of the same
//! HTTP service, offering HTTP/2 and HTTP/1.1 by ALPN.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// An acceptor serving the PEM certificate chain at `cert` with the PEM private key at `key`.
pub fn acceptor(cert: &Path, key: &Path) -> io::Result<TlsAcceptor> {
    let named = |path: &Path, err: io::Error| {
        io::Error::new(err.kind(), format!("{}: {err}", path.display()))
    };
    let pem = std::fs::read(cert).map_err(|e| named(cert, e))?;
    let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| named(cert, e))?;
    if chain.is_empty() {
        return Err(named(cert, io::Error::other("no certificate in the file")));
    }
    let pem = std::fs::read(key).map_err(|e| named(key, e))?;
    let key_der: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| named(key, e))?
        .ok_or_else(|| named(key, io::Error::other("no private key in the file")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: {e}", cert.display()),
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = acceptor(&missing, &missing).err().unwrap().to_string();
        assert!(err.contains("missing.pem"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let err = acceptor(&empty, &empty).err().unwrap().to_string();
        assert!(
            err.contains("empty.pem") && err.contains("no certificate"),
            "{err}"
        );
    }
}
