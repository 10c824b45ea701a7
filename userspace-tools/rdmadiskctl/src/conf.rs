//! `map-all` and `unmap-all`: the persistent maps of `disks.conf` (by default
//! `/etc/rdmadisk/disks.conf`), one disk a line:
//!
//! ```text
//! # NAME  KEY=VALUE ...           (the keys of `rdmadiskctl map`, spelt as in its map line)
//! vol0    addr=192.0.2.2 export=vol0
//! db      target=192.0.2.2,192.0.2.3:7710:7711 export=db queues=4 secret_file=db.key ro
//! ```
//!
//! The whole file is checked, key files read and every line put through the module's own
//! parser, before anything is mapped: a mistake on line 7 must not leave lines 1-6 mapped and
//! the rest not, which a boot unit would then half-retry.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::disk;
use crate::error::{Error, Result};
use crate::map::{self, MapRequest};
use crate::sysfs::Sysfs;

/// Where `map-all` and `unmap-all` read their disks.
pub const DEFAULT_PATH: &str = "/etc/rdmadisk/disks.conf";
/// Names another file (tests; a unit's drop-in); `--config` wins over it.
pub const PATH_ENV: &str = "RDMADISK_DISKS_CONF";

/// The keys a line takes after its name, in the order the help text lists them.
pub const KEYS: [&str; 10] = [
    "addr",
    "target",
    "export",
    "port",
    "tcp_port",
    "queues",
    "poll_queues",
    "ro",
    "secret_file",
    "target_secret_file",
];

/// One disk of the file.
#[derive(Debug)]
pub struct Entry {
    /// `FILE:LINE`, for messages.
    pub at: String,
    pub req: MapRequest,
    pub secret_file: Option<PathBuf>,
    pub target_secret_file: Option<PathBuf>,
}

/// Parses the file's text. `base` is the file's directory, against which relative key file
/// paths are taken. Keys are not read here ([`load`] does). Every bad line is reported, each
/// as `FILE:LINE: what`.
pub fn parse(file: &Path, text: &str) -> std::result::Result<Vec<Entry>, Vec<String>> {
    let base = file.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    let mut errs = Vec::new();
    let mut names = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let at = format!("{}:{}", file.display(), i + 1);
        let line = raw.split('#').next().unwrap_or("");
        let mut words = line.split_ascii_whitespace();
        let Some(name) = words.next() else { continue };
        match parse_line(name, words, base) {
            Ok((req, secret_file, target_secret_file)) => {
                if !names.insert(req.name.clone()) {
                    errs.push(format!("{at}: '{name}' is named twice in the file"));
                    continue;
                }
                out.push(Entry {
                    at,
                    req,
                    secret_file,
                    target_secret_file,
                });
            }
            Err(msg) => errs.push(format!("{at}: {msg}")),
        }
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(errs)
    }
}

type Parsed = (MapRequest, Option<PathBuf>, Option<PathBuf>);

fn parse_line<'a>(
    name: &str,
    words: impl Iterator<Item = &'a str>,
    base: &Path,
) -> std::result::Result<Parsed, String> {
    if name.contains('=') {
        return Err(format!(
            "a line starts with the disk's name, not '{name}' (NAME KEY=VALUE ...)"
        ));
    }
    let mut req = MapRequest {
        name: name.to_owned(),
        ..MapRequest::default()
    };
    let (mut secret_file, mut target_secret_file) = (None, None);
    let mut seen = HashSet::new();
    let mut export = None;
    for w in words {
        let (k, v) = match w.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (w, None),
        };
        if !KEYS.contains(&k) {
            return Err(format!(
                "unknown key '{k}' (keys: {}; knobs such as transport are set with `rdmadiskctl set` after the map)",
                KEYS.join(" ")
            ));
        }
        if !seen.insert(k) {
            return Err(format!("'{k}' is given twice"));
        }
        let v = match (k, v) {
            ("ro", None) => {
                req.ro = true;
                continue;
            }
            ("ro", Some(_)) => return Err("'ro' takes no value".to_owned()),
            (_, None) | (_, Some("")) => return Err(format!("'{k}' needs a value ({k}=...)")),
            (_, Some(v)) => v.to_owned(),
        };
        let path = || base.join(&v);
        match k {
            "addr" => req.addr = v,
            "target" => req.target = Some(v),
            "export" => export = Some(v),
            "port" => req.port = Some(v),
            "tcp_port" => req.tcp_port = Some(v),
            "queues" => req.queues = Some(v),
            "poll_queues" => req.poll_queues = Some(v),
            "secret_file" => secret_file = Some(path()),
            "target_secret_file" => target_secret_file = Some(path()),
            _ => unreachable!("every key of KEYS is handled"),
        }
    }
    match (seen.contains("addr"), seen.contains("target")) {
        (false, false) => return Err("needs addr= or target=".to_owned()),
        (true, true) => return Err("takes addr= or target=, not both".to_owned()),
        _ => {}
    }
    req.export = export.ok_or("needs export=")?;
    if target_secret_file.is_some() && secret_file.is_none() {
        return Err("target_secret_file= needs secret_file= too".to_owned());
    }
    // The module's parser judges the values, as for `map` (keys are checked once read).
    req.line().map_err(|e| e.to_string())?;
    Ok((req, secret_file, target_secret_file))
}

