//! The kit against real `redis-server` processes.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use super::*;

type TestResult = Result<(), TestingError>;

fn start(persistence: Persistence) -> Result<RedisMaster, TestingError> {
    RedisMaster::start(MasterOptions::new().persistence(persistence))
}

/// Whether a process with this pid exists (zombies included).
fn exists(pid: u32) -> bool {
    let pid = Pid::from_raw(i32::try_from(pid).expect("pid fits i32"));
    match kill(pid, None) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(e) => panic!("kill(pid, 0) failed: {e}"),
    }
}

/// SET and GET round-trip through `command`, and replies render as documented.
#[test]
fn command_round_trips() -> TestResult {
    let master = start(Persistence::None)?;
    assert_eq!(master.url(), format!("redis://127.0.0.1:{}", master.port()));
    assert_eq!(master.command(&["SET", "k", "v"])?, "OK");
    assert_eq!(master.command(&["GET", "k"])?, "v");
    assert_eq!(master.command(&["GET", "missing"])?, "(nil)");
    assert_eq!(master.query(&["EXISTS", "k"])?, Reply::Integer(1));
    assert_eq!(master.command(&["KEYS", "*"])?, "k");
    assert_eq!(master.command(&["KEYS", "nothing*"])?, "");
    let err = master
        .command(&["INCR", "k"])
        .expect_err("INCR of a string");
    assert!(
        matches!(&err, TestingError::ServerError { message, .. } if message.starts_with("ERR")),
        "{err}"
    );
    master.ping(Duration::from_secs(5))?;
    Ok(())
}

/// Without persistence a killed master comes back empty, on the same port.
#[test]
fn kill_and_restart_without_persistence_loses_data() -> TestResult {
    let mut master = start(Persistence::None)?;
    let port = master.port();
    master.command(&["SET", "k", "v"])?;
    let first_pid = master.pid().expect("running");
    master.kill()?;
    assert_eq!(master.pid(), None);
    assert!(!master.is_running());
    assert!(!exists(first_pid), "killed process was not reaped");
    assert!(matches!(
        master.command(&["GET", "k"]),
        Err(TestingError::NotRunning { .. })
    ));
    master.restart()?;
    assert_eq!(master.port(), port);
    assert_ne!(master.pid(), Some(first_pid));
    assert_eq!(master.command(&["GET", "k"])?, "(nil)");
    Ok(())
}

/// With `appendfsync always` a key survives SIGKILL and restart; `restart_empty` loses it.
#[test]
fn aof_always_keeps_keys_across_kill() -> TestResult {
    let mut master = start(Persistence::AofAlways)?;
    master.command(&["SET", "k", "v"])?;
    master.kill()?;
    master.restart()?;
    assert_eq!(master.command(&["GET", "k"])?, "v");
    master.restart_empty()?;
    assert_eq!(master.command(&["GET", "k"])?, "(nil)");
    assert_eq!(master.command(&["DBSIZE"])?, "0");
    assert!(
        master.log_file().is_file(),
        "the log survives restart_empty"
    );
    Ok(())
}

/// `restore` brings an `appendfsync always` master back with its backup's data: a key
/// acknowledged after the backup is gone, one from before it is back, in a new process.
#[test]
fn restore_brings_back_the_backups_data() -> TestResult {
    let mut master = start(Persistence::AofAlways)?;
    master.command(&["SET", "before", "1"])?;
    let backup = master.backup()?;
    assert_eq!(backup.port(), master.port());
    master.command(&["SET", "after", "2"])?;
    master.command(&["DEL", "before"])?;
    let old_pid = master.pid();
    master.restore(&backup)?;
    assert_ne!(master.pid(), old_pid);
    assert_eq!(master.command(&["GET", "before"])?, "1");
    assert_eq!(master.command(&["GET", "after"])?, "(nil)");
    assert!(master.log_file().is_file(), "the log survives a restore");
    // The backup can be restored again, and a plain restart keeps what the restore loaded.
    master.command(&["SET", "after", "3"])?;
    master.restore(&backup)?;
    assert_eq!(master.command(&["GET", "after"])?, "(nil)");
    master.restart()?;
    assert_eq!(master.command(&["GET", "before"])?, "1");
    Ok(())
}

/// `stop` is graceful and idempotent; with `appendfsync everysec` the key survives it.
#[test]
fn stop_then_restart_keeps_aof_everysec_data() -> TestResult {
    let mut master = start(Persistence::AofEverySec)?;
    master.command(&["SET", "k", "v"])?;
    master.pause()?;
    master.stop()?;
    assert!(!master.is_running());
    master.stop()?;
    master.kill()?;
    master.restart()?;
    assert_eq!(master.command(&["GET", "k"])?, "v");
    assert!(master.dir().join("appendonlydir").is_dir());
    Ok(())
}

/// A paused master answers nothing until it is resumed, then answers.
#[test]
fn pause_blocks_replies_until_resume() -> TestResult {
    let mut master = start(Persistence::None)?;
    master.pause()?;
    assert!(master.is_paused() && master.is_running());
    let err = master
        .ping(Duration::from_millis(200))
        .expect_err("a paused server answered PING");
    assert!(err.is_timeout(), "{err}");
    let err = master
        .wait_ready(Duration::from_millis(300))
        .expect_err("a paused server was ready");
    assert!(matches!(err, TestingError::NotReady { .. }), "{err}");
    master.resume()?;
    assert!(!master.is_paused());
    master.ping(Duration::from_secs(5))?;
    master.wait_ready(Duration::from_secs(5))?;
    assert_eq!(master.command(&["SET", "k", "v"])?, "OK");
    Ok(())
}

