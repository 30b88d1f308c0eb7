//! Holds kept by leases: a lease worker per client takes one of two resources and keeps it with
//! the library's lease ([`LockGuard::keep_alive`](quorumlock::LockGuard::keep_alive)) for
//! longer than its TTL, renewed in the background; a campaigner per client campaigns in one
//! election ([`Election::campaign`](quorumlock::Election::campaign)) and leads for a while.
//! Either believes it holds from the grant until its lease says it lost
//! ([`Lease::lost`](quorumlock::Lease::lost)) or until it starts releasing (resigning): those
//! are its holds, so that mutual exclusion covers leases and leadership (at most one leader at
//! once), and token order their fencing tokens.

use std::rc::Rc;
use std::time::Duration;

use quorumlock::{CampaignOptions, LeaseOptions, Redlock};

use super::checker::Granted;
use super::history::Kind;
use super::host::now;
use super::workload::{cancellable, Client};
use crate::seed::SeedRng;

/// The resources lease workers hold.
const LEASED: u64 = 2;
/// The election every campaigner runs in.
pub const ELECTION: &str = "lead";

/// A hold from its grant until now ("until further notice": ended by [`Client::end`]).
fn open_ended(asked: Duration, ttl: Duration) -> Granted {
    // Any validity: the hold ends when its holder learns that its lease ended, or releases.
    Granted::of_rounds(asked, ttl, Duration::from_secs(24 * 3600))
}

/// How long a holder keeps what it got: mostly a few renewals, sometimes far past its TTL.
fn keep_for(rng: &mut SeedRng, ttl: Duration) -> Duration {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(1000);
    match rng.below(10) {
        0..3 => Duration::from_millis(rng.below(ms)),
        3..9 => Duration::from_millis(ms + rng.below(3 * ms)),
        _ => Duration::from_millis(4 * ms + rng.below(4 * ms)),
    }
}

/// The lease worker of `client`, until the stop time.
pub async fn lease_worker(client: Rc<Client>, locks: Redlock, mut rng: SeedRng) {
    while now() < client.stop_at {
        let ttl = Duration::from_millis(150 + rng.below(450));
        let resource = format!("lease{}", rng.below(LEASED));
        let cancel_after = rng
            .one_in(10)
            .then(|| Duration::from_micros(rng.below(20_000)));
        let op = client.begin();
        let asked = now();
        let got = cancellable(
            cancel_after,
            client.tagged(op, locks.try_lock(&resource, ttl)),
        )
        .await;
        let Some(Ok(guard)) = got else {
            client.done(op);
            tokio::time::sleep(Duration::from_millis(5 + rng.below(30))).await;
            continue;
        };
        let opts = LeaseOptions::new();
        let lease = match guard.keep_alive(opts) {
            Ok(lease) => lease,
            Err(refused) => {
                // The options are the defaults for a TTL the manager accepted: never refused.
                let _ = refused.into_guard().release().await;
                client.done(op);
                continue;
            }
        };
        let holds = client.granted(
            Kind::Lease,
            &[resource],
            open_ended(asked, ttl),
            lease.fence(),
        );
        let keep = keep_for(&mut rng, ttl);
        // Biased: the order among ready branches must come from the seed, not tokio's draw.
        tokio::select! {
            biased;
            _ = lease.lost() => {}
            () = tokio::time::sleep(keep) => {}
        }
        client.end_leased(&holds, lease.valid_until());
        let _ = lease.release().await;
        client.done(op);
        tokio::time::sleep(Duration::from_millis(rng.below(50))).await;
    }
}

/// The campaigner of `client` in [`ELECTION`], until the stop time: campaigns with a deadline,
/// leads for a while (or until its leadership is lost), resigns.
pub async fn campaigner(client: Rc<Client>, locks: Redlock, mut rng: SeedRng) {
    let identity = format!("c{}", client.index);
    while now() < client.stop_at {
        let ttl = Duration::from_millis(200 + rng.below(400));
        let patience = Duration::from_millis(200 + rng.below(1500));
        let deadline = tokio::time::Instant::now().into_std() + patience;
        let opts = CampaignOptions::new()
            .lease(LeaseOptions::new().ttl(ttl))
            .poll_every(Duration::from_millis(100))
            .deadline(deadline);
        let cancel_after = rng
            .one_in(10)
            .then(|| Duration::from_micros(rng.below(30_000)));
        let op = client.begin();
        let asked = now();
        let campaign = locks.election(ELECTION).campaign(&identity, opts);
        let got = cancellable(cancel_after, client.tagged(op, campaign)).await;
        let Some(Ok(leadership)) = got else {
            client.done(op);
            tokio::time::sleep(Duration::from_millis(rng.below(50))).await;
            continue;
        };
        let holds = client.granted(
            Kind::Leader,
            &[format!("election:{ELECTION}")],
            open_ended(asked, ttl),
            Some(leadership.fence()),
        );
        let keep = keep_for(&mut rng, ttl);
        tokio::select! {
            biased;
            _ = leadership.lost() => {}
            () = tokio::time::sleep(keep) => {}
        }
        client.end_leased(&holds, leadership.handle().valid_until());
        let _ = leadership.resign().await;
        client.done(op);
        tokio::time::sleep(Duration::from_millis(rng.below(100))).await;
    }
}
