//! The connection and server commands of a simulated master: `CLIENT`, `CONFIG`, `HELLO`,
//! `SELECT`, `AUTH`, `(UN)SUBSCRIBE`, `QUIT`, `INFO`, with the texts `redis-server` 7.0 answers
//! (`INFO` only with its server section, where the fields the library reads are).

use super::{ClientId, State};
use crate::commands::{self, lossy, Spec};
use crate::frame::{Frame, Protocol};

/// `ERR unknown subcommand 'x'. Try CLIENT HELP.`
pub(super) fn unknown_subcommand(sub: &[u8], command: &str) -> Frame {
    Frame::error(format!(
        "ERR unknown subcommand '{}'. Try {command} HELP.",
        lossy(sub)
    ))
}

impl State {
    /// A command of `client` that is not a script command.
    pub(super) fn connection_command(
        &mut self,
        client: ClientId,
        spec: &Spec,
        args: &[Vec<u8>],
    ) -> Vec<Frame> {
        let protocol = self
            .clients
            .get(&client)
            .map_or(Protocol::Resp2, |c| c.protocol);
        let one = match spec.name {
            "subscribe" => return self.subscribe(client, &args[1..]),
            "unsubscribe" => return self.unsubscribe(client, &args[1..]),
            "ping" if protocol == Protocol::Resp2 && self.subscribed(client) => Frame::Push(vec![
                Frame::bulk("pong"),
                Frame::Bulk(args.get(1).cloned().unwrap_or_default()),
            ]),
            "client" => self.client(client, args),
            "config" => self.config(args),
            "hello" => self.hello(client, args),
            "select" => match commands::parse_int(&args[1]) {
                Some(0) => Frame::ok(),
                Some(_) => Frame::error("ERR the simulated master has only database 0"),
                None => commands::not_an_integer(),
            },
            "auth" => Frame::error(
                "ERR AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            ),
            "quit" => {
                self.write(client, &Frame::ok());
                if let Some(c) = self.clients.get_mut(&client) {
                    c.closed = true;
                }
                return Vec::new();
            }
            _ => self.server_command(spec, args),
        };
        vec![one]
    }

    fn subscribed(&self, client: ClientId) -> bool {
        self.clients
            .get(&client)
            .is_some_and(|c| !c.channels.is_empty())
    }

    fn subscribe(&mut self, client: ClientId, channels: &[Vec<u8>]) -> Vec<Frame> {
        let Some(c) = self.clients.get_mut(&client) else {
            return Vec::new();
        };
        channels
            .iter()
            .map(|channel| {
                c.channels.insert(channel.clone());
                confirmation("subscribe", Frame::bulk(channel), c.channels.len())
            })
            .collect()
    }

    fn unsubscribe(&mut self, client: ClientId, channels: &[Vec<u8>]) -> Vec<Frame> {
        let Some(c) = self.clients.get_mut(&client) else {
            return Vec::new();
        };
        let channels: Vec<Vec<u8>> = if channels.is_empty() {
            c.channels.iter().cloned().collect()
        } else {
            channels.to_vec()
        };
        if channels.is_empty() {
            return vec![confirmation("unsubscribe", Frame::Nil, 0)];
        }
        channels
            .into_iter()
            .map(|channel| {
                c.channels.remove(&channel);
                confirmation("unsubscribe", Frame::Bulk(channel), c.channels.len())
            })
            .collect()
    }

    /// `CLIENT ID | INFO | LIST | SETNAME | GETNAME | KILL` (`SETINFO` came with Redis 7.2: 7.0
    /// refuses it, and the `redis` crate ignores the refusal).
    fn client(&mut self, client: ClientId, args: &[Vec<u8>]) -> Frame {
        let sub = args[1].to_ascii_lowercase();
        match (sub.as_slice(), args.len()) {
            (b"id", 2) => Frame::Int(i64::try_from(client.0).unwrap_or(i64::MAX)),
            (b"info", 2) => Frame::bulk(self.client_line(client)),
            (b"list", 2) => {
                let ids: Vec<ClientId> = self.clients.keys().copied().collect();
                Frame::bulk(
                    ids.into_iter()
                        .map(|id| self.client_line(id))
                        .collect::<String>(),
                )
            }
            (b"setname", 3) => {
                if args[2].iter().any(|b| *b <= b' ' || *b > b'~') {
                    return Frame::error(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    );
                }
                if let Some(c) = self.clients.get_mut(&client) {
                    c.name = args[2].clone();
                }
                Frame::ok()
            }
            (b"getname", 2) => match self.clients.get(&client) {
                Some(c) if !c.name.is_empty() => Frame::Bulk(c.name.clone()),
                _ => Frame::Nil,
            },
            (b"kill", 3..) => self.kill(client, &args[2..]),
            (b"id" | b"info" | b"list" | b"setname" | b"getname", _) => {
                commands::arity_error(&format!("client|{}", lossy(&sub)))
            }
            _ => unknown_subcommand(&args[1], "CLIENT"),
        }
    }

    /// `CLIENT KILL addr`, or `CLIENT KILL [ID id] [ADDR addr] [SKIPME yes|no]`.
    fn kill(&mut self, caller: ClientId, filters: &[Vec<u8>]) -> Frame {
        if let [addr] = filters {
            let found = self
                .clients
                .iter()
                .find(|(_, c)| c.addr.as_bytes() == addr.as_slice());
            let Some((&id, _)) = found else {
                return Frame::error("ERR No such client");
            };
            self.close(id);
            return Frame::ok();
        }
        if !filters.len().is_multiple_of(2) {
            return Frame::error("ERR syntax error");
        }
        let (mut id, mut addr, mut skip_me) = (None, None, true);
        for pair in filters.chunks(2) {
            match pair[0].to_ascii_lowercase().as_slice() {
                b"id" => match commands::parse_int(&pair[1]).and_then(|n| u64::try_from(n).ok()) {
                    Some(n) if n > 0 => id = Some(ClientId(n)),
                    _ => return Frame::error("ERR client-id should be greater than 0"),
                },
                b"addr" => addr = Some(pair[1].clone()),
                b"skipme" => match pair[1].to_ascii_lowercase().as_slice() {
                    b"yes" => skip_me = true,
                    b"no" => skip_me = false,
                    _ => return Frame::error("ERR syntax error"),
                },
                _ => return Frame::error("ERR syntax error"),
            }
        }
        let doomed: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(cid, c)| {
                id.is_none_or(|id| id == **cid)
                    && addr
                        .as_ref()
                        .is_none_or(|a| a.as_slice() == c.addr.as_bytes())
                    && !(skip_me && **cid == caller)
            })
            .map(|(cid, _)| *cid)
            .collect();
        for id in &doomed {
            self.close(*id);
        }
        Frame::Int(i64::try_from(doomed.len()).unwrap_or(i64::MAX))
    }

