//! One simulated master: its data, its clock, its scripts, its clients and their pub/sub
//! subscriptions. Clients feed it request bytes and take reply bytes (and pushed messages), so
//! it can sit behind any transport: in-process for the conformance test, a simulated network
//! next. Nothing in it reads the machine's clock or randomness: a master is a function of its
//! seed, its clock readings and the bytes it is fed.

mod server;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::clock::SimClock;
use crate::commands::{self, Spec};
use crate::frame::{Frame, Protocol};
use crate::keyspace::Keyspace;
use crate::resp;
use crate::script::Engine;
use crate::seed::SeedRng;

/// A client connection of a [`SimMaster`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u64);

/// What a master knows of one client connection.
#[derive(Debug)]
struct Client {
    addr: String,
    name: Vec<u8>,
    protocol: Protocol,
    channels: BTreeSet<Vec<u8>>,
    connected_ms: i64,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Closed by the master (`QUIT`, `CLIENT KILL`, a protocol error): no more input is read,
    /// and the transport closes the connection once the output is taken.
    closed: bool,
}

/// Everything of a master but its Lua state, which scripts reach through [`State::script`].
#[derive(Debug)]
struct State {
    clock: SimClock,
    keys: Keyspace,
    clients: BTreeMap<ClientId, Client>,
    next_client: u64,
    run_id: String,
    started_us: u64,
    port: u16,
    config: BTreeMap<String, String>,
    /// Whether a command wrote to, or closed, a connection other than its own (a `PUBLISH`
    /// to subscribers, a `CLIENT KILL`) since [`SimMaster::take_others_touched`] last asked.
    others_touched: bool,
}

/// A simulated Redis 7.0 master.
#[derive(Debug)]
pub struct SimMaster {
    state: State,
    engine: Engine,
    rng: SeedRng,
    scripts_run: u64,
}

