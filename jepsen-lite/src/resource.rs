//! The protected resource: the controller's fenced store holding two registers, each a
//! counter and a set, one **unfenced** and one **fenced**.
//!
//! Clients do read-modify-write cycles: read the counter and the set, then write back
//! `counter + 1` and `set ∪ {op id}`. Two critical sections that interleave lose an update,
//! which the checker counts. The fenced register rejects any read or write whose token is
//! lower than the highest it has seen (reads too: a stale read followed by a newer write still
//! loses updates), and any access without a token. Every access is stamped with the host
//! monotonic clock on arrival and logged.
//!
//! Protocol: one JSON object per line each way ([`Request`] → [`Response`]); the server, the
//! fencing check and the log are the [fenced store](fenced_store)'s.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::fenced_store::{self, Bar, FencedRequest};

/// Which register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Register {
    /// Accepts everything.
    Unfenced,
    /// Rejects accesses whose token is below the highest seen.
    Fenced,
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Read the counter and the set.
    Read,
    /// Overwrite the counter and the set.
    Write,
}

/// One request line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// Read or write.
    pub op: Op,
    /// Which register.
    pub register: Register,
    /// The client process.
    pub client: u32,
    /// The lease (acquisition) this access is made under.
    pub lease: String,
    /// The fencing token, if the client has one.
    #[serde(default)]
    pub token: Option<u64>,
    /// For writes: the new counter.
    #[serde(default)]
    pub counter: u64,
    /// For writes: the new set.
    #[serde(default)]
    pub set: Vec<u64>,
    /// For writes: the element this write adds (for the log).
    #[serde(default)]
    pub add: Option<u64>,
}

/// One response line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    /// Whether the access was applied (fenced register: token not stale).
    pub accepted: bool,
    /// The counter after the access.
    pub counter: u64,
    /// The set after the access (only for reads, to keep writes small).
    #[serde(default)]
    pub set: Vec<u64>,
    /// Why it was rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One logged access, stamped on arrival.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Access {
    /// Host monotonic nanoseconds at arrival.
    pub time_ns: u64,
    /// The client process.
    pub client: u32,
    /// The lease it claimed to act under.
    pub lease: String,
    /// Read or write.
    pub op: Op,
    /// Which register.
    pub register: Register,
    /// The token it carried.
    pub token: Option<u64>,
    /// Whether it was applied.
    pub accepted: bool,
    /// The counter read or written.
    pub counter: u64,
    /// For writes, the element added.
    pub add: Option<u64>,
}

/// A counter and a set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RegisterState {
    /// The counter.
    pub counter: u64,
    /// The set.
    pub set: BTreeSet<u64>,
}

/// Both registers: the data of the resource's [fenced store](fenced_store).
#[derive(Debug, Default)]
pub struct Registers {
    /// The unfenced register.
    pub unfenced: RegisterState,
    /// The fenced register.
    pub fenced: RegisterState,
}

impl FencedRequest for Request {
    /// The fenced register has the only bar.
    type Key = ();
    type Data = Registers;
    type Entry = Access;
    type Answer = Response;

    fn bar(&self) -> Result<Bar<()>, String> {
        Ok(match self.register {
            Register::Unfenced => None,
            Register::Fenced => Some(((), self.token)),
        })
    }

    fn apply(
        self,
        registers: &mut Registers,
        time_ns: u64,
        refusal: Option<String>,
    ) -> (Access, Response) {
        let register = match self.register {
            Register::Unfenced => &mut registers.unfenced,
            Register::Fenced => &mut registers.fenced,
        };
        let accepted = refusal.is_none();
        if accepted && self.op == Op::Write {
            register.counter = self.counter;
            register.set = self.set.iter().copied().collect();
        }
        let set = if self.op == Op::Read && accepted {
            register.set.iter().copied().collect()
        } else {
            Vec::new()
        };
        // After an accepted write the register holds the written counter.
        let counter = register.counter;
        let access = Access {
            time_ns,
            client: self.client,
            lease: self.lease,
            op: self.op,
            register: self.register,
            token: self.token,
            accepted,
            counter,
            add: self.add,
        };
        let response = Response {
            accepted,
            counter,
            set,
            reason: refusal,
        };
        (access, response)
    }

    fn bad_request(error: &serde_json::Error) -> Response {
        Response {
            accepted: false,
            counter: 0,
            set: Vec::new(),
            reason: Some(format!("bad request: {error}")),
        }
    }
}

