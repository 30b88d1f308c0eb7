//! TLS for `rediss://` masters (feature `tls`): rustls with its ring provider, over the same
//! socket a plain connection uses, under the same pipeline (so a TLS connection keeps the
//! pipeline's ordering and cancellation guarantees).
//!
//! The server's certificate must chain to the system's roots, as `rustls-native-certs` finds
//! them (`SSL_CERT_FILE` / `SSL_CERT_DIR` point elsewhere), and name the URL's host (a DNS name
//! or an IP address). There is no way to turn the check off. The roots are read on the first
//! TLS connection of the process and kept.

use std::sync::{Arc, Mutex, PoisonError};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::NodeErrorKind;
use crate::outside::Socket;

/// Runs the TLS handshake on `socket` with the master at `host`.
///
/// # Errors
///
/// [`NodeErrorKind::Connect`]: the system's roots could not be read, `host` is no valid server
/// name, or the handshake failed (a certificate not trusted, or not for `host`).
///
/// # Cancel safety
///
/// Cancel-safe: a dropped handshake leaves no connection behind.
pub(crate) async fn wrap(socket: Socket, host: &str) -> Result<TlsStream<Socket>, NodeErrorKind> {
    let config = client_config()?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| {
        NodeErrorKind::Connect(format!("{host:?} is not a valid TLS server name: {e}"))
    })?;
    TlsConnector::from(config)
        .connect(name, socket)
        .await
        .map_err(|e| NodeErrorKind::Connect(format!("TLS handshake failed: {e}")))
}

/// The client configuration of every TLS connection, built on first use. Only a success is
/// kept: a failure to read the roots is retried on the next connection.
fn client_config() -> Result<Arc<ClientConfig>, NodeErrorKind> {
    static CONFIG: Mutex<Option<Arc<ClientConfig>>> = Mutex::new(None);
    let mut cached = CONFIG.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(config) = &*cached {
        return Ok(Arc::clone(config));
    }
    let failed = |e: String| NodeErrorKind::Connect(format!("TLS set-up failed: {e}"));
    // As strict as any certificate the system offers: a store that cannot be read entirely is
    // an error, rather than a smaller set of roots than the operator configured.
    let found = rustls_native_certs::load_native_certs();
    if let Some(error) = found.errors.first() {
        return Err(failed(format!(
            "reading the system's root certificates: {error}"
        )));
    }
    let mut roots = RootCertStore::empty();
    for certificate in found.certs {
        roots
            .add(certificate)
            .map_err(|e| failed(format!("a system root certificate: {e}")))?;
    }
    // The provider named, not the process default: another crate of the program enabling a
    // second provider makes the default ambiguous (and rustls would panic choosing it).
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| failed(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let config = Arc::new(config);
    *cached = Some(Arc::clone(&config));
    Ok(config)
}
