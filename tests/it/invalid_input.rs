//! Bad arguments and bad configurations are rejected with typed errors, before any master is
//! contacted.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::limits;
use quorumlock::{ConfigError, InvalidArgument, LockError, Redlock};
use support::{calls, cluster, manager};

/// Whether an argument error is the one a case expects.
type Expected = fn(&InvalidArgument) -> bool;

/// Each bad argument gives its `InvalidArgument` from every acquire method, asking no master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_typed_errors_and_reach_no_master() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let second = Duration::from_secs(1);
    let too_long = limits::MAX_TTL + Duration::from_millis(1);
    let cases: Vec<(&str, Duration, Expected)> = vec![
        ("", second, |a| matches!(a, InvalidArgument::EmptyResource)),
        (
            "job",
            Duration::ZERO,
            |a| matches!(a, InvalidArgument::ZeroTtl(d) if d.is_zero()),
        ),
        ("job", Duration::from_micros(999), |a| {
            matches!(a, InvalidArgument::ZeroTtl(_))
        }),
        ("job", Duration::from_millis(2), |a| {
            matches!(a, InvalidArgument::TtlTooShort { ttl, drift }
                if *ttl == Duration::from_millis(2) && *drift >= *ttl)
        }),
        ("job", too_long, |a| {
            matches!(a, InvalidArgument::TtlTooLong { ttl, max }
                if *ttl == limits::MAX_TTL + Duration::from_millis(1) && *max == limits::MAX_TTL)
        }),
        ("job", Duration::MAX, |a| {
            matches!(a, InvalidArgument::TtlTooLong { .. })
        }),
    ];
    for (resource, ttl, expected) in cases {
        let deadline = Instant::now() + second;
        let outcomes = [
            locks.try_lock(resource, ttl).await,
            locks.lock(resource, ttl).await,
            locks.lock_until(resource, ttl, deadline).await,
        ];
        for outcome in outcomes {
            match outcome {
                Err(LockError::InvalidArgument(ref argument)) if expected(argument) => {
                    let error = outcome.expect_err("matched an error");
                    assert!(!error.is_retryable(), "{error}");
                    let text = error.to_string();
                    assert!(text.starts_with("invalid argument: "), "{text}");
                    assert!(!text.ends_with('.'), "{text}");
                }
                other => panic!("resource {resource:?}, ttl {ttl:?}: got {other:?}"),
            }
        }
    }
    for master in &cluster {
        assert_eq!(calls(master, "set"), 0, "a master was asked");
        assert_eq!(calls(master, "script"), 0, "a master was connected to");
    }
}

/// `extend` with a bad TTL is rejected before anything is sent, and the lock stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_with_a_bad_ttl_leaves_the_lock_alone() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let mut guard = locks
        .try_lock("job", Duration::from_secs(10))
        .await
        .expect("lock");
    let valid_until = guard.valid_until();
    for ttl in [Duration::ZERO, Duration::from_millis(2), Duration::MAX] {
        let error = guard.extend(ttl).await.expect_err("bad ttl");
        assert!(
            matches!(error, LockError::InvalidArgument(_)),
            "ttl {ttl:?}: {error:?}"
        );
        assert_eq!(guard.valid_until(), valid_until);
    }
    guard.release().await.expect("release");
}

/// Each bad configuration gives its `ConfigError`, with any password in a URL redacted.
#[test]
fn bad_configurations_are_config_errors() {
    let three = || {
        Redlock::builder().nodes([
            "redis://127.0.0.1:7001",
            "redis://127.0.0.1:7002",
            "redis://127.0.0.1:7003",
        ])
    };
    let build_error = |builder: quorumlock::RedlockBuilder| {
        builder
            .build()
            .expect_err("the configuration must be rejected")
    };

    assert_eq!(build_error(Redlock::builder()), ConfigError::NoNodes);
    assert_eq!(
        build_error(three().drift_factor(1.0)),
        ConfigError::DriftFactor(1.0)
    );
    assert_eq!(
        build_error(three().node_timeout(Duration::ZERO)),
        ConfigError::ZeroNodeTimeout
    );

    for url in [
        "http://user:sekrit@127.0.0.1:7004",
        "redis://user:sekrit@[::1",
        "redis://user:sekrit@127.0.0.1:notaport",
        "redis://user:sekrit@127.0.0.1:7004/notadb",
    ] {
        let error = build_error(three().node(url));
        assert!(
            matches!(error, ConfigError::InvalidUrl { .. }),
            "{url}: {error:?}"
        );
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("sekrit"), "{url}: {shown}");
    }

    let error = build_error(three().node("redis://user:sekrit@127.0.0.1:7002/3"));
    match &error {
        ConfigError::DuplicateNode { url } => {
            assert_eq!(url, "redis://user:***@127.0.0.1:7002/3");
        }
        other => panic!("expected DuplicateNode, got {other:?}"),
    }
    assert!(!format!("{error} {error:?}").contains("sekrit"), "{error}");
}
