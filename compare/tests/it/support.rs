//! What every subject's tests check, on `&dyn LockSubject`, and waiting for conditions with a
//! deadline instead of sleeping.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_compare::{LockSubject, SubjectError};

/// How long a test waits for what should happen within a second or two, on a loaded machine.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// A holds; B's attempt and B's wait are refused; A's release lets B in; B's token is above
/// A's when the subject fences.
pub(crate) async fn exclusion_and_release(a: &dyn LockSubject, b: &dyn LockSubject) {
    let resource = "exclusion";
    let held = a
        .try_acquire(resource)
        .await
        .expect("a takes the free lock");
    let refused = b
        .try_acquire(resource)
        .await
        .expect_err("b was granted a held lock");
    assert!(
        matches!(refused, SubjectError::Contended { .. }),
        "{refused}"
    );
    let waited = b
        .acquire(resource, Instant::now() + Duration::from_millis(300))
        .await
        .expect_err("b's wait was granted a held lock");
    assert!(
        matches!(waited, SubjectError::DeadlinePassed { .. }),
        "{waited}"
    );
    let first = held.token();
    held.release().await.expect("a releases");
    let next = b
        .try_acquire(resource)
        .await
        .expect("b takes the released lock");
    if a.fences() {
        let (first, next) = (first.expect("a's token"), next.token().expect("b's token"));
        assert!(next > first, "token {next} after {first}");
    }
    next.release().await.expect("b releases");
}

/// A waiter blocked on a held lock is granted once the holder releases, well before its
/// deadline.
pub(crate) async fn release_wakes_a_waiter(a: &dyn LockSubject, b: &dyn LockSubject) {
    let resource = "handover";
    let held = a
        .try_acquire(resource)
        .await
        .expect("a takes the free lock");
    let deadline = Instant::now() + PATIENCE;
    let (granted, ()) = tokio::join!(b.acquire(resource, deadline), async {
        // Long enough for b to queue on most runs; the test holds either way.
        tokio::time::sleep(Duration::from_millis(200)).await;
        held.release().await.expect("a releases");
    });
    let granted = granted.expect("b is granted after the release");
    assert!(Instant::now() < deadline);
    granted.release().await.expect("b releases");
}

/// Tasks of two clients take turns; never two inside at once; tokens strictly increase from
/// grant to grant.
pub(crate) async fn turns_never_overlap(a: Arc<dyn LockSubject>, b: Arc<dyn LockSubject>) {
    let resource = "turns";
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = [&a, &a, &b, &b]
        .into_iter()
        .map(|subject| {
            let subject = Arc::clone(subject);
            let inside = Arc::clone(&inside);
            let tokens = Arc::clone(&tokens);
            tokio::spawn(async move {
                for _ in 0..4 {
                    let held = subject
                        .acquire(resource, Instant::now() + PATIENCE)
                        .await
                        .expect("granted within the patience");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    tokens.lock().expect("tokens").push(held.token());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    held.release().await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task panicked");
    }
    let tokens = tokens.lock().expect("tokens").clone();
    assert_eq!(tokens.len(), 16);
    if a.fences() {
        let tokens: Vec<u64> = tokens.into_iter().map(|t| t.expect("token")).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "tokens not increasing: {tokens:?}"
        );
    }
}
