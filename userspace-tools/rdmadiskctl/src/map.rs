//! `map` and `unmap`: the `map_device` line, checked with the module's own parser first, so a
//! mistake is explained here in words instead of as a bare EINVAL.

use std::path::Path;

use rdmadisk_proto::auth::{parse_then_wipe, wipe, SECRET_MAX, SECRET_MIN};
use rdmadisk_proto::options::{
    Key, OptionError, Options, DEVICE_NAME_MAX, MAX_QUEUES, MAX_TARGETS,
};
use rdmadisk_proto::wire::EXPORT_NAME_MAX;

use crate::disk::{self, Disk};
use crate::error::{errno, Error, Result};
use crate::sysfs::{self, Sysfs};

/// What `map` was given; each value is kept as typed so that the module's parser, not clap,
/// judges it.
#[derive(Debug, Clone, Default)]
pub struct MapRequest {
    pub name: String,
    pub addr: String,
    /// `target=`: several targets, in place of `addr`.
    pub target: Option<String>,
    pub export: String,
    pub port: Option<String>,
    pub tcp_port: Option<String>,
    pub queues: Option<String>,
    pub poll_queues: Option<String>,
    pub ro: bool,
    /// The key this host proves, as hex read from a file ([`read_key`]).
    pub secret: Option<KeyText>,
    /// The key the target must prove, when not `secret` (hex from a file).
    pub target_secret: Option<KeyText>,
}

/// A key as text: wiped when dropped, never shown by `Debug`.
#[derive(Clone, Default)]
pub struct KeyText(pub String);

impl std::ops::Deref for KeyText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for KeyText {
    fn drop(&mut self) {
        wipe(&mut std::mem::take(&mut self.0).into_bytes());
    }
}

impl std::fmt::Debug for KeyText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

/// A map line that may hold a key: wiped when dropped, never shown by `Debug`.
pub struct Line(String);

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Line({} bytes)", self.0.len())
    }
}

impl std::ops::Deref for Line {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        wipe(&mut std::mem::take(&mut self.0).into_bytes());
    }
}

/// Reads a key file for `--secret-file` / `--target-secret-file`: hex digits, whitespace
/// around them ignored, from a file others may not read (a key on the command line would be
/// in every user's process list). The text read is wiped; the module checks the digits.
pub fn read_key(flag: &str, path: &Path) -> Result<KeyText> {
    use std::os::unix::fs::PermissionsExt;
    let io = |err| Error::Io {
        action: "read",
        path: path.to_owned(),
        err,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.permissions().mode() & 0o004 != 0 {
        return Err(Error::Invalid(format!(
            "{flag} {}: the key file is readable by everyone; chmod o-r it",
            path.display()
        )));
    }
    let mut raw = std::fs::read(path).map_err(io)?;
    Ok(parse_then_wipe(&mut raw, |t| {
        KeyText(String::from_utf8_lossy(t).into_owned())
    }))
}

/// The keys `map_device` requires.
const REQUIRED: [Key; 3] = [Key::Name, Key::Addr, Key::Export];

impl MapRequest {
    fn pairs(&self) -> Vec<(Key, &str)> {
        let mut v = vec![
            (Key::Name, self.name.as_str()),
            match &self.target {
                Some(t) => (Key::Target, t.as_str()),
                None => (Key::Addr, self.addr.as_str()),
            },
            (Key::Export, self.export.as_str()),
        ];
        let optional = [
            (Key::Port, self.port.as_deref()),
            (Key::TcpPort, self.tcp_port.as_deref()),
            (Key::Queues, self.queues.as_deref()),
            (Key::PollQueues, self.poll_queues.as_deref()),
            (Key::Secret, self.secret.as_deref()),
            (Key::TargetSecret, self.target_secret.as_deref()),
        ];
        v.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v?))));
        v
    }

    /// The `map_device` line, checked as the module will check it.
    pub fn line(&self) -> Result<Line> {
        let pairs = self.pairs();
        // A blank in a value would split it into a second key the user never typed
        // (`--export "a port=1"`); the module would see a different request.
        if let Some(&(k, v)) = pairs.iter().find(|(_, v)| v.contains(char::is_whitespace)) {
            return Err(Error::Invalid(bad_value(k, v)));
        }
        let mut words: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if self.ro {
            words.push(Key::Ro.as_str().to_owned());
        }
        let line = Line(words.join(" "));
        for w in &mut words {
            wipe(&mut std::mem::take(w).into_bytes());
        }
        Options::parse(line.as_bytes())
            .and_then(|o| o.require(&REQUIRED))
            .map_err(|e| Error::Invalid(self.explain(e)))?;
        Ok(line)
    }

    /// The line as it may be shown: the keys replaced. Made from the options, not from the
    /// line, so that no unwiped copy of a key is made on the way.
    fn shown(&self) -> String {
        let mut words: Vec<String> = self
            .pairs()
            .into_iter()
            .map(|(k, v)| match k {
                Key::Secret | Key::TargetSecret => format!("{k}=<hidden>"),
                _ => format!("{k}={v}"),
            })
            .collect();
        if self.ro {
            words.push(Key::Ro.as_str().to_owned());
        }
        words.join(" ")
    }

    fn value(&self, key: Key) -> Option<&str> {
        self.pairs()
            .into_iter()
            .find(|&(k, _)| k == key)
            .map(|(_, v)| v)
    }

    fn explain(&self, e: OptionError) -> String {
        match e {
            OptionError::BadValue(k) => bad_value(k, self.value(k).unwrap_or("")),
            e => format!("invalid map options: {e}"),
        }
    }
}