    /// Closes `client` after what was written to it so far.
    fn close(&mut self, client: ClientId) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.closed = true;
            self.others_touched = true;
        }
    }

    /// A `CLIENT INFO` / `CLIENT LIST` line, with the fields Redis 7.0 writes.
    fn client_line(&self, client: ClientId) -> String {
        let Some(c) = self.clients.get(&client) else {
            return String::new();
        };
        let age = (self.clock.millis() - c.connected_ms).max(0) / 1000;
        let resp = if c.protocol == Protocol::Resp3 { 3 } else { 2 };
        format!(
            "id={} addr={} laddr=127.0.0.1:{} fd=8 name={} age={age} idle=0 flags=N db=0 sub={} \
             psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 \
             oll=0 omem=0 tot-mem=0 events=r cmd=client|info user=default redir=-1 resp={resp}\n",
            client.0,
            c.addr,
            self.port,
            lossy(&c.name),
            c.channels.len(),
        )
    }

    /// `CONFIG GET pattern...` (a map in RESP3, pairs in RESP2) and `CONFIG SET name value`.
    fn config(&mut self, args: &[Vec<u8>]) -> Frame {
        let sub = args[1].to_ascii_lowercase();
        match (sub.as_slice(), args.len()) {
            (b"get", 3..) => Frame::Map(
                self.config
                    .iter()
                    .filter(|(name, _)| {
                        args[2..]
                            .iter()
                            .any(|p| commands::glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
                    })
                    .map(|(name, value)| (Frame::bulk(name), Frame::bulk(value)))
                    .collect(),
            ),
            (b"set", 4) => {
                self.config
                    .insert(lossy(&args[2]).to_ascii_lowercase(), lossy(&args[3]));
                Frame::ok()
            }
            (b"get" | b"set", _) => commands::arity_error(&format!("config|{}", lossy(&sub))),
            _ => unknown_subcommand(&args[1], "CONFIG"),
        }
    }

    /// `HELLO [protover [SETNAME name]]`: switches the protocol, answers the server's map.
    fn hello(&mut self, client: ClientId, args: &[Vec<u8>]) -> Frame {
        let protocol = match args.get(1).map(|v| commands::parse_int(v)) {
            None => None,
            Some(Some(2)) => Some(Protocol::Resp2),
            Some(Some(3)) => Some(Protocol::Resp3),
            Some(Some(_)) => return Frame::error("NOPROTO unsupported protocol version"),
            Some(None) => {
                return Frame::error("ERR Protocol version is not an integer or out of range")
            }
        };
        let mut i = 2;
        while i < args.len() {
            match (args[i].to_ascii_lowercase().as_slice(), args.get(i + 1)) {
                (b"setname", Some(name)) => {
                    if let Some(c) = self.clients.get_mut(&client) {
                        c.name = name.clone();
                    }
                    i += 2;
                }
                _ => {
                    return Frame::error(format!(
                        "ERR Syntax error in HELLO option '{}'",
                        lossy(&args[i])
                    ))
                }
            }
        }
        let Some(c) = self.clients.get_mut(&client) else {
            return Frame::Nil;
        };
        if let Some(protocol) = protocol {
            c.protocol = protocol;
        }
        let proto = if c.protocol == Protocol::Resp3 { 3 } else { 2 };
        let field = |k: &str, v: Frame| (Frame::bulk(k), v);
        Frame::Map(vec![
            field("server", Frame::bulk("redis")),
            field("version", Frame::bulk("7.0.15")),
            field("proto", Frame::Int(proto)),
            field(
                "id",
                Frame::Int(i64::try_from(client.0).unwrap_or(i64::MAX)),
            ),
            field("mode", Frame::bulk("standalone")),
            field("role", Frame::bulk("master")),
            field("modules", Frame::Array(Vec::new())),
        ])
    }

    /// `INFO [section]`: the server section (for the default sections too), or nothing.
    pub(super) fn info(&self, section: Option<&[u8]>) -> String {
        let wanted = section.map(<[u8]>::to_ascii_lowercase);
        let server = matches!(
            wanted.as_deref(),
            None | Some(b"server" | b"default" | b"all" | b"everything")
        );
        if !server {
            return String::new();
        }
        let now_us = self.clock.micros();
        // Whole seconds subtracted, as Redis computes its uptime.
        let uptime = (now_us / 1_000_000).saturating_sub(self.started_us / 1_000_000);
        format!(
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\narch_bits:64\r\n\
             process_id:1\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{now_us}\r\n\
             uptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nhz:10\r\n",
            self.run_id,
            self.port,
            uptime / 86_400,
        )
    }
}

/// A pub/sub confirmation: `[kind, channel, subscriptions left]`.
fn confirmation(kind: &str, channel: Frame, count: usize) -> Frame {
    Frame::Push(vec![
        Frame::bulk(kind),
        channel,
        Frame::Int(i64::try_from(count).unwrap_or(i64::MAX)),
    ])
}
