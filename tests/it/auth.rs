//! AUTH through the node URL: a password (`redis://:pw@`) or an ACL user (`redis://user:pw@`)
//! works; wrong credentials give a typed error naming the node, with the password redacted.

use crate::support;

use std::time::Duration;

use quorumlock::{LockError, NodeErrorKind};
use quorumlock_testkit::RedisCluster;
use support::{cluster, patient_builder};

const TTL: Duration = Duration::from_secs(10);

/// Three masters that require `PASSWORD` for the default user and know user `alice` with
/// `ALICE_PASSWORD` (set at run time: the test kit's readiness check speaks without AUTH).
fn secured() -> RedisCluster {
    let cluster = cluster(3);
    for master in &cluster {
        master
            .command(&[
                "ACL",
                "SETUSER",
                "alice",
                "on",
                ">alice-pw",
                "~*",
                "&*",
                "+@all",
            ])
            .expect("ACL SETUSER");
        master
            .command(&["CONFIG", "SET", "requirepass", "s3cret-pw"])
            .expect("CONFIG SET requirepass");
    }
    cluster
}

/// The cluster's URLs with `userinfo@` inserted.
fn with_credentials(cluster: &RedisCluster, userinfo: &str) -> Vec<String> {
    cluster
        .urls()
        .iter()
        .map(|url| url.replace("redis://", &format!("redis://{userinfo}@")))
        .collect()
}

/// The right password, or the right ACL user and password, get the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_and_acl_user_get_the_lock() {
    let cluster = secured();
    for userinfo in [":s3cret-pw", "alice:alice-pw"] {
        let locks = patient_builder(&with_credentials(&cluster, userinfo))
            .build()
            .expect("manager");
        let guard = locks.try_lock("secured", TTL).await.expect("lock");
        guard.release().await.expect("release");
    }
}

/// Wrong credentials (no password, a wrong one, a wrong ACL password) fail with a
/// non-retryable `QuorumUnreachable` whose node errors are `Auth` errors naming each node,
/// password redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_typed_errors_naming_the_node() {
    let cluster = secured();
    for (userinfo, secret) in [
        (":wrong-pw", Some("wrong-pw")),
        ("alice:bad-pw", Some("bad-pw")),
        ("", None),
    ] {
        let urls = if userinfo.is_empty() {
            cluster.urls()
        } else {
            with_credentials(&cluster, userinfo)
        };
        let locks = patient_builder(&urls).build().expect("manager");
        let error = locks.try_lock("secured", TTL).await.expect_err("refused");
        assert!(
            matches!(error, LockError::QuorumUnreachable { .. }),
            "{userinfo}: {error}"
        );
        let text = error.to_string();
        // Decided as soon as a quorum is impossible: two failures of three suffice.
        assert!(error.node_errors().len() >= 2, "{text}");
        let ports = cluster.ports();
        for failure in error.node_errors() {
            assert!(
                ports
                    .iter()
                    .any(|p| failure.node().ends_with(&format!(":{p}"))),
                "{text}"
            );
            if secret.is_some() {
                assert!(failure.node().contains(":***@"), "{text}");
            }
            assert!(
                matches!(failure.kind(), NodeErrorKind::Auth(_)),
                "{userinfo}: {failure}"
            );
            assert!(
                failure.to_string().contains("authentication failed"),
                "the message says what was refused: {failure}"
            );
        }
        // Retrying cannot fix credentials: `lock` gives up at once instead of retrying.
        assert!(!error.is_retryable(), "{text}");
        if let Some(secret) = secret {
            assert!(!text.contains(secret), "password in the message: {text}");
            assert!(
                !format!("{error:?}").contains(secret),
                "password in Debug: {error:?}"
            );
        }
    }
}
