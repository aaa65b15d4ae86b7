//! The soak operator's records: one line per handler call, appended to the
//! file `$KOPF_SOAK_RECORDS` with one unbuffered `write` each, so that a
//! record written before a SIGKILL is in the file (the kernel has it), and
//! a record not written did not happen.
//!
//! ```text
//! KIND UID NAME PID UNIX-NS [EXTRA…]
//! create 5f0c… soak-000007 4242 1764633600000000000 v=3 f=0
//! stat - - 4242 1764633601000000000 tasks=17
//! ```
//!
//! Kinds: `create`, `update` (`v=`, `f=`: the object's `data.v` and
//! `data.f` as the handler saw them), `field` (`f=`), `delete`, `tick`
//! (a timer), `dstart`/`dbeat`/`dstop` (a daemon, `i=` its instance, random
//! per call), `stat` (`tasks=`: the operator's alive tokio tasks, every
//! second). A handler's or task's record ends in `p=1` if the body it got
//! held a poisoned object's nesting (see the soak's `poison` module).

use std::fs::File;
use std::io::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};

/// The environment variable naming the records file.
pub const ENV: &str = "KOPF_SOAK_RECORDS";

/// One parsed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// What happened.
    pub kind: String,
    /// The object's UID (`-` for `stat`).
    pub uid: String,
    /// The object's name (`-` for `stat`).
    pub name: String,
    /// The operator process.
    pub pid: u32,
    /// When, nanoseconds since the Unix epoch.
    pub ts: i64,
    /// `key=value` pairs after the timestamp, in order.
    pub extra: Vec<(String, String)>,
}

impl Record {
    /// Parses one line; `None` for anything else.
    pub fn parse(line: &str) -> Option<Record> {
        let mut parts = line.split(' ');
        let kind = parts.next()?.to_string();
        let uid = parts.next()?.to_string();
        let name = parts.next()?.to_string();
        let pid = parts.next()?.parse().ok()?;
        let ts = parts.next()?.parse().ok()?;
        let extra = parts
            .map(|p| {
                p.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Record {
            kind,
            uid,
            name,
            pid,
            ts,
            extra,
        })
    }

    /// The value of `key=` in the extras.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.extra
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The line this record was parsed from.
    pub fn line(&self) -> String {
        let mut line = format!(
            "{} {} {} {} {}",
            self.kind, self.uid, self.name, self.pid, self.ts
        );
        for (k, v) in &self.extra {
            line.push_str(&format!(" {k}={v}"));
        }
        line
    }
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

static OUT: OnceLock<Option<Mutex<File>>> = OnceLock::new();

/// Appends one record (operator side); does nothing without `$KOPF_SOAK_RECORDS`.
pub fn write(kind: &str, uid: &str, name: &str, extra: &[(&str, String)]) {
    let out = OUT.get_or_init(|| {
        let path = std::env::var_os(ENV)?;
        let file = File::options().create(true).append(true).open(path).ok()?;
        Some(Mutex::new(file))
    });
    let Some(out) = out else { return };
    let mut line = format!(
        "{kind} {} {} {} {}",
        if uid.is_empty() { "-" } else { uid },
        if name.is_empty() { "-" } else { name },
        std::process::id(),
        now_ns()
    );
    for (k, v) in extra {
        line.push_str(&format!(" {k}={v}"));
    }
    line.push('\n');
    // One write of the whole line to a file opened for appending: lines of
    // several processes never interleave.
    let _ = out
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .write_all(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_round_trips_and_junk_is_refused() {
        let line = "update u-1 soak-000001 42 1000 v=3 f=1";
        let r = Record::parse(line).expect("parses");
        assert_eq!(r.kind, "update");
        assert_eq!(r.pid, 42);
        assert_eq!(r.get("v"), Some("3"));
        assert_eq!(r.get("f"), Some("1"));
        assert_eq!(r.line(), line);
        assert!(Record::parse("update u-1 soak-000001 x 1000").is_none());
        assert!(Record::parse("update u-1 soak-000001 42 1000 v3").is_none());
        assert!(Record::parse("half").is_none());
    }
}
