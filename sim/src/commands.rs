//! The data commands a simulated master executes, as Redis 7.0 does them: the same replies,
//! the same errors, the same expiry rules. Both clients and scripts reach them through
//! [`execute`]; connection and server commands live in [`crate::master`].

use std::collections::BTreeMap;

use crate::frame::Frame;
use crate::keyspace::{Data, Entry, Keyspace, WrongType, WRONGTYPE};

/// What a command is, as far as the dispatcher must know before running it.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The lowercase name, as error messages quote it.
    pub name: &'static str,
    /// Redis's arity: `n` exactly n arguments (the name included), `-n` at least n.
    pub arity: i32,
    /// Refused inside a script (`EVAL`, `SUBSCRIBE`, `CLIENT`, ...).
    pub no_script: bool,
    /// Allowed on a RESP2 connection that is subscribed to a channel.
    pub while_subscribed: bool,
}

const fn spec(name: &'static str, arity: i32) -> Spec {
    Spec {
        name,
        arity,
        no_script: false,
        while_subscribed: false,
    }
}

const fn connection(name: &'static str, arity: i32, while_subscribed: bool) -> Spec {
    Spec {
        name,
        arity,
        no_script: true,
        while_subscribed,
    }
}

/// Every command the simulated master knows; anything else is an unknown command.
const SPECS: &[Spec] = &[
    spec("get", 2),
    spec("set", -3),
    spec("mget", -2),
    spec("del", -2),
    spec("exists", -2),
    spec("pttl", 2),
    spec("pexpire", -3),
    spec("type", 2),
    spec("hset", -4),
    spec("hget", 3),
    spec("hmget", -3),
    spec("hexists", 3),
    spec("hdel", -3),
    spec("hlen", 2),
    spec("hincrby", 4),
    spec("hgetall", 2),
    spec("keys", 2),
    spec("dbsize", 1),
    spec("flushall", -1),
    spec("publish", 3),
    spec("time", 1),
    spec("echo", 2),
    spec("info", -1),
    Spec {
        while_subscribed: true,
        ..spec("ping", -1)
    },
    connection("eval", -3, false),
    connection("evalsha", -3, false),
    connection("script", -2, false),
    connection("client", -2, false),
    connection("config", -2, false),
    connection("hello", -1, false),
    connection("select", 2, false),
    connection("auth", -2, false),
    connection("subscribe", -2, true),
    connection("unsubscribe", -1, true),
    connection("quit", -1, true),
];

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    SPECS
        .iter()
        .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Checks `args` (the name included) against `spec`'s arity.
pub fn arity_ok(spec: &Spec, args: &[Vec<u8>]) -> bool {
    let n = i32::try_from(args.len()).unwrap_or(i32::MAX);
    if spec.arity >= 0 {
        n == spec.arity
    } else {
        n >= -spec.arity
    }
}

/// `ERR wrong number of arguments for 'get' command`.
pub fn arity_error(name: &str) -> Frame {
    Frame::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// `ERR unknown command 'FOO', with args beginning with: 'a' 'b' `, as Redis words it.
pub fn unknown_command(args: &[Vec<u8>]) -> Frame {
    let name = args.first().map(|a| lossy(a)).unwrap_or_default();
    let mut quoted = String::new();
    for arg in args.iter().skip(1) {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        let text = lossy(arg);
        quoted.push('\'');
        quoted.push_str(&text[..floor_char_boundary(&text, room)]);
        quoted.push_str("' ");
    }
    let name = &name[..floor_char_boundary(&name, 128)];
    Frame::error(format!(
        "ERR unknown command '{name}', with args beginning with: {quoted}"
    ))
}

fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at.min(text.len()))
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0)
}

pub(crate) fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `ERR value is not an integer or out of range`.
pub fn not_an_integer() -> Frame {
    Frame::error("ERR value is not an integer or out of range")
}

fn syntax_error() -> Frame {
    Frame::error("ERR syntax error")
}

fn wrong_type() -> Frame {
    Frame::error(WRONGTYPE)
}

