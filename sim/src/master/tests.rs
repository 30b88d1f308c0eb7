use super::*;

fn request(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    let frame = Frame::Array(args.iter().map(Frame::bulk).collect());
    frame.write(Protocol::Resp2, &mut out);
    out
}

/// Sends one command and reads every frame written back.
fn call(master: &mut SimMaster, client: ClientId, args: &[&str]) -> Vec<Frame> {
    master.feed(client, &request(args));
    let bytes = master.take_output(client);
    let mut frames = Vec::new();
    let mut at = 0;
    while let Some((frame, used)) = resp::parse_reply(&bytes[at..]).expect("valid reply") {
        frames.push(frame);
        at += used;
    }
    frames
}

fn master() -> SimMaster {
    SimMaster::new(1, SimClock::at_micros(1_700_000_000_000_000), 6379).expect("master")
}

#[test]
fn keys_expire_on_the_simulated_clock_only() {
    let mut m = master();
    let c = m.connect("10.0.0.1:40000");
    assert_eq!(
        call(&mut m, c, &["SET", "k", "v", "NX", "PX", "100"]),
        vec![Frame::ok()]
    );
    m.advance(Duration::from_millis(100));
    assert_eq!(call(&mut m, c, &["GET", "k"]), vec![Frame::bulk("v")]);
    m.advance(Duration::from_millis(1));
    assert_eq!(call(&mut m, c, &["GET", "k"]), vec![Frame::Nil]);
}

#[test]
fn pipelined_requests_split_anywhere_are_answered_in_order() {
    let mut m = master();
    let c = m.connect("10.0.0.1:40000");
    let mut bytes = request(&["SET", "k", "1"]);
    bytes.extend(request(&["GET", "k"]));
    bytes.extend(request(&["NOPE", "x"]));
    for chunk in bytes.chunks(3) {
        m.feed(c, chunk);
    }
    let out = m.take_output(c);
    assert_eq!(
        out,
        b"+OK\r\n$1\r\n1\r\n-ERR unknown command 'NOPE', with args beginning with: 'x' \r\n"
    );
}

#[test]
fn a_script_publishes_to_subscribers_and_evalsha_needs_the_script() {
    let mut m = master();
    let (a, b) = (m.connect("10.0.0.1:1"), m.connect("10.0.0.2:2"));
    assert_eq!(
        call(&mut m, b, &["SUBSCRIBE", "ch"]),
        vec![Frame::Array(vec![
            Frame::bulk("subscribe"),
            Frame::bulk("ch"),
            Frame::Int(1)
        ])]
    );
    let body = "return redis.call('publish', KEYS[1], ARGV[1])";
    let sha = crate::script::sha1_hex(body.as_bytes());
    assert_eq!(
        call(&mut m, a, &["EVALSHA", &sha, "1", "ch", "hi"]),
        vec![Frame::error(
            "NOSCRIPT No matching script. Please use EVAL."
        )]
    );
    assert_eq!(
        call(&mut m, a, &["EVAL", body, "1", "ch", "hi"]),
        vec![Frame::Int(1)]
    );
    assert_eq!(
        call(&mut m, a, &["EVALSHA", &sha, "1", "ch", "again"]),
        vec![Frame::Int(1)]
    );
    let pushed = call(&mut m, b, &["PING"]);
    assert_eq!(pushed.len(), 3);
    assert_eq!(
        pushed[0],
        Frame::Array(vec![
            Frame::bulk("message"),
            Frame::bulk("ch"),
            Frame::bulk("hi")
        ])
    );
    assert_eq!(
        pushed[2],
        Frame::Array(vec![Frame::bulk("pong"), Frame::bulk("")])
    );
    assert!(
        matches!(&call(&mut m, b, &["GET", "k"])[0], Frame::Error(t) if t.starts_with("ERR Can't execute 'get'"))
    );
}

#[test]
fn client_kill_closes_the_orphan_and_info_tells_uptime() {
    let mut m = master();
    let old = m.connect("10.0.0.1:1");
    let new = m.connect("10.0.0.1:2");
    let info = call(&mut m, new, &["CLIENT", "INFO"]);
    assert!(matches!(&info[0], Frame::Bulk(b) if b.starts_with(b"id=2 addr=10.0.0.1:2 ")));
    assert_eq!(
        call(
            &mut m,
            new,
            &[
                "CLIENT",
                "KILL",
                "ID",
                "1",
                "ADDR",
                "10.0.0.1:1",
                "SKIPME",
                "yes"
            ]
        ),
        vec![Frame::Int(1)]
    );
    assert!(m.is_closed(old));
    assert!(!m.is_closed(new));
    m.advance(Duration::from_secs(3));
    let Frame::Bulk(info) = &call(&mut m, new, &["INFO", "server"])[0] else {
        panic!("INFO is a bulk string");
    };
    let info = String::from_utf8_lossy(info);
    assert!(info.contains("uptime_in_seconds:3\r\n"), "{info}");
    assert!(
        info.contains(&format!("run_id:{}\r\n", m.run_id())),
        "{info}"
    );
}

#[test]
fn hello_3_switches_to_resp3() {
    let mut m = master();
    let c = m.connect("10.0.0.1:1");
    m.feed(c, &request(&["HELLO", "3"]));
    assert!(m.take_output(c).starts_with(b"%7\r\n"));
    m.feed(c, &request(&["GET", "missing"]));
    assert_eq!(m.take_output(c), b"_\r\n");
}

#[test]
fn the_same_seed_gives_the_same_master() {
    let (a, b) = (master(), master());
    assert_eq!(a.run_id(), b.run_id());
}