/// The module's words for a bad value, the value (unless it is the secret) and what is valid.
fn bad_value(key: Key, value: &str) -> String {
    let quoted = match key {
        Key::Secret | Key::TargetSecret => String::new(),
        _ => format!(" ('{value}')"),
    };
    format!(
        "invalid map options: {}{quoted}: expected {}",
        OptionError::BadValue(key),
        rule(key)
    )
}

/// What `key` accepts, in words; the bounds come from the parser's own constants.
pub fn rule(key: Key) -> String {
    match key {
        Key::Name => format!("1 to {DEVICE_NAME_MAX} characters of A-Z a-z 0-9 . _ -"),
        Key::Export => format!("1 to {EXPORT_NAME_MAX} characters of A-Z a-z 0-9 . _ -"),
        Key::Addr => "an IPv4 address as four numbers 0-255 without leading zeros, like 192.0.2.2, \
                      or an IPv6 address, like fd00::2 (not a link-local one)"
            .to_owned(),
        Key::Port | Key::TcpPort => "a port number from 1 to 65535".to_owned(),
        Key::Queues => format!("a whole number from 1 to {MAX_QUEUES}"),
        Key::PollQueues => format!(
            "a whole number from 0 to {}, with queues (1 when not given) at most {MAX_QUEUES} in all",
            MAX_QUEUES - 1
        ),
        Key::Ro => "no value".to_owned(),
        Key::Target => format!(
            "1 to {MAX_TARGETS} targets as ADDR[:PORT[:TCP_PORT]], comma-separated, each address \
             as for addr (an IPv6 one in brackets, like [fd00::2]:7700) and each port from 1 to \
             65535, no target twice"
        ),
        Key::Secret | Key::TargetSecret => format!(
            "a key file of {} to {} hex digits (an even number)",
            SECRET_MIN * 2,
            SECRET_MAX * 2
        ),
    }
}

/// `map`: writes the line, then finds the new disk by name. Returns its `/dev` path.
pub fn map(sysfs: &Sysfs, req: &MapRequest) -> Result<String> {
    let line = req.line()?;
    sysfs.check_loaded()?;
    sysfs::write(&sysfs.ctl_file("map_device"), &line, &req.shown()).map_err(|e| {
        e.with_hint(|n| {
            match n {
            errno::EACCES => Some(
                "the target refused our key, wants one, or did not prove its own (dmesg says which)"
                    .to_owned(),
            ),
            errno::EEXIST => Some(format!(
                "a disk named '{}' is mapped already (see rdmadiskctl list)",
                req.name
            )),
            errno::ENOSPC => Some("every disk slot is taken: unmap one first".to_owned()),
            _ => None,
        }
        })
    })?;
    let devices = disk::list(sysfs)?;
    let dev = devices
        .iter()
        .find(|d| d.name == req.name)
        .ok_or_else(|| Error::Parse {
            path: sysfs.ctl_file("devices"),
            msg: format!(
                "the module took the map line but lists no disk named '{}'",
                req.name
            ),
        })?;
    Ok(format!("/dev/{}", dev.device))
}

