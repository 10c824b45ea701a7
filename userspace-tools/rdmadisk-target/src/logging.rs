//! Logging: the `log` facade, written to standard error with a level, and rate limited per
//! call site so that a flood of bad connections cannot flood the log (or the disk it is on).
//!
//! Every line starts with `rdmadisk-target:` and the level. A call site that logs more than
//! [`BURST`] lines within [`WINDOW`] is quiet for the rest of that window; the first line after
//! it says how many were dropped. Errors writing the log (a closed or broken stderr) are
//! ignored: a target must not stop serving because nobody reads its log.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Lines a call site may log per window before it is throttled.
pub const BURST: u32 = 20;
/// The throttling window.
pub const WINDOW: Duration = Duration::from_secs(10);

struct Site {
    window_start: Instant,
    lines: u32,
    dropped: u64,
}

struct Logger {
    level: LevelFilter,
    sites: Mutex<HashMap<(&'static str, u32), Site>>,
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= self.level
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let key = (r.file_static().unwrap_or("?"), r.line().unwrap_or(0));
        let dropped = {
            let mut sites = self.sites.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let s = sites.entry(key).or_insert(Site {
                window_start: now,
                lines: 0,
                dropped: 0,
            });
            if now.duration_since(s.window_start) >= WINDOW {
                s.window_start = now;
                s.lines = 0;
            }
            s.lines += 1;
            if s.lines > BURST {
                s.dropped += 1;
                return;
            }
            std::mem::take(&mut s.dropped)
        };
        let level = match r.level() {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        };
        let mut err = std::io::stderr().lock();
        if dropped > 0 {
            let _ = writeln!(
                err,
                "rdmadisk-target: {level}: ({dropped} similar lines dropped by the rate limit)"
            );
        }
        let _ = writeln!(err, "rdmadisk-target: {level}: {}", r.args());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Installs the logger at `level` (once; later calls change nothing).
pub fn init(level: LevelFilter) {
    let l = LOGGER.get_or_init(|| Logger {
        level,
        sites: Mutex::new(HashMap::new()),
    });
    if log::set_logger(l).is_ok() {
        log::set_max_level(level);
    }
}

/// Parses a `--log-level` value.
pub fn parse_level(s: &str) -> Result<LevelFilter, String> {
    s.parse::<LevelFilter>()
        .map_err(|_| format!("log level {s:?}: one of off, error, warn, info, debug, trace"))
}

/// Writes a line to standard output, ignoring a closed or broken stdout (no panic on EPIPE).
pub fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse() {
        assert_eq!(parse_level("info"), Ok(LevelFilter::Info));
        assert_eq!(parse_level("DEBUG"), Ok(LevelFilter::Debug));
        assert!(parse_level("loud").is_err());
    }
}
