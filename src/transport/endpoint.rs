//! What a node URL says: where the master listens, whether the connection is TLS, the
//! credentials and the database.
//!
//! * `redis://[user[:password]@]host[:port][/db]` (port 6379 by default, database 0);
//! * `rediss://…` likewise, over TLS (feature `tls`);
//! * `redis+unix:///path[?db=N&user=U&pass=P]`, or `unix:///path…`;
//! * `valkey://`, `valkeys://` and `valkey+unix://` as aliases.
//!
//! User and password are percent-decoded (a password with `@`, `:` or `/` is written `%40`,
//! `%3A`, `%2F`). Other query parameters are ignored.
//!
//! An error says what is wrong without quoting any part of the URL: a password with an
//! unescaped `/` or `#` ends the host part early, and would be shown as a port or a path.

use std::fmt;
#[cfg(unix)]
use std::path::PathBuf;

/// The port a URL without one means.
const DEFAULT_PORT: u16 = 6379;

/// Where a master listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    Tcp {
        host: String,
        port: u16,
    },
    /// TCP with TLS on top; `host` is also the name the certificate must carry.
    #[cfg(feature = "tls")]
    Tls {
        host: String,
        port: u16,
    },
    #[cfg(unix)]
    Unix(PathBuf),
}

/// `host:port`, or the socket's path: the server, whatever the credentials or database.
impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp { host, port } => write!(f, "{host}:{port}"),
            #[cfg(feature = "tls")]
            Self::Tls { host, port } => write!(f, "{host}:{port}"),
            #[cfg(unix)]
            Self::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A parsed node URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) place: Place,
    /// For `AUTH user password` (an ACL user); `AUTH password` without it.
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    /// For `SELECT`, when not 0.
    pub(crate) db: u32,
}

/// Never shows the password.
impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("place", &self.place.to_string())
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .finish()
    }
}

impl Endpoint {
    /// Reads `url`. The error says what is wrong, never quoting the URL (it may hold a
    /// password): the caller names the URL, redacted.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err("missing scheme: expected redis://host:port or redis+unix:///path".into());
        };
        match scheme.to_ascii_lowercase().as_str() {
            "redis" | "valkey" => tcp(rest, false),
            "rediss" | "valkeys" => tcp(rest, true),
            "redis+unix" | "unix" | "valkey+unix" => unix(rest),
            other => Err(format!(
                "unknown scheme {other}://: expected redis://, rediss:// (TLS) or redis+unix://"
            )),
        }
    }
}

/// `[user[:password]@]host[:port][/db][?query]`, after `redis://` or `rediss://`.
fn tcp(rest: &str, tls: bool) -> Result<Endpoint, String> {
    let rest = without_fragment(rest)?;
    let rest = rest.split_once('?').map_or(rest, |(before, _query)| before);
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        None => (None, None),
        Some(userinfo) => {
            let (user, password) = match userinfo.split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (userinfo, None),
            };
            let password = password.filter(|p| !p.is_empty());
            (
                non_empty(decode(user, false).map_err(|e| format!("user name {e}"))?),
                match password {
                    Some(p) => Some(decode(p, false).map_err(|e| format!("password {e}"))?),
                    None => None,
                },
            )
        }
    };
    let (host, port) = host_and_port(hostport)?;
    let db = match path.trim_matches('/') {
        "" => 0,
        db => database(db)?,
    };
    let place = if tls {
        #[cfg(feature = "tls")]
        {
            Place::Tls { host, port }
        }
        #[cfg(not(feature = "tls"))]
        return Err("rediss:// (TLS) needs quorumlock's `tls` feature".into());
    } else {
        Place::Tcp { host, port }
    };
    Ok(Endpoint {
        place,
        user,
        password,
        db,
    })
}

