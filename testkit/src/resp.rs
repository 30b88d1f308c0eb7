//! A tiny blocking RESP2 client: just enough to PING a server and run test commands. The kit
//! has its own reader rather than the library's (private) one: it does not depend on the
//! library, whose unit tests use the kit.
//!
//! It never panics on what a server sends: odd type bytes, bad lengths, missing CRLFs, deep
//! nesting and early EOF all become errors.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use super::TestingError;

/// Longest status, error or length line accepted, in bytes.
const MAX_LINE: u64 = 64 * 1024;
/// Largest bulk string accepted: Redis's own `proto-max-bulk-len` default.
const MAX_BULK: i64 = 512 * 1024 * 1024;
/// Deepest array nesting accepted; Redis replies nest two or three levels at most.
const MAX_DEPTH: usize = 32;

/// One RESP2 reply of a server, as returned by [`RedisMaster::query`](super::RedisMaster::query).
///
/// `Display` renders it as text the way [`RedisMaster::command`](super::RedisMaster::command)
/// returns it: statuses and bulk strings as their text (bulk strings lossily as UTF-8), integers
/// in decimal, a nil as `(nil)`, an error nested in an array as `(error) MESSAGE`, and an array as
/// its elements rendered one per line (an empty array renders as the empty string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A simple string, such as `OK` or `PONG`.
    Status(String),
    /// An error reply. At the top level, `query` turns it into
    /// [`TestingError::ServerError`]; it appears here only inside an array (e.g. from `EXEC`).
    Error(String),
    /// An integer reply.
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A nil bulk string or nil array (`GET` of a missing key).
    Nil,
    /// An array of replies.
    Array(Vec<Reply>),
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status(s) => f.write_str(s),
            Self::Error(e) => write!(f, "(error) {e}"),
            Self::Integer(n) => write!(f, "{n}"),
            Self::Bulk(b) => f.write_str(&String::from_utf8_lossy(b)),
            Self::Nil => f.write_str("(nil)"),
            Self::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{item}")?;
                }
                Ok(())
            }
        }
    }
}

/// Encodes a command as a RESP2 array of bulk strings.
pub(super) fn encode<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        let arg = arg.as_ref();
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Why a reply could not be read.
#[derive(Debug)]
pub(super) enum ReadError {
    /// The socket failed, timed out or closed.
    Io(io::Error),
    /// The bytes were not valid RESP2.
    Protocol(String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// Reads one complete reply.
pub(super) fn read_reply<R: BufRead>(r: &mut R) -> Result<Reply, ReadError> {
    read_nested(r, 0)
}

fn read_nested<R: BufRead>(r: &mut R, depth: usize) -> Result<Reply, ReadError> {
    let line = read_line(r)?;
    let (kind, rest) = match line.split_first() {
        Some((kind, rest)) => (*kind, rest),
        None => return Err(ReadError::Protocol("empty reply line".into())),
    };
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Reply::Status(text())),
        b'-' => Ok(Reply::Error(text())),
        b':' => parse_int(rest).map(Reply::Integer),
        b'$' => match parse_int(rest)? {
            -1 => Ok(Reply::Nil),
            len if (0..=MAX_BULK).contains(&len) => read_bulk(r, len.unsigned_abs()),
            len => Err(ReadError::Protocol(format!("bad bulk length {len}"))),
        },
        b'*' => match parse_int(rest)? {
            -1 => Ok(Reply::Nil),
            _ if depth >= MAX_DEPTH => Err(ReadError::Protocol(format!(
                "arrays nested deeper than {MAX_DEPTH}"
            ))),
            len if len >= 0 => {
                let len = len.unsigned_abs();
                // Grow as elements arrive rather than trusting the announced length.
                let mut items = Vec::with_capacity(len.min(64) as usize);
                for _ in 0..len {
                    items.push(read_nested(r, depth + 1)?);
                }
                Ok(Reply::Array(items))
            }
            len => Err(ReadError::Protocol(format!("bad array length {len}"))),
        },
        other => Err(ReadError::Protocol(format!(
            "unknown reply type byte {:?} in line {:?}",
            char::from(other),
            String::from_utf8_lossy(&line)
        ))),
    }
}

/// Reads one CRLF-terminated line and returns it without the CRLF.
fn read_line<R: BufRead>(r: &mut R) -> Result<Vec<u8>, ReadError> {
    let mut line = Vec::new();
    r.by_ref().take(MAX_LINE + 2).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        )));
    }
    if !line.ends_with(b"\r\n") {
        return Err(ReadError::Protocol(format!(
            "reply line not terminated by CRLF: {:?}",
            String::from_utf8_lossy(&line[..line.len().min(80)])
        )));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(digits: &[u8]) -> Result<i64, ReadError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ReadError::Protocol(format!(
                "expected an integer, got {:?}",
                String::from_utf8_lossy(digits)
            ))
        })
}

fn read_bulk<R: BufRead>(r: &mut R, len: u64) -> Result<Reply, ReadError> {
    let mut data = Vec::new();
    // `take` + `read_to_end` grows the buffer with the data actually received.
    let got = r.by_ref().take(len).read_to_end(&mut data)?;
    let mut crlf = [0u8; 2];
    if got as u64 != len {
        return Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("connection closed after {got} of {len} bulk bytes"),
        )));
    }
    r.read_exact(&mut crlf)?;
    if &crlf != b"\r\n" {
        return Err(ReadError::Protocol(
            "bulk string not terminated by CRLF".into(),
        ));
    }
    Ok(Reply::Bulk(data))
}

