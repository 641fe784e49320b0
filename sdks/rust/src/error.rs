//! How a handler's failure reaches the broker: FATAL (a code or payload bug, straight to the
//! dead-letter queue) or TRANSIENT (retried with the broker's backoff), with the real type name,
//! the message and details, and an optional retry-after.

use std::any::{Any, TypeId};
use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// What a failed attempt asks of the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A code or payload bug: retrying cannot help, the job goes to the dead-letter queue at once.
    Fatal,
    /// A passing condition: the broker retries with backoff until the job's attempts run out.
    Transient,
}

/// The failure of one attempt, as a handler returns it.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into it, so `?` works in a handler;
/// the conversion classifies by the error's type (see [`JobError::new`]). To say it yourself, use
/// [`JobError::fatal`] or [`JobError::transient`], and [`JobError::retry_after`] to ask for a
/// specific wait.
///
/// It deliberately does not implement `std::error::Error`: that is what lets every error convert
/// into it with `?`.
pub struct JobError {
    kind: Kind,
    error_type: String,
    message: String,
    details: String,
    retry_after: Option<Duration>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

/// The error types that mean a bug in the handler or its payload, FATAL by default: a payload
/// that does not decode as JSON or as UTF-8, or a number that does not parse. A handler panic is
/// fatal too. Everything else is TRANSIENT.
fn fatal_by_default(t: TypeId) -> bool {
    [
        TypeId::of::<serde_json::Error>(),
        TypeId::of::<std::str::Utf8Error>(),
        TypeId::of::<std::string::FromUtf8Error>(),
        TypeId::of::<std::num::ParseIntError>(),
        TypeId::of::<std::num::ParseFloatError>(),
    ]
    .contains(&t)
}

impl JobError {
    /// A failure classified by `err`'s type: fatal for the payload-bug types listed in the
    /// crate's documentation (`serde_json::Error` from a payload that does not decode,
    /// `Utf8Error`, `FromUtf8Error`, `ParseIntError`, `ParseFloatError`), transient otherwise.
    /// An `std::io::Error` of kind `Unsupported` or `InvalidData` is fatal too. The error type the
    /// broker records is the Rust type name, e.g. `std::io::error::Error`.
    pub fn new<E: StdError + Send + Sync + 'static>(err: E) -> Self {
        let mut fatal = fatal_by_default(TypeId::of::<E>());
        if let Some(io) = (&err as &dyn Any).downcast_ref::<std::io::Error>() {
            fatal = matches!(io.kind(), std::io::ErrorKind::Unsupported | std::io::ErrorKind::InvalidData);
        }
        let kind = if fatal { Kind::Fatal } else { Kind::Transient };
        Self::with_kind(kind, std::any::type_name::<E>().to_string(), Box::new(err))
    }

    /// A fatal failure: the job goes to the dead-letter queue without further attempts. `err`
    /// may be any error, a `String` or a `&str`.
    pub fn fatal(err: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        let err = err.into();
        Self::with_kind(Kind::Fatal, dyn_type_name(&*err), err)
    }

    /// A transient failure: the broker retries it with backoff.
    pub fn transient(err: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        let err = err.into();
        Self::with_kind(Kind::Transient, dyn_type_name(&*err), err)
    }

    fn with_kind(kind: Kind, error_type: String, err: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        JobError { kind, error_type, message: err.to_string(), details: chain(&*err), retry_after: None, source: Some(err) }
    }

