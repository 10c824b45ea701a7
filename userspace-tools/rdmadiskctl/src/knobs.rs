//! `set` and `failover`: writes to a disk's knobs, checked first against the module's own
//! table of knobs so that a bad value is explained with the range the module enforces.

use std::thread;
use std::time::{Duration, Instant};

use rdmadisk_proto::knobs::{knob, Knob, KNOBS};

use crate::disk::Disk;
use crate::error::{Error, Result};
use crate::sysfs::Sysfs;
use crate::table;

/// Every knob with its values and what it does, one per line.
pub fn knob_table() -> String {
    let rows: Vec<[String; 3]> = KNOBS
        .iter()
        .map(|k| {
            [
                format!("  {}", k.name),
                k.values.to_string(),
                k.help.to_owned(),
            ]
        })
        .collect();
    table::render(&rows).trim_end().to_owned()
}

/// The knob named `name`, if `value` is one it accepts.
pub fn check(name: &str, value: &str) -> Result<&'static Knob> {
    let Some(k) = knob(name) else {
        return Err(Error::Invalid(format!(
            "unknown knob '{name}'; the knobs are:\n{}",
            knob_table()
        )));
    };
    if k.values.parse(value.as_bytes()).is_none() {
        return Err(Error::Invalid(format!(
            "invalid value '{value}' for {}: expected {}",
            k.name, k.values
        )));
    }
    Ok(k)
}

/// `set`: returns the knob's value as the module reads it back.
pub fn set(sysfs: &Sysfs, wanted: &str, name: &str, value: &str) -> Result<String> {
    let k = check(name, value)?;
    let disk = Disk::open(sysfs, wanted)?;
    // The value is sent trimmed: the module trims too, and an error then quotes what it saw.
    disk.write(k.name, value.trim())?;
    let now = disk
        .read_optional(k.name)?
        .unwrap_or_else(|| value.to_owned());
    Ok(format!("{}: {} = {now}", disk.dev.device, k.name))
}

/// What `failover --to` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// RDMA, and TCP while RDMA is unhealthy
    Auto,
    /// RDMA only
    Rdma,
    /// TCP only
    Tcp,
}

impl Target {
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Auto => "auto",
            Target::Rdma => "rdma",
            Target::Tcp => "tcp",
        }
    }
}

/// How often `--wait` looks at `active_transport`.
const POLL: Duration = Duration::from_millis(100);

/// `failover`: sets `transport`; with `wait`, waits until `active_transport` is the one
/// asked for (`auto` names no transport to wait for).
pub fn failover(sysfs: &Sysfs, wanted: &str, to: Target, wait: Option<Duration>) -> Result<String> {
    let word = to.as_str();
    let disk = Disk::open(sysfs, wanted)?;
    disk.write("transport", word)?;
    let active = || disk.read("active_transport");
    let Some(limit) = wait.filter(|_| to != Target::Auto) else {
        let note = if wait.is_some() {
            " (auto picks the transport itself: nothing to wait for)"
        } else {
            ""
        };
        return Ok(format!(
            "{}: transport = {word}, active transport {}{note}",
            disk.dev.device,
            active()?
        ));
    };
    let deadline = Instant::now() + limit;
    loop {
        let now = active()?;
        if now == word {
            return Ok(format!("{}: on {now}", disk.dev.device));
        }
        if Instant::now() >= deadline {
            let state = disk.read("state").unwrap_or_else(|_| "unknown".into());
            return Err(Error::Timeout(format!(
                "{} is still on {now} after {} s (asked for {word}; state {state})",
                disk.dev.device,
                limit.as_secs_f64()
            )));
        }
        thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;
    use rdmadisk_proto::knobs::TRANSPORT;

    fn invalid(name: &str, value: &str) -> String {
        match check(name, value) {
            Err(Error::Invalid(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_are_checked_against_the_table() {
        assert_eq!(check("max_credits", "32").unwrap().name, "max_credits");
        assert_eq!(
            check("fast_io_fail_s", "off").unwrap().name,
            "fast_io_fail_s"
        );
        for never in ["never", "-1", "0"] {
            assert_eq!(
                check("loss_timeout_s", never).unwrap().name,
                "loss_timeout_s"
            );
        }
        assert_eq!(
            invalid("loss_timeout_s", "-2"),
            "invalid value '-2' for loss_timeout_s: expected 'never' (or -1) or a whole number from 0 to 86400"
        );
        assert_eq!(
            invalid("max_credits", "65"),
            "invalid value '65' for max_credits: expected a whole number from 1 to 64"
        );
        assert_eq!(
            invalid("transport", "TCP"),
            "invalid value 'TCP' for transport: expected auto, rdma or tcp"
        );
        assert_eq!(
            invalid("inline_max", "1000"),
            "invalid value '1000' for inline_max: expected a multiple of 512 from 0 to 4096"
        );
    }

    #[test]
    fn unknown_knobs_list_every_knob() {
        let m = invalid("colour", "1");
        assert!(
            m.starts_with("unknown knob 'colour'; the knobs are:\n"),
            "{m}"
        );
        for k in KNOBS {
            assert!(m.contains(k.name), "{}", k.name);
        }
        assert!(m.contains("a whole number from 1 to 64"), "{m}");
    }

    /// `failover` writes these words without asking the module's table first.
    #[test]
    fn every_failover_target_is_a_transport_word() {
        for t in Target::value_variants() {
            assert!(TRANSPORT.parse(t.as_str().as_bytes()).is_some());
            let clap_name = t.to_possible_value().unwrap();
            assert_eq!(clap_name.get_name(), t.as_str());
        }
    }
}
