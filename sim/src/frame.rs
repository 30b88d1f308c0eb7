//! One reply of a master, as the simulated master builds it and as the conformance test reads
//! it back from either master: the RESP2 types, plus the RESP3 ones a `HELLO 3` client sees.

/// A reply (or a pushed pub/sub message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `+OK`.
    Status(String),
    /// `-ERR ...`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` and n bytes.
    Bulk(Vec<u8>),
    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    Nil,
    /// `*n` and n replies.
    Array(Vec<Frame>),
    /// A RESP3 map (`%n`); a flat array of keys and values in RESP2.
    Map(Vec<(Frame, Frame)>),
    /// A pub/sub message or (un)subscription confirmation: `>n` in RESP3, `*n` in RESP2.
    Push(Vec<Frame>),
}

/// The protocol a connection speaks: RESP2 until `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2, every connection's start.
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

impl Frame {
    /// A bulk string of `text`.
    pub fn bulk(text: impl AsRef<[u8]>) -> Self {
        Self::Bulk(text.as_ref().to_vec())
    }

    /// `+OK`.
    pub fn ok() -> Self {
        Self::Status("OK".into())
    }

    /// An error reply; `text` starts with its code (`ERR`, `WRONGTYPE`, ...).
    pub fn error(text: impl Into<String>) -> Self {
        Self::Error(text.into())
    }

    /// Appends the frame to `out` as `protocol` writes it.
    pub fn write(&self, protocol: Protocol, out: &mut Vec<u8>) {
        let resp3 = protocol == Protocol::Resp3;
        match self {
            Self::Status(s) => line(out, b'+', s.as_bytes()),
            // A reply line cannot hold a line break: Redis turns them into spaces too.
            Self::Error(e) => line(out, b'-', e.replace(['\r', '\n'], " ").as_bytes()),
            Self::Int(n) => line(out, b':', n.to_string().as_bytes()),
            Self::Bulk(bytes) => {
                line(out, b'$', bytes.len().to_string().as_bytes());
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            Self::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
            Self::Nil => out.extend_from_slice(b"$-1\r\n"),
            Self::Array(items) => items_of(out, b'*', items, protocol),
            Self::Push(items) => items_of(out, if resp3 { b'>' } else { b'*' }, items, protocol),
            Self::Map(pairs) => {
                let (kind, count) = if resp3 {
                    (b'%', pairs.len())
                } else {
                    (b'*', pairs.len() * 2)
                };
                line(out, kind, count.to_string().as_bytes());
                for (key, value) in pairs {
                    key.write(protocol, out);
                    value.write(protocol, out);
                }
            }
        }
    }
}

fn line(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.push(kind);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

fn items_of(out: &mut Vec<u8>, kind: u8, items: &[Frame], protocol: Protocol) {
    line(out, kind, items.len().to_string().as_bytes());
    for item in items {
        item.write(protocol, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(frame: &Frame, protocol: Protocol) -> Vec<u8> {
        let mut out = Vec::new();
        frame.write(protocol, &mut out);
        out
    }

    #[test]
    fn nil_and_maps_follow_the_protocol() {
        assert_eq!(bytes(&Frame::Nil, Protocol::Resp2), b"$-1\r\n");
        assert_eq!(bytes(&Frame::Nil, Protocol::Resp3), b"_\r\n");
        let map = Frame::Map(vec![(Frame::bulk("a"), Frame::Int(1))]);
        assert_eq!(bytes(&map, Protocol::Resp2), b"*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(bytes(&map, Protocol::Resp3), b"%1\r\n$1\r\na\r\n:1\r\n");
        let push = Frame::Push(vec![Frame::bulk("message")]);
        assert_eq!(bytes(&push, Protocol::Resp3), b">1\r\n$7\r\nmessage\r\n");
    }

    #[test]
    fn errors_stay_on_one_line() {
        assert_eq!(
            bytes(&Frame::error("ERR a\r\nb"), Protocol::Resp2),
            b"-ERR a  b\r\n"
        );
    }
}