/// Reads and checks the whole file: every line parsed, every key file read and the line with
/// its key put through the module's parser. Errors name each bad line (`FILE:LINE: ...`).
/// `keys` false skips the key files (`unmap-all` needs only the names).
pub fn load(file: &Path, keys: bool) -> Result<Vec<Entry>> {
    let text = std::fs::read_to_string(file).map_err(|err| Error::Io {
        action: "read",
        path: file.to_owned(),
        err,
    })?;
    let mut entries = parse(file, &text).map_err(|e| Error::Invalid(e.join("\n")))?;
    if !keys {
        return Ok(entries);
    }
    let mut errs = Vec::new();
    for e in &mut entries {
        let r = (|| -> Result<()> {
            if let Some(p) = &e.secret_file {
                e.req.secret = Some(map::read_key("secret_file=", p)?);
            }
            if let Some(p) = &e.target_secret_file {
                e.req.target_secret = Some(map::read_key("target_secret_file=", p)?);
            }
            e.req.line().map(drop)
        })();
        if let Err(err) = r {
            errs.push(format!("{}: {err}", e.at));
        }
    }
    if errs.is_empty() {
        Ok(entries)
    } else {
        Err(Error::Invalid(errs.join("\n")))
    }
}

/// What `map-all` and `unmap-all` did: a line per disk for standard output, and the
/// failures (already worded with their `FILE:LINE`) with the exit status of the first.
#[derive(Debug, Default)]
pub struct Outcome {
    pub done: Vec<String>,
    pub failed: Vec<(String, u8)>,
}

/// `map-all`: maps each disk of the file that no disk of the same name is mapped as. A name
/// mapped to another export is a failure, not a skip: it is not the disk the file means.
pub fn map_all(sysfs: &Sysfs, entries: &[Entry]) -> Result<Outcome> {
    let mapped = disk::list(sysfs)?;
    let mut o = Outcome::default();
    for e in entries {
        let name = &e.req.name;
        match mapped.iter().find(|d| &d.name == name) {
            Some(d) if d.export == e.req.export => o
                .done
                .push(format!("{name}: already mapped as /dev/{}", d.device)),
            Some(d) => o.failed.push((
                format!(
                    "{}: {name}: a disk of that name is mapped already, to export '{}' (/dev/{})",
                    e.at, d.export, d.device
                ),
                crate::error::exit::FAILURE,
            )),
            None => match map::map(sysfs, &e.req) {
                Ok(dev) => o.done.push(format!("{name}: mapped {dev}")),
                Err(err) => o
                    .failed
                    .push((format!("{}: {name}: {err}", e.at), err.exit_code())),
            },
        }
    }
    Ok(o)
}