/// `unmap`: `normal` waits for nothing and fails while the disk is open; `force` fails the
/// disk's I/O and unmaps it anyway.
pub fn unmap(sysfs: &Sysfs, wanted: &str, force: bool) -> Result<String> {
    let disk = Disk::open(sysfs, wanted)?;
    let mode = if force { "force" } else { "normal" };
    disk.write("unmap", mode).map_err(|e| {
        e.with_hint(|n| {
            (n == errno::EBUSY && !force).then(|| {
                format!(
                    "{} is open or mounted: close it, or unmap with --force (its I/O then fails)",
                    disk.dev.device
                )
            })
        })
    })?;
    Ok(format!("unmapped {}", disk.dev.label()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> MapRequest {
        MapRequest {
            name: "d1".into(),
            addr: "192.0.2.2".into(),
            export: "vol0".into(),
            ..MapRequest::default()
        }
    }

    #[test]
    fn lines_carry_every_key_given() {
        assert_eq!(
            &*req().line().unwrap(),
            "name=d1 addr=192.0.2.2 export=vol0"
        );
        let full = MapRequest {
            port: Some("7700".into()),
            tcp_port: Some("7701".into()),
            queues: Some("2".into()),
            poll_queues: Some("1".into()),
            ro: true,
            secret: Some(KeyText("00112233445566778899aabbccddeeff".into())),
            ..req()
        };
        let line = full.line().unwrap();
        assert_eq!(
            &*line,
            "name=d1 addr=192.0.2.2 export=vol0 port=7700 tcp_port=7701 queues=2 \
             poll_queues=1 secret=00112233445566778899aabbccddeeff ro"
        );
        assert_eq!(
            full.shown(),
            "name=d1 addr=192.0.2.2 export=vol0 port=7700 tcp_port=7701 queues=2 \
             poll_queues=1 secret=<hidden> ro"
        );
    }

    #[test]
    fn several_targets_go_in_place_of_addr() {
        let r = MapRequest {
            addr: String::new(),
            target: Some("192.0.2.2,192.0.2.3:7710:7711".into()),
            ..req()
        };
        assert_eq!(
            &*r.line().unwrap(),
            "name=d1 target=192.0.2.2,192.0.2.3:7710:7711 export=vol0"
        );
        let bad = err(MapRequest {
            target: Some("192.0.2.2,,192.0.2.3".into()),
            ..r
        });
        assert!(
            bad.contains("'target'") && bad.contains("comma-separated"),
            "{bad}"
        );
    }

    fn err(r: MapRequest) -> String {
        match r.line() {
            Err(Error::Invalid(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_values_are_explained() {
        assert_eq!(
            err(MapRequest {
                queues: Some("0".into()),
                ..req()
            }),
            "invalid map options: bad value for key 'queues' ('0'): expected a whole number from 1 to 256"
        );
        assert_eq!(
            err(MapRequest {
                addr: "010.0.0.1".into(),
                ..req()
            }),
            "invalid map options: bad value for key 'addr' ('010.0.0.1'): expected an IPv4 address \
             as four numbers 0-255 without leading zeros, like 192.0.2.2, or an IPv6 address, like \
             fd00::2 (not a link-local one)"
        );
        let e = err(MapRequest {
            queues: Some("200".into()),
            poll_queues: Some("57".into()),
            ..req()
        });
        assert!(e.contains("'poll_queues' ('57')"), "{e}");
        assert!(e.contains("at most 256 in all"), "{e}");
        let e = err(MapRequest {
            port: Some("0".into()),
            ..req()
        });
        assert!(e.ends_with("expected a port number from 1 to 65535"), "{e}");
    }

    #[test]
    fn secrets_are_never_quoted() {
        let e = err(MapRequest {
            secret: Some(KeyText("0011zz".into())),
            ..req()
        });
        assert_eq!(
            e,
            "invalid map options: bad value for key 'secret': expected a key file of 32 to 128 hex digits (an even number)"
        );
        assert!(!e.contains("0011"));
    }

    #[test]
    fn blanks_cannot_smuggle_keys() {
        let e = err(MapRequest {
            export: "vol0 port=1".into(),
            ..req()
        });
        assert!(e.contains("'export' ('vol0 port=1')"), "{e}");
        let e = err(MapRequest {
            name: "".into(),
            ..req()
        });
        assert!(
            e.contains("'name' (''): expected 1 to 32 characters"),
            "{e}"
        );
    }
}