impl SimMaster {
    /// A master that starts now, on `clock`, drawing its `run_id`s from `seed`; `port` is what
    /// `INFO` and `CLIENT INFO` report.
    ///
    /// # Errors
    ///
    /// Only if Lua cannot allocate its state.
    pub fn new(seed: u64, clock: SimClock, port: u16) -> mlua::Result<Self> {
        let mut rng = SeedRng::new(seed);
        let config = [
            ("appendonly", "no"),
            ("appendfsync", "everysec"),
            ("save", ""),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        Ok(Self {
            state: State {
                clock,
                keys: Keyspace::default(),
                clients: BTreeMap::new(),
                next_client: 1,
                run_id: rng.run_id(),
                started_us: clock.micros(),
                port,
                config,
                others_touched: false,
            },
            engine: Engine::new()?,
            rng,
            scripts_run: 0,
        })
    }

    /// The master's clock.
    pub fn clock(&self) -> SimClock {
        self.state.clock
    }

    /// Moves the master's clock forward by `by`.
    pub fn advance(&mut self, by: Duration) {
        self.state.clock.advance(by);
    }

    /// Sets the master's clock (a jump, backwards too).
    pub fn set_clock(&mut self, clock: SimClock) {
        self.state.clock = clock;
    }

    /// The data, for checkers ("no key left beyond its bound").
    pub fn keyspace(&mut self) -> &mut Keyspace {
        &mut self.state.keys
    }

    /// This life's `run_id`.
    pub fn run_id(&self) -> &str {
        &self.state.run_id
    }

    /// Sets a configuration parameter as `CONFIG GET` reports it (`appendfsync`, ...).
    pub fn set_config(&mut self, name: &str, value: &str) {
        self.state.config.insert(name.into(), value.into());
    }

    /// Whether its persistence cannot lose an acknowledged write (`appendonly yes`,
    /// `appendfsync always`): a restart of it is one from a backup if it lost anything.
    pub fn is_durable(&self) -> bool {
        let get = |name: &str| self.state.config.get(name).map(String::as_str);
        get("appendonly") == Some("yes") && get("appendfsync") == Some("always")
    }

    /// A restart: every client is disconnected, scripts are forgotten, a new `run_id` and
    /// uptime begin, and the data is `data` (what the persistence kept: nothing, an older
    /// snapshot, everything).
    ///
    /// # Errors
    ///
    /// Only if Lua cannot allocate the new process's state.
    pub fn restart(&mut self, data: Keyspace) -> mlua::Result<()> {
        // A new process: a new Lua state, its random generator back at its start.
        self.engine = Engine::new()?;
        self.state.clients.clear();
        self.state.keys = data;
        self.state.run_id = self.rng.run_id();
        self.state.started_us = self.state.clock.micros();
        Ok(())
    }

    /// A new client connection from `addr` (`ip:port`, as `CLIENT INFO` reports it).
    pub fn connect(&mut self, addr: &str) -> ClientId {
        let state = &mut self.state;
        let id = ClientId(state.next_client);
        state.next_client += 1;
        state.clients.insert(
            id,
            Client {
                addr: addr.into(),
                name: Vec::new(),
                protocol: Protocol::Resp2,
                channels: BTreeSet::new(),
                connected_ms: state.clock.millis(),
                input: Vec::new(),
                output: Vec::new(),
                closed: false,
            },
        );
        id
    }

    /// The connections open from addresses that start with `prefix` (an `ip:`), and the
    /// channels they are subscribed to, summed: what a client host holds on this master.
    pub fn held_by(&self, prefix: &str) -> (usize, usize) {
        self.state
            .clients
            .values()
            .filter(|c| c.addr.starts_with(prefix))
            .fold((0, 0), |(connections, channels), c| {
                (connections + 1, channels + c.channels.len())
            })
    }

    /// Scripts run (`EVAL`, `EVALSHA`) since the master was made, across its restarts: what
    /// most of a simulation's time goes to.
    pub fn scripts_run(&self) -> u64 {
        self.scripts_run
    }

    /// The client went away (its side closed the connection).
    pub fn disconnect(&mut self, client: ClientId) {
        self.state.clients.remove(&client);
    }

    /// Whether the master closed `client` (or never knew it): the transport closes the
    /// connection once it took the output.
    pub fn is_closed(&self, client: ClientId) -> bool {
        self.state.clients.get(&client).is_none_or(|c| c.closed)
    }

    /// Takes the bytes the master wrote to `client` so far (replies and pushed messages).
    pub fn take_output(&mut self, client: ClientId) -> Vec<u8> {
        self.state
            .clients
            .get_mut(&client)
            .map(|c| std::mem::take(&mut c.output))
            .unwrap_or_default()
    }

    /// Whether a command wrote to, or closed, another connection than the one that sent it
    /// since the last call (a `PUBLISH` to subscribers, a `CLIENT KILL`): only then must the
    /// other connections look at their output.
    pub fn take_others_touched(&mut self) -> bool {
        std::mem::take(&mut self.state.others_touched)
    }

    /// Feeds `bytes` from `client` and runs every request complete so far, in order.
    pub fn feed(&mut self, client: ClientId, bytes: &[u8]) {
        let Some(c) = self.state.clients.get_mut(&client) else {
            return;
        };
        if c.closed {
            return;
        }
        c.input.extend_from_slice(bytes);
        loop {
            let Some(c) = self.state.clients.get_mut(&client) else {
                return;
            };
            if c.closed {
                return;
            }
            let parsed = resp::parse_request(&c.input);
            let args = match parsed {
                Ok(Some((args, used))) => {
                    c.input.drain(..used);
                    args
                }
                Ok(None) => return,
                Err(resp::ProtocolError(text)) => {
                    let protocol = c.protocol;
                    Frame::error(format!("ERR {text}")).write(protocol, &mut c.output);
                    c.closed = true;
                    return;
                }
            };
            if args.is_empty() {
                continue;
            }
            for frame in self.execute(client, &args) {
                self.state.write(client, &frame);
            }
        }
    }

    /// Runs one command of `client`: its replies, in order (a `SUBSCRIBE` of n channels has n).
    pub fn execute(&mut self, client: ClientId, args: &[Vec<u8>]) -> Vec<Frame> {
        let Some(spec) = commands::lookup(&args[0]) else {
            return vec![commands::unknown_command(args)];
        };
        if !commands::arity_ok(spec, args) {
            return vec![commands::arity_error(spec.name)];
        }
        let subscribed = self
            .state
            .clients
            .get(&client)
            .is_some_and(|c| !c.channels.is_empty() && c.protocol == Protocol::Resp2);
        if subscribed && !spec.while_subscribed {
            return vec![Frame::error(format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
                 RESET are allowed in this context",
                spec.name
            ))];
        }
        match spec.name {
            "eval" | "evalsha" => vec![self.eval(spec, args)],
            "script" => vec![self.script(args)],
            _ => self.state.connection_command(client, spec, args),
        }
    }

