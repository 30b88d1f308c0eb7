//! The simulated master against a real `redis-server` 7.0: the same command sequences on both
//! (every library script with representative keys and arguments, the commands the transport
//! sends, Lua conversions, errors, expiry, pub/sub, RESP3), replies compared exactly except
//! where a field must differ: times (compared within a bound; the simulated clock follows the
//! real one), `run_id`s and uptimes, client ids, and the order of a hash's fields.

#[path = "conformance/harness.rs"]
mod harness;

use harness::{Pair, Tol, ANY, EXACT};

/// A fencing token proposal far ahead of any clock (year 2096 in µs): a granted token is then
/// exactly the proposal on both masters, whatever their clocks read.
const P: u64 = 4_000_000_000_000_000;
/// How far a proposal may lead the master's clock (µs): far enough for [`P`].
const CAP: &str = "100000000000000000";
/// A TTL that no slow run outlives.
const LONG: &str = "60000";
/// How far times may differ: ms fields and µs fields.
const MS: i64 = 2_000;
const US: i64 = 2_000_000;

fn source(name: &str) -> &'static str {
    quorumlock::lua_scripts()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .unwrap_or_else(|| panic!("no script {name}"))
}

/// Loads every library script on both masters (their SHA1s must agree) and returns the SHA1 of
/// `name`'s.
fn sha(name: &str) -> String {
    quorumlock_sim::script::sha1_hex(source(name).as_bytes())
}

/// Runs library script `name` on connection 0 of both.
fn script(pair: &mut Pair, name: &str, keys: &[&str], args: &[&str], rules: &[harness::Rule]) {
    let sha = sha(name);
    let count = keys.len().to_string();
    let mut call = vec!["EVALSHA", sha.as_str(), count.as_str()];
    call.extend_from_slice(keys);
    call.extend_from_slice(args);
    pair.check(0, &call, rules);
}

/// The reply shape of the acquire scripts: `{granted, token, epoch_age_ms, pttl_ms}`.
const ACQUIRE_REPLY: &[harness::Rule] = &[(&[2], Tol::Int(MS)), (&[3], Tol::Int(MS))];
/// The same with a token drawn from the clock.
const ACQUIRE_CLOCK_TOKEN: &[harness::Rule] = &[
    (&[1], Tol::Int(US)),
    (&[2], Tol::Int(MS)),
    (&[3], Tol::Int(MS)),
];
/// Slot claims: per slot, `epoch_age_ms` and `updated_us` are times.
const CLAIM_REPLY: &[harness::Rule] = &[(&[ANY, 2], Tol::Int(MS)), (&[ANY, 6], Tol::Int(US))];
/// `SLOT_STATUS`: `updated_us`.
const STATUS_REPLY: &[harness::Rule] = &[(&[4], Tol::Int(US))];