/// `host[:port]`, `[v6 address][:port]`.
fn host_and_port(text: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (address, after) = bracketed
            .split_once(']')
            .ok_or("unclosed [ in the IPv6 address")?;
        address
            .parse::<std::net::Ipv6Addr>()
            .map_err(|_| "not an IPv6 address between [ and ]".to_string())?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("expected :port after the IPv6 address")?,
            ),
        };
        (address, port)
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err("missing host: expected redis://host:port".into());
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "<>\\^|\"`{}[]%".contains(c))
    {
        return Err("a space or a reserved character in the host name".into());
    }
    if host == "0.0.0.0" || host == "::" {
        return Err(format!(
            "{host} is a wildcard address (listen on it, connect to a real one)"
        ));
    }
    let port = match port {
        None | Some("") => DEFAULT_PORT,
        Some(port) => port
            .parse()
            .map_err(|_| "invalid port: expected a number from 0 to 65535".to_string())?,
    };
    Ok((host.to_string(), port))
}

/// `/path[?db=N&user=U&pass=P]`, after `redis+unix://` (an empty host or `localhost`).
#[cfg(unix)]
fn unix(rest: &str) -> Result<Endpoint, String> {
    let rest = without_fragment(rest)?;
    let (before, query) = rest.split_once('?').unwrap_or((rest, ""));
    let at = before.find('/').unwrap_or(before.len());
    let (host, path) = before.split_at(at);
    if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
        return Err("a unix socket URL names no host: expected redis+unix:///path".into());
    }
    if path.is_empty() {
        return Err("missing path: expected redis+unix:///path".into());
    }
    let path = decode(path, false).map_err(|e| format!("path {e}"))?;
    let mut endpoint = Endpoint {
        place: Place::Unix(PathBuf::from(path)),
        user: None,
        password: None,
        db: 0,
    };
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "db" => endpoint.db = database(&decode(value, true)?)?,
            "user" => endpoint.user = Some(decode(value, true).map_err(|e| format!("user {e}"))?),
            "pass" => {
                endpoint.password = Some(decode(value, true).map_err(|e| format!("pass {e}"))?)
            }
            _ => {}
        }
    }
    Ok(endpoint)
}

#[cfg(not(unix))]
fn unix(_rest: &str) -> Result<Endpoint, String> {
    Err("unix sockets are not available on this platform".into())
}

/// The URL without its `#fragment`, refusing one: the only fragment Redis URLs know
/// (`#insecure`) turns certificate checks off, which quorumlock does not do.
fn without_fragment(rest: &str) -> Result<&str, String> {
    match rest.split_once('#') {
        None => Ok(rest),
        Some((_, "insecure")) => {
            Err("#insecure is not supported: certificates are always verified".into())
        }
        Some(_) => Err("unexpected #fragment (escape a # in a password as %23)".into()),
    }
}

