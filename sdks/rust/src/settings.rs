//! Where the broker is and how to reach it: the address, an API token and TLS, from code or from
//! the environment variables every Jobwire client reads (docs/security.md, "Connecting from the
//! environment").

use std::collections::HashMap;
use std::path::PathBuf;

use crate::Error;

/// The environment variables the settings are read from, as the jobwire command and the Go,
/// Python and Node.js libraries read them.
pub const ENV_ADDR: &str = "JOBWIRE_ADDR";
pub const ENV_TOKEN: &str = "JOBWIRE_TOKEN";
pub const ENV_TLS: &str = "JOBWIRE_TLS";
pub const ENV_TLS_CA: &str = "JOBWIRE_TLS_CA";
pub const ENV_TLS_CERT: &str = "JOBWIRE_TLS_CERT";
pub const ENV_TLS_KEY: &str = "JOBWIRE_TLS_KEY";
pub const ENV_TLS_SERVER_NAME: &str = "JOBWIRE_TLS_SERVER_NAME";

/// The broker's address when none is given.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:7070";

/// TLS settings: files of PEM, read when the worker is built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// CA certificates to trust for the broker's certificate; `None` trusts the system's CAs.
    pub ca: Option<PathBuf>,
    /// A client certificate and its key, for a broker that requires one (mutual TLS).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The name to check the broker's certificate against, when the address is not one it holds.
    pub server_name: Option<String>,
}

/// Connection settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// host:port of the broker.
    pub address: String,
    /// API token for a broker with auth on, sent as `authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Connect over TLS; `None` is plaintext (h2c).
    pub tls: Option<Tls>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { address: DEFAULT_ADDRESS.to_string(), token: None, tls: None }
    }
}

impl Settings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Self {
        Self::from_vars(&std::env::vars().collect())
    }

    /// Reads the settings from `vars`: unset or empty variables leave the defaults. Any TLS
    /// file or server name, or `JOBWIRE_TLS=true`, turns TLS on.
    pub fn from_vars(vars: &HashMap<String, String>) -> Self {
        let get = |k: &str| vars.get(k).filter(|v| !v.is_empty()).cloned();
        let tls = Tls {
            ca: get(ENV_TLS_CA).map(PathBuf::from),
            cert: get(ENV_TLS_CERT).map(PathBuf::from),
            key: get(ENV_TLS_KEY).map(PathBuf::from),
            server_name: get(ENV_TLS_SERVER_NAME),
        };
        let on = get(ENV_TLS).as_deref() == Some("true") || tls != Tls::default();
        Settings {
            address: get(ENV_ADDR).unwrap_or_else(|| DEFAULT_ADDRESS.to_string()),
            token: get(ENV_TOKEN),
            tls: on.then_some(tls),
        }
    }

    /// Checks the settings and reads the TLS files. An error names the setting to fix.
    pub(crate) fn endpoint(&self) -> Result<tonic::transport::Endpoint, Error> {
        if let Some(t) = &self.token {
            if t.is_empty() || t.chars().any(char::is_whitespace) {
                return Err(Error::Config(format!(
                    "the token ({ENV_TOKEN}) is empty or holds white space; give it exactly as it was printed"
                )));
            }
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut ep = tonic::transport::Endpoint::from_shared(format!("{scheme}://{}", self.address))
            .map_err(|e| Error::Config(format!("the broker address {:?} ({ENV_ADDR}) is not host:port: {e}", self.address)))?
            .tcp_nodelay(true)
            // hyper's adaptive flow-control window (BDP pings) is left off: against the broker
            // it cut a 20,000-job drain from 3,760 to 366-381 jobs/s in interleaved runs.
            .http2_keep_alive_interval(std::time::Duration::from_secs(30))
            .keep_alive_while_idle(true);
        if let Some(tls) = &self.tls {
            let mut cfg = tonic::transport::ClientTlsConfig::new();
            match &tls.ca {
                Some(ca) => cfg = cfg.ca_certificate(tonic::transport::Certificate::from_pem(read(ca, ENV_TLS_CA)?)),
                None => cfg = cfg.with_native_roots(),
            }
            match (&tls.cert, &tls.key) {
                (Some(c), Some(k)) => {
                    cfg = cfg.identity(tonic::transport::Identity::from_pem(read(c, ENV_TLS_CERT)?, read(k, ENV_TLS_KEY)?))
                }
                (None, None) => {}
                _ => {
                    return Err(Error::Config(format!(
                        "{ENV_TLS_CERT} and {ENV_TLS_KEY} go together: set both or neither"
                    )))
                }
            }
            if let Some(name) = &tls.server_name {
                cfg = cfg.domain_name(name.clone());
            }
            ep = ep.tls_config(cfg).map_err(|e| Error::Config(format!("the TLS settings cannot be used: {e}")))?;
        }
        Ok(ep)
    }
}

fn read(path: &PathBuf, var: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Config(format!("cannot read {} ({var}): {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn reads_the_variables_every_client_reads() {
        let cases = [
            ("nothing set", vars(&[]), Settings::default()),
            (
                "address and token",
                vars(&[(ENV_ADDR, "broker:7070"), (ENV_TOKEN, "jw_1_secret")]),
                Settings { address: "broker:7070".into(), token: Some("jw_1_secret".into()), tls: None },
            ),
            (
                "JOBWIRE_TLS=true trusts the system",
                vars(&[(ENV_TLS, "true")]),
                Settings { tls: Some(Tls::default()), ..Settings::default() },
            ),
            ("JOBWIRE_TLS=false and empty values", vars(&[(ENV_TLS, "false"), (ENV_TLS_CA, "")]), Settings::default()),
            (
                "files imply TLS",
                vars(&[(ENV_TLS_CA, "ca.pem"), (ENV_TLS_CERT, "c.pem"), (ENV_TLS_KEY, "k.pem"), (ENV_TLS_SERVER_NAME, "broker")]),
                Settings {
                    tls: Some(Tls {
                        ca: Some("ca.pem".into()),
                        cert: Some("c.pem".into()),
                        key: Some("k.pem".into()),
                        server_name: Some("broker".into()),
                    }),
                    ..Settings::default()
                },
            ),
        ];
        for (name, v, want) in cases {
            assert_eq!(Settings::from_vars(&v), want, "{name}");
        }
    }

    #[test]
    fn bad_settings_name_what_to_fix() {
        let cases = [
            ("token with a space", vars(&[(ENV_TOKEN, "jw 1")]), ENV_TOKEN),
            ("cert without key", vars(&[(ENV_TLS_CERT, "/dev/null")]), ENV_TLS_KEY),
            ("missing CA file", vars(&[(ENV_TLS_CA, "/nonexistent/ca.pem")]), ENV_TLS_CA),
        ];
        for (name, v, want) in cases {
            let err = Settings::from_vars(&v).endpoint().unwrap_err().to_string();
            assert!(err.contains(want), "{name}: {err}");
        }
    }
}
