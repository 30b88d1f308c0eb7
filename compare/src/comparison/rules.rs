//! iptables rules on loopback that a cell puts in place (packet loss, a cut between members,
//! the marks that tell a member's connections apart). Each rule carries a comment naming this
//! process and the rule, so that its counters can be read back (the proof that it took effect)
//! and so that rules left by a process that died without removing them are swept away. The
//! rules go when their guard drops: at the end of the fault, on an error, on a panic.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// The comment prefix of every rule this crate installs.
const TAG: &str = "quorumlock-compare";

static NEXT: AtomicU64 = AtomicU64::new(0);
static SWEEP: Once = Once::new();

/// One installed rule.
#[derive(Debug, Clone)]
struct Rule {
    table: &'static str,
    chain: &'static str,
    matches: Vec<String>,
    target: Vec<String>,
    comment: String,
}

impl Rule {
    fn args(&self, op: &str) -> Vec<String> {
        let mut args = vec![
            "-w".to_owned(),
            "-t".to_owned(),
            self.table.to_owned(),
            op.to_owned(),
            self.chain.to_owned(),
        ];
        args.extend(self.matches.iter().cloned());
        args.extend(["-m", "comment", "--comment", &self.comment].map(str::to_owned));
        args.extend(self.target.iter().cloned());
        args
    }
}

/// Rules installed together, removed when dropped.
#[derive(Debug, Default)]
pub(super) struct Rules {
    installed: Vec<Rule>,
}

impl Rules {
    /// No rules yet. The first guard of a process removes rules that processes now dead
    /// left behind.
    pub(super) fn new() -> Self {
        SWEEP.call_once(sweep_dead);
        Self::default()
    }

    /// Inserts a rule at the top of `table`'s `chain`: `matches`, then `target` (`-j DROP`;
    /// none for a rule that only counts). Returns the rule's comment, to read its counters by.
    ///
    /// # Errors
    ///
    /// What iptables said (it is missing, we are not root, a match is not available).
    pub(super) fn insert(
        &mut self,
        table: &'static str,
        chain: &'static str,
        matches: &[String],
        target: &[&str],
    ) -> Result<String, String> {
        let comment = format!(
            "{TAG}:{}:{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let rule = Rule {
            table,
            chain,
            matches: matches.to_vec(),
            target: target.iter().map(|t| (*t).to_owned()).collect(),
            comment: comment.clone(),
        };
        iptables(&rule.args("-I"))?;
        self.installed.push(rule);
        Ok(comment)
    }

    /// The packets the rule with `comment` has matched so far.
    ///
    /// # Errors
    ///
    /// The listing could not be read, or the rule is not in it.
    pub(super) fn packets(&self, comment: &str) -> Result<u64, String> {
        let rule = self
            .installed
            .iter()
            .find(|r| r.comment == comment)
            .ok_or_else(|| format!("no rule {comment} was installed here"))?;
        let listing = iptables(&["-w", "-t", rule.table, "-L", rule.chain, "-v", "-x", "-n"])?;
        packets_of(&listing, comment).ok_or_else(|| format!("rule {comment} is not listed"))
    }

    /// Removes every rule now.
    ///
    /// # Errors
    ///
    /// The rules that could not be removed (the others are gone).
    pub(super) fn remove(&mut self) -> Result<(), String> {
        let failed: Vec<String> = self
            .installed
            .drain(..)
            .filter_map(|rule| iptables(&rule.args("-D")).err())
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// The packet counter of the rule whose comment is `comment`, in an `iptables -L -v -x -n`
/// listing.
fn packets_of(listing: &str, comment: &str) -> Option<u64> {
    let needle = format!("/* {comment} */");
    listing
        .lines()
        .find(|line| line.contains(&needle))
        .and_then(|line| line.split_whitespace().next()?.parse().ok())
}

/// Runs iptables; its output, or why it failed.
fn iptables<S: AsRef<str>>(args: &[S]) -> Result<String, String> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let out = Command::new("iptables")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("iptables: {e} (scripts/install-deps.sh --compare installs it)"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Removes the rules of processes that are gone (killed before their guards dropped).
fn sweep_dead() {
    for table in ["filter", "mangle"] {
        let Ok(listing) = iptables(&["-w", "-t", table, "-S"]) else {
            continue;
        };
        for line in listing.lines() {
            let Some(pid) = owner_pid(line) else { continue };
            if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let Some(rest) = line.strip_prefix("-A ") else {
                continue;
            };
            let mut args = vec!["-w".to_owned(), "-t".to_owned(), table.to_owned()];
            args.push("-D".to_owned());
            args.extend(
                rest.split_whitespace()
                    .map(|a| a.trim_matches('"').to_owned()),
            );
            let _ = iptables(&args);
        }
    }
}

/// The pid in the comment of a rule this crate installed, in an `iptables -S` line.
fn owner_pid(line: &str) -> Option<u32> {
    let start = line.find(&format!("{TAG}:"))? + TAG.len() + 1;
    line[start..].split(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_comment_only() {
        let listing = "\
Chain INPUT (policy ACCEPT 0 packets, 0 bytes)
    pkts      bytes target     prot opt in     out     source               destination
      12      720 DROP       6    --  lo     *       0.0.0.0/0            0.0.0.0/0            multiport ports 20001 /* quorumlock-compare:7:12 */
       3      180 DROP       6    --  lo     *       0.0.0.0/0            0.0.0.0/0            multiport ports 20002 /* quorumlock-compare:7:1 */
";
        assert_eq!(packets_of(listing, "quorumlock-compare:7:1"), Some(3));
        assert_eq!(packets_of(listing, "quorumlock-compare:7:12"), Some(12));
        assert_eq!(packets_of(listing, "quorumlock-compare:7:2"), None);
    }

    #[test]
    fn the_owner_of_a_rule_is_read_from_its_comment() {
        let line = "-A INPUT -i lo -p tcp -m multiport --ports 20001 -m comment --comment \
                    \"quorumlock-compare:4242:3\" -j DROP";
        assert_eq!(owner_pid(line), Some(4242));
        assert_eq!(owner_pid("-A INPUT -i lo -j DROP"), None);
    }
}
