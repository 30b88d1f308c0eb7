//! The pipeline against a scripted fake Redis at the other end of an in-memory stream: replies
//! paired with requests in order, abandoned requests, delivery after the `Pipeline` is dropped,
//! and every way the connection can break.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufStream, DuplexStream};
use tokio::time::{timeout, Instant};

use super::*;

/// Room in each direction of the in-memory stream: more than any test has in flight at once,
/// except where a test says otherwise.
const ROOM: usize = 64 * 1024;

/// The test's end of the connection: reads requests and writes replies, as Redis would.
struct FakeRedis {
    stream: BufReader<DuplexStream>,
}

impl FakeRedis {
    /// Reads one request as its arguments; `None` once the pipeline closed the connection.
    async fn request(&mut self) -> Option<Vec<Vec<u8>>> {
        let count = self.header(b'*').await?;
        let mut args = Vec::with_capacity(count);
        for _ in 0..count {
            let len = self.header(b'$').await.expect("a bulk string header");
            let mut arg = vec![0; len + 2];
            self.stream
                .read_exact(&mut arg)
                .await
                .expect("a bulk string");
            assert_eq!(arg.split_off(len), b"\r\n", "bulk string not ended by CRLF");
            args.push(arg);
        }
        Some(args)
    }

    /// Reads a `*3\r\n` or `$5\r\n` line; `None` at the end of the stream.
    async fn header(&mut self, kind: u8) -> Option<usize> {
        let mut line = Vec::new();
        let read = self.stream.read_until(b'\n', &mut line).await;
        if read.expect("read a request") == 0 {
            return None;
        }
        let number = line
            .strip_prefix(&[kind])
            .and_then(|rest| rest.strip_suffix(b"\r\n"))
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| digits.parse().ok());
        Some(number.unwrap_or_else(|| panic!("not a RESP header: {line:?}")))
    }

    async fn reply(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write a reply");
    }

    /// Reads one `ECHO arg` request and answers it with `arg`.
    async fn echo_back(&mut self) {
        let request = self.request().await.expect("a request");
        assert_eq!(request.len(), 2, "not an ECHO: {request:?}");
        self.reply(&bulk(&request[1])).await;
    }
}

/// Starts a pipeline on one end of an in-memory stream with `room` bytes of buffer each way;
/// the test plays Redis on the other end.
fn connect(room: usize) -> (Pipeline, FakeRedis) {
    let (client, server) = tokio::io::duplex(room);
    let redis = FakeRedis {
        stream: BufReader::new(server),
    };
    (Pipeline::start(client), redis)
}

/// Queues `ECHO arg`.
fn send(pipeline: &Pipeline, arg: &str) -> oneshot::Receiver<Reply> {
    pipeline
        .send(Command(&[&[b"ECHO", arg.as_bytes()]]))
        .expect("queued")
}

/// Sends `ECHO arg` and waits for its reply.
async fn query(pipeline: &Pipeline, arg: &str) -> Result<Reply, NodeErrorKind> {
    pipeline.query(Command(&[&[b"ECHO", arg.as_bytes()]])).await
}

/// `ECHO arg` as the fake reads it.
fn echo(arg: &str) -> Vec<Vec<u8>> {
    vec![b"ECHO".to_vec(), arg.as_bytes().to_vec()]
}

/// The reply to `ECHO arg`, as the pipeline hands it out.
fn echoed(arg: &str) -> Reply {
    Reply::Bulk(arg.as_bytes().to_vec())
}

/// `data` as a RESP bulk string.
fn bulk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// Many tasks querying at once, on several threads, each get the reply to their own request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_are_paired_with_requests_in_order() {
    const TASKS: usize = 8;
    const QUERIES: usize = 50;
    let (pipeline, mut redis) = connect(ROOM);
    let pipeline = Arc::new(pipeline);
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let pipeline = Arc::clone(&pipeline);
            tokio::spawn(async move {
                let mut wrong = Vec::new();
                for i in 0..QUERIES {
                    let arg = format!("{task}/{i}");
                    let reply = query(&pipeline, &arg).await;
                    if reply != Ok(echoed(&arg)) {
                        wrong.push((arg, reply));
                    }
                }
                wrong
            })
        })
        .collect();
    // Each task has one request in flight at a time: answer a round of one per task in a single
    // write, so that several replies arrive in one read.
    for _ in 0..QUERIES {
        let mut replies = Vec::new();
        for _ in 0..TASKS {
            let request = redis.request().await.expect("a request");
            replies.extend(bulk(&request[1]));
        }
        redis.reply(&replies).await;
    }
    for task in tasks {
        assert_eq!(task.await.expect("task"), []);
    }
}

