//! A pub/sub connection to a master (RESP2): `SUBSCRIBE` and `UNSUBSCRIBE` written on a
//! dialled stream, and what the master pushes read back as [`Event`]s.
//!
//! The [`Pipeline`](crate::transport::pipeline::Pipeline) cannot carry it: on a subscribed
//! connection replies are no longer one per request (a `SUBSCRIBE` of n channels is confirmed
//! n times, and a message arrives whenever someone publishes). One task owns the connection,
//! so it needs no sharing: it writes its commands and reads the events itself.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::NodeErrorKind;
use crate::transport::dial::{dial, Stream};
use crate::transport::endpoint::Endpoint;
use crate::transport::reply::shown;
use crate::transport::resp::{parse, Command, Reply};

/// Bytes read per `read` call: events are small (a channel name and a SHA1).
const READ_CHUNK: usize = 4096;

/// What the master pushed on a subscribed connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A `PUBLISH` on a subscribed channel.
    Message { channel: Vec<u8>, payload: Vec<u8> },
    /// A `SUBSCRIBE` confirmed, for one channel.
    Subscribed,
    /// An `UNSUBSCRIBE` confirmed, for one channel.
    Unsubscribed,
}

/// One pub/sub connection.
pub(crate) struct PubSub {
    stream: Stream,
    /// What arrived and is not an event yet (the start of one).
    buf: Vec<u8>,
}

impl PubSub {
    /// Opens a pub/sub connection to `endpoint` (see [`dial`]); the caller bounds the wait.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped attempt leaves no connection behind.
    pub(crate) async fn open(endpoint: &Endpoint) -> Result<Self, NodeErrorKind> {
        Ok(Self::new(dial(endpoint).await?))
    }

