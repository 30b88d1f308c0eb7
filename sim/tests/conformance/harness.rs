//! Two masters side by side: a real `redis-server` and a simulated one, each with the same
//! connections; every command goes to both and their replies are compared, exactly except where
//! a rule says a field may differ (times, `run_id`s) and by how much.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use quorumlock_sim::clock::SimClock;
use quorumlock_sim::resp::parse_reply;
use quorumlock_sim::{ClientId, Frame, Protocol, SimMaster};
use quorumlock_testkit::{MasterOptions, RedisMaster};

/// How a field of a reply may differ between the masters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tol {
    /// An integer within this distance (a TTL in ms, a time in µs, an age).
    Int(i64),
    /// A bulk string holding a decimal number, within this distance (`TIME`, a stored time).
    Text(i64),
    /// Any 40 hex digits (a `run_id`: random on the real master, from the seed on ours).
    Hex40,
    /// `INFO server` text: both with a 40-hex `run_id` and `uptime_in_seconds` within 2.
    Info,
    /// The same items in any order (a hash's fields: insertion order on the real master, key
    /// order on ours).
    Unordered,
    /// Anything (a client id, which counts every connection the kit opened before).
    Any,
}

/// Where a rule applies: indices into nested arrays from the reply's root; [`ANY`] matches
/// every index.
pub(crate) type Rule = (&'static [usize], Tol);

/// Matches every index of a path.
pub(crate) const ANY: usize = usize::MAX;

/// Replies must be identical.
pub(crate) const EXACT: &[Rule] = &[];

/// The two masters and their connections.
pub(crate) struct Pair {
    // Kept for its Drop, which stops the server.
    _real: RedisMaster,
    real: Vec<(TcpStream, Vec<u8>)>,
    sim: SimMaster,
    sim_clients: Vec<(ClientId, Vec<u8>)>,
    origin: Instant,
    real_origin_us: u64,
    /// How many replies were compared.
    pub(crate) compared: usize,
    /// Every difference found, in order.
    pub(crate) mismatches: Vec<String>,
}

const READ_TIMEOUT: Duration = Duration::from_secs(10);

impl Pair {
    /// A real master on a free port and a simulated one whose clock starts at the real one's
    /// `TIME`, each with `connections` connections.
    pub(crate) fn start(connections: usize) -> Self {
        let real = RedisMaster::start(MasterOptions::new()).expect("start redis-server");
        let streams: Vec<(TcpStream, Vec<u8>)> = (0..connections)
            .map(|_| {
                let stream = TcpStream::connect(("127.0.0.1", real.port())).expect("connect");
                stream
                    .set_read_timeout(Some(READ_TIMEOUT))
                    .expect("timeout");
                (stream, Vec::new())
            })
            .collect();
        let mut pair = Self {
            _real: real,
            real: streams,
            sim: SimMaster::new(23, SimClock::at_micros(0), 6379).expect("simulated master"),
            sim_clients: Vec::new(),
            origin: Instant::now(),
            real_origin_us: 0,
            compared: 0,
            mismatches: Vec::new(),
        };
        let time = pair.real_call(0, &["TIME"]);
        pair.origin = Instant::now();
        pair.real_origin_us = time_of(&time).expect("TIME answers two numbers");
        // Started now, as the real one just did.
        pair.sim = SimMaster::new(23, SimClock::at_micros(pair.real_origin_us), 6379)
            .expect("simulated master");
        pair.sim_clients = (0..connections)
            .map(|i| {
                (
                    pair.sim.connect(&format!("127.0.0.1:{}", 50_000 + i)),
                    Vec::new(),
                )
            })
            .collect();
        pair
    }

    /// The simulated clock set to the real one's: its start plus the time elapsed since.
    fn sync_clock(&mut self) {
        let elapsed = u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.sim
            .set_clock(SimClock::at_micros(self.real_origin_us + elapsed));
    }

    /// Lets real time pass (for expiry); the simulated clock follows at the next command.
    pub(crate) fn sleep(&mut self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    /// Sends `args` on connection `conn` of both masters and compares the replies by `rules`.
    pub(crate) fn check(&mut self, conn: usize, args: &[&str], rules: &[Rule]) -> Frame {
        let real = self.real_call(conn, args);
        self.sync_clock();
        let client = self.sim_clients[conn].0;
        self.sim.feed(client, &encode(args));
        let sim = self.sim_read(conn);
        self.compare(&format!("{args:?}"), &real, &sim, rules);
        real
    }

    /// Reads one more frame (a pushed message) on connection `conn` of both and compares them.
    pub(crate) fn pushed(&mut self, conn: usize, what: &str, rules: &[Rule]) {
        let real = self.real_read(conn);
        let sim = self.sim_read(conn);
        self.compare(what, &real, &sim, rules);
    }

    fn compare(&mut self, what: &str, real: &Frame, sim: &Frame, rules: &[Rule]) {
        self.compared += 1;
        let mut path = Vec::new();
        if let Err(why) = same(real, sim, rules, &mut path) {
            self.mismatches.push(format!(
                "{what}: {why}\n    real: {}\n    sim:  {}",
                shown(real),
                shown(sim)
            ));
        }
    }

    fn real_call(&mut self, conn: usize, args: &[&str]) -> Frame {
        self.real[conn]
            .0
            .write_all(&encode(args))
            .expect("write to redis-server");
        self.real_read(conn)
    }

    fn real_read(&mut self, conn: usize) -> Frame {
        let (stream, buf) = &mut self.real[conn];
        loop {
            if let Some((frame, used)) = parse_reply(buf).expect("redis-server speaks RESP") {
                buf.drain(..used);
                return frame;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).expect("read from redis-server");
            assert!(n > 0, "redis-server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn sim_read(&mut self, conn: usize) -> Frame {
        let (client, buf) = &mut self.sim_clients[conn];
        buf.extend(self.sim.take_output(*client));
        match parse_reply(buf).expect("the simulated master speaks RESP") {
            Some((frame, used)) => {
                buf.drain(..used);
                frame
            }
            None => Frame::Error("(no reply from the simulated master)".into()),
        }
    }
}

/// A command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    Frame::Array(args.iter().map(Frame::bulk).collect()).write(Protocol::Resp2, &mut out);
    out
}

fn time_of(frame: &Frame) -> Option<u64> {
    let Frame::Array(items) = frame else {
        return None;
    };
    let [Frame::Bulk(s), Frame::Bulk(us)] = items.as_slice() else {
        return None;
    };
    let number = |b: &[u8]| String::from_utf8_lossy(b).parse::<u64>().ok();
    Some(number(s)? * 1_000_000 + number(us)?)
}

fn rule_at(rules: &[Rule], path: &[usize]) -> Option<Tol> {
    rules
        .iter()
        .find(|(p, _)| {
            p.len() == path.len() && p.iter().zip(path).all(|(a, b)| *a == ANY || a == b)
        })
        .map(|(_, tol)| *tol)
}

fn same(real: &Frame, sim: &Frame, rules: &[Rule], path: &mut Vec<usize>) -> Result<(), String> {
    let at = || format!("at {path:?}");
    if let Some(tol) = rule_at(rules, path) {
        return tolerated(real, sim, tol).map_err(|why| format!("{} {why}", at()));
    }
    match (real, sim) {
        (Frame::Array(a), Frame::Array(b))
        | (Frame::Push(a), Frame::Push(b))
        | (Frame::Array(a), Frame::Push(b)) => {
            if a.len() != b.len() {
                return Err(format!("{} lengths {} and {}", at(), a.len(), b.len()));
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                path.push(i);
                same(x, y, rules, path)?;
                path.pop();
            }
            Ok(())
        }
        (Frame::Map(a), Frame::Map(b)) => {
            let flat = |m: &[(Frame, Frame)]| {
                m.iter()
                    .flat_map(|(k, v)| [k.clone(), v.clone()])
                    .collect::<Vec<_>>()
            };
            same(&Frame::Array(flat(a)), &Frame::Array(flat(b)), rules, path)
        }
        _ if real == sim => Ok(()),
        _ => Err(format!("{} differ", at())),
    }
}

fn tolerated(real: &Frame, sim: &Frame, tol: Tol) -> Result<(), String> {
    let number = |f: &Frame| match f {
        Frame::Int(n) => Some(*n),
        Frame::Bulk(b) => String::from_utf8_lossy(b).parse().ok(),
        _ => None,
    };
    let text = |f: &Frame| match f {
        Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    };
    let hex40 = |s: &str| s.len() == 40 && s.bytes().all(|c| c.is_ascii_hexdigit());
    let ok = match tol {
        Tol::Int(within) => {
            matches!((real, sim), (Frame::Int(a), Frame::Int(b)) if (a - b).abs() <= within)
        }
        Tol::Text(within) => matches!(
            (real, sim, number(real), number(sim)),
            (Frame::Bulk(_), Frame::Bulk(_), Some(a), Some(b)) if (a - b).abs() <= within
        ),
        Tol::Hex40 => hex40(&text(real)) && hex40(&text(sim)),
        Tol::Info => {
            let field = |info: &str, name: &str| {
                info.split("\r\n")
                    .find_map(|line| line.strip_prefix(name))
                    .map(str::to_owned)
            };
            let (r, s) = (text(real), text(sim));
            let uptime =
                |i: &str| field(i, "uptime_in_seconds:").and_then(|u| u.parse::<i64>().ok());
            field(&r, "run_id:").is_some_and(|id| hex40(&id))
                && field(&s, "run_id:").is_some_and(|id| hex40(&id))
                && matches!((uptime(&r), uptime(&s)), (Some(a), Some(b)) if (a - b).abs() <= 2)
        }
        Tol::Unordered => {
            let sorted = |f: &Frame| {
                let mut items: Vec<String> = match f {
                    Frame::Array(items) => {
                        items.chunks(2).map(|pair| format!("{pair:?}")).collect()
                    }
                    Frame::Map(pairs) => {
                        pairs.iter().map(|(k, v)| format!("{:?}", [k, v])).collect()
                    }
                    other => vec![format!("{other:?}")],
                };
                items.sort();
                items
            };
            sorted(real) == sorted(sim)
        }
        Tol::Any => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("beyond {tol:?}"))
    }
}

/// A frame as a short readable line.
pub(crate) fn shown(frame: &Frame) -> String {
    match frame {
        Frame::Status(s) => format!("+{s}"),
        Frame::Error(e) => format!("-{e}"),
        Frame::Int(n) => format!(":{n}"),
        Frame::Bulk(b) => format!("{:?}", String::from_utf8_lossy(b)),
        Frame::Nil => "nil".into(),
        Frame::Array(items) | Frame::Push(items) => {
            format!(
                "[{}]",
                items.iter().map(shown).collect::<Vec<_>>().join(", ")
            )
        }
        Frame::Map(pairs) => format!(
            "{{{}}}",
            pairs
                .iter()
                .map(|(k, v)| format!("{}: {}", shown(k), shown(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
