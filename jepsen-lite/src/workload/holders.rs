//! The rules of claims that may hold at once, over the claims the [checker](super::checker)
//! rebuilt (each from its grant to the end of its bounded belief, sorted by start) and the
//! store's log:
//! * a **semaphore** of K permits: at no moment more than K claims hold (a claim holds beside
//!   an earlier one when it starts more than [`Params::epsilon_ns`] before that one ends);
//! * a **read-write lock**: a writer's claim overlaps no other claim, reader or writer; a
//!   writer's token is above the token of every access (write or read) the store accepted
//!   before its grant, and every claim granted after the writer's claim ended has a token
//!   above the writer's.

use super::checker::{Claim, Observation, Params};
use super::request::{Access, Kind};

/// A semaphore of `permits` permits: the most claims at once, and each moment more held.
pub(super) fn permits(claims: &[Claim], permits: usize, p: &Params, obs: &mut Observation) {
    for (i, c) in claims.iter().enumerate() {
        let beside = holding_at(&claims[..i], c, p);
        obs.holders_max = obs.holders_max.max(1 + beside.len());
        if beside.len() >= permits {
            let others: Vec<String> = beside.iter().map(|d| label(d)).collect();
            obs.too_many_holders.push(format!(
                "{} holders of {permits} permits: {} granted while {} held",
                1 + beside.len(),
                label(c),
                others.join(", ")
            ));
        }
    }
}

/// A read-write lock: writers alone, and the writers' tokens in order.
pub(super) fn read_write(log: &[Access], claims: &[Claim], p: &Params, obs: &mut Observation) {
    for (i, c) in claims.iter().enumerate() {
        let beside = holding_at(&claims[..i], c, p);
        obs.holders_max = obs.holders_max.max(1 + beside.len());
        for d in beside.into_iter().filter(|d| !(d.shared && c.shared)) {
            obs.writer_not_alone.push(format!(
                "{} granted while {} held, for {:.1} ms",
                role(c),
                role(d),
                (d.end_ns - c.start_ns) as f64 / 1e6
            ));
        }
    }
    for w in claims.iter().filter(|c| !c.shared) {
        let Some(token) = w.token else {
            obs.writer_tokens.push(format!("{} has no token", role(w)));
            continue;
        };
        let earlier = log.iter().filter(|a| {
            a.accepted
                && matches!(a.req.kind, Kind::Write | Kind::Read)
                && a.time_ns < w.start_ns
                && (a.req.pid, a.req.claim) != (w.pid, w.claim)
                && a.req.token.is_some_and(|t| t >= token)
        });
        for a in earlier {
            obs.writer_tokens.push(format!(
                "{}: a {:?} of w{} p{} c{} with token {:?} was accepted before its grant",
                role(w),
                a.req.kind,
                a.req.worker,
                a.req.pid,
                a.req.claim,
                a.req.token
            ));
        }
        let later = claims
            .iter()
            .filter(|c| c.start_ns > w.end_ns && c.token.is_none_or(|t| t <= token));
        for c in later {
            obs.writer_tokens
                .push(format!("{} granted after {} ended", role(c), role(w)));
        }
    }
}

/// The claims of `earlier` (which started no later than `c`) still held when `c` started.
fn holding_at<'a>(earlier: &'a [Claim], c: &Claim, p: &Params) -> Vec<&'a Claim> {
    earlier
        .iter()
        .filter(|d| d.end_ns > c.start_ns.saturating_add(p.epsilon_ns))
        .collect()
}

/// A semaphore's claim and its permit.
fn label(c: &Claim) -> String {
    let permit = c.resources.join(", ");
    format!(
        "w{} p{} c{} ({permit}, token {:?})",
        c.worker, c.pid, c.claim, c.token
    )
}

/// A read-write lock's claim: a reader or a writer.
fn role(c: &Claim) -> String {
    let role = if c.shared { "reader" } else { "writer" };
    format!(
        "w{} p{} c{} ({role}, token {:?})",
        c.worker, c.pid, c.claim, c.token
    )
}

#[cfg(test)]
mod tests {
    use super::super::checker::Sharing;
    use super::super::request::Request;
    use super::*;

    const MS: u64 = 1_000_000;

