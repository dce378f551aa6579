//! TLS to Redis and the sentinels (`tls = true` in `[cluster]`): rustls with the ring
//! provider, TLS 1.2 or 1.3, the server's certificate always verified (its chain up to
//! `ca_file` or the system's roots, and its name: a DNS name, or an IP address SAN for an IP).
//!
//! The files (`ca_file`, `client_cert`, `client_key`) are read at start and again at each
//! connection, like the password, so a renewed certificate is picked up at the next one; every
//! error names the file. The stream is made here and handed to the redis crate
//! (`MultiplexedConnection::new_with_config`) rather than built by its `rediss://` client: that
//! client resolves and verifies one host string, so it could neither connect to the address a
//! sentinel gave nor verify `tls_server_name` there, and it reads the system's roots at every
//! connection even when a CA file is given.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};

use crate::config::RedisTls;

/// The rustls client settings `tls` describes, its files read now.
///
/// # Errors
/// A message naming the file (or the system store) that cannot be read or holds no usable
/// certificate or key, or the pair that does not match.
pub(crate) fn client_config(tls: &RedisTls) -> Result<ClientConfig, String> {
    let roots = match &tls.ca_file {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(path, "ca_file")? {
                roots
                    .add(cert)
                    .map_err(|e| format!("[cluster] ca_file {}: {e}", path.display()))?;
            }
            roots
        }
        None => system_roots()?,
    };
    let builder = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("[cluster] TLS: {e}"))?
        .with_root_certificates(roots);
    match &tls.client {
        None => Ok(builder.with_no_client_auth()),
        Some(client) => {
            let chain = certificates(&client.cert, "client_cert")?;
            let key = PrivateKeyDer::from_pem_file(&client.key).map_err(|e| {
                format!(
                    "[cluster] client_key {}: no private key read ({e})",
                    client.key.display()
                )
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                format!(
                    "[cluster] client_cert {} with client_key {}: {e}",
                    client.cert.display(),
                    client.key.display()
                )
            })
        }
    }
}

/// The certificates of the PEM file at `path` (`field` names it in errors); at least one.
fn certificates(path: &Path, field: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("[cluster] {field} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "[cluster] {field} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// The system's roots (`rustls-native-certs`: on Linux the OpenSSL store, `SSL_CERT_FILE` or
/// `SSL_CERT_DIR` if set), those that parse; at least one.
fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (_, unusable) = roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(format!(
            "[cluster] tls: no usable CA certificate in the system's store ({why}, {unusable} \
             unusable): give ca_file"
        ));
    }
    Ok(roots)
}

/// A TLS connection to `address` whose certificate must be valid for `server_name`, with
/// the settings of `tls` (its files read now); TCP connect and handshake bounded by `timeout`.
///
/// # Errors
/// The file that cannot be used, or what failed: the connection, or the handshake (an
/// unknown issuer, a name the certificate does not carry, a client certificate the server
/// wanted and did not get...), naming the name and the address.
pub(crate) async fn connect(
    address: SocketAddr,
    server_name: &str,
    tls: &RedisTls,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, String> {
    let config = client_config(tls)?;
    let name = ServerName::try_from(server_name.to_owned())
        .map_err(|e| format!("TLS server name `{server_name}`: {e}"))?;
    let handshake = async {
        let tcp = TcpStream::connect(address)
            .await
            .map_err(|e| format!("connect to {address}: {e}"))?;
        // A round is one small pipelined write: do not let Nagle hold it back.
        tcp.set_nodelay(true)
            .map_err(|e| format!("TCP_NODELAY on {address}: {e}"))?;
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {address} as `{server_name}`: {e}"))
    };
    tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| format!("TLS with {address} as `{server_name}`: timed out"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientCertificate;

    #[test]
    fn missing_or_empty_files_are_named() {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-tls-unit-")
            .tempdir()
            .expect("temp dir writable");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("temp dir writable");
        let tls = |ca: &Path, client: Option<(&Path, &Path)>| RedisTls {
            ca_file: Some(ca.to_path_buf()),
            client: client.map(|(cert, key)| ClientCertificate {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            }),
            server_name: None,
        };
        let missing = Path::new("/nonexistent/tollgate-ca.pem");
        let error = client_config(&tls(missing, None)).unwrap_err();
        assert!(
            error.contains("ca_file /nonexistent/tollgate-ca.pem"),
            "{error}"
        );
        let error = client_config(&tls(&empty, None)).unwrap_err();
        assert!(error.contains("no PEM certificate"), "{error}");
        assert!(error.contains(&empty.display().to_string()), "{error}");
    }
}