/// Requests whose receivers are dropped, before or after they are written, still reach the
/// master in order; their replies are read and discarded, and every other request gets its own.
#[tokio::test]
async fn abandoned_requests_are_sent_and_their_replies_discarded() {
    let (pipeline, mut redis) = connect(ROOM);
    drop(send(&pipeline, "a"));
    let b = send(&pipeline, "b");
    let c = send(&pipeline, "c");
    drop(send(&pipeline, "d"));
    for arg in ["a", "b", "c", "d"] {
        assert_eq!(redis.request().await, Some(echo(arg)));
    }
    // Abandoned once on the wire, its reply still to come.
    drop(c);
    for arg in ["a", "b", "c", "d"] {
        redis.reply(&bulk(arg.as_bytes())).await;
    }
    assert_eq!(b.await, Ok(echoed("b")));
    let (e, ()) = tokio::join!(query(&pipeline, "e"), redis.echo_back());
    assert_eq!(e, Ok(echoed("e")));
}

/// Dropping the pipeline before its task even ran still delivers every queued request (the
/// cleanup guarantee the lock relies on) and hands kept receivers their replies; the connection
/// stays open until the last reply, and closes then, not at the end of the grace.
#[tokio::test(start_paused = true)]
async fn dropped_pipeline_delivers_what_is_queued_then_closes() {
    let (pipeline, mut redis) = connect(ROOM);
    let a = send(&pipeline, "a");
    drop(send(&pipeline, "b"));
    let c = send(&pipeline, "c");
    drop(pipeline);
    let dropped = Instant::now();
    for arg in ["a", "b", "c"] {
        assert_eq!(redis.request().await, Some(echo(arg)));
    }
    redis.reply(&bulk(b"a")).await;
    redis.reply(&bulk(b"b")).await;
    let early = timeout(SHUTDOWN_GRACE / 2, redis.request()).await;
    assert!(early.is_err(), "closed with a reply outstanding: {early:?}");
    redis.reply(&bulk(b"c")).await;
    assert_eq!(redis.request().await, None);
    assert!(dropped.elapsed() < SHUTDOWN_GRACE);
    assert_eq!(a.await, Ok(echoed("a")));
    assert_eq!(c.await, Ok(echoed("c")));
}

/// A dropped pipeline whose master never answers gives up after `SHUTDOWN_GRACE`: the
/// connection closes and waiting receivers close without a reply.
#[tokio::test(start_paused = true)]
async fn dropped_pipeline_gives_up_after_the_grace() {
    let (pipeline, mut redis) = connect(ROOM);
    let a = send(&pipeline, "a");
    drop(pipeline);
    let dropped = Instant::now();
    assert_eq!(redis.request().await, Some(echo("a")));
    let closed = timeout(2 * SHUTDOWN_GRACE, redis.request()).await;
    assert_eq!(closed, Ok(None), "still open long after the grace");
    assert!(
        dropped.elapsed() >= SHUTDOWN_GRACE,
        "{:?}",
        dropped.elapsed()
    );
    assert!(a.await.is_err());
}

/// A master that closes the connection, even halfway through a reply, fails every waiting
/// request with `ConnectionLost`; later requests fail at once with the same error.
#[tokio::test]
async fn closed_connection_fails_waiting_and_later_requests() {
    let (pipeline, mut redis) = connect(ROOM);
    let (a, b, ()) = tokio::join!(query(&pipeline, "a"), query(&pipeline, "b"), async move {
        assert_eq!(redis.request().await, Some(echo("a")));
        assert_eq!(redis.request().await, Some(echo("b")));
        redis.reply(b"$1\r\n").await;
        // `redis` is dropped here: the connection closes.
    });
    assert!(matches!(a, Err(NodeErrorKind::ConnectionLost(_))), "{a:?}");
    assert_eq!(b, a);
    let later = pipeline.send(Command(&[&[b"ECHO", b"c"]]));
    assert_eq!(later.err(), a.err());
}

/// A master that closes an idle connection makes the next request fail at once with
/// `ConnectionLost`, rather than queue it on a connection that is gone.
#[tokio::test(start_paused = true)]
async fn closed_idle_connection_fails_the_next_request() {
    let (pipeline, redis) = connect(ROOM);
    drop(redis);
    // On the paused clock, time only moves once every task is idle: the pipeline's task has
    // seen the close by then.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let next = pipeline.send(Command(&[&[b"ECHO", b"a"]]));
    assert!(
        matches!(next, Err(NodeErrorKind::ConnectionLost(_))),
        "{next:?}"
    );
}

