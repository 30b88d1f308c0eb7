//! A tiny blocking RESP2 client: just enough to PING a server and run test commands, with the
//! library's own encoder and parser ([`crate::transport::resp`]).
//!
//! It never panics on what a server sends: odd type bytes, bad lengths, missing CRLFs, deep
//! nesting and early EOF all become errors.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use super::TestingError;

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

/// Encodes a command as a RESP2 array of bulk strings (the library's own encoder).
pub(super) fn encode<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let parts: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
    let mut out = Vec::new();
    crate::transport::resp::Command(&[&parts]).write(&mut out);
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

/// Reads one complete reply with the library's own parser: bytes from `r` are added to
/// `buf` until it holds a whole reply, which is taken off its front.
pub(super) fn read_reply<R: Read>(r: &mut R, buf: &mut Vec<u8>) -> Result<Reply, ReadError> {
    let mut chunk = [0u8; 4096];
    loop {
        match crate::transport::resp::parse(buf) {
            Ok(Some((reply, used))) => {
                buf.drain(..used);
                return Ok(Reply::from(reply));
            }
            Ok(None) => {}
            Err(crate::transport::resp::ProtocolError(detail)) => {
                return Err(ReadError::Protocol(detail))
            }
        }
        let n = r.read(&mut chunk)?;
        if n == 0 {
            return Err(ReadError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a whole reply",
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

impl From<crate::transport::resp::Reply> for Reply {
    fn from(reply: crate::transport::resp::Reply) -> Self {
        use crate::transport::resp::Reply as Wire;
        match reply {
            Wire::Status(s) => Self::Status(s),
            Wire::Error(e) => Self::Error(e),
            Wire::Int(n) => Self::Integer(n),
            Wire::Bulk(b) => Self::Bulk(b),
            Wire::Nil => Self::Nil,
            Wire::Array(items) => Self::Array(items.into_iter().map(Self::from).collect()),
        }
    }
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
    stream: TcpStream,
    /// Bytes read but not yet parsed.
    buf: Vec<u8>,
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
            stream,
            buf: Vec::new(),
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
            .write_all(&encode(args))
            .map_err(|e| TestingError::io(format!("sending {name} to 127.0.0.1:{port}"), e))?;
        read_reply(&mut self.stream, &mut self.buf).map_err(|e| match e {
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
        read_reply(&mut io::Cursor::new(bytes), &mut Vec::new())
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
        let deep = "*1\r\n".repeat(crate::transport::resp::MAX_DEPTH + 1) + ":1\r\n";
        assert!(matches!(
            parse(deep.as_bytes()),
            Err(ReadError::Protocol(_))
        ));
        let long = vec![b'+'; 100 * 1024];
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
