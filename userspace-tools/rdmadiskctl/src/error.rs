//! What can go wrong, the words each failure is told in, and the exit status it gives, so
//! that a script can tell "not root" from "the kernel said no" without parsing messages.

use std::{fmt, io, path::PathBuf};

/// Exit statuses (documented in the man page, see `EXIT_STATUS` in main.rs).
pub mod exit {
    /// A read or write failed for another reason, or a file could not be parsed.
    pub const FAILURE: u8 = 1;
    /// A value or knob was refused before anything was written (clap's usage errors are 2 too).
    pub const INVALID: u8 = 2;
    /// The module is not loaded.
    pub const NOT_LOADED: u8 = 3;
    /// The disk named is not mapped.
    pub const NO_DISK: u8 = 4;
    /// A write needs root.
    pub const PERMISSION: u8 = 5;
    /// The kernel refused a write.
    pub const REFUSED: u8 = 6;
    /// `failover --wait` timed out.
    pub const TIMEOUT: u8 = 7;
}

/// The error numbers whose meaning a command explains (the tool has no libc binding).
pub mod errno {
    pub const EACCES: i32 = 13;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const ENOSPC: i32 = 28;
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug)]
pub enum Error {
    /// No `class/rdmadisk/ctl` directory.
    NotLoaded { ctl: PathBuf },
    /// No mapped disk answers to `wanted`; `mapped` lists what is there ("rdmadisk0 (d1)").
    NoDisk { wanted: String, mapped: Vec<String> },
    /// A disk is listed but its block device is not there (yet, or any more).
    NoBlockDevice { disk: String, state: String },
    /// A write refused with EACCES or EPERM.
    PermissionDenied { path: PathBuf },
    /// Refused here, before it reached the kernel; the message names what is valid.
    Invalid(String),
    /// The kernel refused a write. `what` is the value as it may be shown (secrets hidden);
    /// `hint` says what the error number most likely means for this file.
    Refused {
        path: PathBuf,
        what: String,
        err: io::Error,
        hint: Option<String>,
    },
    /// Any other failure of a read or write.
    Io {
        action: &'static str,
        path: PathBuf,
        err: io::Error,
    },
    /// A file in a form this tool does not understand.
    Parse { path: PathBuf, msg: String },
    /// `failover --wait` ran out of time.
    Timeout(String),
    /// `top` could not drive the terminal.
    Terminal(io::Error),
    /// Several things failed, each already told; `code` is the first one's exit status.
    Failed { what: String, code: u8 },
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NotLoaded { .. } => exit::NOT_LOADED,
            Error::NoDisk { .. } | Error::NoBlockDevice { .. } => exit::NO_DISK,
            Error::PermissionDenied { .. } => exit::PERMISSION,
            Error::Invalid(_) => exit::INVALID,
            Error::Refused { .. } => exit::REFUSED,
            Error::Timeout(_) => exit::TIMEOUT,
            Error::Io { .. } | Error::Parse { .. } | Error::Terminal(_) => exit::FAILURE,
            Error::Failed { code, .. } => *code,
        }
    }

    /// Adds a hint to a kernel refusal, chosen by its error number; other errors pass as
    /// they are. Each command knows best what EBUSY or EEXIST means for its own file.
    pub fn with_hint(self, hint: impl FnOnce(i32) -> Option<String>) -> Error {
        match self {
            Error::Refused {
                path,
                what,
                err,
                hint: None,
            } => {
                let hint = err.raw_os_error().and_then(hint);
                Error::Refused {
                    path,
                    what,
                    err,
                    hint,
                }
            }
            e => e,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotLoaded { ctl } => write!(
                f,
                "rdmadisk is not loaded: no {} (load it with insmod rdmadisk.ko)",
                ctl.display()
            ),
            Error::NoDisk { wanted, mapped } if mapped.is_empty() => {
                write!(f, "no disk '{wanted}': no rdmadisk disk is mapped")
            }
            Error::NoDisk { wanted, mapped } => {
                write!(f, "no disk '{wanted}'; mapped: {}", mapped.join(", "))
            }
            Error::NoBlockDevice { disk, state } => {
                write!(f, "{disk} has no block device (state {state})")?;
                if state == "connecting" {
                    f.write_str(": it appears once the first connection is up")?;
                }
                Ok(())
            }
            Error::PermissionDenied { path } => write!(
                f,
                "permission denied writing {}: rdmadiskctl must run as root",
                path.display()
            ),
            Error::Invalid(msg) => f.write_str(msg),
            Error::Refused {
                path,
                what,
                err,
                hint,
            } => {
                write!(
                    f,
                    "the kernel refused '{what}' written to {}: {}",
                    path.display(),
                    os_message(err)
                )?;
                if let Some(h) = hint {
                    write!(f, "; {h}")?;
                }
                f.write_str(" (run `dmesg | tail` for the module's reason)")
            }
            Error::Io { action, path, err } => {
                write!(f, "cannot {action} {}: {}", path.display(), os_message(err))
            }
            Error::Parse { path, msg } => write!(f, "cannot parse {}: {msg}", path.display()),
            Error::Timeout(msg) => f.write_str(msg),
            Error::Terminal(err) => write!(f, "cannot drive the terminal: {err}"),
            Error::Failed { what, .. } => f.write_str(what),
        }
    }
}

