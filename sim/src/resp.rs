//! Reading the wire: requests as a master reads them (arrays of bulk strings, or an inline
//! line) and replies as a client reads them (every [`Frame`] type), incrementally and without
//! ever panicking on what a peer sends.

use crate::frame::Frame;

/// The bytes are not RESP: the connection cannot be read further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// How deep replies may nest before the reader refuses them.
const MAX_DEPTH: usize = 16;
/// The largest bulk string or array accepted, as Redis's default `proto-max-bulk-len`.
const MAX_LEN: usize = 512 * 1024 * 1024;

/// A request's arguments (its name first) and how many bytes it took.
pub type Request = (Vec<Vec<u8>>, usize);

/// Parses one request from the start of `buf`: its arguments and how many bytes it took,
/// `None` while only part of it has arrived. An empty inline line gives no arguments.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, ProtocolError> {
    let Some(first) = buf.first() else {
        return Ok(None);
    };
    if *first != b'*' {
        let Some(end) = find_crlf(buf, 0).or_else(|| buf.iter().position(|b| *b == b'\n')) else {
            return Ok(None);
        };
        let consumed = if buf.get(end) == Some(&b'\r') {
            end + 2
        } else {
            end + 1
        };
        let args = buf[..end]
            .split(|b| b.is_ascii_whitespace())
            .filter(|word| !word.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        return Ok(Some((args, consumed)));
    }
    let Some((count, mut at)) = header(buf, 0)? else {
        return Ok(None);
    };
    let count = length(count, "multibulk length")?;
    let mut args = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let Some(kind) = buf.get(at) else {
            return Ok(None);
        };
        if *kind != b'$' {
            return Err(ProtocolError(format!(
                "Protocol error: expected '$', got '{}'",
                char::from(*kind)
            )));
        }
        let Some((len, next)) = header(buf, at)? else {
            return Ok(None);
        };
        let len = length(len, "bulk length")?;
        let Some(end) = next.checked_add(len) else {
            return Err(ProtocolError("Protocol error: invalid bulk length".into()));
        };
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtocolError("Protocol error: bulk without CRLF".into()));
        }
        args.push(buf[next..end].to_vec());
        at = end + 2;
    }
    Ok(Some((args, at)))
}

/// Parses one reply from the start of `buf`: the frame and how many bytes it took, `None`
/// while only part of it has arrived.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Frame, usize)>, ProtocolError> {
    let mut at = 0;
    Ok(reply(buf, &mut at, 0)?.map(|frame| (frame, at)))
}

fn reply(buf: &[u8], at: &mut usize, depth: usize) -> Result<Option<Frame>, ProtocolError> {
    if depth > MAX_DEPTH {
        return Err(ProtocolError("reply nested too deep".into()));
    }
    let Some(end) = find_crlf(buf, *at) else {
        return Ok(None);
    };
    let kind = buf[*at];
    let body = &buf[*at + 1..end];
    let text = || String::from_utf8_lossy(body).into_owned();
    let number = || -> Result<i64, ProtocolError> {
        std::str::from_utf8(body)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ProtocolError(format!("not a number: {:?}", text())))
    };
    let next = end + 2;
    let frame = match kind {
        b'+' => Frame::Status(text()),
        b'-' => Frame::Error(text()),
        b':' => Frame::Int(number()?),
        b'_' => Frame::Nil,
        b'$' => {
            let n = number()?;
            if n < 0 {
                Frame::Nil
            } else {
                let len = length(n, "bulk length")?;
                if buf.len() < next + len + 2 {
                    return Ok(None);
                }
                *at = next + len + 2;
                return Ok(Some(Frame::Bulk(buf[next..next + len].to_vec())));
            }
        }
        b'*' | b'>' | b'%' => {
            let n = number()?;
            if n < 0 {
                *at = next;
                return Ok(Some(Frame::Nil));
            }
            let per_entry = if kind == b'%' { 2 } else { 1 };
            let count = length(n, "aggregate length")? * per_entry;
            *at = next;
            let mut items = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                match reply(buf, at, depth + 1)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            return Ok(Some(match kind {
                b'*' => Frame::Array(items),
                b'>' => Frame::Push(items),
                _ => {
                    let mut pairs = Vec::with_capacity(items.len() / 2);
                    let mut items = items.into_iter();
                    while let (Some(k), Some(v)) = (items.next(), items.next()) {
                        pairs.push((k, v));
                    }
                    Frame::Map(pairs)
                }
            }));
        }
        other => {
            return Err(ProtocolError(format!(
                "unknown reply type {:?}",
                char::from(other)
            )))
        }
    };
    *at = next;
    Ok(Some(frame))
}

/// The number after a `*` or `$` at `at`, and where the line after it starts.
fn header(buf: &[u8], at: usize) -> Result<Option<(i64, usize)>, ProtocolError> {
    let Some(end) = find_crlf(buf, at) else {
        return Ok(None);
    };
    let n = std::str::from_utf8(&buf[at + 1..end])
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ProtocolError("Protocol error: invalid length".into()))?;
    Ok(Some((n, end + 2)))
}

fn length(n: i64, what: &str) -> Result<usize, ProtocolError> {
    usize::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_LEN)
        .ok_or_else(|| ProtocolError(format!("Protocol error: invalid {what}")))
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    rest.windows(2)
        .position(|w| w == b"\r\n")
        .map(|offset| from + offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_whole_or_not_at_all() {
        let bytes = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        for cut in 0..bytes.len() {
            assert_eq!(parse_request(&bytes[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(
            parse_request(bytes),
            Ok(Some((vec![b"GET".to_vec(), b"k".to_vec()], bytes.len())))
        );
        assert_eq!(
            parse_request(b"PING  x\r\nrest"),
            Ok(Some((vec![b"PING".to_vec(), b"x".to_vec()], 9)))
        );
        assert!(parse_request(b"*1\r\n:3\r\n").is_err());
        assert!(parse_request(b"*-5\r\n").is_err());
    }

    #[test]
    fn replies_of_every_type_are_read() {
        let bytes = b"*4\r\n+OK\r\n:-3\r\n$-1\r\n%1\r\n$1\r\na\r\n_\r\n";
        let expected = Frame::Array(vec![
            Frame::Status("OK".into()),
            Frame::Int(-3),
            Frame::Nil,
            Frame::Map(vec![(Frame::bulk("a"), Frame::Nil)]),
        ]);
        assert_eq!(parse_reply(bytes), Ok(Some((expected, bytes.len()))));
        assert_eq!(parse_reply(&bytes[..bytes.len() - 1]), Ok(None));
        assert!(parse_reply(b"?x\r\n").is_err());
    }
}
