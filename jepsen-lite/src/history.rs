//! The history: one JSON object per line, Jepsen-style.
//!
//! Every operation is an `invoke` followed by its completion: `ok` (it happened), `fail` (it
//! definitely did not) or `info` (unknown). Nemesis operations are `info` events of process
//! `"nemesis"`. `time_ns` is the host's `CLOCK_MONOTONIC` ([`crate::clock`]), so the files of
//! separate client processes merge on one time line.
//!
//! Fields of `value` by operation (all times in host monotonic nanoseconds):
//!
//! | `f` | type | value |
//! |---|---|---|
//! | `acquire` | `ok` | `lease`, `resource`, `t_start_ns`, `valid_until_ns`, `ttl_ms`, `token` (or null), `granted_by` (the masters of the granting quorum, by node index) |
//! | `extend` | `ok` | `lease`, `valid_until_ns` |
//! | `release` | `invoke` | `lease` (the claim ends here at the latest) |
//! | `read` | `ok` | `lease`, `register`, `counter`, `set_len` |
//! | `write` | `ok` | `lease`, `register`, `counter`, `add` (the set element this write added) |
//! | nemesis verbs | `info` | what was done to which node or link |

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The type of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The operation starts.
    Invoke,
    /// It happened.
    Ok,
    /// It definitely did not happen.
    Fail,
    /// It may or may not have happened.
    Info,
}

/// Who did it: a client process (by number) or the nemesis.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Process {
    /// A client OS process.
    Client(u32),
    /// `"nemesis"`, or another named actor such as `"controller"`.
    Named(String),
}

impl Process {
    /// The nemesis.
    pub fn nemesis() -> Self {
        Self::Named("nemesis".into())
    }
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Client(n) => write!(f, "{n}"),
            Self::Named(name) => f.write_str(name),
        }
    }
}

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Host monotonic nanoseconds.
    pub time_ns: u64,
    /// Who.
    pub process: Process,
    /// invoke / ok / fail / info.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// The operation: `acquire`, `extend`, `release`, `read`, `write`, or a nemesis verb.
    pub f: String,
    /// Operation details (see the module docs).
    #[serde(default)]
    pub value: Value,
    /// Why it failed, for `fail` and `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Event {
    /// An event now.
    pub fn now(process: Process, kind: Kind, f: &str, value: Value) -> Self {
        Self::at(crate::clock::now_ns(), process, kind, f, value)
    }

    /// An event at a given time (hand-built histories in tests).
    pub fn at(time_ns: u64, process: Process, kind: Kind, f: &str, value: Value) -> Self {
        Self {
            time_ns,
            process,
            kind,
            f: f.to_string(),
            value,
            error: None,
        }
    }

    /// The same event with an error.
    #[must_use]
    pub fn with_error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    /// `value[field]` as a string.
    pub fn str_field(&self, field: &str) -> Option<&str> {
        self.value.get(field).and_then(Value::as_str)
    }

    /// `value[field]` as an integer.
    pub fn u64_field(&self, field: &str) -> Option<u64> {
        self.value.get(field).and_then(Value::as_u64)
    }
}

/// Appends events to a JSONL file, flushing each so that a killed process loses nothing.
#[derive(Debug)]
pub struct Writer {
    out: BufWriter<File>,
}

impl Writer {
    /// Creates (truncates) the file.
    ///
    /// # Errors
    ///
    /// When the file cannot be created.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            out: BufWriter::new(File::create(path)?),
        })
    }

    /// Writes one event as one line.
    ///
    /// # Errors
    ///
    /// When the file cannot be written.
    pub fn write(&mut self, event: &Event) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, event)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

/// Reads a JSONL file of any serde type; a torn last line (a killed writer) is skipped.
///
/// # Errors
///
/// When the file cannot be read or a line other than the last does not parse.
pub fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> std::io::Result<Vec<T>> {
    let lines: Vec<String> = BufReader::new(File::open(path)?)
        .lines()
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(item) => out.push(item),
            Err(_) if i + 1 == lines.len() => {}
            Err(e) => {
                return Err(std::io::Error::other(format!(
                    "{}:{}: {e}",
                    path.display(),
                    i + 1
                )))
            }
        }
    }
    Ok(out)
}

/// Writes any serde items as JSONL.
///
/// # Errors
///
/// When the file cannot be written.
pub fn write_jsonl<T: Serialize>(path: &Path, items: &[T]) -> std::io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    for item in items {
        serde_json::to_writer(&mut out, item)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Merges per-process histories into one, ordered by time (stable for equal times).
pub fn merge(parts: Vec<Vec<Event>>) -> Vec<Event> {
    let mut all: Vec<Event> = parts.into_iter().flatten().collect();
    all.sort_by_key(|e| e.time_ns);
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_round_trip_as_jepsen_style_lines() {
        let e = Event::at(
            5,
            Process::Client(2),
            Kind::Ok,
            "acquire",
            json!({"lease": "2-1"}),
        );
        let line = serde_json::to_string(&e).unwrap_or_default();
        assert!(line.contains(r#""type":"ok""#), "{line}");
        assert!(line.contains(r#""process":2"#), "{line}");
        let back: Event = serde_json::from_str(&line).expect("parses");
        assert_eq!(back, e);
        let n: Event = serde_json::from_str(
            r#"{"time_ns":1,"process":"nemesis","type":"info","f":"kill","value":{"node":2}}"#,
        )
        .expect("parses");
        assert_eq!(n.process, Process::nemesis());
        assert_eq!(n.u64_field("node"), Some(2));
    }

    #[test]
    fn a_torn_last_line_is_skipped() {
        let dir = std::env::temp_dir().join(format!("jl-hist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("h.jsonl");
        let mut w = Writer::create(&path).expect("create");
        w.write(&Event::at(
            1,
            Process::Client(0),
            Kind::Invoke,
            "acquire",
            Value::Null,
        ))
        .expect("write");
        drop(w);
        let mut text = std::fs::read_to_string(&path).expect("read");
        text.push_str(r#"{"time_ns":2,"proc"#);
        std::fs::write(&path, text).expect("write");
        let events: Vec<Event> = read_jsonl(&path).expect("reads");
        assert_eq!(events.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
