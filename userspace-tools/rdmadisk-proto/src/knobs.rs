//! The per-disk knobs of `/sys/block/rdmadiskN/rdmadisk/`: their names and the values each
//! takes. The module checks writes against these very ranges, and rdmadiskctl checks a value
//! before it writes it and names the range when it is refused, so the two cannot drift.

use super::policy::MAX_FAILOVER_THRESHOLD;
use super::wire::SECTOR_SIZE;

/// Requests a hardware queue holds at once (the blk-mq queue depth and the most credits a
/// connection uses).
pub const QUEUE_DEPTH: u16 = 64;
/// Largest write carried inline in its request's Send.
pub const INLINE_CAP: u32 = 4096;

/// What a knob accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// A whole number in `min..=max`.
    Range { min: u32, max: u32 },
    /// 0 (off), or a whole number in `min..=max`.
    OffOrRange { min: u32, max: u32 },
    /// `off`, or a whole number in `min..=max`.
    WordOffOrRange { min: u32, max: u32 },
    /// `never` (also written `-1`, as nvme's `ctrl_loss_tmo`), or a whole number in
    /// `min..=max`.
    NeverOrRange { min: u32, max: u32 },
    /// A whole number in `min..=max` that is a multiple of `step`.
    Multiple { min: u32, max: u32, step: u32 },
    /// One of these words.
    Words(&'static [&'static str]),
}

/// A knob: its file name, what it accepts, and a line on what it does.
#[derive(Clone, Copy, Debug)]
pub struct Knob {
    pub name: &'static str,
    pub values: Values,
    pub help: &'static str,
}

pub const IO_TIMEOUT_MS: Values = Values::Range {
    min: 1_000,
    max: 600_000,
};
pub const LOSS_TIMEOUT_S: Values = Values::NeverOrRange {
    min: 0,
    max: 86_400,
};
pub const FAST_IO_FAIL_S: Values = Values::WordOffOrRange {
    min: 0,
    max: 86_400,
};
pub const MAX_CREDITS: Values = Values::Range {
    min: 1,
    max: QUEUE_DEPTH as u32,
};
pub const INLINE_MAX: Values = Values::Multiple {
    min: 0,
    max: INLINE_CAP,
    step: SECTOR_SIZE,
};
pub const KEEPALIVE_MS: Values = Values::OffOrRange {
    min: 100,
    max: 600_000,
};
pub const TRANSPORT: Values = Values::Words(&["auto", "rdma", "tcp"]);
pub const FAILOVER_THRESHOLD: Values = Values::Range {
    min: 1,
    max: MAX_FAILOVER_THRESHOLD,
};
pub const FAILOVER_WINDOW_MS: Values = Values::Range {
    min: 1,
    max: 3_600_000,
};
pub const FAILBACK_PROBES: Values = Values::Range { min: 1, max: 1_000 };
pub const PROBE_INTERVAL_MS: Values = Values::Range {
    min: 100,
    max: 600_000,
};
pub const TELEMETRY: Values = Values::Range { min: 0, max: 1 };
pub const PATH_FAILOVER_MS: Values = Values::Range {
    min: 0,
    max: 600_000,
};
/// Only `failover` (one target carries the I/O at a time) is taken: see [`PATH_POLICY_WORDS`].
pub const PATH_POLICY: Values = Values::Words(&["failover"]);
/// Every `path_policy` word the file names, the ones not taken yet included: spreading I/O over
/// several gateways of one RBD image would move its exclusive lock back and forth.
pub const PATH_POLICY_WORDS: &[&str] = &["failover", "round-robin", "min-inflight"];