    /// A pub/sub connection over a stream that was already set up.
    pub(crate) fn new(stream: Stream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes `SUBSCRIBE` of `subscribe` then `UNSUBSCRIBE` of `unsubscribe` (either left out
    /// when empty), in one write. The master confirms each channel with one [`Event`], in order.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped call may have written part of a command. Drop the connection
    /// then.
    pub(crate) async fn send(
        &mut self,
        subscribe: &[&str],
        unsubscribe: &[&str],
    ) -> Result<(), NodeErrorKind> {
        let mut out = Vec::new();
        for (verb, channels) in [
            (&b"SUBSCRIBE"[..], subscribe),
            (b"UNSUBSCRIBE", unsubscribe),
        ] {
            if !channels.is_empty() {
                let names: Vec<&[u8]> = channels.iter().map(|c| c.as_bytes()).collect();
                Command(&[&[verb], &names]).write(&mut out);
            }
        }
        let lost = |e: std::io::Error| NodeErrorKind::ConnectionLost(format!("write failed: {e}"));
        self.stream.write_all(&out).await.map_err(lost)?;
        self.stream.flush().await.map_err(lost)
    }

    /// The next event the master pushed.
    ///
    /// # Errors
    ///
    /// The connection broke, the master refused a command (an error reply), or sent something
    /// that is no pub/sub event: in each case drop the connection.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: whatever was read is kept for the next call.
    pub(crate) async fn next(&mut self) -> Result<Event, NodeErrorKind> {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            let parsed = parse(&self.buf).map_err(|e| {
                NodeErrorKind::UnexpectedReply(format!("not a Redis reply: {}", e.0))
            })?;
            if let Some((reply, used)) = parsed {
                self.buf.drain(..used);
                return event(reply);
            }
            match self.stream.read(&mut chunk).await {
                Ok(0) => {
                    return Err(NodeErrorKind::ConnectionLost(
                        "the master closed the connection".into(),
                    ))
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(NodeErrorKind::ConnectionLost(format!("read failed: {e}"))),
            }
        }
    }
}

/// Reads a pushed reply: `message`, `subscribe` or `unsubscribe`, each an array of three.
fn event(reply: Reply) -> Result<Event, NodeErrorKind> {
    let unexpected = |reply: &Reply| {
        NodeErrorKind::UnexpectedReply(format!("expected a pub/sub event, got {}", shown(reply)))
    };
    let Reply::Array(items) = reply else {
        return Err(match reply {
            Reply::Error(error) => NodeErrorKind::Server(error),
            other => unexpected(&other),
        });
    };
    match items.as_slice() {
        [Reply::Bulk(kind), Reply::Bulk(channel), Reply::Bulk(payload)] if kind == b"message" => {
            Ok(Event::Message {
                channel: channel.clone(),
                payload: payload.clone(),
            })
        }
        [Reply::Bulk(kind), Reply::Bulk(_), Reply::Int(_)] if kind == b"subscribe" => {
            Ok(Event::Subscribed)
        }
        // The channel is nil when nothing was subscribed.
        [Reply::Bulk(kind), Reply::Bulk(_) | Reply::Nil, Reply::Int(_)]
            if kind == b"unsubscribe" =>
        {
            Ok(Event::Unsubscribed)
        }
        _ => Err(unexpected(&Reply::Array(items))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Reply {
        Reply::Bulk(text.as_bytes().to_vec())
    }

    #[test]
    fn events_are_read_strictly() {
        assert_eq!(
            event(Reply::Array(vec![bulk("message"), bulk("ch"), bulk("sha")])),
            Ok(Event::Message {
                channel: b"ch".to_vec(),
                payload: b"sha".to_vec()
            })
        );
        assert_eq!(
            event(Reply::Array(vec![
                bulk("subscribe"),
                bulk("ch"),
                Reply::Int(1)
            ])),
            Ok(Event::Subscribed)
        );
        assert_eq!(
            event(Reply::Array(vec![
                bulk("unsubscribe"),
                Reply::Nil,
                Reply::Int(0)
            ])),
            Ok(Event::Unsubscribed)
        );
        assert_eq!(
            event(Reply::Error("NOPERM no channel".into())),
            Err(NodeErrorKind::Server("NOPERM no channel".into()))
        );
        for other in [
            Reply::Status("OK".into()),
            Reply::Array(vec![bulk("message"), bulk("ch")]),
            Reply::Array(vec![bulk("pmessage"), bulk("p"), bulk("ch"), bulk("x")]),
            Reply::Array(vec![bulk("subscribe"), bulk("ch"), bulk("1")]),
        ] {
            assert!(
                matches!(event(other.clone()), Err(NodeErrorKind::UnexpectedReply(_))),
                "{other:?}"
            );
        }
    }

    /// Subscribes, hears a message, unsubscribes, over an in-memory stream that answers as a
    /// master does; events cut anywhere by the reads are put back together.
    #[tokio::test]
    async fn a_subscription_round_trip() {
        let (client, mut server) = tokio::io::duplex(7);
        let mut pubsub = PubSub::new(Stream::Test(client));
        let master = tokio::spawn(async move {
            let expected: &[u8] = b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$1\r\nb\r\n\
                *2\r\n$11\r\nUNSUBSCRIBE\r\n$1\r\nc\r\n";
            let mut got = vec![0u8; expected.len()];
            server.read_exact(&mut got).await.expect("read");
            assert_eq!(got, expected);
            server
                .write_all(
                    b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
                      *3\r\n$7\r\nmessage\r\n$1\r\na\r\n$3\r\nsha\r\n\
                      *3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n\
                      *3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:2\r\n",
                )
                .await
                .expect("write");
            server
        });
        pubsub.send(&["a", "b"], &["c"]).await.expect("send");
        assert_eq!(pubsub.next().await, Ok(Event::Subscribed));
        assert_eq!(
            pubsub.next().await,
            Ok(Event::Message {
                channel: b"a".to_vec(),
                payload: b"sha".to_vec()
            })
        );
        assert_eq!(pubsub.next().await, Ok(Event::Subscribed));
        assert_eq!(pubsub.next().await, Ok(Event::Unsubscribed));
        drop(master.await.expect("the master's task"));
        assert!(matches!(
            pubsub.next().await,
            Err(NodeErrorKind::ConnectionLost(_))
        ));
    }
}
