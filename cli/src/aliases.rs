//! Refuses one master listed under two names (`127.0.0.1` and `localhost`, a host name and its
//! address): it would count twice towards a quorum, so that one real master could grant a lock
//! alone. The library refuses a URL listed twice verbatim; only resolving the names tells the
//! other aliases apart.

use std::net::{SocketAddr, ToSocketAddrs};

/// The port a URL without one means.
const DEFAULT_PORT: u16 = 6379;

/// An error naming two URLs (passwords redacted by `redact`) that reach the same address.
/// Names that do not resolve are left to the connections to report.
pub(crate) fn check(urls: &[&str], redact: impl Fn(&str) -> String) -> Result<(), String> {
    let mut seen: Vec<(&str, Vec<SocketAddr>)> = Vec::new();
    for &url in urls {
        let Some(addresses) = address(url).and_then(|a| a.to_socket_addrs().ok()) else {
            continue;
        };
        let addresses: Vec<SocketAddr> = addresses.collect();
        if let Some((other, _)) = seen
            .iter()
            .find(|(_, known)| known.iter().any(|a| addresses.contains(a)))
        {
            return Err(format!(
                "nodes {:?} and {:?} are the same master (same address): each master must be \
                 listed once, or it counts twice towards a quorum",
                redact(other),
                redact(url)
            ));
        }
        seen.push((url, addresses));
    }
    Ok(())
}

/// `host:port` of a `redis://` or `rediss://` URL (the default port if none), `None` for any
/// other form.
fn address(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() {
        return None;
    }
    let has_port = match host_port.rfind(']') {
        Some(end) => host_port[end..].contains(':'),
        None => host_port.contains(':'),
    };
    Some(if has_port {
        host_port.to_string()
    } else {
        format!("{host_port}:{DEFAULT_PORT}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_of_a_url() {
        assert_eq!(address("redis://h:1").as_deref(), Some("h:1"));
        assert_eq!(address("redis://u:p@w@h/0").as_deref(), Some("h:6379"));
        assert_eq!(address("rediss://[::1]:7?x=1").as_deref(), Some("[::1]:7"));
        assert_eq!(address("redis://[::1]").as_deref(), Some("[::1]:6379"));
        assert_eq!(address("localhost"), None);
    }
}