fn commands_and_expiry(p: &mut Pair) {
    p.check(0, &["PING"], EXACT);
    p.check(0, &["ECHO", "hi"], EXACT);
    p.check(0, &["SET", "c:k", "v", "NX", "PX", LONG], EXACT);
    p.check(0, &["SET", "c:k", "w", "NX", "PX", LONG], EXACT);
    p.check(0, &["GET", "c:k"], EXACT);
    p.check(0, &["PTTL", "c:k"], &[(&[], Tol::Int(MS))]);
    p.check(0, &["SET", "c:k", "w", "XX", "GET"], EXACT);
    p.check(0, &["SET", "c:x", "v", "PX", "0"], EXACT);
    p.check(0, &["SET", "c:x", "v", "PX", "abc"], EXACT);
    p.check(0, &["SET", "c:x", "v", "NX", "XX"], EXACT);
    p.check(0, &["SET", "c:x", "v", "PX"], EXACT);
    p.check(0, &["PEXPIRE", "c:k", LONG], EXACT);
    p.check(0, &["PEXPIRE", "c:missing", LONG], EXACT);
    p.check(0, &["PEXPIRE", "c:k", "x"], EXACT);
    p.check(0, &["PTTL", "c:missing"], EXACT);
    p.check(0, &["SET", "c:forever", "v"], EXACT);
    p.check(0, &["PTTL", "c:forever"], EXACT);
    p.check(0, &["PEXPIRE", "c:forever", "0"], EXACT);
    p.check(0, &["EXISTS", "c:forever", "c:k", "c:k"], EXACT);
    p.check(0, &["SET", "c:short", "v", "PX", "100"], EXACT);
    p.sleep(300);
    p.check(0, &["GET", "c:short"], EXACT);
    p.check(0, &["PTTL", "c:short"], EXACT);
    p.check(0, &["HSET", "c:h", "b", "2", "a", "1"], EXACT);
    p.check(0, &["HSET", "c:h", "a", "3", "c"], EXACT);
    p.check(0, &["HMGET", "c:h", "a", "x", "b"], EXACT);
    p.check(0, &["HINCRBY", "c:h", "a", "-5"], EXACT);
    p.check(0, &["HINCRBY", "c:h", "a", "x"], EXACT);
    p.check(0, &["HEXISTS", "c:h", "b"], EXACT);
    p.check(0, &["HLEN", "c:h"], EXACT);
    p.check(0, &["HGETALL", "c:h"], &[(&[], Tol::Unordered)]);
    p.check(0, &["GET", "c:h"], EXACT);
    p.check(0, &["HGET", "c:k", "f"], EXACT);
    p.check(0, &["HSET", "c:k", "f", "v"], EXACT);
    p.check(0, &["MGET", "c:k", "c:h", "c:missing"], EXACT);
    p.check(0, &["TYPE", "c:h"], EXACT);
    p.check(0, &["HDEL", "c:h", "a", "b", "zz"], EXACT);
    p.check(0, &["HDEL", "c:h", "c"], EXACT);
    p.check(0, &["EXISTS", "c:h"], EXACT);
    p.check(0, &["DEL", "c:k", "c:h", "c:missing"], EXACT);
    p.check(0, &["NOSUCH", "a", "b"], EXACT);
    p.check(0, &["GET"], EXACT);
    p.check(0, &["TIME"], &[(&[0], Tol::Text(2)), (&[1], Tol::Any)]);
    p.check(0, &["INFO", "server"], &[(&[], Tol::Info)]);
    p.check(
        0,
        &["CONFIG", "GET", "appendonly", "appendfsync"],
        &[(&[], Tol::Unordered)],
    );
    p.check(0, &["CLIENT", "SETINFO", "LIB-NAME", "conformance"], EXACT);
    p.check(0, &["CLIENT", "ID"], &[(&[], Tol::Any)]);
    p.check(
        0,
        &[
            "CLIENT",
            "KILL",
            "ID",
            "999999",
            "ADDR",
            "127.0.0.1:1",
            "SKIPME",
            "yes",
        ],
        EXACT,
    );
    p.check(0, &["SELECT", "0"], EXACT);
}