/// Every writable per-disk knob.
pub const KNOBS: &[Knob] = &[
    Knob {
        name: "io_timeout_ms",
        values: IO_TIMEOUT_MS,
        help: "ms before a request's timer fires and its connection is reset",
    },
    Knob {
        name: "loss_timeout_s",
        values: LOSS_TIMEOUT_S,
        help: "s of outage after which the disk fails for good (0: at the first loss, never or -1: never)",
    },
    Knob {
        name: "fast_io_fail_s",
        values: FAST_IO_FAIL_S,
        help: "s of outage after which new I/O fails at once (off: never)",
    },
    Knob {
        name: "max_credits",
        values: MAX_CREDITS,
        help: "requests in flight per connection at most",
    },
    Knob {
        name: "inline_max",
        values: INLINE_MAX,
        help: "largest write sent inline in its request (bytes)",
    },
    Knob {
        name: "keepalive_ms",
        values: KEEPALIVE_MS,
        help: "ms between keepalives on a quiet RDMA connection (0: off)",
    },
    Knob {
        name: "transport",
        values: TRANSPORT,
        help: "the transport to use: auto (RDMA, TCP while RDMA is unhealthy), rdma or tcp",
    },
    Knob {
        name: "failover_threshold",
        values: FAILOVER_THRESHOLD,
        help: "RDMA failures within the window that switch to TCP",
    },
    Knob {
        name: "failover_window_ms",
        values: FAILOVER_WINDOW_MS,
        help: "ms over which RDMA failures are counted",
    },
    Knob {
        name: "failback_probes",
        values: FAILBACK_PROBES,
        help: "successful RDMA probes in a row before switching back",
    },
    Knob {
        name: "probe_interval_ms",
        values: PROBE_INTERVAL_MS,
        help: "ms between RDMA probes while on TCP",
    },
    Knob {
        name: "path_failover_ms",
        values: PATH_FAILOVER_MS,
        help: "ms the disk keeps reconnecting to a lost target before it moves to the next one (several targets)",
    },
    Knob {
        name: "path_policy",
        values: PATH_POLICY,
        help: "how I/O uses several targets: failover (one at a time, in the map's order)",
    },
    Knob {
        name: "telemetry",
        values: TELEMETRY,
        help: "1: record the telemetry; 0: stop recording it",
    },
];

/// The knob named `name`.
pub fn knob(name: &str) -> Option<&'static Knob> {
    KNOBS.iter().find(|k| k.name == name)
}

/// A whole number in decimal digits, with surrounding whitespace (the newline `echo` adds)
/// and nothing else: `u32::from_str` alone would also take a sign ("+5").
pub fn parse_digits(input: &[u8]) -> Option<u32> {
    let digits = input.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    core::str::from_utf8(digits).ok()?.parse().ok()
}

/// What a write of `input` sets, if `values` accepts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    Number(u32),
    /// `off` of a [`Values::WordOffOrRange`] knob.
    Off,
    /// `never` (or `-1`) of a [`Values::NeverOrRange`] knob.
    Never,
    /// The index of the word in a [`Values::Words`] list.
    Word(usize),
}

impl Values {
    /// Checks `input` against the values; `None` when they do not take it.
    pub fn parse(&self, input: &[u8]) -> Option<Setting> {
        let n = |min: u32, max: u32| parse_digits(input).filter(|v| (min..=max).contains(v));
        match *self {
            Values::Range { min, max } => n(min, max).map(Setting::Number),
            Values::OffOrRange { min, max } => match parse_digits(input) {
                Some(0) => Some(Setting::Number(0)),
                _ => n(min, max).map(Setting::Number),
            },
            Values::WordOffOrRange { min, max } => {
                if input.trim_ascii() == b"off" {
                    Some(Setting::Off)
                } else {
                    n(min, max).map(Setting::Number)
                }
            }
            Values::NeverOrRange { min, max } => match input.trim_ascii() {
                b"never" | b"-1" => Some(Setting::Never),
                _ => n(min, max).map(Setting::Number),
            },
            Values::Multiple { min, max, step } => n(min, max)
                .filter(|v| v.checked_rem(step) == Some(0))
                .map(Setting::Number),
            Values::Words(words) => words
                .iter()
                .position(|w| w.as_bytes() == input.trim_ascii())
                .map(Setting::Word),
        }
    }
}

