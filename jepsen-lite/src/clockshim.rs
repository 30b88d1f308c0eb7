//! Per-node wall-clock faults: the C shim in `shim/clockshim.c`, built at run time with the
//! system compiler and preloaded into every `redis-server` through a wrapper script.
//!
//! The wrapper takes the port from the server's `--port` argument and points the shim at
//! `<dir>/<port>.clock`, which the harness rewrites in place to jump or speed up that node's
//! clock. `libfaketime` is not an option: it hangs Debian's redis-server.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("../shim/clockshim.c");

/// Where the shim, the wrapper and the control files live.
#[derive(Debug, Clone)]
pub struct Clocks {
    dir: PathBuf,
}

impl Clocks {
    /// Builds the shim and writes the wrapper into `dir`; returns the wrapper's path, to be
    /// exported as `QUORUMLOCK_REDIS_SERVER` before any master starts.
    ///
    /// # Errors
    ///
    /// When `cc` is missing or fails, or the files cannot be written.
    pub fn install(dir: &Path) -> std::io::Result<(Self, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let src = dir.join("clockshim.c");
        let lib = dir.join("libjlclock.so");
        std::fs::write(&src, SOURCE)?;
        let out = Command::new("cc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src)
            .output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "cc failed building the clock shim: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let real = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .unwrap_or("redis-server");
        let wrapper = dir.join("redis-server");
        let script = format!(
            r#"#!/bin/sh
# jepsen-lite: start redis-server with the clock shim; the control file is per port.
port=""; prev=""
for a in "$@"; do [ "$prev" = "--port" ] && port="$a"; prev="$a"; done
ctl="{dir}/$port.clock"
[ -f "$ctl" ] || head -c 24 /dev/zero > "$ctl"
export JEPSEN_LITE_CLOCK_FILE="$ctl"
export LD_PRELOAD="{lib}"
exec {real} "$@"
"#,
            dir = dir.display(),
            lib = lib.display(),
        );
        std::fs::write(&wrapper, script)?;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
        Ok((Self { dir }, wrapper))
    }

    /// The environment that puts another server program (one started without the wrapper)
    /// under the shim, with its clock in the control file named `node`: `LD_PRELOAD` and the
    /// control file's variable. The control file is made now (the server maps it when it
    /// starts, and every process it forks shares the mapping).
    ///
    /// # Errors
    ///
    /// When the control file cannot be written.
    pub fn preload(&self, node: &str) -> std::io::Result<Vec<(&'static str, PathBuf)>> {
        self.set_node(node, 0, 0)?;
        Ok(vec![
            ("LD_PRELOAD", self.dir.join("libjlclock.so")),
            ("JEPSEN_LITE_CLOCK_FILE", self.control(node)),
        ])
    }

    /// Sets node `port`'s clock to `real + offset_ms + (real − now) × rate_ppm / 1e6`.
    ///
    /// # Errors
    ///
    /// When the control file cannot be written.
    pub fn set(&self, port: u16, offset_ms: i64, rate_ppm: i64) -> std::io::Result<()> {
        self.set_node(&port.to_string(), offset_ms, rate_ppm)
    }

    fn control(&self, node: &str) -> PathBuf {
        self.dir.join(format!("{node}.clock"))
    }

    /// As [`set`](Self::set), for the control file named `node` (see
    /// [`preload`](Self::preload)).
    ///
    /// # Errors
    ///
    /// When the control file cannot be written.
    pub fn set_node(&self, node: &str, offset_ms: i64, rate_ppm: i64) -> std::io::Result<()> {
        let path = self.control(node);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)?;
        if file.metadata()?.len() < 24 {
            file.write_all_at(&[0u8; 24], 0)?;
        }
        let t0 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(0))
            .unwrap_or(0);
        let mut bytes = [0u8; 24];
        bytes[0..8].copy_from_slice(&(offset_ms * 1_000_000).to_le_bytes());
        bytes[8..16].copy_from_slice(&rate_ppm.to_le_bytes());
        bytes[16..24].copy_from_slice(&t0.to_le_bytes());
        // In place: the file is mapped by the server, and must never shrink.
        file.write_all_at(&bytes, 0)
    }

    /// Resets node `port`'s clock.
    ///
    /// # Errors
    ///
    /// When the control file cannot be written.
    pub fn reset(&self, port: u16) -> std::io::Result<()> {
        self.set(port, 0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlock_testkit::{MasterOptions, RedisMaster};

    fn unix_now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    }

    /// Another server's environment names the shim and a control file of its own, made at
    /// once (the server maps it when it starts) and rewritten in place by `set_node`.
    #[test]
    fn preload_names_the_shim_and_a_control_file() {
        let dir = std::env::temp_dir().join(format!("jl-preload-{}", std::process::id()));
        let (clocks, _) = Clocks::install(&dir).expect("cc builds the shim");
        let env = clocks.preload("postgres").expect("preload");
        let value = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone());
        let lib = value("LD_PRELOAD").expect("LD_PRELOAD");
        assert!(lib.is_file(), "{}", lib.display());
        let control = value("JEPSEN_LITE_CLOCK_FILE").expect("the control file's variable");
        assert_eq!(std::fs::read(&control).expect("made").len(), 24);
        clocks.set_node("postgres", 4000, 0).expect("set");
        let bytes = std::fs::read(&control).expect("read");
        let offset_ns = i64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
        assert_eq!(offset_ns, 4_000_000_000);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The shim moves a real redis-server's wall clock (TIME and key expiry) and nothing else.
    #[test]
    fn shim_jumps_redis_wall_clock_and_expiry() {
        let dir = std::env::temp_dir().join(format!("jl-clock-{}", std::process::id()));
        let (clocks, wrapper) = Clocks::install(&dir).expect("cc builds the shim");
        // This test binary starts no other master, so the variable affects only this one.
        std::env::set_var("QUORUMLOCK_REDIS_SERVER", &wrapper);
        let master = RedisMaster::start(MasterOptions::new()).expect("starts through the wrapper");
        std::env::remove_var("QUORUMLOCK_REDIS_SERVER");
        let time = |m: &RedisMaster| -> i64 {
            m.command(&["TIME"])
                .ok()
                .and_then(|t| t.lines().next().and_then(|s| s.trim().parse().ok()))
                .unwrap_or(0)
        };
        assert!((time(&master) - unix_now()).abs() <= 2);
        master
            .command(&["SET", "k", "v", "PX", "10000"])
            .expect("set");
        clocks.set(master.port(), 3_600_000, 0).expect("jump");
        assert!((time(&master) - unix_now() - 3600).abs() <= 2);
        assert_eq!(
            master.command(&["GET", "k"]).expect("get"),
            "(nil)",
            "the jump expired the key"
        );
        clocks.reset(master.port()).expect("reset");
        assert!((time(&master) - unix_now()).abs() <= 2);
        // A fast clock: 100% fast runs two seconds per second.
        clocks.set(master.port(), 0, 1_000_000).expect("rate");
        std::thread::sleep(std::time::Duration::from_millis(1500));
        assert!(
            time(&master) - unix_now() >= 1,
            "a doubled rate gains a second in 1.5 s"
        );
        drop(master);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