fn lua_conversions_and_errors(p: &mut Pair) {
    p.check(0, &["HSET", "c:hash", "f", "v"], EXACT);
    for body in [
        "return 3.99",
        "return -3.99",
        "return 2^53 + 0.5",
        "return {1, 2, {3, 'x'}, nil, 5}",
        "return {1, false, 3}",
        "return true",
        "return false",
        "return nil",
        "return {}",
        "return redis.status_reply('FINE')",
        "return redis.error_reply('MY err')",
        "return redis.error_reply('oops')",
        "return {err = 'SOME thing'}",
        "return {ok = 'fine', 1}",
        "return redis.call('ping')",
        "return redis.call('echo', 'x')",
        "redis.call('set', 'c:n', 0.1) return redis.call('get', 'c:n')",
        "redis.call('set', 'c:n', 1e20) return redis.call('get', 'c:n')",
        "redis.call('set', 'c:n', 12345678901234567) return redis.call('get', 'c:n')",
        "redis.call('set', 'c:n', -7) return redis.call('get', 'c:n')",
        "return redis.call('set', 'c:n', 'x', 'nx')",
        "return redis.call('hmget', 'c:hash', 'f', 'g')",
        "local x = 1\nreturn redis.call('get', 'c:hash')",
        "local r = redis.call('get', 'c:hash')\nreturn r",
        "return redis.pcall('get', 'c:hash')",
        "local e = redis.pcall('get', 'c:hash') return e.err",
        "return nosuch",
        "x = 1",
        "redis.call = nil",
        "return redis.call('nosuchcommand')",
        "return redis.call('get')",
        "return redis.call('subscribe', 'x')",
        "return redis.call()",
        "return redis.call('get', {})",
        "return redis.sha1hex('abc')",
        "return {math.random(100), math.random(1, 6), math.floor(math.random() * 1000)}",
        "return {math.random(100), math.random(1, 6), math.floor(math.random() * 1000)}",
        "math.randomseed(7) return math.random(1000000)",
        "return string.format('%d', 2^52 + 1)",
        "return tostring(1e15)",
        "error('boom')",
        "error({err = 'CUSTOM failure'})",
        "return (",
    ] {
        p.check(0, &["EVAL", body, "0"], EXACT);
    }
    p.check(0, &["EVAL", "return KEYS", "2", "a"], EXACT);
    p.check(0, &["EVAL", "return KEYS", "-1"], EXACT);
    p.check(0, &["EVAL", "return KEYS", "x"], EXACT);
    p.check(
        0,
        &["EVAL", "return {KEYS[1], ARGV[2]}", "1", "k", "a1", "a2"],
        EXACT,
    );
    p.check(0, &["EVALSHA", &"0".repeat(40), "0"], EXACT);
    p.check(0, &["EVALSHA", "nosuch", "0"], EXACT);
    let sha = quorumlock_sim::script::sha1_hex(b"return 3.99");
    p.check(0, &["EVALSHA", &sha, "0"], EXACT);
    p.check(0, &["SCRIPT", "EXISTS", &sha, &"0".repeat(40)], EXACT);
    p.check(0, &["SCRIPT", "FLUSH"], EXACT);
    p.check(0, &["EVALSHA", &sha, "0"], EXACT);
}