    /// `EVAL script numkeys key... arg...` and `EVALSHA sha numkeys ...`.
    fn eval(&mut self, spec: &Spec, args: &[Vec<u8>]) -> Frame {
        let Some(numkeys) = commands::parse_int(&args[2]) else {
            return commands::not_an_integer();
        };
        let rest = &args[3..];
        let Ok(numkeys) = usize::try_from(numkeys) else {
            return Frame::error("ERR Number of keys can't be negative");
        };
        if numkeys > rest.len() {
            return Frame::error("ERR Number of keys can't be greater than number of args");
        }
        let sha = if spec.name == "eval" {
            match self.engine.load(&args[1]) {
                Ok(sha) => sha,
                Err(frame) => return frame,
            }
        } else {
            commands::lossy(&args[1])
        };
        let (keys, argv) = rest.split_at(numkeys);
        self.scripts_run += 1;
        let state = &mut self.state;
        let mut exec = |call: &[Vec<u8>]| state.script_command(call);
        self.engine.run(&sha, keys, argv, &mut exec)
    }

    /// `SCRIPT LOAD | EXISTS | FLUSH`.
    fn script(&mut self, args: &[Vec<u8>]) -> Frame {
        let sub = args[1].to_ascii_lowercase();
        match (sub.as_slice(), args.len()) {
            (b"load", 3) => match self.engine.load(&args[2]) {
                Ok(sha) => Frame::bulk(sha),
                Err(frame) => frame,
            },
            (b"exists", 3..) => Frame::Array(
                args[2..]
                    .iter()
                    .map(|sha| Frame::Int(i64::from(self.engine.has(&commands::lossy(sha)))))
                    .collect(),
            ),
            (b"flush", 2..=3) => {
                self.engine.flush();
                Frame::ok()
            }
            (b"load" | b"exists" | b"flush", _) => {
                commands::arity_error(&format!("script|{}", commands::lossy(&sub)))
            }
            _ => server::unknown_subcommand(&args[1], "SCRIPT"),
        }
    }
}

impl State {
    /// Appends `frame` to `client`'s output, in its protocol.
    fn write(&mut self, client: ClientId, frame: &Frame) {
        if let Some(c) = self.clients.get_mut(&client) {
            let protocol = c.protocol;
            frame.write(protocol, &mut c.output);
        }
    }

    /// A command called by a script: only data and server commands, with Redis's
    /// script-context errors.
    fn script_command(&mut self, args: &[Vec<u8>]) -> Frame {
        let Some(spec) = commands::lookup(&args[0]) else {
            return Frame::error("ERR Unknown Redis command called from script");
        };
        if !commands::arity_ok(spec, args) {
            return Frame::error("ERR Wrong number of args calling Redis command from script");
        }
        if spec.no_script {
            return Frame::error("ERR This Redis command is not allowed from script");
        }
        self.server_command(spec, args)
    }

    /// A command that is the same from a client and from a script.
    fn server_command(&mut self, spec: &Spec, args: &[Vec<u8>]) -> Frame {
        let now_ms = self.clock.millis();
        if let Some(frame) = commands::execute(&mut self.keys, now_ms, args) {
            return frame;
        }
        match spec.name {
            "publish" => self.publish(&args[1], &args[2]),
            "time" => {
                let us = self.clock.micros();
                Frame::Array(vec![
                    Frame::bulk((us / 1_000_000).to_string()),
                    Frame::bulk((us % 1_000_000).to_string()),
                ])
            }
            "echo" => Frame::Bulk(args[1].clone()),
            "ping" => match args.get(1) {
                Some(message) => Frame::Bulk(message.clone()),
                None => Frame::Status("PONG".into()),
            },
            "info" => Frame::bulk(self.info(args.get(1).map(Vec::as_slice))),
            _ => Frame::error(format!("ERR '{}' is not simulated here", spec.name)),
        }
    }

    /// Delivers `message` to every subscriber of `channel`; how many there were.
    fn publish(&mut self, channel: &[u8], message: &[u8]) -> Frame {
        let push = Frame::Push(vec![
            Frame::bulk("message"),
            Frame::bulk(channel),
            Frame::bulk(message),
        ]);
        let mut receivers = 0;
        for client in self.clients.values_mut() {
            if client.channels.contains(channel) && !client.closed {
                push.write(client.protocol, &mut client.output);
                receivers += 1;
            }
        }
        self.others_touched |= receivers > 0;
        Frame::Int(receivers)
    }
}

#[cfg(test)]
mod tests;
