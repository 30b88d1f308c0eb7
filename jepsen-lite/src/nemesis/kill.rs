//! Killing a worker process (`kill -9`) while it holds a claim, for the workloads that run
//! their own workers: proven by its exit status (signal 9) and by the new pid it is started
//! again with. (A lock client of the scripted runs crashes itself; see the client.)

/// Kills `child` with `SIGKILL` and waits for its exit: whether it died of signal 9.
pub async fn kill9(child: &mut tokio::process::Child) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let _ = child.start_kill();
    let status = child.wait().await;
    status.ok().and_then(|s| s.signal()) == Some(9)
}

/// The proof of a `kill -9` and restart of a worker: pid `old` died of signal 9 (`killed`),
/// and `new` (its replacement, if it could be started) is another process. `holding` says
/// what the worker was doing when it died ("running ...", "holding ..."), or why it was not
/// holding what the fault was meant to hit.
///
/// # Errors
///
/// The replacement could not be started, the worker was not holding, or the kill is not
/// proven.
pub fn killed_and_restarted(
    old: u32,
    killed: bool,
    new: Result<u32, String>,
    holding: Result<String, String>,
) -> Result<String, String> {
    let new = new.map_err(|e| format!("pid {old} killed; could not start it again: {e}"))?;
    match holding {
        Ok(h) if killed && new != old => Ok(format!(
            "pid {old} died of signal 9 {h}; started again as pid {new}"
        )),
        Ok(_) => Err(format!(
            "pid {old} did not die of SIGKILL ({killed}), new pid {new}"
        )),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_is_proven_only_by_signal_9_and_a_new_pid() {
        let holding = || Ok("running job-a slot 1".to_string());
        assert_eq!(
            killed_and_restarted(10, true, Ok(11), holding()),
            Ok("pid 10 died of signal 9 running job-a slot 1; started again as pid 11".into())
        );
        assert!(killed_and_restarted(10, false, Ok(11), holding()).is_err());
        assert!(killed_and_restarted(10, true, Ok(10), holding()).is_err());
        assert_eq!(
            killed_and_restarted(10, true, Err("no exe".into()), holding()),
            Err("pid 10 killed; could not start it again: no exe".into())
        );
        assert_eq!(
            killed_and_restarted(10, true, Ok(11), Err("claim ended".into())),
            Err("claim ended".into())
        );
    }
}
