//! The connection failures no reconnect can fix: a token the broker refused, or TLS settings
//! that do not match the broker's. The worker stops with a [`ConnectError`] naming the setting to
//! change instead of reconnecting (docs/protocol.md, "TLS, mutual TLS and tokens").

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio_rustls::rustls;
use tonic::Code;

use crate::settings::{Settings, ENV_TLS, ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_SERVER_NAME, ENV_TOKEN};

/// What kind of setting is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectErrorKind {
    /// The TLS settings do not match the broker's.
    Tls,
    /// The token is missing, unknown, revoked, or not allowed what the worker asks.
    Auth,
}

/// A connection failure no reconnect can fix: what happened (`problem`), which setting to change
/// (`fix`), and the stream's status.
#[derive(Debug)]
pub struct ConnectError {
    pub kind: ConnectErrorKind,
    pub problem: String,
    pub fix: String,
    pub status: tonic::Status,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {}", self.problem, self.fix)
    }
}

impl StdError for ConnectError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.status)
    }
}

/// The status's message with every source below it, lower-cased: where the TLS library's words
/// are.
pub(crate) fn describe(status: &tonic::Status) -> String {
    let mut out = status.message().to_string();
    let mut cur: Option<&(dyn StdError + 'static)> = status.source();
    while let Some(e) = cur {
        // Errors often repeat their source in their own message: say each once.
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = e.source();
    }
    out
}

/// `status`, ending a stream that never got its Welcome, as a ConnectError when no reconnect can
/// fix it; `None` for a broker that is down, starting or restarting. When the broker closed the
/// connection without a word, a TLS handshake with it tells a TLS broker from one that went away.
pub(crate) async fn classify(status: &tonic::Status, settings: &Settings) -> Option<ConnectError> {
    let msg = describe(status);
    let err = |kind, problem: String, fix: String| Some(ConnectError { kind, problem, fix, status: status.clone() });
    match status.code() {
        Code::Unauthenticated => {
            return err(
                ConnectErrorKind::Auth,
                format!("the broker refused the token: {}", status.message()),
                format!("set {ENV_TOKEN} (Settings::token) to a token the broker issued (jobwire tokens create)"),
            )
        }
        Code::PermissionDenied => {
            return err(
                ConnectErrorKind::Auth,
                format!("the token is not allowed this: {}", status.message()),
                "use a token whose role and scope cover it (jobwire tokens create --role worker --types ...)".into(),
            )
        }
        Code::Unavailable | Code::Unknown | Code::Internal => {}
        _ => return None,
    }
    let low = msg.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| low.contains(w));
    let tls = settings.tls.as_ref();
    let client_cert = tls.is_some_and(|t| t.cert.is_some());
    let client_cert_error = |cert: bool| {
        if cert {
            err(
                ConnectErrorKind::Tls,
                format!("the broker refused this worker's client certificate ({msg})"),
                "use a client certificate signed by the CA the broker trusts (its --tls-client-ca), and not expired".into(),
            )
        } else {
            err(
                ConnectErrorKind::Tls,
                "the broker requires a client certificate (mutual TLS) and none was given".into(),
                format!("set {ENV_TLS_CERT} and {ENV_TLS_KEY} to a certificate signed by the CA the broker trusts"),
            )
        }
    };
    if tls.is_some() {
        if has(&["corrupt message", "invalidcontenttype", "wrong version number", "record overflow"]) {
            return err(
                ConnectErrorKind::Tls,
                "this worker connected with TLS but the broker does not serve TLS".into(),
                format!("start the broker with --tls-cert and --tls-key, or connect without TLS (unset {ENV_TLS}, {ENV_TLS_CA}, {ENV_TLS_CERT} and {ENV_TLS_KEY})"),
            );
        }
        if has(&["notvalidforname", "not valid for name"]) {
            return err(
                ConnectErrorKind::Tls,
                format!("the broker's certificate does not name the address dialled ({msg})"),
                format!("connect by a name the certificate holds, or set {ENV_TLS_SERVER_NAME} to one"),
            );
        }
        if has(&["invalid peer certificate", "unknownissuer", "certificate verify failed"]) {
            return err(
                ConnectErrorKind::Tls,
                format!("the broker's certificate is not signed by a CA this worker trusts ({msg})"),
                format!("set {ENV_TLS_CA} to the CA certificate that signed the broker's certificate"),
            );
        }
        if has(&["certificaterequired", "certificate required", "badcertificate", "bad certificate", "unknownca", "unknown ca"]) {
            return client_cert_error(client_cert);
        }
    }
    if has(&["connection refused", "dns error", "failed to lookup", "name resolution"]) {
        return None; // nothing listens there (yet): a broker that is starting
    }
    let probe = probe_tls(&settings.address, tls.is_some() && !client_cert).await;
    match (tls.is_some(), probe) {
        (false, Some(_)) => err(
            ConnectErrorKind::Tls,
            "the broker serves TLS and this worker connected without it".into(),
            format!("set {ENV_TLS_CA} to the CA of the broker's certificate, or {ENV_TLS}=true if the system trusts it"),
        ),
        (true, Some(Probe::CertificateRequired)) if !client_cert => client_cert_error(false),
        _ => None,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Probe {
    Tls,
    CertificateRequired,
}

const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether `address` answers a TLS handshake made without a client certificate. With `verdict`
/// it also waits for the server's first bytes and answers CertificateRequired when the server
/// ends the connection instead (with TLS 1.3 a refused client certificate arrives after the
/// handshake). Nothing is sent once the handshake is done.
async fn probe_tls(address: &str, verdict: bool) -> Option<Probe> {
    let (host, _) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let name = rustls::pki_types::ServerName::try_from(host).ok()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let run = async {
        let tcp = tokio::net::TcpStream::connect(address).await.ok()?;
        let mut stream = match connector.connect(name, tcp).await {
            Ok(s) => s,
            Err(e) => {
                let low = e.to_string().to_lowercase();
                return (low.contains("certificaterequired") || low.contains("handshakefailure"))
                    .then_some(Probe::CertificateRequired);
            }
        };
        if !verdict {
            return Some(Probe::Tls);
        }
        let mut buf = [0u8; 1];
        match tokio::time::timeout(PROBE_TIMEOUT, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => Some(Probe::Tls),
            Ok(_) => Some(Probe::CertificateRequired),
            Err(_) => Some(Probe::Tls),
        }
    };
    tokio::time::timeout(PROBE_TIMEOUT * 2, run).await.ok().flatten()
}

/// Accepts any certificate: the probe only asks whether the broker speaks TLS, and sends nothing.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Tls;

    #[tokio::test]
    async fn tokens_and_tls_mismatches_stop_the_worker() {
        let plain = Settings::default();
        let tls = Settings { tls: Some(Tls { ca: Some("ca.pem".into()), ..Tls::default() }), ..Settings::default() };
        let cases = [
            ("unknown token", Code::Unauthenticated, "invalid token", &plain, Some(ConnectErrorKind::Auth), ENV_TOKEN),
            ("scope", Code::PermissionDenied, "not allowed", &plain, Some(ConnectErrorKind::Auth), "--role worker"),
            ("unknown CA", Code::Unavailable, "invalid peer certificate: UnknownIssuer", &tls, Some(ConnectErrorKind::Tls), ENV_TLS_CA),
            ("plaintext broker", Code::Unavailable, "received corrupt message of type InvalidContentType", &tls, Some(ConnectErrorKind::Tls), "--tls-cert"),
            ("mutual TLS", Code::Unavailable, "received fatal alert: CertificateRequired", &tls, Some(ConnectErrorKind::Tls), ENV_TLS_CERT),
            ("refused connection", Code::Unavailable, "tcp connect error: Connection refused (os error 111)", &plain, None, ""),
            ("broker shutting down", Code::Unavailable, "connection refused", &tls, None, ""),
            ("bad hello", Code::InvalidArgument, "capacity", &plain, None, ""),
        ];
        for (name, code, msg, settings, want, fix) in cases {
            let got = classify(&tonic::Status::new(code, msg), settings).await;
            assert_eq!(got.as_ref().map(|e| e.kind), want, "{name}: {got:?}");
            if let Some(e) = got {
                assert!(e.to_string().contains(fix), "{name}: {e}");
            }
        }
    }
}
