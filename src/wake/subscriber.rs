//! One master's pub/sub connection, shared by every waiter of a manager: opened when the first
//! waiter arrives, it follows the set of wanted channels (subscribing to new ones, dropping
//! those no waiter waits on any more) and hands every release it hears to the waiters.
//!
//! Runs on a task of its own, so a paused or dead master only delays its own subscriptions;
//! waiters wait for a quorum of masters' confirmations, never for every master.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::Inner;
use crate::error::NodeErrorKind;
use crate::transport::endpoint::Endpoint;
use crate::transport::pubsub::{Event, PubSub};

/// The first wait before reconnecting a broken or refused connection, doubled up to
/// [`MAX_BACKOFF`]: a master that is down costs a connection attempt now and then, nothing
/// more.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A master's subscription state as waiters see it.
#[derive(Debug, Default)]
pub(crate) struct Status {
    /// Woken whenever the task has something new to do (the wanted set changed, the hub went).
    pub(crate) poke: Notify,
    /// The version of the wanted set this master's subscriptions match.
    pub(crate) synced: AtomicU64,
    /// The last version this master failed to reach (connection refused or broken).
    pub(crate) failed: AtomicU64,
}

/// The task's own state.
pub(crate) struct Subscriber {
    pub(crate) hub: Weak<Inner>,
    pub(crate) index: usize,
    pub(crate) endpoint: Arc<Endpoint>,
    pub(crate) status: Arc<Status>,
    pub(crate) timeout: Duration,
}

impl Subscriber {
    /// Runs until the hub (the manager and every waiter) is gone.
    pub(crate) async fn run(self) {
        let mut conn: Option<PubSub> = None;
        let mut actual: HashSet<Arc<str>> = HashSet::new();
        let mut backoff = FIRST_BACKOFF;
        // Whether a connection carrying subscriptions broke: releases may have been missed.
        let mut lost = false;
        loop {
            let poked = self.status.poke.notified();
            tokio::pin!(poked);
            poked.as_mut().enable();
            let Some((version, wanted)) = self.hub.upgrade().map(|hub| hub.wanted()) else {
                return;
            };
            let wanted: HashSet<Arc<str>> = wanted.into_iter().collect();
            if wanted != actual || (conn.is_none() && !wanted.is_empty()) {
                if let Err(error) = self.sync(&mut conn, &mut actual, &wanted).await {
                    tracing::debug!(node = self.index, %error, "pub/sub connection failed; waiters fall back to polling");
                    lost |= !actual.is_empty();
                    conn = None;
                    actual.clear();
                    self.status.failed.fetch_max(version, Ordering::AcqRel);
                    self.progress();
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                backoff = FIRST_BACKOFF;
                if std::mem::take(&mut lost) {
                    if let Some(hub) = self.hub.upgrade() {
                        let woken = hub.lines().resync();
                        tracing::debug!(
                            node = self.index,
                            woken,
                            "resubscribed after a broken connection; waiters woken"
                        );
                    }
                }
            }
            if self.status.synced.fetch_max(version, Ordering::AcqRel) < version {
                self.progress();
            }
            match conn.as_mut() {
                // `next` keeps what it read when a poke cancels it.
                Some(pubsub) => tokio::select! {
                    event = pubsub.next() => match event {
                        Ok(event) => self.dispatch(event),
                        Err(error) => {
                            tracing::debug!(node = self.index, %error, "pub/sub connection lost; resubscribing");
                            lost |= !actual.is_empty();
                            conn = None;
                            actual.clear();
                        }
                    },
                    () = &mut poked => {}
                },
                None => poked.await,
            }
        }
    }

    /// Makes the master's subscriptions match `wanted`, connecting first if needed, and waits
    /// until the master confirmed every change (dispatching the releases heard meanwhile). An
    /// error leaves the connection unusable: the caller drops it.
    async fn sync(
        &self,
        conn: &mut Option<PubSub>,
        actual: &mut HashSet<Arc<str>>,
        wanted: &HashSet<Arc<str>>,
    ) -> Result<(), NodeErrorKind> {
        let bounded = |what: &'static str| {
            let timeout = self.timeout;
            move |_| NodeErrorKind::Connect(format!("{what} timed out after {timeout:?}"))
        };
        if conn.is_none() {
            let opened = tokio::time::timeout(self.timeout, PubSub::open(&self.endpoint))
                .await
                .map_err(bounded("connecting"))??;
            *conn = Some(opened);
        }
        let Some(pubsub) = conn.as_mut() else {
            return Err(NodeErrorKind::Connect("no connection".into()));
        };
        // Sorted: the same commands, byte for byte, whatever the hash order (a simulated run
        // replays exactly).
        let mut add: Vec<&str> = wanted.difference(actual).map(|c| &**c).collect();
        let mut remove: Vec<&str> = actual.difference(wanted).map(|c| &**c).collect();
        add.sort_unstable();
        remove.sort_unstable();
        let confirmed = async {
            pubsub.send(&add, &remove).await?;
            // The master confirms each channel once, in order: the subscriptions first.
            let (mut subscribed, mut unsubscribed) = (0, 0);
            while subscribed < add.len() || unsubscribed < remove.len() {
                match pubsub.next().await? {
                    Event::Subscribed => subscribed += 1,
                    Event::Unsubscribed => unsubscribed += 1,
                    message @ Event::Message { .. } => self.dispatch(message),
                }
            }
            Ok::<_, NodeErrorKind>(())
        };
        tokio::time::timeout(self.timeout, confirmed)
            .await
            .map_err(bounded("subscribing"))??;
        actual.clone_from(wanted);
        Ok(())
    }

    fn dispatch(&self, event: Event) {
        let Event::Message { channel, payload } = event else {
            return;
        };
        // Our channels are lock keys, which are text: another name is no release of ours.
        let (Some(hub), Ok(channel)) = (self.hub.upgrade(), std::str::from_utf8(&channel)) else {
            return;
        };
        let woken = hub.lines().released(channel, self.index, &payload);
        tracing::trace!(node = self.index, woken, "release heard");
    }

    fn progress(&self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.progress.notify_waiters();
        }
    }
}