impl std::error::Error for Error {}

/// The OS's words for an error without Rust's "(os error N)" tail, but with the errno's
/// symbolic name, which is what a reader searches the module's source for.
fn os_message(err: &io::Error) -> String {
    let Some(n) = err.raw_os_error() else {
        return err.to_string();
    };
    let text = err.to_string();
    let text = text
        .strip_suffix(&format!(" (os error {n})"))
        .unwrap_or(&text);
    match errno_name(n) {
        Some(name) => format!("{text} ({name})"),
        None => format!("{text} (errno {n})"),
    }
}

/// The names of the error numbers the module returns from its sysfs writes.
fn errno_name(n: i32) -> Option<&'static str> {
    Some(match n {
        1 => "EPERM",
        2 => "ENOENT",
        5 => "EIO",
        12 => "ENOMEM",
        13 => "EACCES",
        16 => "EBUSY",
        17 => "EEXIST",
        19 => "ENODEV",
        22 => "EINVAL",
        28 => "ENOSPC",
        27 => "EFBIG",
        71 => "EPROTO",
        93 => "EPROTONOSUPPORT",
        95 => "EOPNOTSUPP",
        103 => "ECONNABORTED",
        104 => "ECONNRESET",
        110 => "ETIMEDOUT",
        111 => "ECONNREFUSED",
        113 => "EHOSTUNREACH",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_errno_and_point_at_dmesg() {
        let e = Error::Refused {
            path: "/sys/x/map_device".into(),
            what: "name=d1".into(),
            err: io::Error::from_raw_os_error(22),
            hint: None,
        };
        assert_eq!(
            e.to_string(),
            "the kernel refused 'name=d1' written to /sys/x/map_device: Invalid argument (EINVAL) \
             (run `dmesg | tail` for the module's reason)"
        );
        assert_eq!(e.exit_code(), exit::REFUSED);
    }

    #[test]
    fn hints_follow_the_errno() {
        let refused = |n| Error::Refused {
            path: "/p".into(),
            what: "force".into(),
            err: io::Error::from_raw_os_error(n),
            hint: None,
        };
        let hint = |n: i32| (n == errno::EBUSY).then(|| "it is open".to_string());
        assert!(refused(16)
            .with_hint(hint)
            .to_string()
            .contains("; it is open"));
        assert!(!refused(22).with_hint(hint).to_string().contains("open"));
    }

    #[test]
    fn missing_disks_list_what_is_mapped() {
        let e = Error::NoDisk {
            wanted: "d9".into(),
            mapped: vec!["rdmadisk0 (d1)".into(), "rdmadisk1 (d2)".into()],
        };
        assert_eq!(
            e.to_string(),
            "no disk 'd9'; mapped: rdmadisk0 (d1), rdmadisk1 (d2)"
        );
        let none = Error::NoDisk {
            wanted: "d9".into(),
            mapped: vec![],
        };
        assert_eq!(none.to_string(), "no disk 'd9': no rdmadisk disk is mapped");
    }
}
