//! Party identities and mutual TLS between pinned certificates.
//!
//! Each party has an [`Identity`] (a certificate and its private key) and knows the exact
//! certificate of each peer ([`Pins`]). Both ends of every connection present their
//! certificate and accept only the pinned one of the peer they expect: there is no
//! certificate authority, no name check and no validity window, because the three parties
//! exchange their certificates out of band when they agree on a session (as they agree
//! on addresses). The handshake is TLS 1.3 with `rustls` and its `ring` provider, for TCP
//! and QUIC alike.
//!
//! [`Identity::generate`] makes a self-signed development identity with `rcgen`; the
//! `keygen` binary of `puma-examples` writes one per party as PEM files.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use puma_core::PartyId;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, ServerConfig,
    SignatureScheme,
};

use crate::error::TransportError;

/// The ALPN protocol id of puma-rs links.
pub(crate) const ALPN: &[u8] = b"puma/1";

/// A party's certificate and private key.
pub struct Identity {
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The private key never reaches a log.
        write!(f, "Identity {{ cert: {} bytes, key: .. }}", self.cert.len())
    }
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            cert: self.cert.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    /// A fresh self-signed development identity for `party` (an ECDSA P-256 key; the
    /// certificate names `puma-party-N` and `localhost`).
    ///
    /// # Errors
    /// [`TransportError::Local`] if key generation fails.
    pub fn generate(party: PartyId) -> Result<Identity, TransportError> {
        let names = vec![server_name(party), "localhost".to_string()];
        let ck = rcgen::generate_simple_self_signed(names)
            .map_err(|e| TransportError::Local(format!("cannot generate a certificate: {e}")))?;
        let key = PrivateKeyDer::try_from(ck.key_pair.serialize_der())
            .map_err(|e| TransportError::Local(format!("cannot encode a key: {e}")))?;
        Ok(Identity {
            cert: ck.cert.der().clone(),
            key,
        })
    }

    /// Reads a PEM certificate and a PEM private key (PKCS#8, SEC1 or PKCS#1) and checks
    /// that they belong together.
    ///
    /// On Unix the key file must not be readable or writable by other users (mode 0600 or
    /// stricter, as `ssh` demands of its keys): a key others can read is no secret.
    ///
    /// # Errors
    /// [`TransportError::Local`] naming the file that is missing, malformed or open to
    /// other users, or saying that the key does not match the certificate.
    pub fn from_pem_files(cert_path: &Path, key_path: &Path) -> Result<Identity, TransportError> {
        check_key_mode(key_path)?;
        let cert = read_cert(cert_path)?;
        let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| {
            TransportError::Local(format!("cannot read the key {}: {e}", key_path.display()))
        })?;
        // A mismatched pair would otherwise surface only as a failed handshake at the
        // peers, reported as "did not connect" when the connect deadline expires.
        CertifiedKey::from_der(
            vec![cert.clone()],
            key.clone_key(),
            &ring::default_provider(),
        )
        .map_err(|e| {
            TransportError::Local(format!(
                "the key {} does not belong to the certificate {}: {e}",
                key_path.display(),
                cert_path.display()
            ))
        })?;
        Ok(Identity { cert, key })
    }

    /// Writes the certificate (mode 0644) and the private key (mode 0600 from its creation,
    /// so it is never readable by others) as PEM files. Refuses to replace an existing file
    /// unless `overwrite`; an overwritten key file gets mode 0600 too.
    ///
    /// # Errors
    /// [`TransportError::Local`] naming the file that exists or cannot be written.
    pub fn write_pem_files(
        &self,
        cert_path: &Path,
        key_path: &Path,
        overwrite: bool,
    ) -> Result<(), TransportError> {
        write_file(cert_path, self.cert_pem().as_bytes(), 0o644, overwrite)?;
        write_file(key_path, self.key_pem().as_bytes(), 0o600, overwrite)
    }

    /// The certificate, as PEM.
    pub fn cert_pem(&self) -> String {
        pem("CERTIFICATE", &self.cert)
    }

    /// The private key, as PEM (PKCS#8). Keep it secret.
    pub fn key_pem(&self) -> String {
        pem("PRIVATE KEY", self.key.secret_der())
    }

    /// The certificate in DER.
    pub fn cert(&self) -> &CertificateDer<'static> {
        &self.cert
    }
}

