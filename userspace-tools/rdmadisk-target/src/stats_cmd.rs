//! `rdmadisk-target stats`: a running target's counters, read from its stats file (which the
//! target rewrites every second, on SIGUSR1 and at exit), printed as they are (`key=value`
//! lines) or as one JSON object for monitoring.
//!
//! It reads the file rather than asking the target: the target has no control socket, and
//! the file is already what monitoring reads. The file's age tells whether the target is
//! still writing it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use crate::config::{FileConf, StatsArgs};
use crate::logging;

/// A file older than this is from a target that stopped (it rewrites it every second).
const STALE: Duration = Duration::from_secs(5);

/// The counters of a stats file, in its order.
pub fn parse(text: &str) -> Result<Vec<(String, u64)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: not key=value: {line:?}", i + 1))?;
        let ok_key = !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let v = v
            .parse::<u64>()
            .ok()
            .filter(|_| ok_key)
            .ok_or_else(|| format!("line {}: not a counter (name=number): {line:?}", i + 1))?;
        out.push((k.to_string(), v));
    }
    if out.is_empty() {
        return Err("no counters in it".into());
    }
    Ok(out)
}

/// One JSON object: `{"stats_file": ..., "age_ms": ..., "counters": {name: value, ...}}`.
/// Counter names are `[A-Za-z0-9_]` (see [`parse`]), so only the path needs escaping.
pub fn to_json(path: &Path, age: Option<Duration>, counters: &[(String, u64)]) -> String {
    let mut s = String::from("{\"stats_file\":");
    json_string(&mut s, &path.to_string_lossy());
    match age {
        Some(a) => {
            let _ = write!(s, ",\"age_ms\":{}", a.as_millis());
        }
        None => s += ",\"age_ms\":null",
    }
    s += ",\"counters\":{";
    for (i, (k, v)) in counters.iter().enumerate() {
        let _ = write!(s, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
    }
    s += "}}\n";
    s
}

fn json_string(out: &mut String, v: &str) {
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => *out += "\\\"",
            '\\' => *out += "\\\\",
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The stats file named by the flags: `--stats-file`, else the config's `stats_file`.
fn stats_path(a: &StatsArgs) -> Result<PathBuf, String> {
    if let Some(p) = &a.stats_file {
        return Ok(p.clone());
    }
    let Some(c) = &a.config else {
        return Err("give --stats-file PATH, or --config FILE with stats_file set".into());
    };
    FileConf::read(c)?
        .stats_file
        .ok_or_else(|| format!("{}: no stats_file in it", c.display()))
}

/// Runs the subcommand: 0 with the counters printed, 1 if they cannot be read.
pub fn run(a: &StatsArgs) -> ExitCode {
    let res = stats_path(a).and_then(|p| {
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let counters = parse(&text).map_err(|e| format!("{}: {e}", p.display()))?;
        let age = std::fs::metadata(&p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok());
        Ok((p, age, counters))
    });
    let (path, age, counters) = match res {
        Ok(r) => r,
        Err(e) => {
            logging::error_line(&e);
            return ExitCode::FAILURE;
        }
    };
    if let Some(a) = age.filter(|a| *a > STALE) {
        log::warn!(
            "{} was last written {} s ago: is the target running? (it rewrites the file every second)",
            path.display(),
            a.as_secs()
        );
    }
    if a.json {
        logging::out(&to_json(&path, age, &counters));
    } else {
        let mut s = String::new();
        for (k, v) in &counters {
            let _ = writeln!(s, "{k}={v}");
        }
        logging::out(&s);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Stats;

    #[test]
    fn the_target_s_own_file_parses_back() {
        let s = Stats::default();
        Stats::add(&s.reads, 7);
        Stats::add(&s.bytes_read, 28672);
        let counters = parse(&s.render()).unwrap();
        assert_eq!(counters[0], ("requests".to_string(), 0));
        assert!(counters.contains(&("reads".to_string(), 7)));
        assert!(counters.contains(&("bytes_read".to_string(), 28672)));
        assert_eq!(counters.len(), s.render().lines().count());
    }

    #[test]
    fn anything_else_is_refused() {
        assert!(parse("").is_err());
        assert!(parse("reads=1\nwrites\n").unwrap_err().contains("line 2"));
        assert!(parse("reads=-1\n").is_err());
        assert!(parse("re ads=1\n").is_err());
        assert!(parse("=1\n").is_err());
    }

    #[test]
    fn json_is_one_object() {
        let c = vec![("reads".to_string(), 3), ("writes".to_string(), 0)];
        assert_eq!(
            to_json(
                Path::new("run/a \"b\".stats"),
                Some(Duration::from_millis(1500)),
                &c
            ),
            "{\"stats_file\":\"run/a \\\"b\\\".stats\",\"age_ms\":1500,\"counters\":{\"reads\":3,\"writes\":0}}\n"
        );
        assert!(to_json(Path::new("s"), None, &[]).contains("\"age_ms\":null"));
    }
}