/// Parses an integer argument as Redis's `string2ll` does: an optional minus, digits, no
/// leading zeros, no spaces, within `i64`.
pub fn parse_int(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let well_formed = match digits.as_bytes() {
        [b'0'] => text == "0",
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if well_formed {
        text.parse().ok()
    } else {
        None
    }
}

/// Runs the data command `args` (the name first, arity already checked) on `keys` at the
/// master's time `now_ms`; `None` for a command that is not a data command.
pub fn execute(keys: &mut Keyspace, now_ms: i64, args: &[Vec<u8>]) -> Option<Frame> {
    let name = lookup(args.first()?)?.name;
    let rest = &args[1..];
    Some(match name {
        "get" => match keys.string(&rest[0], now_ms) {
            Ok(value) => value.map_or(Frame::Nil, Frame::bulk),
            Err(WrongType) => wrong_type(),
        },
        "set" => set(keys, now_ms, rest),
        "mget" => Frame::Array(
            rest.iter()
                .map(|key| match keys.string(key, now_ms) {
                    Ok(Some(value)) => Frame::bulk(value),
                    _ => Frame::Nil,
                })
                .collect(),
        ),
        "del" => count(rest.iter().filter(|key| keys.remove(key, now_ms)).count()),
        "exists" => count(rest.iter().filter(|key| keys.exists(key, now_ms)).count()),
        "pttl" => Frame::Int(match keys.entry(&rest[0], now_ms) {
            None => -2,
            Some(Entry {
                expires_at: None, ..
            }) => -1,
            Some(Entry {
                expires_at: Some(at),
                ..
            }) => at.saturating_sub(now_ms).max(0),
        }),
        "pexpire" => pexpire(keys, now_ms, rest),
        "type" => Frame::Status(
            match keys.entry(&rest[0], now_ms) {
                None => "none",
                Some(Entry {
                    data: Data::Str(_), ..
                }) => "string",
                Some(_) => "hash",
            }
            .into(),
        ),
        "hset" => hset(keys, now_ms, rest),
        "hget" => match keys.hash(&rest[0], now_ms) {
            Ok(hash) => hash
                .and_then(|h| h.get(&rest[1]))
                .map_or(Frame::Nil, Frame::bulk),
            Err(WrongType) => wrong_type(),
        },
        "hmget" => match keys.hash(&rest[0], now_ms) {
            Ok(hash) => Frame::Array(
                rest[1..]
                    .iter()
                    .map(|field| {
                        hash.as_ref()
                            .and_then(|h| h.get(field))
                            .map_or(Frame::Nil, Frame::bulk)
                    })
                    .collect(),
            ),
            Err(WrongType) => wrong_type(),
        },
        "hexists" => match keys.hash(&rest[0], now_ms) {
            Ok(hash) => count(usize::from(hash.is_some_and(|h| h.contains_key(&rest[1])))),
            Err(WrongType) => wrong_type(),
        },
        "hdel" => {
            let removed = match keys.hash(&rest[0], now_ms) {
                Ok(Some(hash)) => rest[1..]
                    .iter()
                    .filter(|field| hash.remove(*field).is_some())
                    .count(),
                Ok(None) => 0,
                Err(WrongType) => return Some(wrong_type()),
            };
            keys.drop_if_empty_hash(&rest[0]);
            count(removed)
        }
        "hlen" => match keys.hash(&rest[0], now_ms) {
            Ok(hash) => count(hash.map_or(0, |h| h.len())),
            Err(WrongType) => wrong_type(),
        },
        "hincrby" => hincrby(keys, now_ms, rest),
        "hgetall" => match keys.hash(&rest[0], now_ms) {
            Ok(hash) => Frame::Map(
                hash.map(|h| {
                    h.iter()
                        .map(|(f, v)| (Frame::bulk(f), Frame::bulk(v)))
                        .collect()
                })
                .unwrap_or_default(),
            ),
            Err(WrongType) => wrong_type(),
        },
        "keys" => {
            keys.purge_expired(now_ms);
            Frame::Array(
                keys.iter()
                    .filter(|(key, _)| glob_match(&rest[0], key))
                    .map(|(key, _)| Frame::bulk(key))
                    .collect(),
            )
        }
        "dbsize" => count(keys.len()),
        "flushall" => {
            keys.clear();
            Frame::ok()
        }
        _ => return None,
    })
}

fn count(n: usize) -> Frame {
    Frame::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|KEEPTTL]`.
fn set(keys: &mut Keyspace, now_ms: i64, rest: &[Vec<u8>]) -> Frame {
    let (key, value) = (&rest[0], &rest[1]);
    let (mut nx, mut xx, mut get, mut keep_ttl) = (false, false, false, false);
    let mut expire: Option<(&[u8], i64)> = None;
    let mut i = 2;
    while i < rest.len() {
        let option = rest[i].to_ascii_uppercase();
        let next = rest.get(i + 1);
        match option.as_slice() {
            b"NX" if !xx => nx = true,
            b"XX" if !nx => xx = true,
            b"GET" => get = true,
            b"KEEPTTL" if expire.is_none() => keep_ttl = true,
            b"EX" | b"PX" if expire.is_none() && !keep_ttl && next.is_some() => {
                let unit = if option == b"EX" { 1000 } else { 1 };
                expire = next.map(|n| (n.as_slice(), unit));
                i += 1;
            }
            _ => return syntax_error(),
        }
        i += 1;
    }
    let expires_at = match expire {
        None => None,
        Some((text, unit)) => {
            let Some(n) = parse_int(text) else {
                return not_an_integer();
            };
            let at = n
                .checked_mul(unit)
                .filter(|ms| *ms > 0)
                .and_then(|ms| ms.checked_add(now_ms));
            match at {
                Some(at) => Some(at),
                None => return Frame::error("ERR invalid expire time in 'set' command"),
            }
        }
    };
    let old = match keys.string(key, now_ms) {
        Ok(old) => old.map(<[u8]>::to_vec),
        Err(WrongType) if get => return wrong_type(),
        Err(WrongType) => Some(Vec::new()),
    };
    let exists = keys.exists(key, now_ms);
    if (nx && exists) || (xx && !exists) {
        return if get {
            old.map_or(Frame::Nil, Frame::Bulk)
        } else {
            Frame::Nil
        };
    }
    let expires_at = if keep_ttl {
        keys.entry(key, now_ms).and_then(|e| e.expires_at)
    } else {
        expires_at
    };
    keys.put(
        key,
        Entry {
            data: Data::Str(value.clone()),
            expires_at,
        },
    );
    if get {
        old.map_or(Frame::Nil, Frame::Bulk)
    } else {
        Frame::ok()
    }
}

/// `PEXPIRE key ms [NX|XX|GT|LT]`: a time already past deletes the key.
fn pexpire(keys: &mut Keyspace, now_ms: i64, rest: &[Vec<u8>]) -> Frame {
    let Some(ms) = parse_int(&rest[1]) else {
        return not_an_integer();
    };
    let mut flags = Vec::new();
    for option in &rest[2..] {
        let option = option.to_ascii_uppercase();
        match option.as_slice() {
            b"NX" | b"XX" | b"GT" | b"LT" => flags.push(option),
            _ => return Frame::error(format!("ERR Unsupported option {}", lossy(&option))),
        }
    }
    let has = |f: &[u8]| flags.iter().any(|x| x == f);
    if has(b"NX") && flags.len() > 1 {
        return Frame::error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if has(b"GT") && has(b"LT") {
        return Frame::error("ERR GT and LT options at the same time are not compatible");
    }
    let Some(at) = ms.checked_add(now_ms) else {
        return Frame::error("ERR invalid expire time in 'pexpire' command");
    };
    let Some(entry) = keys.entry(&rest[0], now_ms) else {
        return Frame::Int(0);
    };
    let current = entry.expires_at;
    let refused = (has(b"NX") && current.is_some())
        || (has(b"XX") && current.is_none())
        // No expiry counts as an infinite one.
        || (has(b"GT") && current.is_none_or(|c| at <= c))
        || (has(b"LT") && current.is_some_and(|c| at >= c));
    if refused {
        return Frame::Int(0);
    }
    if at <= now_ms {
        keys.remove(&rest[0], now_ms);
    } else {
        entry.expires_at = Some(at);
    }
    Frame::Int(1)
}

/// `HSET key field value [field value ...]`: how many fields are new.
fn hset(keys: &mut Keyspace, now_ms: i64, rest: &[Vec<u8>]) -> Frame {
    if rest.len().is_multiple_of(2) {
        return arity_error("hset");
    }
    let hash = match keys.hash_or_new(&rest[0], now_ms) {
        Ok(hash) => hash,
        Err(WrongType) => return wrong_type(),
    };
    let added = rest[1..]
        .chunks(2)
        .filter(|pair| hash.insert(pair[0].clone(), pair[1].clone()).is_none())
        .count();
    count(added)
}

/// `HINCRBY key field increment`.
fn hincrby(keys: &mut Keyspace, now_ms: i64, rest: &[Vec<u8>]) -> Frame {
    let Some(by) = parse_int(&rest[2]) else {
        return not_an_integer();
    };
    let hash: &mut BTreeMap<Vec<u8>, Vec<u8>> = match keys.hash_or_new(&rest[0], now_ms) {
        Ok(hash) => hash,
        Err(WrongType) => return wrong_type(),
    };
    let current = match hash.get(&rest[1]) {
        None => 0,
        Some(value) => match parse_int(value) {
            Some(n) => n,
            None => return Frame::error("ERR hash value is not an integer"),
        },
    };
    let Some(next) = current.checked_add(by) else {
        return Frame::error("ERR increment or decrement would overflow");
    };
    hash.insert(rest[1].clone(), next.to_string().into_bytes());
    Frame::Int(next)
}

/// Redis's glob (`*`, `?`, `[...]`, `\x`), for `KEYS`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob_match(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((b'[', rest)) => {
            let Some(close) = rest.iter().position(|b| *b == b']') else {
                return text.first() == Some(&b'[') && glob_match(rest, &text[1..]);
            };
            let (class, after) = (&rest[..close], &rest[close + 1..]);
            let Some(c) = text.first() else {
                return false;
            };
            let (negate, class) = match class.split_first() {
                Some((b'^', class)) => (true, class),
                _ => (false, class),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    let (lo, hi) = (class[i].min(class[i + 2]), class[i].max(class[i + 2]));
                    hit |= (lo..=hi).contains(c);
                    i += 3;
                } else {
                    hit |= class[i] == *c;
                    i += 1;
                }
            }
            hit != negate && glob_match(after, &text[1..])
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && glob_match(&rest[1..], &text[1..])
        }
        Some((c, rest)) => text.first() == Some(c) && glob_match(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(keys: &mut Keyspace, now_ms: i64, line: &str) -> Frame {
        let args: Vec<Vec<u8>> = line.split(' ').map(|a| a.as_bytes().to_vec()).collect();
        execute(keys, now_ms, &args).expect("a data command")
    }

    #[test]
    fn set_nx_px_expires_on_the_clock() {
        let mut keys = Keyspace::default();
        assert_eq!(run(&mut keys, 0, "set k a NX PX 100"), Frame::ok());
        assert_eq!(run(&mut keys, 50, "set k b NX PX 100"), Frame::Nil);
        assert_eq!(run(&mut keys, 50, "pttl k"), Frame::Int(50));
        assert_eq!(run(&mut keys, 100, "pttl k"), Frame::Int(0));
        assert_eq!(run(&mut keys, 101, "pttl k"), Frame::Int(-2));
        assert_eq!(run(&mut keys, 101, "set k b NX PX 100"), Frame::ok());
        assert_eq!(run(&mut keys, 101, "get k"), Frame::bulk("b"));
    }

    #[test]
    fn set_refuses_bad_options_like_redis() {
        let mut keys = Keyspace::default();
        assert_eq!(run(&mut keys, 0, "set k a NX XX"), syntax_error());
        assert_eq!(run(&mut keys, 0, "set k a PX"), syntax_error());
        assert_eq!(run(&mut keys, 0, "set k a PX x"), not_an_integer());
        assert_eq!(
            run(&mut keys, 0, "set k a PX 0"),
            Frame::error("ERR invalid expire time in 'set' command")
        );
        assert!(keys.is_empty());
    }

    #[test]
    fn pexpire_in_the_past_deletes_and_gt_treats_no_ttl_as_infinite() {
        let mut keys = Keyspace::default();
        run(&mut keys, 0, "set k a");
        assert_eq!(run(&mut keys, 0, "pexpire k 10 GT"), Frame::Int(0));
        assert_eq!(run(&mut keys, 0, "pexpire k 10"), Frame::Int(1));
        assert_eq!(run(&mut keys, 0, "pexpire k 0"), Frame::Int(1));
        assert_eq!(run(&mut keys, 0, "exists k"), Frame::Int(0));
        assert_eq!(run(&mut keys, 0, "pexpire k 10"), Frame::Int(0));
    }

    #[test]
    fn hashes_count_fields_and_vanish_when_empty() {
        let mut keys = Keyspace::default();
        assert_eq!(run(&mut keys, 0, "hset h a 1 b 2"), Frame::Int(2));
        assert_eq!(run(&mut keys, 0, "hset h a 3"), Frame::Int(0));
        assert_eq!(run(&mut keys, 0, "hincrby h a -4"), Frame::Int(-1));
        assert_eq!(run(&mut keys, 0, "hset h a 1 b"), arity_error("hset"));
        assert_eq!(
            run(&mut keys, 0, "hmget h a x"),
            Frame::Array(vec![Frame::bulk("-1"), Frame::Nil])
        );
        assert_eq!(run(&mut keys, 0, "get h"), wrong_type());
        assert_eq!(run(&mut keys, 0, "hdel h a b c"), Frame::Int(2));
        assert_eq!(run(&mut keys, 0, "exists h"), Frame::Int(0));
        run(&mut keys, 0, "set s v");
        assert_eq!(run(&mut keys, 0, "hlen s"), wrong_type());
        assert_eq!(run(&mut keys, 0, "hincrby s f 1"), wrong_type());
    }

    #[test]
    fn integers_are_parsed_strictly() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b" 1",
            b"1.5",
            b"+1",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_int(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn glob_patterns_match_like_keys() {
        assert!(glob_match(b"ql:*", b"ql:a"));
        assert!(!glob_match(b"ql:*", b"x:a"));
        assert!(glob_match(b"h?llo", b"hello"));
        assert!(glob_match(b"h[a-e]llo", b"hello"));
        assert!(!glob_match(b"h[^e]llo", b"hello"));
    }
}
