//! The Redis wire protocol (RESP2) as quorumlock's own pipelined connection speaks it:
//! commands written straight into the connection's buffer from borrowed arguments (no
//! allocation per request), replies parsed incrementally, strictly, without ever panicking on
//! what a peer sends (the pipeline must tell "not all of the reply has arrived yet" from "this
//! is not Redis").

/// A command as its arguments, name first, given in segments so that a script call can put
/// its fixed head, its keys and its arguments side by side without collecting them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Command<'a>(pub(crate) &'a [&'a [&'a [u8]]]);

impl Command<'_> {
    fn args(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().flat_map(|segment| segment.iter().copied())
    }

    /// Appends the command to `out` as a RESP array of bulk strings.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        let count: usize = self.0.iter().map(|segment| segment.len()).sum();
        header(out, b'*', count);
        for arg in self.args() {
            header(out, b'$', arg.len());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// `*3\r\n` or `$5\r\n`.
fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    match n {
        // Lock commands' lengths are short: skip the general conversion for them.
        0..=9 => out.push(b'0' + n as u8),
        10..=99 => out.extend_from_slice(&[b'0' + (n / 10) as u8, b'0' + (n % 10) as u8]),
        _ => out.extend_from_slice(Decimal::new(u64::try_from(n).unwrap_or(u64::MAX)).as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
}

/// A number as decimal text, for commands and headers, without allocating.
pub(crate) struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    pub(crate) fn new(n: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            // `n % 10` is a single digit: the cast cannot truncate.
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Self { digits, start: at }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// One reply from a master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK` and other status replies.
    Status(String),
    /// `-ERR ...`: the server refused the command (the connection is fine).
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` followed by n bytes.
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`.
    Nil,
    /// `*n` followed by n replies.
    Array(Vec<Reply>),
}

/// The bytes are not a Redis reply: every later reply on the connection would be misread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProtocolError(pub(crate) String);

/// How deep arrays may nest (a lock script returns a flat array; this only stops a hostile peer
/// from exhausting the stack).
pub(crate) const MAX_DEPTH: usize = 8;
/// The largest bulk string or array accepted (lock replies are tiny; this stops a hostile peer
/// from making the client reserve gigabytes).
const MAX_LEN: usize = 64 * 1024 * 1024;

/// Parses one reply from the start of `buf`: the reply and how many bytes it took, `None` if
/// `buf` holds only part of it so far.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, ProtocolError> {
    let mut cursor = 0;
    match reply(buf, &mut cursor, 0)? {
        Some(reply) => Ok(Some((reply, cursor))),
        None => Ok(None),
    }
}

fn reply(buf: &[u8], at: &mut usize, depth: usize) -> Result<Option<Reply>, ProtocolError> {
    let Some(line) = line(buf, *at)? else {
        return Ok(None);
    };
    let (kind, text) = match line.text.split_first() {
        Some((kind, text)) => (*kind, text),
        None => {
            return Err(ProtocolError(
                "empty line where a reply was expected".into(),
            ))
        }
    };
    let after_line = line.next;
    let parsed = match kind {
        b'+' => Reply::Status(utf8(text)?),
        b'-' => Reply::Error(utf8(text)?),
        b':' => Reply::Int(integer(text)?),
        b'$' => {
            let len = integer(text)?;
            if len == -1 {
                *at = after_line;
                return Ok(Some(Reply::Nil));
            }
            let len = length(len)?;
            let end = after_line + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string not terminated by CRLF".into()));
            }
            *at = end + 2;
            return Ok(Some(Reply::Bulk(buf[after_line..end].to_vec())));
        }
        b'*' => {
            let len = integer(text)?;
            if len == -1 {
                *at = after_line;
                return Ok(Some(Reply::Nil));
            }
            if depth >= MAX_DEPTH {
                return Err(ProtocolError(format!(
                    "arrays nested deeper than {MAX_DEPTH}"
                )));
            }
            let len = length(len)?;
            let mut cursor = after_line;
            // Never trust the announced length for the allocation: grow with what arrives.
            let mut items = Vec::with_capacity(len.min(16));
            for _ in 0..len {
                match reply(buf, &mut cursor, depth + 1)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            *at = cursor;
            return Ok(Some(Reply::Array(items)));
        }
        other => {
            return Err(ProtocolError(format!(
                "unknown reply type byte 0x{other:02x} (not a RESP2 reply)"
            )))
        }
    };
    *at = after_line;
    Ok(Some(parsed))
}

struct Line<'a> {
    text: &'a [u8],
    /// Where the next line starts.
    next: usize,
}

/// The line starting at `start`, without its CRLF; `None` if its end has not arrived.
fn line(buf: &[u8], start: usize) -> Result<Option<Line<'_>>, ProtocolError> {
    let rest = buf.get(start..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'\n') {
        Some(nl) if nl > 0 && rest[nl - 1] == b'\r' => Ok(Some(Line {
            text: &rest[..nl - 1],
            next: start + nl + 1,
        })),
        Some(_) => Err(ProtocolError("line not terminated by CRLF".into())),
        // A status line longer than any lock reply, still without its end: not Redis.
        None if rest.len() > 64 * 1024 => Err(ProtocolError("line longer than 64 KiB".into())),
        None => Ok(None),
    }
}

