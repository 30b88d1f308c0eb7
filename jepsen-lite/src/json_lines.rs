//! The wire of the controller's fenced store (for the resource's registers, the cron
//! executions and the workloads' events): one JSON request per line from a client process,
//! one JSON response per line back, over TCP with Nagle off (a store's answer is on the critical path of every access).

use std::marker::PhantomData;
use std::net::SocketAddr;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::clock::now_ns;

/// Serves one connection until it closes: each line is parsed as a `Req` and answered with
/// `answer(parsed, arrival_ns)`, the arrival read as soon as the line is in (before any lock
/// the store takes; the store logs it no earlier than its previous entry, see
/// `fenced_store::stamp`).
pub async fn serve<Req, Resp>(
    stream: TcpStream,
    mut answer: impl FnMut(Result<Req, serde_json::Error>, u64) -> Resp,
) where
    Req: DeserializeOwned,
    Resp: Serialize,
{
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let arrival = now_ns();
        let response = answer(serde_json::from_str::<Req>(&line), arrival);
        let Ok(mut out) = serde_json::to_vec(&response) else {
            return;
        };
        out.push(b'\n');
        if write.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// A client process's connection to a store that takes `Req` and answers `Resp`.
#[derive(Debug)]
pub struct Client<Req, Resp> {
    lines: tokio::io::Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
    kinds: PhantomData<fn(&Req) -> Resp>,
}

impl<Req: Serialize, Resp: DeserializeOwned> Client<Req, Resp> {
    /// Connects.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        Ok(Self {
            lines: BufReader::new(read).lines(),
            write,
            kinds: PhantomData,
        })
    }

    /// Sends one request and waits for its response.
    ///
    /// # Errors
    ///
    /// When the connection fails or the response does not parse.
    pub async fn call(&mut self, req: &Req) -> std::io::Result<Resp> {
        let mut out = serde_json::to_vec(req)?;
        out.push(b'\n');
        self.write.write_all(&out).await?;
        let line = self
            .lines
            .next_line()
            .await?
            .ok_or_else(|| std::io::Error::other("the store closed the connection"))?;
        Ok(serde_json::from_str(&line)?)
    }
}
