use super::*;
use crate::commands;
use crate::keyspace::Keyspace;

/// Runs `body` on a fresh engine whose commands go to `keys` at time 0.
fn eval(engine: &mut Engine, keys: &mut Keyspace, body: &str, k: &[&str], a: &[&str]) -> Frame {
    let sha = match engine.load(body.as_bytes()) {
        Ok(sha) => sha,
        Err(frame) => return frame,
    };
    let bytes = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    let mut exec = |args: &[Vec<u8>]| {
        commands::execute(keys, 0, args)
            .unwrap_or_else(|| Frame::error("ERR Unknown Redis command called from script"))
    };
    engine.run(&sha, &bytes(k), &bytes(a), &mut exec)
}

fn engine() -> (Engine, Keyspace) {
    (Engine::new().expect("lua"), Keyspace::default())
}

#[test]
fn keys_and_argv_reach_the_script_and_replies_convert_back() {
    let (mut e, mut ks) = engine();
    let reply = eval(
        &mut e,
        &mut ks,
        "redis.call('set', KEYS[1], ARGV[1]) return {redis.call('get', KEYS[1]), \
         redis.call('pttl', KEYS[1]), redis.call('set', KEYS[1], 'x', 'nx')}",
        &["k"],
        &["v"],
    );
    assert_eq!(
        reply,
        Frame::Array(vec![Frame::bulk("v"), Frame::Int(-1), Frame::Nil])
    );
}

#[test]
fn numbers_sent_by_scripts_are_written_like_redis() {
    let (mut e, mut ks) = engine();
    let reply = eval(
        &mut e,
        &mut ks,
        "redis.call('set', 'a', 1000) redis.call('set', 'b', 0.5) \
         return {redis.call('get', 'a'), redis.call('get', 'b')}",
        &[],
        &[],
    );
    assert_eq!(
        reply,
        Frame::Array(vec![Frame::bulk("1000"), Frame::bulk("0.5")])
    );
}

#[test]
fn a_failed_call_raises_with_the_scripts_line_and_pcall_returns_it() {
    let (mut e, mut ks) = engine();
    eval(
        &mut e,
        &mut ks,
        "redis.call('hset', 'h', 'f', 'v')",
        &[],
        &[],
    );
    let sha = sha1_hex(b"local x = 1\nreturn redis.call('get', 'h')");
    assert_eq!(
        eval(
            &mut e,
            &mut ks,
            "local x = 1\nreturn redis.call('get', 'h')",
            &[],
            &[]
        ),
        Frame::error(format!(
            "WRONGTYPE Operation against a key holding the wrong kind of value script: {sha}, \
             on @user_script:2."
        ))
    );
    assert_eq!(
        eval(&mut e, &mut ks, "return redis.pcall('get', 'h')", &[], &[]),
        Frame::error("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
}

#[test]
fn globals_are_protected() {
    let (mut e, mut ks) = engine();
    let reply = eval(&mut e, &mut ks, "return nosuch", &[], &[]);
    let Frame::Error(text) = reply else {
        panic!("expected an error, got {reply:?}");
    };
    assert!(
        text.starts_with(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'nosuch'"
        ),
        "{text}"
    );
    for body in [
        "x = 1",
        "redis = nil",
        "redis.call = nil",
        "string.len = nil",
    ] {
        let reply = eval(&mut e, &mut ks, body, &[], &[]);
        assert!(
            matches!(&reply, Frame::Error(t) if t.contains("Attempt to modify a readonly table")),
            "{body}: {reply:?}"
        );
    }
}

#[test]
fn status_and_error_replies_and_noscript() {
    let (mut e, mut ks) = engine();
    assert_eq!(
        eval(
            &mut e,
            &mut ks,
            "return redis.status_reply('FINE')",
            &[],
            &[]
        ),
        Frame::Status("FINE".into())
    );
    assert_eq!(
        eval(
            &mut e,
            &mut ks,
            "return redis.error_reply('oops')",
            &[],
            &[]
        ),
        Frame::error("ERR oops")
    );
    assert_eq!(
        eval(
            &mut e,
            &mut ks,
            "return redis.error_reply('MY code')",
            &[],
            &[]
        ),
        Frame::error("MY code")
    );
    let mut exec = |_: &[Vec<u8>]| Frame::Nil;
    assert_eq!(
        e.run(&"0".repeat(40), &[], &[], &mut exec),
        Frame::error("NOSCRIPT No matching script. Please use EVAL.")
    );
    assert!(matches!(
        eval(&mut e, &mut ks, "return (", &[], &[]),
        Frame::Error(t) if t.starts_with("ERR Error compiling script (new function): user_script:")
    ));
}

#[test]
fn math_random_runs_on_across_scripts_from_the_same_start() {
    let (mut e, mut ks) = engine();
    let body = "return {math.random(100000), math.random(100000)}";
    // redis-server's first draws after it starts.
    assert_eq!(
        eval(&mut e, &mut ks, body, &[], &[]),
        Frame::Array(vec![Frame::Int(39_647), Frame::Int(84_049)])
    );
    let next = eval(&mut e, &mut ks, body, &[], &[]);
    assert_ne!(
        next,
        Frame::Array(vec![Frame::Int(39_647), Frame::Int(84_049)])
    );
    let (mut other, _) = engine();
    let reseeded = "math.randomseed(0) return math.random(1000)";
    // floor(366850414 / (2^31 - 1) * 1000) + 1: lrand48 after srand48(0).
    assert_eq!(
        eval(&mut other, &mut ks, reseeded, &[], &[]),
        Frame::Int(171)
    );
}
