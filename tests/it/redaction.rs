//! A password given in a node URL never shows in an error, a `Debug` output or a node name.

use crate::support;

use std::time::Duration;

use quorumlock::{ConfigError, Redlock};
use support::{builder, cluster, dead_port};

const SECRET: &str = "sekrit";
const TTL: Duration = Duration::from_secs(10);

/// A dead master behind a password URL: the unreachable error names it without the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_master_error_hides_the_password() {
    let (_reserved, addr) = dead_port();
    let url = format!("redis://user:{SECRET}@{addr}");
    let locks = builder(&[&url]).build().expect("build manager");
    assert_hidden(&format!("{locks:?}"));
    let names: Vec<&str> = locks.node_names().collect();
    assert_eq!(names, [format!("redis://user:***@{addr}")]);

    let error = locks
        .try_lock("job", TTL)
        .await
        .expect_err("nothing listens");
    assert_eq!(error.node_errors().len(), 1, "{error}");
    assert_eq!(
        error.node_errors()[0].node(),
        format!("redis://user:***@{addr}")
    );
    assert_hidden(&error.to_string());
    assert_hidden(&format!("{error:?}"));
}

/// A master that rejects the password gives an error without it; the right one works, unshown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_password_error_hides_the_password() {
    let cluster = cluster(1);
    let master = &cluster[0];
    master
        .command(&[
            "ACL",
            "SETUSER",
            "alice",
            "on",
            ">right-pass",
            "~*",
            "+@all",
        ])
        .expect("ACL SETUSER");

    let wrong = format!("redis://alice:{SECRET}@127.0.0.1:{}", master.port());
    let locks = builder(&[&wrong]).build().expect("build manager");
    let error = locks
        .try_lock("job", TTL)
        .await
        .expect_err("wrong password");
    assert_eq!(error.node_errors().len(), 1, "{error}");
    assert_hidden(&error.to_string());
    assert_hidden(&format!("{error:?}"));

    let right = format!("redis://alice:right-pass@127.0.0.1:{}", master.port());
    let locks = Redlock::builder()
        .node(&right)
        .node_timeout(support::NODE_TIMEOUT)
        .build()
        .expect("build manager");
    assert!(!format!("{locks:?}").contains("right-pass"), "{locks:?}");
    let guard = locks.try_lock("job", TTL).await.expect("right password");
    assert!(!format!("{guard:?}").contains("right-pass"));
    guard.release().await.expect("release");
}

/// A URL that forgot its `redis://` (or mistyped it) is rejected without showing its password.
#[test]
fn password_in_url_without_scheme_is_redacted() {
    for url in [
        format!("user:{SECRET}@127.0.0.1:7004"),
        format!("redis:/user:{SECRET}@127.0.0.1:7004"),
        format!("redis//user:{SECRET}@127.0.0.1:7004"),
    ] {
        let error = Redlock::builder()
            .node(&url)
            .build()
            .expect_err("no scheme");
        assert!(
            matches!(error, ConfigError::InvalidUrl { .. }),
            "{url}: {error:?}"
        );
        assert_hidden(&format!("{error} / {error:?}"));
    }
}

/// A password with an unescaped `/`, `?` or `#` (common when generated) is never shown.
#[test]
fn password_with_reserved_characters_is_redacted() {
    for password in ["sek/rit", "sek?rit", "sek#rit"] {
        let url = format!("redis://user:{password}@127.0.0.1:7004");
        let shown = match Redlock::builder().node(&url).build() {
            Ok(locks) => format!("{locks:?}"),
            Err(error) => format!("{error} / {error:?}"),
        };
        assert!(!shown.contains("sek"), "{url}: {shown}");
        assert!(!shown.contains("rit"), "{url}: {shown}");
    }
}

fn assert_hidden(shown: &str) {
    assert!(!shown.contains(SECRET), "the password leaked: {shown}");
}