/// Writes `bytes` to `path`, created with `mode` (Unix) unless it exists and `overwrite`
/// is false; an existing file's mode is set to `mode` too.
fn write_file(path: &Path, bytes: &[u8], mode: u32, overwrite: bool) -> Result<(), TransportError> {
    use std::io::Write;
    let fail =
        |e: std::io::Error| TransportError::Local(format!("cannot write {}: {e}", path.display()));
    let mut open = std::fs::OpenOptions::new();
    open.write(true);
    if overwrite {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        open.mode(mode);
        let mut file = open.open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                TransportError::Local(format!("{} exists", path.display()))
            } else {
                fail(e)
            }
        })?;
        // `mode` applies only to a new file (and under the umask): set it on every path.
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(fail)?;
        file.write_all(bytes).map_err(fail)
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        let mut file = open.open(path).map_err(fail)?;
        file.write_all(bytes).map_err(fail)
    }
}

/// Refuses a private key file that other users may read or write (Unix).
fn check_key_mode(path: &Path) -> Result<(), TransportError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| {
            TransportError::Local(format!("cannot read the key {}: {e}", path.display()))
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(TransportError::Local(format!(
                "the key {} is accessible to other users (mode {mode:04o}); make it private \
                 with `chmod 600 {}`",
                path.display(),
                path.display()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Reads one PEM certificate.
///
/// # Errors
/// [`TransportError::Local`] naming the file that is missing or malformed.
pub fn read_cert(path: &Path) -> Result<CertificateDer<'static>, TransportError> {
    CertificateDer::from_pem_file(path).map_err(|e| {
        TransportError::Local(format!(
            "cannot read the certificate {}: {e}",
            path.display()
        ))
    })
}

fn pem(label: &str, der: &[u8]) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len().div_ceil(3) * 4);
    for chunk in der.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let idx = ((n >> (18 - 6 * i)) & 63) as usize;
                b64.push(char::from(B64.get(idx).copied().unwrap_or(b'A')));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The certificates a party accepts from its peers, by party index (its own is unused).
#[derive(Clone, Debug, Default)]
pub struct Pins {
    certs: [Option<CertificateDer<'static>>; 3],
}

impl Pins {
    /// No pins yet.
    pub fn new() -> Pins {
        Pins::default()
    }

    /// Pins `cert` as `party`'s certificate.
    pub fn with(mut self, party: PartyId, cert: CertificateDer<'static>) -> Pins {
        if let Some(slot) = self.certs.get_mut(party.index()) {
            *slot = Some(cert);
        }
        self
    }

    /// The pinned certificate of `party`.
    pub fn get(&self, party: PartyId) -> Option<&CertificateDer<'static>> {
        self.certs.get(party.index()).and_then(Option::as_ref)
    }

    /// The party among `among` whose pinned certificate is `cert`.
    pub(crate) fn identify(&self, cert: &[u8], among: &[PartyId]) -> Option<PartyId> {
        among
            .iter()
            .copied()
            .find(|&p| self.get(p).is_some_and(|c| c.as_ref() == cert))
    }
}

/// The TLS server name a party's certificate is issued for.
pub(crate) fn server_name(party: PartyId) -> String {
    format!("puma-party-{}", party.index())
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

fn tls_err(peer: Option<PartyId>, e: rustls::Error) -> TransportError {
    TransportError::Tls {
        peer,
        reason: e.to_string(),
    }
}

/// A client configuration that presents `me` and accepts only `peer`'s pinned certificate.
pub(crate) fn client_config(
    me: &Identity,
    pins: &Pins,
    peer: PartyId,
) -> Result<ClientConfig, TransportError> {
    let pinned = pins
        .get(peer)
        .cloned()
        .ok_or_else(|| TransportError::Local(format!("no pinned certificate for {peer}")))?;
    let mut cfg = pinned_client(peer, pinned)?
        .with_client_auth_cert(vec![me.cert.clone()], me.key.clone_key())
        .map_err(|e| tls_err(Some(peer), e))?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    Ok(cfg)
}

/// A TLS 1.3 client configuration, up to its own certificate, that accepts only `pinned`
/// as `peer`'s certificate.
fn pinned_client(
    peer: PartyId,
    pinned: CertificateDer<'static>,
) -> Result<rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>, TransportError> {
    let provider = provider();
    let verifier = Arc::new(PinnedServer {
        pinned,
        algs: provider.signature_verification_algorithms,
    });
    Ok(ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err(Some(peer), e))?
        .dangerous()
        .with_custom_certificate_verifier(verifier))
}

/// A server configuration that presents `me` and accepts only the pinned certificates of
/// `clients`.
pub(crate) fn server_config(
    me: &Identity,
    pins: &Pins,
    clients: &[PartyId],
) -> Result<ServerConfig, TransportError> {
    let allowed: Vec<CertificateDer<'static>> = clients
        .iter()
        .filter_map(|&p| pins.get(p).cloned())
        .collect();
    if allowed.len() != clients.len() {
        return Err(TransportError::Local(
            "a peer that connects to this party has no pinned certificate".into(),
        ));
    }
    let provider = provider();
    let verifier = Arc::new(PinnedClients {
        allowed,
        algs: provider.signature_verification_algorithms,
    });
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err(None, e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![me.cert.clone()], me.key.clone_key())
        .map_err(|e| tls_err(None, e))?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    Ok(cfg)
}

/// The ALPN protocol id of the service's client connections (distinct from the links
/// between parties, so that a client dialling a peer port fails at the handshake).
pub const SERVICE_ALPN: &[u8] = b"puma-serve/1";

/// A server configuration for a service's outside clients and owners: presents `me` and
/// asks for no client certificate (the client authenticates the server by its pin; who may
/// connect is the network's and the operator's choice, see SECURITY.md).
///
/// # Errors
/// [`TransportError::Tls`] if the identity's key does not fit its certificate.
pub fn service_server_config(me: &Identity) -> Result<ServerConfig, TransportError> {
    let mut cfg = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err(None, e))?
        .with_no_client_auth()
        .with_single_cert(vec![me.cert.clone()], me.key.clone_key())
        .map_err(|e| tls_err(None, e))?;
    cfg.alpn_protocols = vec![SERVICE_ALPN.to_vec()];
    Ok(cfg)
}

/// A client configuration for an outside client of server `party`: presents no
/// certificate and accepts only `pinned`, the server's certificate.
///
/// # Errors
/// [`TransportError::Tls`] if TLS 1.3 is unavailable.
pub fn service_client_config(
    party: PartyId,
    pinned: CertificateDer<'static>,
) -> Result<ClientConfig, TransportError> {
    let mut cfg = pinned_client(party, pinned)?.with_no_client_auth();
    cfg.alpn_protocols = vec![SERVICE_ALPN.to_vec()];
    Ok(cfg)
}

/// The TLS server name a client of a service asks server `party` for (its certificate
/// is pinned, so the name is not checked).
pub fn service_server_name(party: PartyId) -> ServerName<'static> {
    ServerName::try_from(server_name(party))
        .unwrap_or_else(|_| ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into()))
}