    /// Makes the failure transient and asks the broker to retry after `after` instead of its
    /// computed backoff (still capped by its maximum delay), e.g. when a dependency answered
    /// "429, retry in 30 s".
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.kind = Kind::Transient;
        self.retry_after = Some(after);
        self
    }

    /// Makes the failure fatal, keeping its type name: `JobError::new(err).into_fatal()`.
    pub fn into_fatal(mut self) -> Self {
        self.kind = Kind::Fatal;
        self.retry_after = None;
        self
    }

    /// Makes the failure transient, keeping its type name.
    pub fn into_transient(mut self) -> Self {
        self.kind = Kind::Transient;
        self
    }

    /// Replaces the error type the broker records (the broker's always-fatal list matches it).
    pub fn with_error_type(mut self, error_type: impl Into<String>) -> Self {
        self.error_type = error_type.into();
        self
    }

    /// Replaces the details the broker records (by default the error's chain of sources).
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    pub(crate) fn panic(message: String) -> Self {
        JobError {
            kind: Kind::Fatal,
            error_type: "panic".into(),
            details: String::new(),
            message,
            retry_after: None,
            source: None,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }
    pub fn error_type(&self) -> &str {
        &self.error_type
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    pub fn details(&self) -> &str {
        &self.details
    }
    pub fn retry_after_duration(&self) -> Option<Duration> {
        self.retry_after
    }
    /// The error this failure was made from, if any.
    pub fn source(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl<E: StdError + Send + Sync + 'static> From<E> for JobError {
    fn from(err: E) -> Self {
        JobError::new(err)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("kind", &self.kind)
            .field("error_type", &self.error_type)
            .field("message", &self.message)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}: {}", self.kind, self.error_type, self.message)
    }
}

/// The type name of a boxed error: a message given as a string has none of its own, so it is
/// "error", as in the Go library; a few well-known types are recognised by downcasting.
fn dyn_type_name(err: &(dyn StdError + Send + Sync + 'static)) -> String {
    macro_rules! known {
        ($($t:ty),*) => {$(
            if err.is::<$t>() {
                return std::any::type_name::<$t>().to_string();
            }
        )*};
    }
    known!(std::io::Error, serde_json::Error, std::str::Utf8Error, std::string::FromUtf8Error,
        std::num::ParseIntError, std::num::ParseFloatError, tokio::time::error::Elapsed);
    "error".to_string()
}

/// The error and its sources, one per line: Rust errors carry no stack trace, and the chain is
/// what explains them.
fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        out.push_str("\ncaused by: ");
        out.push_str(&e.to_string());
        cur = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Dependency;
    impl fmt::Display for Dependency {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the dependency is down")
        }
    }
    impl StdError for Dependency {}

    fn bad_json() -> serde_json::Error {
        serde_json::from_str::<serde_json::Value>("{").unwrap_err()
    }

    #[test]
    fn errors_are_classified_by_their_type() {
        let cases: Vec<(&str, JobError, Kind, &str)> = vec![
            ("json syntax", bad_json().into(), Kind::Fatal, "serde_json::error::Error"),
            ("utf-8", String::from_utf8(vec![0xff]).unwrap_err().into(), Kind::Fatal, "alloc::string::FromUtf8Error"),
            ("str utf-8", std::str::from_utf8(&[0xff]).unwrap_err().into(), Kind::Fatal, "core::str::error::Utf8Error"),
            ("parse int", "x".parse::<i64>().unwrap_err().into(), Kind::Fatal, "core::num::error::ParseIntError"),
            ("parse float", "x".parse::<f64>().unwrap_err().into(), Kind::Fatal, "core::num::dec2flt::ParseFloatError"),
            ("io invalid data", std::io::Error::from(std::io::ErrorKind::InvalidData).into(), Kind::Fatal, "std::io::error::Error"),
            ("io unsupported", std::io::Error::from(std::io::ErrorKind::Unsupported).into(), Kind::Fatal, "std::io::error::Error"),
            ("io refused", std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(), Kind::Transient, "std::io::error::Error"),
            ("own error", Dependency.into(), Kind::Transient, "jobwire::error::tests::Dependency"),
            ("explicit fatal", JobError::fatal("no recipient"), Kind::Fatal, "error"),
            ("explicit transient of a payload error", JobError::transient(bad_json()), Kind::Transient, "serde_json::error::Error"),
            ("explicit fatal of a boxed own error", JobError::fatal(Box::new(Dependency) as Box<dyn StdError + Send + Sync>), Kind::Fatal, "error"),
            ("into_fatal keeps the type", JobError::new(Dependency).into_fatal(), Kind::Fatal, "jobwire::error::tests::Dependency"),
            ("retry-after makes transient", JobError::fatal("busy").retry_after(Duration::from_secs(3)), Kind::Transient, "error"),
        ];
        for (name, err, kind, typ) in cases {
            assert_eq!(err.kind(), kind, "{name}");
            assert_eq!(err.error_type(), typ, "{name}");
        }
    }

    #[test]
    fn question_mark_converts_and_keeps_the_message() {
        fn handler() -> Result<(), JobError> {
            Err(Dependency)?;
            Ok(())
        }
        let err = handler().unwrap_err();
        assert_eq!(err.message(), "the dependency is down");
        assert_eq!(err.kind(), Kind::Transient);
        assert!(err.retry_after_duration().is_none());
    }

    #[test]
    fn details_list_the_sources() {
        let inner = std::io::Error::other(Dependency);
        let err = JobError::transient(inner);
        assert!(err.details().contains("the dependency is down"), "{}", err.details());
    }
}