/// `unmap-all`: unmaps each disk of the file that is mapped, last line first; disks mapped
/// by hand (not in the file, or under a name of the file but to another export, which
/// `map-all` refuses as not the file's) are left alone. A module that is not loaded has
/// nothing mapped.
pub fn unmap_all(sysfs: &Sysfs, entries: &[Entry], force: bool) -> Result<Outcome> {
    let mapped = match disk::list(sysfs) {
        Err(Error::NotLoaded { .. }) => return Ok(Outcome::default()),
        r => r?,
    };
    let mut o = Outcome::default();
    for e in entries.iter().rev() {
        let name = &e.req.name;
        if !mapped
            .iter()
            .any(|d| &d.name == name && d.export == e.req.export)
        {
            continue;
        }
        match map::unmap(sysfs, name, force) {
            Ok(msg) => o.done.push(msg),
            Err(err) => o
                .failed
                .push((format!("{}: {name}: {err}", e.at), err.exit_code())),
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errs(text: &str) -> Vec<String> {
        parse(Path::new("/etc/rdmadisk/disks.conf"), text).unwrap_err()
    }

    #[test]
    fn lines_become_map_requests() {
        let text = "# comment\n\n  vol0 addr=192.0.2.2 export=vol0   # trailing\n\
                    db target=192.0.2.2,192.0.2.3:7710:7711 export=db queues=4 poll_queues=1 \
                    port=7700 tcp_port=7701 secret_file=db.key target_secret_file=/k/t.key ro\n";
        let e = parse(Path::new("/etc/rdmadisk/disks.conf"), text).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].at, "/etc/rdmadisk/disks.conf:3");
        assert_eq!(
            &*e[0].req.line().unwrap(),
            "name=vol0 addr=192.0.2.2 export=vol0"
        );
        assert_eq!(
            &*e[1].req.line().unwrap(),
            "name=db target=192.0.2.2,192.0.2.3:7710:7711 export=db port=7700 tcp_port=7701 \
             queues=4 poll_queues=1 ro"
        );
        assert_eq!(
            e[1].secret_file.as_deref(),
            Some(Path::new("/etc/rdmadisk/db.key"))
        );
        assert_eq!(
            e[1].target_secret_file.as_deref(),
            Some(Path::new("/k/t.key"))
        );
    }

    #[test]
    fn the_example_file_parses() {
        let e = parse(
            Path::new("/etc/rdmadisk/disks.conf"),
            include_str!("../disks.conf.example"),
        )
        .unwrap();
        assert_eq!(e.len(), 2);
    }

    #[test]
    fn every_bad_line_is_named() {
        let e = errs(
            "ok addr=192.0.2.2 export=v\n\
             bad1 addr=192.0.2.2\n\
             bad2 addr=192.0.2.2 export=v transport=tcp\n\
             bad3 addr=300.0.0.1 export=v\n\
             addr=192.0.2.2 export=v\n\
             ok export=w addr=192.0.2.2\n\
             bad4 addr=192.0.2.2 target=192.0.2.3 export=v\n\
             bad5 addr=192.0.2.2 export=v ro=1\n\
             bad6 addr=192.0.2.2 export=v queues=1 queues=2\n\
             bad7 addr=192.0.2.2 export=v target_secret_file=k\n\
             bad8 addr=192.0.2.2 export=v port=\n",
        );
        let at = |n: usize| format!("/etc/rdmadisk/disks.conf:{n}: ");
        let want = [
            (2, "needs export="),
            (3, "unknown key 'transport'"),
            (4, "bad value for key 'addr' ('300.0.0.1')"),
            (5, "starts with the disk's name"),
            (6, "'ok' is named twice"),
            (7, "not both"),
            (8, "'ro' takes no value"),
            (9, "'queues' is given twice"),
            (10, "needs secret_file= too"),
            (11, "'port' needs a value"),
        ];
        assert_eq!(e.len(), want.len(), "{e:#?}");
        for (got, (n, words)) in e.iter().zip(want) {
            assert!(
                got.starts_with(&at(n)) && got.contains(words),
                "{got} / {n} {words}"
            );
        }
    }

    #[test]
    fn key_files_are_read_and_checked_before_anything_is_mapped() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        std::fs::write(&key, "00112233445566778899aabbccddeeff\n").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let conf = dir.path().join("disks.conf");
        std::fs::write(
            &conf,
            "a addr=192.0.2.2 export=v secret_file=k\nb addr=192.0.2.2 export=v secret_file=none\n",
        )
        .unwrap();
        let e = match load(&conf, true) {
            Err(Error::Invalid(m)) => m,
            r => panic!("{r:?}"),
        };
        assert!(
            e.starts_with(&format!("{}:2: cannot read ", conf.display())),
            "{e}"
        );
        assert!(!e.contains(":1:"), "{e}");
        // unmap-all needs only the names.
        assert_eq!(load(&conf, false).unwrap().len(), 2);
        std::fs::write(&conf, "a addr=192.0.2.2 export=v secret_file=k\n").unwrap();
        let e = load(&conf, true).unwrap();
        assert!(e[0].req.line().unwrap().contains("secret=0011"));
    }
}