fn database(text: &str) -> Result<u32, String> {
    text.parse()
        .map_err(|_| "invalid database: expected a number such as /0".to_string())
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// Percent-decodes `text` (and `+` as a space in a query, `in_query`) into UTF-8.
fn decode(text: &str, in_query: bool) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|hex| std::str::from_utf8(hex).ok())
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok());
                match hex {
                    Some(decoded) => {
                        out.push(decoded);
                        i += 3;
                        continue;
                    }
                    // As browsers and the `url` crate do: a `%` not followed by two hex
                    // digits stands for itself.
                    None => out.push(b'%'),
                }
            }
            b'+' if in_query => out.push(b' '),
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "is not UTF-8 once percent-decoded".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_place(host: &str, port: u16) -> Place {
        Place::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn tcp_urls_are_read() {
        let plain = Endpoint::parse("redis://10.0.0.1:7001").expect("valid");
        assert_eq!(plain.place, tcp_place("10.0.0.1", 7001));
        assert_eq!((plain.user, plain.password, plain.db), (None, None, 0));

        let full = Endpoint::parse("redis://app:p%40ss%3Aw%2Fd@db.example:7002/3?protocol=resp3")
            .expect("valid");
        assert_eq!(full.place, tcp_place("db.example", 7002));
        assert_eq!(full.user.as_deref(), Some("app"));
        assert_eq!(full.password.as_deref(), Some("p@ss:w/d"));
        assert_eq!(full.db, 3);

        let password_only = Endpoint::parse("redis://:s3cret@host").expect("valid");
        assert_eq!(password_only.place, tcp_place("host", DEFAULT_PORT));
        assert_eq!(password_only.user, None);
        assert_eq!(password_only.password.as_deref(), Some("s3cret"));

        let v6 = Endpoint::parse("REDIS://[::1]:7003/").expect("valid");
        assert_eq!(v6.place, tcp_place("::1", 7003));
        assert_eq!(v6.place.to_string(), "::1:7003");
        assert_eq!(
            Endpoint::parse("valkey://h:1").expect("valid").place,
            tcp_place("h", 1)
        );
        // A user without a password is sent nothing: `AUTH` needs a password.
        let user_only = Endpoint::parse("redis://app@h").expect("valid");
        assert_eq!(user_only.user.as_deref(), Some("app"));
        assert_eq!(user_only.password, None);
    }

    #[cfg(unix)]
    #[test]
    fn unix_urls_are_read() {
        for url in [
            "redis+unix:///tmp/r%20s.sock?db=2&user=u&pass=p+w%26",
            "unix://localhost/tmp/r%20s.sock?pass=p+w%26&db=2&user=u&protocol=2",
        ] {
            let e = Endpoint::parse(url).expect("valid");
            assert_eq!(
                e.place,
                Place::Unix(PathBuf::from("/tmp/r s.sock")),
                "{url}"
            );
            assert_eq!(e.db, 2);
            assert_eq!(e.user.as_deref(), Some("u"));
            assert_eq!(e.password.as_deref(), Some("p w&"));
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn rediss_is_tls() {
        let e = Endpoint::parse("rediss://u:p@h:6380/1").expect("valid");
        assert_eq!(
            e.place,
            Place::Tls {
                host: "h".into(),
                port: 6380
            }
        );
        assert_eq!(e.place.to_string(), "h:6380");
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_without_the_feature_names_it() {
        let reason = Endpoint::parse("rediss://h:6380").expect_err("no tls feature");
        assert!(reason.contains("`tls` feature"), "{reason}");
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, expected) in [
            ("127.0.0.1:6379", "missing scheme"),
            ("http://h:1", "unknown scheme http://"),
            ("redis://", "missing host"),
            ("redis://:6379", "missing host"),
            ("redis://u:p@", "missing host"),
            ("redis://h:notaport", "invalid port"),
            ("redis://h:65536", "invalid port"),
            ("redis://h:1/notadb", "invalid database"),
            ("redis://h:1/-1", "invalid database"),
            ("redis://[::1", "unclosed ["),
            ("redis://[nope]:1", "not an IPv6 address"),
            ("redis://[::1]x", "expected :port"),
            ("redis://0.0.0.0:1", "wildcard"),
            ("redis://[::]:1", "wildcard"),
            ("redis://h st:1", "in the host name"),
            ("rediss://h:1/#insecure", "always verified"),
            ("redis://u:p#w@h:1", "fragment"),
            ("redis://u:%FF@h", "password is not UTF-8"),
            ("redis+unix://host/tmp/s", "names no host"),
            ("redis+unix://", "missing path"),
            ("redis://u:s3/cret@h", "invalid port"),
            ("unix:///tmp/s?db=x", "invalid database"),
        ] {
            match Endpoint::parse(url) {
                Err(reason) => {
                    assert!(reason.contains(expected), "{url}: {reason}");
                    assert!(!reason.contains("s3"), "{url}: {reason}");
                }
                Ok(e) => panic!("{url} gave {e:?}"),
            }
        }
    }

    #[test]
    fn percent_signs_without_hex_digits_stand_for_themselves() {
        assert_eq!(decode("100%", false).as_deref(), Ok("100%"));
        assert_eq!(decode("%zz%4", false).as_deref(), Ok("%zz%4"));
        assert_eq!(decode("a+b", false).as_deref(), Ok("a+b"));
        assert_eq!(decode("a+b", true).as_deref(), Ok("a b"));
    }
}