fn single_key_locks(p: &mut Pair) {
    let (p0, p1) = (P.to_string(), (P + 10).to_string());
    let keys = ["c:lock", "c:fence", "c:epoch", "c:lock"];
    let acquire = |value: &str, proposal: &str| -> Vec<String> {
        [value, LONG, "1", "1", LONG, "", proposal, CAP]
            .map(String::from)
            .to_vec()
    };
    let args = acquire("v1", &p0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    script(p, "acquire", &keys, &args, ACQUIRE_REPLY);
    let args = acquire("v2", &p0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    script(p, "acquire", &keys, &args, ACQUIRE_REPLY);
    script(p, "compare_and_pexpire", &["c:lock"], &["v2", LONG], EXACT);
    script(
        p,
        "compare_and_pexpire",
        &["c:lock"],
        &["v1", "50000"],
        EXACT,
    );
    p.check(0, &["PTTL", "c:lock"], &[(&[], Tol::Int(MS))]);
    script(
        p,
        "extend_with_companion",
        &["c:lock", "c:fence"],
        &["v1", LONG, "90000"],
        EXACT,
    );
    p.check(0, &["PTTL", "c:fence"], &[(&[], Tol::Int(MS))]);
    script(p, "raise_fence", &["c:fence"], &[&p1, LONG], EXACT);
    script(p, "raise_fence", &["c:fence"], &["5", LONG], EXACT);
    p.check(0, &["GET", "c:fence"], EXACT);
    p.check(1, &["SUBSCRIBE", "c:lock"], EXACT);
    script(p, "compare_and_delete", &["c:lock"], &["v2", "1"], EXACT);
    script(p, "compare_and_delete", &["c:lock"], &["v1", "1"], EXACT);
    p.pushed(1, "the release's message", EXACT);
    p.check(1, &["GET", "c:lock"], EXACT);
    p.check(1, &["PING"], EXACT);
    p.check(1, &["UNSUBSCRIBE"], EXACT);
    p.check(1, &["UNSUBSCRIBE"], EXACT);
    // The counter leads the clock: the next token is the counter's successor, a proposal of 0
    // notwithstanding.
    let args = acquire("v3", "0");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    script(p, "acquire", &keys, &args, ACQUIRE_REPLY);
    // A fresh counter and no proposal: the token is the master's clock (µs).
    let fresh = ["c:lock2", "c:fence2", "c:epoch", "c:lock2"];
    let args = acquire("v1", "0");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    script(p, "acquire", &fresh, &args, ACQUIRE_CLOCK_TOKEN);
    // Unfenced, no epoch check: the unused keys are the lock key itself.
    script(
        p,
        "acquire",
        &["c:plain", "c:plain", "c:plain", "c:plain"],
        &["v", "100", "0", "0", LONG, "", "0", CAP],
        ACQUIRE_REPLY,
    );
    p.sleep(300);
    script(p, "compare_and_pexpire", &["c:plain"], &["v", LONG], EXACT);
    script(p, "compare_and_delete", &["c:plain"], &["v", "0"], EXACT);
    script(
        p,
        "acquire",
        &["c:plain", "c:plain", "c:plain", "c:plain"],
        &["w", LONG, "0", "0", LONG, "", "0", CAP],
        ACQUIRE_REPLY,
    );
    // Holding on: a release that keeps the key, then one that deletes it.
    script(
        p,
        "release_holding",
        &["c:plain", "c:plain"],
        &["w", "5000", ""],
        EXACT,
    );
    p.check(0, &["PTTL", "c:plain"], &[(&[], Tol::Int(MS))]);
    script(
        p,
        "release_holding",
        &["c:plain", "c:plain"],
        &["x", "0", ""],
        EXACT,
    );
    script(
        p,
        "release_holding",
        &["c:plain", "c:plain"],
        &["w", "0", ""],
        EXACT,
    );
    p.check(0, &["EXISTS", "c:plain"], EXACT);
    // The jepsen-lite mutants.
    p.check(0, &["SET", "c:m", "other", "PX", LONG], EXACT);
    script(p, "extend_recreates", &["c:gone"], &["v", LONG], EXACT);
    script(p, "extend_recreates", &["c:m"], &["v", LONG], EXACT);
    script(p, "plain_delete", &["c:m"], &[], EXACT);
    // A lock key that holds a hash: the script fails with Redis's text and line.
    p.check(0, &["HSET", "c:wrong", "f", "v"], EXACT);
    script(p, "compare_and_delete", &["c:wrong"], &["v", "1"], EXACT);
    script(p, "compare_and_pexpire", &["c:wrong"], &["v", LONG], EXACT);
    let args = acquire("v1", &p0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    script(
        p,
        "acquire",
        &["c:lock9", "c:wrong", "c:epoch", "c:lock9"],
        &args,
        EXACT,
    );
    // A read permit behind a writer intent (the blocker, KEYS[5]): refused with 2 and the
    // intent's TTL; granted once it is gone.
    p.check(0, &["SET", "c:intent", "w", "PX", LONG], EXACT);
    let read = ["c:read", "c:read", "c:read", "c:read", "c:intent"];
    let blocked = ["r", LONG, "0", "0", LONG, "", "0", CAP, "1"];
    script(p, "acquire", &read, &blocked, ACQUIRE_REPLY);
    p.check(0, &["DEL", "c:intent"], EXACT);
    script(p, "acquire", &read, &blocked, ACQUIRE_REPLY);
}

fn reentrant_locks(p: &mut Pair) {
    let keys = ["c:r", "c:r", "c:r", "c:rh"];
    let acquire = |owner: &'static str, id: &'static str, ttl: &'static str| {
        [owner, ttl, "0", "0", LONG, id, "0", CAP]
    };
    script(
        p,
        "acquire",
        &keys,
        &acquire("o1", "a1", "30000"),
        ACQUIRE_REPLY,
    );
    script(
        p,
        "acquire",
        &keys,
        &acquire("o1", "a2", LONG),
        ACQUIRE_REPLY,
    );
    script(
        p,
        "acquire",
        &keys,
        &acquire("o2", "b1", LONG),
        ACQUIRE_REPLY,
    );
    p.check(0, &["HLEN", "c:rh"], EXACT);
    script(
        p,
        "extend_reentrant",
        &["c:r", "c:rh"],
        &["o1", "a1", "90000"],
        EXACT,
    );
    script(
        p,
        "extend_reentrant",
        &["c:r", "c:rh"],
        &["o1", "zz", "90000"],
        EXACT,
    );
    p.check(0, &["PTTL", "c:rh"], &[(&[], Tol::Int(MS))]);
    script(
        p,
        "release_reentrant",
        &["c:r", "c:rh"],
        &["o1", "a1", "1"],
        EXACT,
    );
    script(
        p,
        "release_reentrant",
        &["c:r", "c:rh"],
        &["o1", "a1", "1"],
        EXACT,
    );
    script(
        p,
        "release_holding",
        &["c:r", "c:rh"],
        &["o1", "a2", "0"],
        EXACT,
    );
    p.check(0, &["EXISTS", "c:r", "c:rh"], EXACT);
}

fn key_sets_and_elections(p: &mut Pair) {
    let p0 = P.to_string();
    let keys = ["c:s1", "c:s2", "c:sf1", "c:sf2", "c:epoch"];
    script(
        p,
        "multi_acquire",
        &keys,
        &["v", LONG, "2", "1", "1", LONG, &p0, CAP],
        ACQUIRE_REPLY,
    );
    script(
        p,
        "multi_acquire",
        &keys,
        &["w", LONG, "2", "1", "1", LONG, &p0, CAP],
        ACQUIRE_REPLY,
    );
    p.check(0, &["MGET", "c:sf1", "c:sf2"], EXACT);
    script(
        p,
        "multi_extend",
        &["c:s1", "c:s2"],
        &["v", "2", "70000"],
        EXACT,
    );
    script(
        p,
        "multi_extend",
        &["c:s1", "c:s2"],
        &["w", "2", "70000"],
        EXACT,
    );
    script(
        p,
        "multi_raise_fence",
        &["c:sf1", "c:sf2"],
        &[&(P + 5).to_string(), LONG],
        EXACT,
    );
    p.check(0, &["MGET", "c:sf1", "c:sf2"], EXACT);
    script(p, "announce", &["c:s1", "c:ann"], &["v", "42"], EXACT);
    script(p, "announce", &["c:s1", "c:ann"], &["w", "42"], EXACT);
    p.check(0, &["MGET", "c:s1", "c:ann"], EXACT);
    p.check(0, &["PTTL", "c:ann"], &[(&[], Tol::Int(MS))]);
    script(
        p,
        "multi_release",
        &["c:s1", "c:s2", "c:ann"],
        &["w", "2", "1"],
        EXACT,
    );
    script(
        p,
        "multi_release",
        &["c:s1", "c:s2", "c:ann"],
        &["v", "2", "1"],
        EXACT,
    );
    p.check(0, &["EXISTS", "c:s1", "c:s2", "c:ann"], EXACT);
    // Half a set held by someone else: refused, with the longest remaining TTL.
    p.check(0, &["SET", "c:s2", "x", "PX", "40000"], EXACT);
    script(
        p,
        "multi_acquire",
        &["c:s1", "c:s2"],
        &["v", LONG, "2", "0", "0", LONG, "0", CAP],
        ACQUIRE_REPLY,
    );
}

fn slots(p: &mut Pair) {
    let p0 = P.to_string();
    let claim = |value: &'static str, retry: &'static str| {
        [
            LONG, "1", "1", LONG, "", CAP, "120000", "runner-a", retry, value,
        ]
    };
    let keys = ["c:run1", "c:rec1", "c:job", "c:epoch"];
    let mut args = claim("val1", "0");
    args[4] = &p0;
    script(p, "claim_slots", &keys, &args, CLAIM_REPLY);
    script(p, "claim_slots", &keys, &args, CLAIM_REPLY);
    let mut other = claim("val2", "0");
    other[4] = &p0;
    script(p, "claim_slots", &keys, &other, CLAIM_REPLY);
    script(p, "slot_status", &["c:run1", "c:rec1"], &[], STATUS_REPLY);
    p.check(
        0,
        &["HMGET", "c:rec1", "state", "value", "attempts", "token"],
        EXACT,
    );
    let finish = ["completed", "val1", "runner-a", "120000", &p0, "1", "1"];
    script(p, "finish_slots", &["c:run1", "c:rec1"], &finish, EXACT);
    script(p, "slot_status", &["c:run1", "c:rec1"], &[], STATUS_REPLY);
    script(p, "claim_slots", &keys, &other, CLAIM_REPLY);
    p.check(0, &["EXISTS", "c:run1"], EXACT);
    // Two slots in one call: one claimed, then reverted (a claim that did not win).
    let keys2 = [
        "c:run2", "c:rec2", "c:run2", "c:run3", "c:rec3", "c:run3", "c:epoch",
    ];
    let mut two = claim("val3", "0").to_vec();
    two.push("val4");
    two[1] = "0";
    script(p, "claim_slots", &keys2, &two, CLAIM_REPLY);
    script(
        p,
        "revert_slots",
        &["c:run2", "c:run2", "c:rec2", "c:run3", "c:rec3"],
        &["val3", "other"],
        EXACT,
    );
    p.check(
        0,
        &["EXISTS", "c:run2", "c:rec2", "c:run3", "c:rec3"],
        EXACT,
    );
    // Abandoned: a claim whose run ended without completing is not claimed again unless asked.
    script(
        p,
        "finish_slots",
        &["c:run3", "c:rec3"],
        &["abandoned", "val4", "runner-a", "120000", "0", "1", "1"],
        EXACT,
    );
    let keys3 = ["c:run3", "c:rec3", "c:run3", "c:epoch"];
    let mut again = claim("val5", "0");
    again[1] = "0";
    script(p, "claim_slots", &keys3, &again, CLAIM_REPLY);
    let mut retry = claim("val5", "1");
    retry[1] = "0";
    script(p, "claim_slots", &keys3, &retry, CLAIM_REPLY);
    p.check(
        0,
        &["HMGET", "c:rec3", "state", "attempts", "prev_state"],
        EXACT,
    );
}

fn restart_protection(p: &mut Pair) {
    let life: &[harness::Rule] = &[(&[0], Tol::Hex40), (&[1], Tol::Int(2))];
    script(p, "master_life", &["c:prov"], &[], life);
    script(p, "provision", &["c:epoch3", "c:prov"], &[], life);
    script(p, "master_life", &["c:prov"], &[], life);
    p.check(0, &["GET", "c:epoch3"], EXACT);
}

fn resp3(p: &mut Pair) {
    p.check(2, &["HELLO", "3"], &[(&[7], Tol::Any)]);
    p.check(2, &["GET", "c:missing"], EXACT);
    p.check(2, &["HSET", "c:h3", "a", "1"], EXACT);
    p.check(2, &["HGETALL", "c:h3"], EXACT);
    p.check(2, &["EVAL", "return {1, false, 'x'}", "0"], EXACT);
    p.check(
        2,
        &["EVAL", "return redis.call('get', 'c:missing')", "0"],
        EXACT,
    );
    p.check(2, &["CONFIG", "GET", "appendonly"], EXACT);
    p.check(2, &["SUBSCRIBE", "c:ch3"], EXACT);
    p.check(0, &["PUBLISH", "c:ch3", "hello"], EXACT);
    p.pushed(2, "a RESP3 push", EXACT);
    p.check(2, &["PING"], EXACT);
}

/// Every script of the library, and the commands around them, answer the same on the simulated
/// master as on `redis-server`.
#[test]
fn the_simulated_master_answers_like_redis_server() {
    let mut p = Pair::start(3);
    p.check(0, &["FLUSHALL"], EXACT);
    p.check(0, &["SCRIPT", "FLUSH"], EXACT);
    commands_and_expiry(&mut p);
    lua_conversions_and_errors(&mut p);
    // NOSCRIPT before loading, then every script loaded under the same SHA1 on both.
    script(&mut p, "compare_and_delete", &["c:x"], &["v", "0"], EXACT);
    for (_, source) in quorumlock::lua_scripts() {
        p.check(0, &["SCRIPT", "LOAD", source], EXACT);
    }
    single_key_locks(&mut p);
    reentrant_locks(&mut p);
    key_sets_and_elections(&mut p);
    slots(&mut p);
    restart_protection(&mut p);
    resp3(&mut p);
    eprintln!(
        "conformance: {} replies compared, {} differ",
        p.compared,
        p.mismatches.len()
    );
    assert!(
        p.mismatches.is_empty(),
        "the simulated master differs from redis-server:\n{}",
        p.mismatches.join("\n")
    );
}