/// Dropping a master kills and reaps its process, even a paused one, and removes its directory.
#[test]
fn drop_kills_reaps_and_cleans_up() -> TestResult {
    let mut master = start(Persistence::AofEverySec)?;
    master.pause()?;
    let pid = master.pid().expect("running");
    let dir = master.dir().to_path_buf();
    assert!(dir.is_dir());
    drop(master);
    assert!(!exists(pid), "pid {pid} still exists after drop");
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
    Ok(())
}

/// Five masters start quickly on distinct ports, and all answer.
#[test]
fn cluster_of_five_on_distinct_ports() -> TestResult {
    let started = Instant::now();
    let mut cluster = RedisCluster::start(5)?;
    let elapsed = started.elapsed();
    eprintln!("5 masters ready in {elapsed:?}");
    assert_eq!(cluster.len(), 5);
    assert!(!cluster.is_empty());
    let ports: HashSet<u16> = cluster.ports().into_iter().collect();
    assert_eq!(ports.len(), 5, "ports {:?}", cluster.ports());
    let urls = cluster.urls();
    for (master, url) in cluster.iter().zip(&urls) {
        assert_eq!(&master.url(), url);
        master.ping(Duration::from_secs(5))?;
    }
    assert!(cluster.get(5).is_none());
    cluster[2].pause()?;
    assert!(cluster.get(2).is_some_and(RedisMaster::is_paused));
    let pids: Vec<u32> = cluster.iter().filter_map(RedisMaster::pid).collect();
    assert_eq!(pids.len(), 5);
    drop(cluster);
    for pid in pids {
        assert!(!exists(pid), "pid {pid} outlived its cluster");
    }
    Ok(())
}

/// A fresh master whose port is taken before it binds moves to another port.
#[test]
fn taken_port_moves_a_fresh_master() -> TestResult {
    let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, free_port()?)).expect("bind");
    let taken = squatter.local_addr().expect("addr").port();
    let mut master = RedisMaster::launch_on(MasterOptions::default(), taken)?;
    master.finish_start()?;
    assert_ne!(master.port(), taken);
    master.ping(Duration::from_secs(5))?;
    Ok(())
}

/// A server of someone else on our port is not mistaken for ours: ours moves to another port.
#[test]
fn port_held_by_another_server_is_not_mistaken_for_ours() -> TestResult {
    let other = start(Persistence::None)?;
    other.command(&["SET", "owner", "other"])?;
    let mut master = RedisMaster::launch_on(MasterOptions::default(), other.port())?;
    master.finish_start()?;
    assert_ne!(master.port(), other.port());
    assert_eq!(master.command(&["GET", "owner"])?, "(nil)");
    Ok(())
}

/// A restart whose port was taken meanwhile fails with `AddrInUse`, leaving nothing running.
#[test]
fn restart_on_taken_port_fails_cleanly() -> TestResult {
    let mut master = start(Persistence::None)?;
    master.kill()?;
    let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, master.port())).expect("bind");
    let err = master.restart().expect_err("restart on a taken port");
    assert!(
        matches!(&err, TestingError::AddrInUse { log_tail, .. } if log_tail.contains("in use")),
        "{err}"
    );
    assert!(!master.is_running());
    drop(squatter);
    master.restart()?;
    master.ping(Duration::from_secs(5))?;
    Ok(())
}

/// A server that rejects its arguments is reported with its own message.
#[test]
fn bad_argument_is_reported_with_stderr() {
    let err = RedisMaster::start(MasterOptions::new().args(["--no-such-directive", "1"]))
        .expect_err("redis-server accepted a bogus directive");
    assert!(
        matches!(&err, TestingError::Exited { log_tail, .. } if log_tail.contains("no-such-directive")),
        "{err}"
    );
}

/// Faults on a master that does not run report `NotRunning`; `kill` and `stop` are no-ops.
#[test]
fn operations_on_a_killed_master() -> TestResult {
    let mut master = start(Persistence::None)?;
    master.kill()?;
    master.kill()?;
    master.stop()?;
    assert!(matches!(
        master.pause(),
        Err(TestingError::NotRunning { .. })
    ));
    assert!(matches!(
        master.resume(),
        Err(TestingError::NotRunning { .. })
    ));
    assert!(matches!(
        master.wait_ready(Duration::from_secs(1)),
        Err(TestingError::NotRunning { .. })
    ));
    Ok(())
}

/// Masters and clusters can be shared with and moved to other threads, e.g. a nemesis thread.
#[test]
fn masters_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RedisMaster>();
    assert_send_sync::<RedisCluster>();
    assert_send_sync::<TestingError>();
}

/// A binary named in the options is the one run, whatever the environment names.
#[test]
fn the_options_binary_is_the_one_run() {
    let missing = std::env::temp_dir().join("quorumlock-no-such-dir/redis-server");
    let started = RedisMaster::start(MasterOptions::new().binary(&missing));
    match started {
        Err(TestingError::ServerNotFound { looked_at }) => {
            assert!(looked_at.contains("quorumlock-no-such-dir"), "{looked_at}");
        }
        other => panic!("expected the named binary to be missing, got {other:?}"),
    }
}