impl core::fmt::Display for Values {
    /// What the values are, for an error message ("a whole number from 1 to 64").
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Values::Range { min, max } => write!(f, "a whole number from {min} to {max}"),
            Values::OffOrRange { min, max } => write!(f, "0 (off) or {min} to {max}"),
            Values::WordOffOrRange { min, max } => {
                write!(f, "'off' or a whole number from {min} to {max}")
            }
            Values::NeverOrRange { min, max } => {
                write!(f, "'never' (or -1) or a whole number from {min} to {max}")
            }
            Values::Multiple { min, max, step } => {
                write!(f, "a multiple of {step} from {min} to {max}")
            }
            Values::Words(words) => {
                for (i, w) in words.iter().enumerate() {
                    let sep = match i {
                        0 => "",
                        i if i + 1 == words.len() => " or ",
                        _ => ", ",
                    };
                    write!(f, "{sep}{w}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn ranges_take_what_they_say() {
        assert_eq!(MAX_CREDITS.parse(b"64\n"), Some(Setting::Number(64)));
        assert_eq!(MAX_CREDITS.parse(b"65"), None);
        assert_eq!(MAX_CREDITS.parse(b"0"), None);
        assert_eq!(MAX_CREDITS.parse(b"+5"), None);
        assert_eq!(MAX_CREDITS.parse(b""), None);
        assert_eq!(MAX_CREDITS.parse(b"99999999999999999999"), None);
        assert_eq!(KEEPALIVE_MS.parse(b"0"), Some(Setting::Number(0)));
        assert_eq!(KEEPALIVE_MS.parse(b"50"), None);
        assert_eq!(KEEPALIVE_MS.parse(b"100"), Some(Setting::Number(100)));
        assert_eq!(FAST_IO_FAIL_S.parse(b"off\n"), Some(Setting::Off));
        assert_eq!(FAST_IO_FAIL_S.parse(b"0"), Some(Setting::Number(0)));
        assert_eq!(FAST_IO_FAIL_S.parse(b"of"), None);
        assert_eq!(INLINE_MAX.parse(b"1024"), Some(Setting::Number(1024)));
        assert_eq!(INLINE_MAX.parse(b"1000"), None);
        assert_eq!(INLINE_MAX.parse(b"8192"), None);
        assert_eq!(TRANSPORT.parse(b"tcp\n"), Some(Setting::Word(2)));
        assert_eq!(TRANSPORT.parse(b"TCP"), None);
    }

    /// nvme's `ctrl_loss_tmo`: -1 is "never", 0 is a number like any other (fail at the first
    /// loss), and nothing else below 0 is taken.
    #[test]
    fn loss_timeout_has_a_never_of_its_own() {
        assert_eq!(LOSS_TIMEOUT_S.parse(b"never\n"), Some(Setting::Never));
        assert_eq!(LOSS_TIMEOUT_S.parse(b" -1 \n"), Some(Setting::Never));
        assert_eq!(LOSS_TIMEOUT_S.parse(b"0\n"), Some(Setting::Number(0)));
        assert_eq!(
            LOSS_TIMEOUT_S.parse(b"86400"),
            Some(Setting::Number(86_400))
        );
        assert_eq!(LOSS_TIMEOUT_S.parse(b"86401"), None);
        assert_eq!(LOSS_TIMEOUT_S.parse(b"-2"), None);
        assert_eq!(LOSS_TIMEOUT_S.parse(b"-0"), None);
        assert_eq!(LOSS_TIMEOUT_S.parse(b"Never"), None);
        assert_eq!(LOSS_TIMEOUT_S.parse(b"never never"), None);
        assert_eq!(
            LOSS_TIMEOUT_S.to_string(),
            "'never' (or -1) or a whole number from 0 to 86400"
        );
        let help = knob("loss_timeout_s").map(|k| k.help).unwrap_or_default();
        assert!(
            help.contains("0: at the first loss") && help.contains("never"),
            "{help}"
        );
    }

    #[test]
    fn messages_name_the_values() {
        assert_eq!(MAX_CREDITS.to_string(), "a whole number from 1 to 64");
        assert_eq!(TRANSPORT.to_string(), "auto, rdma or tcp");
        assert_eq!(KEEPALIVE_MS.to_string(), "0 (off) or 100 to 600000");
        assert_eq!(INLINE_MAX.to_string(), "a multiple of 512 from 0 to 4096");
    }

    #[test]
    fn every_knob_is_found_by_name() {
        for k in KNOBS {
            assert_eq!(knob(k.name).map(|x| x.name), Some(k.name));
        }
        assert!(knob("stats").is_none());
    }
}