/// The registers' state and the access log, for tests that apply requests by hand.
pub type State = fenced_store::State<Request>;

/// The running store: [`Server::start`] binds and serves; clients connect to its `addr`.
pub type Server = fenced_store::Store<Request>;

impl Server {
    /// A copy of the log and both registers.
    pub fn snapshot(&self) -> (Vec<Access>, RegisterState, RegisterState) {
        self.read(|state| {
            (
                state.log.clone(),
                state.data.unfenced.clone(),
                state.data.fenced.clone(),
            )
        })
    }
}

/// A client process's connection to the store.
pub type Client = fenced_store::Client<Request>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::now_ns;

    fn req(op: Op, register: Register, token: Option<u64>, counter: u64) -> Request {
        Request {
            op,
            register,
            client: 0,
            lease: "0-0".into(),
            token,
            counter,
            set: vec![counter],
            add: Some(counter),
        }
    }

    #[test]
    fn fenced_register_rejects_stale_and_missing_tokens_reads_included() {
        let mut s = State::default();
        assert!(
            s.apply(req(Op::Read, Register::Fenced, Some(5), 0), 1)
                .accepted
        );
        assert!(
            s.apply(req(Op::Write, Register::Fenced, Some(5), 1), 2)
                .accepted
        );
        let stale_read = s.apply(req(Op::Read, Register::Fenced, Some(4), 0), 3);
        assert!(!stale_read.accepted);
        assert!(stale_read.reason.unwrap_or_default().contains("stale"));
        assert!(
            !s.apply(req(Op::Write, Register::Fenced, Some(4), 9), 4)
                .accepted
        );
        assert!(
            !s.apply(req(Op::Write, Register::Fenced, None, 9), 5)
                .accepted
        );
        assert_eq!(s.data.fenced.counter, 1);
        assert!(
            s.apply(req(Op::Write, Register::Fenced, Some(6), 2), 6)
                .accepted
        );
        assert_eq!(s.data.fenced.counter, 2);
        assert_eq!(s.log.len(), 6);
    }

    #[test]
    fn unfenced_register_accepts_everything_and_overwrites() {
        let mut s = State::default();
        assert!(
            s.apply(req(Op::Write, Register::Unfenced, None, 3), 1)
                .accepted
        );
        assert!(
            s.apply(req(Op::Write, Register::Unfenced, Some(1), 1), 2)
                .accepted
        );
        assert_eq!(s.data.unfenced.counter, 1);
        assert_eq!(s.data.unfenced.set.len(), 1);
    }

    #[tokio::test]
    async fn serves_over_tcp_and_stamps_arrival() {
        let server = Server::start().await.expect("starts");
        let mut client = Client::connect(server.addr).await.expect("connects");
        let before = now_ns();
        let r = client
            .call(&req(Op::Write, Register::Unfenced, None, 7))
            .await
            .expect("call");
        assert!(r.accepted);
        let r = client
            .call(&req(Op::Read, Register::Unfenced, None, 0))
            .await
            .expect("call");
        assert_eq!((r.counter, r.set), (7, vec![7]));
        let (log, unfenced, _) = server.snapshot();
        assert_eq!(log.len(), 2);
        assert!(log[0].time_ns >= before);
        assert_eq!(unfenced.counter, 7);
    }

    /// Many connections at once: the log's times follow the order in which the accesses were
    /// applied (a time out of order reads as two leases interleaving to the effects checker).
    /// Red with each access stamped at its arrival alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_is_stamped_in_the_order_of_application() {
        let server = Server::start().await.expect("starts");
        let mut tasks = Vec::new();
        for c in 0..8u32 {
            let addr = server.addr;
            tasks.push(tokio::spawn(async move {
                let mut client = Client::connect(addr).await.expect("connects");
                for i in 0..400 {
                    let mut r = req(Op::Write, Register::Unfenced, None, u64::from(c) * 1000 + i);
                    r.client = c;
                    client.call(&r).await.expect("call");
                }
            }));
        }
        for task in tasks {
            task.await.expect("client");
        }
        let (log, _, _) = server.snapshot();
        assert_eq!(log.len(), 3200);
        let inversions = log
            .windows(2)
            .filter(|w| w[1].time_ns < w[0].time_ns)
            .count();
        assert_eq!(inversions, 0, "times out of the order of application");
    }
}
