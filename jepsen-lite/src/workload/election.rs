//! The election worker's loop: campaign, lead for a few writes, resign; again.
//!
//! While leader it writes through the fenced store: before each write it checks its validity
//! (and stops leading when none is left), then works a little more, then writes: a pause in
//! that gap (the controller's `SIGSTOP`) makes the write stale, which the store must reject.
//! It stops leading when [`lost`](quorumlock::Leadership::lost) resolves or a write is
//! rejected.
//!
//! Mutants: `keep-leading` ignores `lost()` and a rejected write and keeps believing it leads
//! (its validity, as it reports it, is always a full TTL minus the drift from the check, as if
//! every renewal had succeeded): the claims checker must find it overlapping the next leader.
//! `never-resign` leads until its lease is lost (a kill or a pause): leadership stops changing,
//! which the progress check must catch.

use std::time::Duration;

use quorumlock::{CampaignOptions, LeaseOptions, Redlock};
use rand::RngExt;

use super::request::Kind;
use super::worker::{valid_until_ns, Reporter, WorkerConfig};
use super::{Mutant, ELECTION};
use crate::clock::now_ns;

/// Runs the worker until it is killed.
///
/// # Errors
///
/// Lease options the library refuses.
pub async fn run(
    locks: &Redlock,
    cfg: &WorkerConfig,
    reporter: &mut Reporter,
) -> Result<(), Box<dyn std::error::Error>> {
    let pid = std::process::id();
    let mut rng = cfg.process_rng();
    let ttl = cfg.ttl();
    let believed = super::believed_validity(ttl);
    let opts = CampaignOptions::new().lease(LeaseOptions::new().ttl(ttl).renew_every(ttl / 3));
    let election = [ELECTION.to_string()];
    let mut claim = 0u64;
    loop {
        claim += 1;
        let identity = format!("w{}-p{pid}-c{claim}", cfg.id);
        let mut call = reporter.about(Kind::Call, claim, &election, None);
        call.identity = identity.clone();
        reporter.send(&call).await;
        let leadership = match locks
            .election(ELECTION)
            .campaign(&identity, opts.clone())
            .await
        {
            Ok(l) => l,
            Err(e) => {
                reporter.refused(claim, &[], e.to_string()).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let token = leadership.fence();
        let mut grant = reporter.grant(claim, &election, token, call.at_ns, leadership.remaining());
        grant.identity = identity.clone();
        grant.renewed = true;
        reporter.send(&grant).await;

        let keep_leading = cfg.mutant == Some(Mutant::KeepLeading);
        let writes = if cfg.mutant == Some(Mutant::NeverResign) {
            usize::MAX
        } else {
            rng.random_range(2..=8)
        };
        let mut ended: Option<String> = None;
        for _ in 0..writes {
            let work = Duration::from_millis(rng.random_range(30..120));
            tokio::select! {
                lost = leadership.lost(), if !keep_leading => {
                    ended = Some(format!("lost: {lost}"));
                    break;
                }
                () = tokio::time::sleep(work) => {}
            }
            let checked = if keep_leading {
                let now = now_ns();
                (now, now + believed)
            } else {
                let remaining = leadership.remaining();
                if remaining.is_zero() {
                    ended = Some("validity ran out".into());
                    break;
                }
                valid_until_ns(remaining)
            };
            // Work between the check and the write: a pause here makes the write stale.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..40))).await;
            if !reporter.write(claim, ELECTION, token, Some(checked)).await && !keep_leading {
                ended = Some("write rejected".into());
                break;
            }
        }
        match ended {
            Some(why) => {
                reporter.end(claim, &election, token, why).await;
                drop(leadership);
            }
            None => {
                reporter.end(claim, &election, token, "resign".into()).await;
                let _ = leadership.resign().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..150))).await;
    }
}
