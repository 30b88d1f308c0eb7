//! Node URLs: parsing ([`Endpoint`]), duplicate detection and redaction of secrets for display.

use std::sync::Arc;

use crate::error::ConfigError;
use crate::transport::endpoint::Endpoint;

/// A parsed master address: what a connection to it needs, and the text that names it in
/// errors and traces (with any password replaced by `***`).
#[derive(Clone)]
pub(crate) struct NodeAddress {
    pub(crate) endpoint: Arc<Endpoint>,
    pub(crate) display: String,
    /// `host:port` (or socket path) that identifies the server, for duplicate detection.
    pub(crate) identity: String,
}

impl std::fmt::Debug for NodeAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl NodeAddress {
    /// Parses one node URL without connecting.
    pub(crate) fn parse(url: &str) -> Result<Self, ConfigError> {
        let display = redact(url);
        if url.trim().is_empty() {
            return Err(ConfigError::InvalidUrl {
                url: display,
                reason: "empty URL: expected redis://host:port".into(),
            });
        }
        // The reason never quotes the URL, so it cannot let a password through.
        let endpoint = Endpoint::parse(url).map_err(|reason| ConfigError::InvalidUrl {
            url: display.clone(),
            reason,
        })?;
        let identity = endpoint.place.to_string();
        Ok(Self {
            endpoint: Arc::new(endpoint),
            display,
            identity,
        })
    }
}

/// `url` with the password (or a lone user-info part, which Redis URLs may use for the
/// password) and any `password=`/`pass=` query value replaced by `***`.
///
/// Robust to malformed input, since it runs on URLs that failed to parse: the user-info is
/// everything up to the **last** `@` (a generated password may contain unescaped `@`, `/`, `?`
/// or `#`), and it is looked for even when the scheme is missing or mistyped.
pub(crate) fn redact(url: &str) -> String {
    let start = userinfo_start(url);
    let (head, rest) = url.split_at(start);
    match rest.rfind('@') {
        Some(at) => {
            let (userinfo, host) = rest.split_at(at);
            let user = match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***"),
                None if userinfo.is_empty() => String::new(),
                None => "***".to_string(),
            };
            format!("{head}{user}{}", redact_query(host))
        }
        None => format!("{head}{}", redact_query(rest)),
    }
}

/// Where the user-info of `url` would start: after `scheme://`, after a mistyped `scheme:/`,
/// or at the very start.
fn userinfo_start(url: &str) -> usize {
    if let Some(i) = url.find("://") {
        return i + 3;
    }
    match url.split_once(':') {
        Some((scheme, after))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && after.starts_with('/') =>
        {
            url.len() - after.trim_start_matches('/').len()
        }
        _ => 0,
    }
}

/// Replaces the values of `password` and `pass` query parameters by `***`.
fn redact_query(text: &str) -> String {
    let Some(q) = text.find('?') else {
        return text.to_string();
    };
    let (path, query) = text.split_at(q + 1);
    let redacted: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _))
                if name.eq_ignore_ascii_case("password") || name.eq_ignore_ascii_case("pass") =>
            {
                format!("{name}=***")
            }
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}{}", redacted.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://user:s3cret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(
            redact("redis://:s3cret@host:6379"),
            "redis://:***@host:6379"
        );
        assert_eq!(redact("rediss://s3cret@host"), "rediss://***@host");
        assert_eq!(
            redact("redis+unix:///tmp/r.sock?db=1&pass=s3cret"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(redact("redis://127.0.0.1:7001"), "redis://127.0.0.1:7001");
        assert_eq!(redact("not a url"), "not a url");
        assert_eq!(redact("u:s3cret@host:1"), "u:***@host:1");
        assert_eq!(redact("redis:/u:s3cret@host"), "redis:/u:***@host");
        assert_eq!(redact("redis://u:s3/c?r#et@host/0"), "redis://u:***@host/0");
        assert_eq!(redact("redis://[::1]:6379/0"), "redis://[::1]:6379/0");
    }

    #[test]
    fn bad_urls_are_rejected_with_the_password_redacted() {
        for url in [
            "",
            "127.0.0.1:6379",
            "http://u:s3cret@host",
            "redis://u:s3cret@[::1",
        ] {
            match NodeAddress::parse(url) {
                Err(ConfigError::InvalidUrl { url: shown, reason }) => {
                    assert!(!shown.contains("s3cret"), "{shown}");
                    assert!(!reason.contains("s3cret"), "{reason}");
                }
                other => panic!("{url:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn identity_ignores_database_and_credentials() {
        let a = NodeAddress::parse("redis://127.0.0.1:7001/0").expect("valid");
        let b = NodeAddress::parse("redis://u:p@127.0.0.1:7001/3").expect("valid");
        assert_eq!(a.identity, b.identity);
    }
}
