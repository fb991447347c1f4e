//! One error type for the whole program, with the classification controllers need.

use std::fmt;
use std::time::Duration;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The API server answered with a non-2xx status (body decoded from a `Status` when possible).
    Api {
        code: u16,
        reason: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// Connection, TLS or timeout failure: nothing was learned from the server.
    Transport(String),
    /// A body could not be decoded.
    Decode(String),
    /// Bad configuration (flags, kubeconfig, files): fatal at start-up.
    Config(String),
    /// Local I/O.
    Io(String),
    /// The operation was cancelled (shutdown).
    Cancelled,
}

impl Error {
    pub fn api(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Error::Api {
            code,
            reason: reason.to_string(),
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn config(msg: impl Into<String>) -> Self {
        Error::Config(msg.into())
    }
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }
    fn reason(&self) -> &str {
        match self {
            Error::Api { reason, .. } => reason,
            _ => "",
        }
    }
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }
    /// 409 because of a stale resourceVersion or a failed precondition (not AlreadyExists).
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409) && self.reason() != "AlreadyExists"
    }
    pub fn is_already_exists(&self) -> bool {
        self.code() == Some(409) && self.reason() == "AlreadyExists"
    }
    /// 410 Expired / Gone: the resourceVersion is too old; re-list.
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410) || matches!(self.reason(), "Expired" | "Gone")
    }
    /// The server's cache has not reached the resourceVersion asked for (504 Timeout "Too
    /// large resource version", as after an apiserver restart): client-go's
    /// `isTooLargeResourceVersionError`, read from the message as it does for servers that
    /// send no cause.
    pub fn is_resource_version_too_large(&self) -> bool {
        match self {
            Error::Api { code, message, .. } => {
                *code == 504 && message.contains("Too large resource version")
            }
            _ => false,
        }
    }
    pub fn is_unauthorized(&self) -> bool {
        self.code() == Some(401)
    }
    pub fn is_forbidden(&self) -> bool {
        self.code() == Some(403)
    }
    pub fn is_too_many_requests(&self) -> bool {
        self.code() == Some(429)
    }
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
    /// The text of the error as upstream prints it (a `Status` error is its message).
    pub fn message(&self) -> String {
        match self {
            Error::Api { message, .. } if !message.is_empty() => message.clone(),
            other => other.to_string(),
        }
    }
    /// 403 for a create in a namespace being deleted (upstream's `NamespaceTerminating`
    /// cause): the write will never succeed, and nothing needs retrying.
    pub fn is_namespace_terminating(&self) -> bool {
        match self {
            Error::Api { code, message, .. } => {
                *code == 403 && message.contains("because it is being terminated")
            }
            _ => false,
        }
    }
    /// Worth retrying the same request: transport failures, 429, 5xx.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) => true,
            Error::Api { code, .. } => *code == 429 || *code >= 500,
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api {
                code,
                reason,
                message,
                ..
            } => {
                if reason.is_empty() {
                    write!(f, "server answered {code}: {message}")
                } else {
                    write!(f, "server answered {code} {reason}: {message}")
                }
            }
            Error::Transport(m) => write!(f, "transport error: {m}"),
            Error::Decode(m) => write!(f, "decode error: {m}"),
            Error::Config(m) => write!(f, "{m}"),
            Error::Io(m) => write!(f, "i/o error: {m}"),
            Error::Cancelled => write!(f, "cancelled"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Decode(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert!(Error::api(404, "NotFound", "x").is_not_found());
        assert!(Error::api(409, "Conflict", "x").is_conflict());
        assert!(!Error::api(409, "AlreadyExists", "x").is_conflict());
        assert!(Error::api(409, "AlreadyExists", "x").is_already_exists());
        assert!(Error::api(410, "Expired", "x").is_gone());
        assert!(Error::api(500, "", "x").is_transient());
        assert!(Error::api(429, "TooManyRequests", "x").is_transient());
        assert!(!Error::api(403, "Forbidden", "x").is_transient());
        assert!(Error::Transport("eof".into()).is_transient());
    }
}
