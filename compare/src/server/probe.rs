//! Synchronous probes of a server's state over loopback TCP: an HTTP/1.0 request (etcd's
//! `/health` and status) and a ZooKeeper four-letter word (`srvr`). Errors are plain strings:
//! they end up in a readiness error's "last probe".

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// Sends one HTTP/1.0 request to `127.0.0.1:port` and returns the body of a 200 answer.
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Result<String, String> {
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = exchange(port, request.as_bytes(), timeout)?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP header in {answer:?}"))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        return Err(format!("{method} {path} answered {status:?}: {body}"));
    }
    Ok(body.to_owned())
}

/// Sends a ZooKeeper four-letter word and returns the answer.
pub(crate) fn four_letter(port: u16, word: &str, timeout: Duration) -> Result<String, String> {
    exchange(port, word.as_bytes(), timeout)
}

/// Writes `request`, reads until the server closes.
fn exchange(port: u16, request: &[u8], timeout: Duration) -> Result<String, String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream.write_all(request).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream
        .take(1 << 20)
        .read_to_end(&mut answer)
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}