fn utf8(text: &[u8]) -> Result<String, ProtocolError> {
    String::from_utf8(text.to_vec()).map_err(|_| ProtocolError("status line is not UTF-8".into()))
}

fn integer(text: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ProtocolError(format!(
                "expected an integer, got {:?}",
                String::from_utf8_lossy(&text[..text.len().min(40)])
            ))
        })
}

fn length(len: i64) -> Result<usize, ProtocolError> {
    usize::try_from(len)
        .ok()
        .filter(|&len| len <= MAX_LEN)
        .ok_or_else(|| ProtocolError(format!("length {len} out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn whole(bytes: &[u8]) -> Reply {
        let (reply, used) = parse(bytes).expect("valid").expect("complete");
        assert_eq!(used, bytes.len());
        reply
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        let ttl = Decimal::new(10_000);
        Command(&[&[b"SET", b"k", b"v\r\n"], &[b"PX", ttl.as_bytes()]]).write(&mut out);
        assert_eq!(
            out,
            b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n$2\r\nPX\r\n$5\r\n10000\r\n"
        );
        assert_eq!(Decimal::new(0).as_bytes(), b"0");
        for n in [0, 9, 10, 99, 100, 12345] {
            let mut out = Vec::new();
            header(&mut out, b'$', n);
            assert_eq!(out, format!("${n}\r\n").as_bytes());
        }
        assert_eq!(
            Decimal::new(u64::MAX).as_bytes(),
            u64::MAX.to_string().as_bytes()
        );
        // The same bytes as the reference client (the `redis` crate, a dev-dependency) packs.
        let mut cmd = redis::cmd("SET");
        cmd.arg("k").arg("v\r\n").arg("PX").arg(10_000);
        assert_eq!(cmd.get_packed_command(), out);
    }

    #[test]
    fn every_reply_type_parses() {
        assert_eq!(whole(b"+OK\r\n"), Reply::Status("OK".into()));
        assert_eq!(
            whole(b"-WRONGTYPE Operation against a key\r\n"),
            Reply::Error("WRONGTYPE Operation against a key".into())
        );
        assert_eq!(whole(b":-12\r\n"), Reply::Int(-12));
        assert_eq!(whole(b"$3\r\na\r\n\r\n"), Reply::Bulk(b"a\r\n".to_vec()));
        assert_eq!(whole(b"$0\r\n\r\n"), Reply::Bulk(Vec::new()));
        assert_eq!(whole(b"$-1\r\n"), Reply::Nil);
        assert_eq!(whole(b"*-1\r\n"), Reply::Nil);
        assert_eq!(
            whole(b"*3\r\n:1\r\n:7\r\n*1\r\n$1\r\nx\r\n"),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(7),
                Reply::Array(vec![Reply::Bulk(b"x".to_vec())])
            ])
        );
    }

    #[test]
    fn garbage_is_a_protocol_error_not_a_panic() {
        for bad in [
            &b"HTTP/1.1 400 Bad Request\r\n"[..],
            b"\r\n",
            b":12x\r\n",
            b"$5\r\nabcdefg\r\n",
            b"+OK\n",
            b"$99999999999\r\n",
            b"*-5\r\n:1\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            // Only `-1` is a nil length; any other negative one is refused.
            match parse(bad) {
                Err(ProtocolError(_)) => {}
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bad)),
            }
        }
    }

    fn reply_strategy() -> impl Strategy<Value = Reply> {
        let leaf = prop_oneof![
            "[a-zA-Z ]{0,20}".prop_map(Reply::Status),
            "[A-Z]{1,10} [a-z ]{0,20}".prop_map(Reply::Error),
            any::<i64>().prop_map(Reply::Int),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Reply::Bulk),
            Just(Reply::Nil),
        ];
        leaf.prop_recursive(3, 24, 5, |inner| {
            proptest::collection::vec(inner, 0..5).prop_map(Reply::Array)
        })
    }

    fn encode(reply: &Reply, out: &mut Vec<u8>) {
        match reply {
            Reply::Status(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Reply::Error(s) => out.extend_from_slice(format!("-{s}\r\n").as_bytes()),
            Reply::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Reply::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    encode(item, out);
                }
            }
        }
    }

    proptest! {
        /// A stream of replies, cut anywhere, parses back to the same replies: a prefix is
        /// "incomplete", never an error or a wrong reply.
        #[test]
        fn replies_survive_any_split(
            replies in proptest::collection::vec(reply_strategy(), 1..6),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut bytes = Vec::new();
            for reply in &replies {
                encode(reply, &mut bytes);
            }
            let cut = cut.index(bytes.len() + 1);
            let mut parsed = Vec::new();
            let mut at = 0;
            while let Some((reply, used)) = parse(&bytes[at..cut]).expect("prefix is valid") {
                parsed.push(reply);
                at += used;
            }
            while let Some((reply, used)) = parse(&bytes[at..]).expect("valid") {
                parsed.push(reply);
                at += used;
            }
            prop_assert_eq!(at, bytes.len());
            prop_assert_eq!(parsed, replies);
        }

        /// Arbitrary bytes never panic the parser.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
        }
    }
}
