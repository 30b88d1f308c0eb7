//! Opening a connection to a master: the stream (TCP, a Unix socket, or TLS over TCP), then
//! the set-up the URL asks for (`AUTH`, `SELECT`), before the stream carries anything else.
//! The lock connections ([`Pipeline`](crate::transport::pipeline::Pipeline)) and the pub/sub
//! connection ([`PubSub`](crate::transport::pubsub::PubSub)) both start from a dialled stream,
//! so TLS, credentials and the database are handled once, for both.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::error::NodeErrorKind;
use crate::outside::Socket;
use crate::transport::endpoint::{Endpoint, Place};
use crate::transport::resp::{parse, Command, Reply};

/// An open, authenticated stream to a master.
pub(crate) enum Stream {
    Tcp(Socket),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
    #[cfg(feature = "tls")]
    Tls(Box<tokio_rustls::client::TlsStream<Socket>>),
    /// An in-memory peer, for unit tests.
    #[cfg(test)]
    Test(tokio::io::DuplexStream),
}

/// Opens a stream to `endpoint` and sets it up (`AUTH`, `SELECT`). The caller bounds the wait
/// (a peer that accepts and never answers would hold it forever).
///
/// # Errors
///
/// [`NodeErrorKind::Auth`] when the master refuses the credentials (retrying does not help),
/// [`NodeErrorKind::Connect`] for anything else.
///
/// # Cancel safety
///
/// Cancel-safe: a dropped attempt leaves no connection behind.
pub(crate) async fn dial(endpoint: &Endpoint) -> Result<Stream, NodeErrorKind> {
    let io_error = |e: io::Error| NodeErrorKind::Connect(e.to_string());
    let mut stream = match &endpoint.place {
        Place::Tcp { host, port } => Stream::Tcp(
            crate::outside::connect(host, *port)
                .await
                .map_err(io_error)?,
        ),
        #[cfg(unix)]
        Place::Unix(path) => Stream::Unix(
            tokio::net::UnixStream::connect(path)
                .await
                .map_err(io_error)?,
        ),
        #[cfg(feature = "tls")]
        Place::Tls { host, port } => {
            let socket = crate::outside::connect(host, *port)
                .await
                .map_err(io_error)?;
            Stream::Tls(Box::new(crate::transport::tls::wrap(socket, host).await?))
        }
    };
    set_up(&mut stream, endpoint).await?;
    Ok(stream)
}

/// Sends `AUTH` and `SELECT` as the URL asks, together (one round trip), and checks that each
/// answers `OK`.
async fn set_up(stream: &mut Stream, endpoint: &Endpoint) -> Result<(), NodeErrorKind> {
    let mut out = Vec::new();
    let mut contexts = Vec::new();
    if let Some(password) = &endpoint.password {
        match &endpoint.user {
            // An ACL user.
            Some(user) => {
                Command(&[&[b"AUTH", user.as_bytes(), password.as_bytes()]]).write(&mut out)
            }
            None => Command(&[&[b"AUTH", password.as_bytes()]]).write(&mut out),
        }
        contexts.push("authenticating: ");
    }
    let db = crate::transport::resp::Decimal::new(u64::from(endpoint.db));
    if endpoint.db != 0 {
        Command(&[&[b"SELECT", db.as_bytes()]]).write(&mut out);
        contexts.push("selecting the database: ");
    }
    if out.is_empty() {
        return Ok(());
    }
    let sent = async {
        stream.write_all(&out).await?;
        stream.flush().await
    };
    sent.await
        .map_err(|e| NodeErrorKind::Connect(format!("{}{e}", contexts[0])))?;
    let mut buf = Vec::new();
    for context in contexts.iter().copied() {
        match read_reply(stream, &mut buf).await {
            Ok(Reply::Status(ok)) if ok == "OK" => {}
            Ok(Reply::Error(error)) => return Err(refused_or_connect(&error, context)),
            Ok(other) => {
                return Err(NodeErrorKind::Connect(format!(
                    "{context}expected OK, got {}",
                    crate::transport::reply::shown(&other)
                )))
            }
            Err(error) => return Err(NodeErrorKind::Connect(format!("{context}{error}"))),
        }
    }
    // The connection's next reader pairs replies with its own requests: nothing may be left.
    if !buf.is_empty() {
        return Err(NodeErrorKind::Connect(
            "a reply arrived for no request during set-up".into(),
        ));
    }
    Ok(())
}

