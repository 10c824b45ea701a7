//! Logging: the `log` facade, written to standard error with a level, and rate limited per
//! call site so that a flood of bad connections cannot flood the log (or the disk it is on).
//!
//! Every line starts with `rdmadisk-target:` and the level; lines below the configured level
//! (`--log-level`, `log_level`) are not written. A call site that logs more than [`BURST`]
//! lines within [`WINDOW`] is quiet for the rest of that window; how many lines it dropped, and
//! the last of them, are told once the window is over (by its next line, or by
//! [`flush_dropped`], which the main loop calls every second, so a flood that stops is still
//! accounted for). Errors writing the log (a closed or broken stderr) are ignored: a target must
//! not stop serving because nobody reads its log.
//!
//! When standard error is the systemd journal (`JOURNAL_STREAM` names it), each line also
//! starts with its syslog priority (`<3>` for an error...), which journald takes as the
//! line's priority: `journalctl -p warning` then shows the target's warnings and errors.
//!
//! Standard output is not the log: it carries the start-up and shutdown story and the
//! counters ([`out`]), at every level.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
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
    /// The last line dropped, and its level, for the account.
    last_dropped: Option<(Level, String)>,
}

struct Logger {
    level: LevelFilter,
    journal: bool,
    sites: Mutex<HashMap<(&'static str, u32), Site>>,
}

/// The level's word in a line.
fn word(level: Level) -> &'static str {
    match level {
        Level::Error => "error",
        Level::Warn => "warning",
        Level::Info => "info",
        Level::Debug => "debug",
        Level::Trace => "trace",
    }
}

/// A log line: the journal's priority prefix if wanted, the program, the level, the message.
fn format_line(journal: bool, level: Level, msg: &str) -> String {
    let prio = match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    };
    let prefix = if journal {
        format!("<{prio}>")
    } else {
        String::new()
    };
    format!("{prefix}rdmadisk-target: {}: {msg}\n", word(level))
}

/// The account of a site's dropped lines.
fn dropped_line(journal: bool, n: u64, last: &(Level, String)) -> String {
    format_line(
        journal,
        last.0,
        &format!(
            "{n} similar line(s) dropped by the rate limit, the last: {}",
            last.1
        ),
    )
}

fn write_err(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Whether `journal_stream` (the value of `JOURNAL_STREAM`, `DEVICE:INODE`) names the file
/// behind standard error (systemd.exec(5): compare both, since a child may inherit the
/// variable with another stderr).
fn stderr_is(journal_stream: &str) -> bool {
    let Some((dev, ino)) = journal_stream.split_once(':') else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    match std::fs::File::from(fd).metadata() {
        Ok(m) => dev.parse() == Ok(m.dev()) && ino.parse() == Ok(m.ino()),
        Err(_) => false,
    }
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
        let account = {
            let mut sites = self.sites.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let s = sites.entry(key).or_insert(Site {
                window_start: now,
                lines: 0,
                dropped: 0,
                last_dropped: None,
            });
            if now.duration_since(s.window_start) >= WINDOW {
                s.window_start = now;
                s.lines = 0;
            }
            s.lines += 1;
            if s.lines > BURST {
                s.dropped += 1;
                s.last_dropped = Some((r.level(), r.args().to_string()));
                return;
            }
            take_account(s, self.journal)
        };
        let mut text = account.unwrap_or_default();
        text += &format_line(self.journal, r.level(), &r.args().to_string());
        write_err(&text);
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The account of what `s` dropped, if anything, and the slate wiped.
fn take_account(s: &mut Site, journal: bool) -> Option<String> {
    let n = std::mem::take(&mut s.dropped);
    let last = s.last_dropped.take()?;
    (n > 0).then(|| dropped_line(journal, n, &last))
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Installs the logger at `level` (once; later calls change nothing).
pub fn init(level: LevelFilter) {
    let journal = std::env::var("JOURNAL_STREAM").is_ok_and(|v| stderr_is(&v));
    let l = LOGGER.get_or_init(|| Logger {
        level,
        journal,
        sites: Mutex::new(HashMap::new()),
    });
    if log::set_logger(l).is_ok() {
        log::set_max_level(level);
    }
}

/// Tells what the rate limit dropped at every call site whose window is over. The main loop
/// calls it every second.
pub fn flush_dropped() {
    let Some(l) = LOGGER.get() else {
        return;
    };
    let mut text = String::new();
    {
        let mut sites = l.sites.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        for s in sites.values_mut() {
            if s.dropped > 0 && now.duration_since(s.window_start) >= WINDOW {
                // A new window: the site may log again at once.
                s.window_start = now;
                s.lines = 0;
                text += &take_account(s, l.journal).unwrap_or_default();
            }
        }
    }
    if !text.is_empty() {
        write_err(&text);
    }
}

/// An error line on standard error that no rate limit holds back (start-up problems, each of
/// which must be seen), in the log's format.
pub fn error_line(msg: &str) {
    let journal = LOGGER.get().is_some_and(|l| l.journal);
    write_err(&format_line(journal, Level::Error, msg));
}

/// A line at `level` that no rate limit holds back, if the log level lets it through: for
/// lines a reader must see every one of (each act of the test-only hostile mode, which a
/// test pairs with the client's resets).
pub fn unthrottled(level: Level, msg: &str) {
    let logger = LOGGER.get();
    if logger.is_some_and(|l| level > l.level) {
        return;
    }
    write_err(&format_line(logger.is_some_and(|l| l.journal), level, msg));
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
        assert_eq!(parse_level("off"), Ok(LevelFilter::Off));
        assert!(parse_level("loud").is_err());
    }

    #[test]
    fn lines_carry_the_journal_priority_only_for_the_journal() {
        assert_eq!(
            format_line(false, Level::Warn, "x"),
            "rdmadisk-target: warning: x\n"
        );
        assert_eq!(
            format_line(true, Level::Error, "x"),
            "<3>rdmadisk-target: error: x\n"
        );
        assert_eq!(
            format_line(true, Level::Info, "x"),
            "<6>rdmadisk-target: info: x\n"
        );
        // Not the journal: a JOURNAL_STREAM that names some other file.
        assert!(!stderr_is("0:0"));
        assert!(!stderr_is("garbage"));
    }

    #[test]
    fn a_throttled_site_accounts_for_what_it_dropped() {
        let mut s = Site {
            window_start: Instant::now(),
            lines: BURST + 3,
            dropped: 3,
            last_dropped: Some((Level::Warn, "tcp 10.0.0.9: refused".into())),
        };
        let line = take_account(&mut s, false).unwrap();
        assert_eq!(
            line,
            "rdmadisk-target: warning: 3 similar line(s) dropped by the rate limit, the last: tcp 10.0.0.9: refused\n"
        );
        assert_eq!(s.dropped, 0);
        assert!(take_account(&mut s, false).is_none(), "told once");
    }
}