/// Accepts exactly one server certificate.
#[derive(Debug)]
struct PinnedServer {
    pinned: CertificateDer<'static>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.pinned.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// Accepts the client certificates of a fixed set of parties.
#[derive(Debug)]
struct PinnedClients {
    allowed: Vec<CertificateDer<'static>>,
    algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for PinnedClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self
            .allowed
            .iter()
            .any(|c| c.as_ref() == end_entity.as_ref())
        {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pem_round_trips_and_debug_hides_the_key() {
        let id = Identity::generate(PartyId::P1).unwrap();
        let dir = std::env::temp_dir().join(format!("puma-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, k) = (dir.join("c.pem"), dir.join("k.pem"));
        id.write_pem_files(&c, &k, true).unwrap();
        let back = Identity::from_pem_files(&c, &k).unwrap();
        assert_eq!(back.cert(), id.cert());
        assert_eq!(back.key.secret_der(), id.key.secret_der());
        assert!(!format!("{id:?}").contains(&id.key_pem()[30..60]));
        let missing = Identity::from_pem_files(&dir.join("none.pem"), &k).unwrap_err();
        assert!(missing.to_string().contains("none.pem"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn keys_are_written_private_and_open_keys_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let id = Identity::generate(PartyId::P0).unwrap();
        let dir = std::env::temp_dir().join(format!("puma-tls-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, k) = (dir.join("c.pem"), dir.join("k.pem"));
        id.write_pem_files(&c, &k, false).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&c), mode(&k)), (0o644, 0o600));
        // No silent replacement; an overwritten key is private too.
        let again = id.write_pem_files(&c, &k, false).unwrap_err();
        assert!(again.to_string().contains("c.pem exists"), "{again}");
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = Identity::from_pem_files(&c, &k).unwrap_err().to_string();
        assert!(
            open.contains("k.pem") && open.contains("0644") && open.contains("chmod 600"),
            "{open}"
        );
        id.write_pem_files(&c, &k, true).unwrap();
        assert_eq!(mode(&k), 0o600);
        Identity::from_pem_files(&c, &k).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_naming_both_files() {
        let (a, b) = (
            Identity::generate(PartyId::P0).unwrap(),
            Identity::generate(PartyId::P1).unwrap(),
        );
        let dir = std::env::temp_dir().join(format!("puma-tls-pair-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca, ka) = (dir.join("a.cert.pem"), dir.join("a.key.pem"));
        let (cb, kb) = (dir.join("b.cert.pem"), dir.join("b.key.pem"));
        a.write_pem_files(&ca, &ka, true).unwrap();
        b.write_pem_files(&cb, &kb, true).unwrap();
        let e = Identity::from_pem_files(&ca, &kb).unwrap_err().to_string();
        assert!(
            e.contains("b.key.pem") && e.contains("a.cert.pem") && e.contains("does not belong"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