/// Runs one command on the server listening on `127.0.0.1:port`, over a connection of its
/// own whose connect, write and read each give up after `timeout`: a probe that a paused or
/// cut server cannot hold up for longer, usable from a thread that owns no
/// [`RedisMaster`](super::RedisMaster). An error reply is returned as [`Reply::Error`].
///
/// # Errors
///
/// [`TestingError::Io`] when the server cannot be reached or does not answer in time,
/// [`TestingError::UnexpectedReply`] for bytes that are not RESP.
pub fn query_port(port: u16, args: &[&str], timeout: Duration) -> Result<Reply, TestingError> {
    Conn::open(port, timeout)?.call(args)
}

/// One blocking connection to a local server, every read and write bounded by a timeout.
pub(super) struct Conn {
    stream: BufReader<TcpStream>,
    port: u16,
}

impl Conn {
    /// Connects to 127.0.0.1:`port`; `timeout` bounds the connect and every later read and write.
    pub(super) fn open(port: u16, timeout: Duration) -> Result<Self, TestingError> {
        // A zero timeout is rejected by the socket API; one millisecond is as good as zero.
        let timeout = timeout.max(Duration::from_millis(1));
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let context = || format!("connecting to {addr}");
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| TestingError::io(context(), e))?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| TestingError::io(context(), e))?;
        Ok(Self {
            stream: BufReader::new(stream),
            port,
        })
    }

    /// Sends one command and reads its reply; an error reply is returned as [`Reply::Error`].
    pub(super) fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, TestingError> {
        let name = args
            .first()
            .map(|a| String::from_utf8_lossy(a.as_ref()).into_owned())
            .unwrap_or_default();
        let port = self.port;
        self.stream
            .get_mut()
            .write_all(&encode(args))
            .map_err(|e| TestingError::io(format!("sending {name} to 127.0.0.1:{port}"), e))?;
        read_reply(&mut self.stream).map_err(|e| match e {
            ReadError::Io(e) => TestingError::io(
                format!("reading the reply to {name} from 127.0.0.1:{port}"),
                e,
            ),
            ReadError::Protocol(detail) => TestingError::UnexpectedReply { port, detail },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Reply, ReadError> {
        read_reply(&mut io::Cursor::new(bytes))
    }

    fn parses_to(bytes: &[u8], want: Reply) {
        match parse(bytes) {
            Ok(got) => assert_eq!(got, want, "input {:?}", String::from_utf8_lossy(bytes)),
            Err(e) => panic!("{:?} failed: {e:?}", String::from_utf8_lossy(bytes)),
        }
    }

    /// Commands are encoded as arrays of bulk strings, binary-safe and with empty arguments.
    #[test]
    fn encode_is_an_array_of_bulk_strings() {
        assert_eq!(
            encode(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
        assert_eq!(encode::<&str>(&[]), b"*0\r\n".to_vec());
    }

    /// Every RESP2 reply type parses, including nils and nested arrays.
    #[test]
    fn every_reply_type_parses() {
        parses_to(b"+OK\r\n", Reply::Status("OK".into()));
        parses_to(b"-ERR no\r\n", Reply::Error("ERR no".into()));
        parses_to(b":-42\r\n", Reply::Integer(-42));
        parses_to(b"$3\r\na\r\n\r\n", Reply::Bulk(b"a\r\n".to_vec()));
        parses_to(b"$0\r\n\r\n", Reply::Bulk(Vec::new()));
        parses_to(b"$-1\r\n", Reply::Nil);
        parses_to(b"*-1\r\n", Reply::Nil);
        parses_to(b"*0\r\n", Reply::Array(Vec::new()));
        parses_to(
            b"*2\r\n*1\r\n:1\r\n$1\r\nx\r\n",
            Reply::Array(vec![
                Reply::Array(vec![Reply::Integer(1)]),
                Reply::Bulk(b"x".to_vec()),
            ]),
        );
    }

    /// Odd or truncated input yields an error, never a panic or a huge allocation.
    #[test]
    fn odd_replies_are_errors() {
        let cases: &[&[u8]] = &[
            b"",
            b"\r\n",
            b"?what\r\n",
            b"+no crlf\n",
            b"+truncated",
            b":12x\r\n",
            b"$-2\r\n",
            b"$5\r\nab\r\n",
            b"$2\r\nabXY",
            b"$99999999999\r\n",
            b"*-5\r\n",
            b"*3\r\n:1\r\n",
            b"*9223372036854775807\r\n",
            b"$\xff\r\n",
        ];
        for case in cases {
            assert!(
                parse(case).is_err(),
                "{:?} parsed",
                String::from_utf8_lossy(case)
            );
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(matches!(
            parse(deep.as_bytes()),
            Err(ReadError::Protocol(_))
        ));
        let long = vec![b'+'; (MAX_LINE + 10) as usize];
        assert!(parse(&long).is_err());
    }

    /// Replies render as text the way `RedisMaster::command` documents.
    #[test]
    fn replies_render_as_text() {
        let reply = Reply::Array(vec![
            Reply::Bulk(b"a".to_vec()),
            Reply::Integer(7),
            Reply::Nil,
            Reply::Error("ERR x".into()),
            Reply::Status("OK".into()),
        ]);
        assert_eq!(reply.to_string(), "a\n7\n(nil)\n(error) ERR x\nOK");
        assert_eq!(Reply::Array(Vec::new()).to_string(), "");
        assert_eq!(Reply::Bulk(vec![0xff]).to_string(), "\u{fffd}");
    }
}
