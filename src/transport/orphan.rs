//! A broken connection's master side, closed before its replacement carries any request.
//!
//! # Why
//!
//! Cleanups rely on order: a compare-and-delete sent after a `SET` on the same connection runs
//! after it on the master. A connection that broke, and the new one that replaces it, have no
//! order between them. When the client gives up on a connection with requests in flight, the
//! master may not have: its side can still be open with a late `SET` in its buffer (a middlebox
//! reset only the client's side; the master was paused with the bytes already in its socket),
//! or bytes still on the wire. Without more, that `SET` can run after the cleanup sent on the
//! new connection, and the key then lives until its TTL (at most one TTL: every `SET` carries
//! `PX ttl`).
//!
//! # How
//!
//! Each connection reads how the master knows it (`CLIENT INFO`: its client id and address)
//! when it opens. When a connection breaks, its replacement first closes that client on the
//! master (`CLIENT KILL ID <id> ADDR <addr>`, both filters, so that after a restart, when ids
//! start again, no other client can match) before it is used. Redis runs nothing more from a
//! client it killed, so every request on the new connection, cleanups included, runs after
//! anything the old one will ever run. The kill costs one round trip when a connection is
//! replaced, none per lock.
//!
//! Where the master does not allow it (`CLIENT` renamed or denied by an ACL, Redis older than
//! 6.2, a proxy in front of the master), the connection opens all the same and the bound is
//! the TTL.

use crate::error::NodeErrorKind;
use crate::transport::pipeline::Pipeline;
use crate::transport::reply::shown;
use crate::transport::resp::{Command, Reply};

/// A connection as the master knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MasterSide {
    /// The master's client id (unique within one master process).
    id: String,
    /// The client's address as the master sees it (`ip:port`).
    addr: String,
}

impl MasterSide {
    /// Reads from a `CLIENT INFO` reply (`id=7 addr=127.0.0.1:51234 laddr=… fd=8 …`).
    fn parse(info: &str) -> Option<Self> {
        let field = |name: &str| {
            info.split_ascii_whitespace()
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .filter(|value| !value.is_empty())
        };
        let id = field("id")?;
        if !id.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Self {
            id: id.to_string(),
            addr: field("addr")?.to_string(),
        })
    }
}

/// Set-up of a new connection `conn` that replaces `orphan` (a connection that broke, as the
/// master knew it): closes `orphan` on the master, then reads how the master knows `conn`.
///
/// # Errors
///
/// Only when `conn` itself breaks (then the orphan may not be closed yet, and the next
/// connection tries again). A master that refuses either command leaves the bound at one TTL
/// (see the module docs), and the connection is used all the same.
pub(crate) async fn replace(
    conn: &Pipeline,
    orphan: Option<&MasterSide>,
    node: &str,
) -> Result<Option<MasterSide>, NodeErrorKind> {
    let info: [&[u8]; 2] = [b"CLIENT", b"INFO"];
    let info = [&info[..]];
    // Both in one round trip: the kill is queued first, so it runs first.
    let (closed, info) = futures::join!(close(conn, orphan, node), conn.query(Command(&info)));
    closed?;
    Ok(match info? {
        Reply::Bulk(bytes) => MasterSide::parse(&String::from_utf8_lossy(&bytes)),
        Reply::Status(text) => MasterSide::parse(&text),
        other => {
            tracing::debug!(node, reply = %shown(&other), "CLIENT INFO unavailable");
            None
        }
    })
}

/// Closes `orphan` on the master behind `conn`, if there is one.
async fn close(
    conn: &Pipeline,
    orphan: Option<&MasterSide>,
    node: &str,
) -> Result<(), NodeErrorKind> {
    let Some(orphan) = orphan else {
        return Ok(());
    };
    let kill: [&[u8]; 8] = [
        b"CLIENT",
        b"KILL",
        b"ID",
        orphan.id.as_bytes(),
        b"ADDR",
        orphan.addr.as_bytes(),
        // Never this connection (the default, said out loud).
        b"SKIPME",
        b"yes",
    ];
    match conn.query(Command(&[&kill])).await? {
        // 1: it was still open there; 0: the master had closed it already.
        Reply::Int(killed) => {
            tracing::debug!(node, killed, "closed the broken connection's master side")
        }
        other => tracing::warn!(
            node,
            reply = %shown(&other),
            "could not close a broken connection's master side: a late request on it may \
             outlive its cleanup (until its ttl)"
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::MasterSide;

    #[test]
    fn reads_id_and_address_from_client_info() {
        let info = "id=7 addr=127.0.0.1:51234 laddr=127.0.0.1:6379 fd=8 name= age=0 idle=0 \
                    flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=26 qbuf-free=20448 \
                    argv-mem=10 multi-mem=0 rbs=1024 rbp=0 obl=0 oll=0 omem=0 tot-mem=22426 \
                    events=r cmd=client|info user=default redir=-1 resp=2\n";
        assert_eq!(
            MasterSide::parse(info),
            Some(MasterSide {
                id: "7".into(),
                addr: "127.0.0.1:51234".into()
            })
        );
        let v6 = "id=12 addr=[::1]:40000 laddr=[::1]:6379 fd=9";
        assert_eq!(
            MasterSide::parse(v6).map(|side| side.addr),
            Some("[::1]:40000".into())
        );
    }

    #[test]
    fn anything_else_is_unknown() {
        assert_eq!(MasterSide::parse(""), None);
        assert_eq!(MasterSide::parse("addr=1.2.3.4:5"), None);
        assert_eq!(MasterSide::parse("id= addr=1.2.3.4:5"), None);
        assert_eq!(MasterSide::parse("id=x1 addr=1.2.3.4:5"), None);
        assert_eq!(MasterSide::parse("id=3"), None);
        // `laddr=` is not `addr=`.
        assert_eq!(MasterSide::parse("id=3 laddr=1.2.3.4:5"), None);
    }
}