/// A peer that does not speak RESP fails every waiting request with `UnexpectedReply`, the
/// pipeline closes the connection, and later requests fail at once.
#[tokio::test]
async fn garbage_fails_waiting_requests_as_unexpected_reply() {
    let (pipeline, mut redis) = connect(ROOM);
    let (a, b, ()) = tokio::join!(query(&pipeline, "a"), query(&pipeline, "b"), async {
        assert_eq!(redis.request().await, Some(echo("a")));
        assert_eq!(redis.request().await, Some(echo("b")));
        redis.reply(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        assert_eq!(redis.request().await, None);
    });
    assert!(matches!(a, Err(NodeErrorKind::UnexpectedReply(_))), "{a:?}");
    assert_eq!(b, a);
    let later = pipeline.send(Command(&[&[b"ECHO", b"c"]]));
    assert_eq!(later.err(), a.err());
}

/// A reply when no request waits breaks the connection: the pipeline closes it and later
/// requests fail with `UnexpectedReply`.
#[tokio::test]
async fn reply_for_no_request_breaks_the_connection() {
    let (pipeline, mut redis) = connect(ROOM);
    let (a, ()) = tokio::join!(query(&pipeline, "a"), redis.echo_back());
    assert_eq!(a, Ok(echoed("a")));
    redis.reply(b"+OK\r\n").await;
    assert_eq!(redis.request().await, None);
    let later = pipeline.send(Command(&[&[b"ECHO", b"b"]]));
    assert!(
        matches!(later, Err(NodeErrorKind::UnexpectedReply(_))),
        "{later:?}"
    );
}

/// A reply that arrives one byte per read (and a request written one byte at a time) is
/// delivered whole, and the next reply is parsed from a clean start.
#[tokio::test]
async fn reply_split_into_single_bytes_is_delivered() {
    // One byte of room: every read and write on the stream moves a single byte.
    let (pipeline, mut redis) = connect(1);
    let script = Command(&[&[b"EVALSHA", b"sha", b"1", b"key"]]);
    let (reply, ()) = tokio::join!(pipeline.query(script), async {
        redis.request().await.expect("a request");
        for byte in b"*3\r\n$5\r\nhello\r\n:42\r\n$-1\r\n" {
            redis.reply(&[*byte]).await;
        }
    });
    let expected = vec![Reply::Bulk(b"hello".to_vec()), Reply::Int(42), Reply::Nil];
    assert_eq!(reply, Ok(Reply::Array(expected)));
    let (b, ()) = tokio::join!(query(&pipeline, "b"), redis.echo_back());
    assert_eq!(b, Ok(echoed("b")));
}

/// A request larger than the stream's buffer and a reply larger than one read go through in
/// pieces and arrive whole.
#[tokio::test]
async fn large_request_and_reply_go_through_in_pieces() {
    let (pipeline, mut redis) = connect(ROOM);
    let arg: String = (0..2 * ROOM)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert!(arg.len() > ROOM && arg.len() > READ_CHUNK);
    let (reply, ()) = tokio::join!(query(&pipeline, &arg), redis.echo_back());
    assert_eq!(reply, Ok(echoed(&arg)));
}

/// An error reply is handed to its request as `Reply::Error`, and the connection stays usable.
#[tokio::test]
async fn error_reply_is_delivered_and_the_connection_stays_usable() {
    let (pipeline, mut redis) = connect(ROOM);
    let (a, ()) = tokio::join!(pipeline.query(Command(&[&[b"FOO"]])), async {
        assert_eq!(redis.request().await, Some(vec![b"FOO".to_vec()]));
        redis.reply(b"-ERR unknown command 'FOO'\r\n").await;
    });
    assert_eq!(a, Ok(Reply::Error("ERR unknown command 'FOO'".into())));
    let (b, ()) = tokio::join!(query(&pipeline, "b"), redis.echo_back());
    assert_eq!(b, Ok(echoed("b")));
}

/// On a stream that buffers writes until flushed (as a TLS stream does), every request still
/// reaches the master.
#[tokio::test(start_paused = true)]
async fn buffered_stream_is_flushed_until_done() {
    // One byte of room: the buffering stream's flush can move one byte, then must wait.
    let (client, server) = tokio::io::duplex(1);
    let pipeline = Pipeline::start(BufStream::new(client));
    let mut redis = FakeRedis {
        stream: BufReader::new(server),
    };
    let round_trip = async { tokio::join!(query(&pipeline, "a"), redis.echo_back()).0 };
    let a = timeout(Duration::from_secs(60), round_trip).await;
    assert_eq!(
        a,
        Ok(Ok(echoed("a"))),
        "the request never left the stream's buffer"
    );
}

/// The `ReuseAfterTimeout` mutant does what it says: once a request is abandoned before its
/// reply, its late reply goes to the next request, and each later reply to the request after
/// its own (what the real pipeline must never do: see the test above).
#[cfg(quorumlock_mutants)]
#[tokio::test]
async fn reuse_after_timeout_mutant_hands_late_replies_to_the_next_request() {
    let (pipeline, mut redis) = connect(ROOM);
    pipeline.reuse_after_timeout();
    // "a" times out: abandoned, its reply not yet come.
    drop(send(&pipeline, "a"));
    assert_eq!(redis.request().await, Some(echo("a")));
    let b = send(&pipeline, "b");
    assert_eq!(redis.request().await, Some(echo("b")));
    redis.reply(&bulk(b"a")).await;
    assert_eq!(b.await, Ok(echoed("a")), "b reads a's late reply");
    // b's own reply comes while nothing waits: the next request gets it.
    redis.reply(&bulk(b"b")).await;
    let (c, ()) = tokio::join!(query(&pipeline, "c"), redis.echo_back());
    assert_eq!(c, Ok(echoed("b")), "c reads b's reply");
}