/// Reads one whole reply, keeping in `buf` whatever arrived after it.
async fn read_reply(stream: &mut Stream, buf: &mut Vec<u8>) -> Result<Reply, String> {
    let mut chunk = [0u8; 512];
    loop {
        if let Some((reply, used)) =
            parse(buf).map_err(|e| format!("not a Redis reply: {}", e.0))?
        {
            buf.drain(..used);
            return Ok(reply);
        }
        match stream.read(&mut chunk).await {
            Ok(0) => return Err("the master closed the connection".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// An error reply during set-up: refused credentials are [`NodeErrorKind::Auth`] (they do not
/// go away by retrying); anything else (`-ERR max number of clients reached`, a server still
/// loading its data) is a connect error, which may.
pub(crate) fn refused_or_connect(error: &str, context: &str) -> NodeErrorKind {
    let text = format!("{context}{error}");
    let refused = error.starts_with("NOAUTH")
        || error.starts_with("WRONGPASS")
        || error.contains("invalid password")
        || error.contains("invalid username-password")
        || error.contains("called without any password configured");
    if refused {
        NodeErrorKind::Auth(text)
    } else {
        NodeErrorKind::Connect(text)
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(unix)]
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "tls")]
            Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(test)]
            Self::Test(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(unix)]
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "tls")]
            Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(test)]
            Self::Test(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            #[cfg(unix)]
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "tls")]
            Self::Tls(s) => Pin::new(s).poll_flush(cx),
            #[cfg(test)]
            Self::Test(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(unix)]
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "tls")]
            Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(test)]
            Self::Test(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the set-up of `url` against an in-memory master that expects `request` and answers
    /// `answer`.
    async fn set_up_against(
        url: &str,
        request: &'static [u8],
        answer: &'static [u8],
    ) -> Result<(), NodeErrorKind> {
        let endpoint = Endpoint::parse(url).expect("valid");
        let (client, mut master) = tokio::io::duplex(4096);
        let serve = tokio::spawn(async move {
            let mut got = vec![0u8; request.len()];
            master.read_exact(&mut got).await.expect("read");
            assert_eq!(got, request, "{}", String::from_utf8_lossy(&got));
            master.write_all(answer).await.expect("write");
            master
        });
        let mut stream = Stream::Test(client);
        let result = set_up(&mut stream, &endpoint).await;
        drop(serve.await.expect("the master's task"));
        result
    }

    #[tokio::test]
    async fn credentials_and_database_are_sent_together_and_checked() {
        let both =
            b"*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$4\r\np@ss\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n";
        let url = "redis://app:p%40ss@h:1/3";
        assert_eq!(set_up_against(url, both, b"+OK\r\n+OK\r\n").await, Ok(()));
        match set_up_against(
            url,
            both,
            b"-WRONGPASS invalid username-password pair\r\n-NOAUTH x\r\n",
        )
        .await
        {
            Err(NodeErrorKind::Auth(text)) => {
                assert!(text.starts_with("authenticating: WRONGPASS"))
            }
            other => panic!("{other:?}"),
        }
        match set_up_against(url, both, b"+OK\r\n-ERR DB index is out of range\r\n").await {
            Err(NodeErrorKind::Connect(text)) => assert!(text.contains("selecting the database")),
            other => panic!("{other:?}"),
        }
        // A reply for no request would be paired with the connection's first request.
        match set_up_against(url, both, b"+OK\r\n+OK\r\n+OK\r\n").await {
            Err(NodeErrorKind::Connect(text)) => assert!(text.contains("no request")),
            other => panic!("{other:?}"),
        }
        let password_only = b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n";
        assert_eq!(
            set_up_against("redis://:pw@h", password_only, b"+OK\r\n").await,
            Ok(())
        );
    }
}