    fn params(sharing: Sharing) -> Params {
        Params {
            ttl_ns: 1000 * MS,
            drift_ns: 12 * MS,
            slack_ns: 10 * MS,
            epsilon_ns: 2 * MS,
            liveness_bound_ns: 2500 * MS,
            progress_bound_ns: 3000 * MS,
            window: (0, 4000 * MS),
            sharing,
        }
    }

    /// Process `pid`'s claim 1 on `resource` from `start` to `end` ms.
    fn claim(pid: u32, resource: &str, shared: bool, token: u64, start: u64, end: u64) -> Claim {
        Claim {
            worker: pid as usize,
            pid,
            claim: 1,
            resources: vec![resource.to_string()],
            token: Some(token),
            identity: String::new(),
            shared,
            call_ns: start * MS,
            start_ns: start * MS,
            end_ns: end * MS,
        }
    }

    /// An access of `kind` by process `pid`'s claim 1 with `token`, arriving at `at` ms.
    fn access(kind: Kind, pid: u32, token: u64, at: u64) -> Access {
        let mut req = Request::new(kind, pid as usize);
        req.pid = pid;
        req.claim = 1;
        req.resources = vec!["t".into()];
        req.token = Some(token);
        req.at_ns = at * MS;
        Access {
            time_ns: at * MS,
            req,
            accepted: true,
        }
    }

    #[test]
    fn a_semaphore_admits_k_holders_and_catches_one_more() {
        let p = params(Sharing::Permits { permits: 2 });
        // Permits 0 and 1 held together, then a third claim as the first ends (within epsilon).
        let two = [
            claim(1, "s0", false, 10, 0, 500),
            claim(2, "s1", false, 20, 100, 900),
            claim(3, "s0", false, 11, 501, 800),
        ];
        let mut obs = Observation::default();
        permits(&two, 2, &p, &mut obs);
        assert!(
            obs.too_many_holders.is_empty(),
            "{:?}",
            obs.too_many_holders
        );
        assert_eq!(obs.holders_max, 2);
        // A third permit held beside both.
        let three = [
            two[0].clone(),
            two[1].clone(),
            claim(3, "s2", false, 5, 200, 300),
        ];
        let mut obs = Observation::default();
        permits(&three, 2, &p, &mut obs);
        assert_eq!(obs.too_many_holders.len(), 1, "{:?}", obs.too_many_holders);
        assert_eq!(obs.holders_max, 3);
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let p = params(Sharing::ReadWrite);
        let log = [
            access(Kind::Read, 1, 10, 50),
            access(Kind::Read, 2, 12, 150),
            access(Kind::Write, 3, 20, 700),
            access(Kind::Read, 4, 21, 1200),
        ];
        let clean = [
            claim(1, "t", true, 10, 0, 500),
            claim(2, "t", true, 12, 100, 600),
            claim(3, "t", false, 20, 650, 1000),
            claim(4, "t", true, 21, 1100, 1500),
        ];
        let mut obs = Observation::default();
        read_write(&log, &clean, &p, &mut obs);
        assert!(
            obs.writer_not_alone.is_empty(),
            "{:?}",
            obs.writer_not_alone
        );
        assert!(obs.writer_tokens.is_empty(), "{:?}", obs.writer_tokens);
        assert_eq!(obs.holders_max, 2);
        // A reader granted while the writer holds, and a second writer beside the first (whose
        // token is above the next reader's).
        let mut beside = clean.to_vec();
        beside.push(claim(5, "t", true, 13, 700, 800));
        beside.push(claim(6, "t", false, 30, 900, 950));
        beside.sort_by_key(|c| c.start_ns);
        let mut obs = Observation::default();
        read_write(&log, &beside, &p, &mut obs);
        assert_eq!(obs.writer_not_alone.len(), 2, "{:?}", obs.writer_not_alone);
    }

    #[test]
    fn a_writer_token_must_be_above_earlier_accesses_and_below_later_claims() {
        let p = params(Sharing::ReadWrite);
        let claims = [
            claim(1, "t", true, 25, 0, 500),
            claim(3, "t", false, 20, 650, 1000),
            claim(4, "t", true, 19, 1100, 1500),
        ];
        // A read with 25 accepted before the writer's 20, and a reader after it with 19.
        let log = [access(Kind::Read, 1, 25, 50)];
        let mut obs = Observation::default();
        read_write(&log, &claims, &p, &mut obs);
        assert_eq!(obs.writer_tokens.len(), 2, "{:?}", obs.writer_tokens);
        assert!(obs.writer_not_alone.is_empty());
    }
}
