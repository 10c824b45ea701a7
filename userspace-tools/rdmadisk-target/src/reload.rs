//! SIGHUP: the configuration is read again (the same command line, the file anew) and what
//! can change live is applied (docs/design.md, "The target"):
//!
//! - exports added are opened and served; exports removed are served no more, and their
//!   connections end (requests in flight are finished, then the connection closes, logged);
//! - allow-lists (top level, `allow_any`, and each export's) change at once; connections from
//!   addresses the new lists do not admit end the same way;
//! - anything else (an export's path, read_only, exclusive, keys; listen address, ports,
//!   limits, host keys) needs a restart: it is logged as such, and the running target keeps
//!   it as it was. An export whose definition changed so is kept whole, even with no client:
//!   replacing it under a client attaching at that moment would split its exclusive hold
//!   and its sticky errors between two copies.
//!
//! A configuration with any problem, or an added export that cannot be opened, is refused
//! whole: nothing changes.

use std::fmt::Write as _;

use rdmadisk_net::allow::AllowList;

use crate::config::{Config, ExportSpec};
use crate::engine::Target;

/// What a new configuration changes, against the one running.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Exports to open and serve.
    pub add: Vec<String>,
    /// Exports to take out.
    pub remove: Vec<String>,
    /// Exports whose allow-list changes (live).
    pub allow: Vec<String>,
    /// The top-level allow-list or `allow_any` changes (live).
    pub access: bool,
    /// What needs a restart, one line each (kept as it is).
    pub restart: Vec<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        *self == Plan::default()
    }
}

/// Why `new` cannot replace `old` live (the same export name), if it cannot.
fn export_change(old: &ExportSpec, new: &ExportSpec) -> Vec<&'static str> {
    let mut why = Vec::new();
    if old.path != new.path || old.rbd != new.rbd {
        why.push("path");
    }
    if old.read_only != new.read_only {
        why.push("read_only");
    }
    if old.exclusive != new.exclusive {
        why.push("exclusive");
    }
    if old.insecure != new.insecure {
        why.push("insecure");
    }
    let key = |e: &ExportSpec| e.secret.as_ref().map(|s| s.as_bytes().to_vec());
    if key(old) != key(new) {
        why.push("secret_file (the key)");
    }
    // The identity mapped disks hold it to: they refuse another uuid (docs/design.md,
    // "Identity"), so it is never swapped under them.
    if old.uuid != new.uuid {
        why.push("uuid");
    }
    if old.serial != new.serial {
        why.push("serial");
    }
    why
}

/// The top-level settings that differ and cannot change live.
fn top_level_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut why = Vec::new();
    macro_rules! cmp {
        ($($f:ident),*) => {
            $(if old.$f != new.$f {
                why.push(stringify!($f));
            })*
        };
    }
    cmp!(
        listen,
        rdma_port,
        tcp_port,
        max_io_bytes,
        queue_depth,
        credits,
        direct,
        buffer_memory,
        rdma_window,
        inline_max,
        ack_timeout_exp,
        poll_us,
        max_connections,
        max_connections_per_host,
        hello_timeout,
        idle_timeout,
        send_timeout,
        shutdown_timeout,
        stats_file,
        log_level,
        corrupt_read_every,
        fail_write_crc_every,
        hostile,
        control_socket,
        metrics_listen,
        metrics_file
    );
    let hosts = |c: &Config| {
        let mut v: Vec<_> = c
            .hosts
            .iter()
            .map(|h| {
                (
                    h.addr,
                    h.name.clone(),
                    h.keys.client.as_bytes().to_vec(),
                    h.keys.target.as_bytes().to_vec(),
                )
            })
            .collect();
        v.sort();
        v
    };
    if hosts(old) != hosts(new) {
        why.push("host (keys)");
    }
    why
}

/// What `new` changes against `old` (pure: nothing is applied).
pub fn plan(old: &Config, new: &Config) -> Plan {
    let mut p = Plan::default();
    for n in &new.exports {
        match old.exports.iter().find(|o| o.name == n.name) {
            None => p.add.push(n.name.clone()),
            Some(o) => {
                let why = export_change(o, n);
                if !why.is_empty() {
                    p.restart.push(format!(
                        "export {}: {} changed: needs a restart; served as it was",
                        n.name,
                        why.join(", ")
                    ));
                }
                if o.allow != n.allow {
                    p.allow.push(n.name.clone());
                }
            }
        }
    }
    for o in &old.exports {
        if !new.exports.iter().any(|n| n.name == o.name) {
            p.remove.push(o.name.clone());
        }
    }
    p.access = old.allow != new.allow || old.allow_any != new.allow_any;
    let top = top_level_changes(old, new);
    if !top.is_empty() {
        p.restart.push(format!(
            "{} changed: needs a restart; kept as it was",
            top.join(", ")
        ));
    }
    p
}

/// The configuration in force once `p` is applied: `new`'s exports (but those that need a
/// restart, which stay as in `old`, allow-list aside) and allow-lists, `old`'s everything
/// else.
pub fn in_force(old: &Config, new: &Config) -> Config {
    let mut c = old.clone();
    c.allow = new.allow.clone();
    c.allow_any = new.allow_any;
    c.exports = new
        .exports
        .iter()
        .map(|n| match old.exports.iter().find(|o| o.name == n.name) {
            Some(o) => ExportSpec {
                allow: n.allow.clone(),
                ..o.clone()
            },
            None => n.clone(),
        })
        .collect();
    c
}

fn export_allow(e: &ExportSpec) -> Result<Option<AllowList>, String> {
    if e.allow.is_empty() {
        return Ok(None);
    }
    AllowList::parse(&e.allow)
        .map(Some)
        .map_err(|err| format!("export {}: {err}", e.name))
}

/// Applies `new` to the running target (see the module's comment); the configuration now in
/// force, or why nothing was applied. Every change is logged.
pub fn apply(t: &Target, old: &Config, new: &Config) -> Result<Config, String> {
    let p = plan(old, new);
    if p.is_empty() {
        log::info!("reload: nothing changed");
        return Ok(old.clone());
    }
    // Everything that can fail first: then nothing is half applied.
    let allow = AllowList::parse(&new.allow).map_err(|e| format!("allow: {e}"))?;
    let mut allows = Vec::new();
    for n in &p.allow {
        let spec = new.exports.iter().find(|e| &e.name == n).expect("planned");
        allows.push((n.clone(), export_allow(spec)?));
    }
    let mut opened = Vec::new();
    for n in &p.add {
        let spec = new.exports.iter().find(|e| &e.name == n).expect("planned");
        opened.push(crate::open_export(spec, old.direct)?);
    }
    for line in &p.restart {
        log::warn!("reload: {line}");
    }
    for n in &p.remove {
        if let Some(e) = t.export(n) {
            e.retire();
        }
    }
    t.change_exports(opened, &p.remove);
    for (n, a) in allows {
        if let Some(e) = t.export(&n) {
            e.set_allow(a);
        }
        log::info!("reload: export {n}: allow-list changed");
    }
    if p.access {
        t.set_access(allow, new.allow_any);
        log::info!(
            "reload: allow-list now {}",
            if new.allow_any {
                "none (allow_any: every client that reaches the target)".to_string()
            } else {
                new.allow.join(", ")
            }
        );
    }
    for n in &p.add {
        log::info!("reload: export {n} added");
    }
    for n in &p.remove {
        let why = format!("export {n} was removed by a reload");
        let gone = t.registry.evict(|c| &c.conn.export == n, &why);
        log::info!(
            "reload: export {n} removed; disconnecting its {} connection(s){}",
            gone.len(),
            peers(&gone)
        );
    }
    if p.access || !p.allow.is_empty() {
        let why = "its address is no longer on the allow-list (a reload)";
        let gone = t.registry.evict(
            |c| {
                let Some(ip) = c.ip() else { return false };
                !t.admits(ip) || t.export(&c.conn.export).is_some_and(|e| !e.allows(ip))
            },
            why,
        );
        if !gone.is_empty() {
            log::info!(
                "reload: disconnecting {} connection(s) no longer allowed{}",
                gone.len(),
                peers(&gone)
            );
        }
    }
    Ok(in_force(old, new))
}

fn peers(cs: &[std::sync::Arc<crate::registry::Client>]) -> String {
    let mut s = String::new();
    for (i, c) in cs.iter().enumerate() {
        let _ = write!(
            s,
            "{}{} ({} {}, session {})",
            if i == 0 { ": " } else { ", " },
            c.conn.peer.map_or("?".to_string(), |p| p.to_string()),
            c.conn.transport.name(),
            c.conn.export,
            c.conn.session
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Args;
    use std::path::Path;

    fn load(dir: &Path, text: &str) -> Config {
        let p = dir.join("t.toml");
        std::fs::write(&p, text).unwrap();
        Config::load(&Args {
            config: Some(p),
            ..Args::default()
        })
        .unwrap()
    }

    const BASE: &str = "listen = \"127.0.0.1\"\nallow = [\"10.0.0.0/8\"]\n";

    fn export(name: &str, path: &str, extra: &str) -> String {
        format!("[[export]]\nname = \"{name}\"\npath = \"{path}\"\n{extra}\n")
    }

    #[test]
    fn exports_added_removed_and_unchanged() {
        let d = tempfile::tempdir().unwrap();
        let old = load(
            d.path(),
            &format!(
                "{BASE}{}{}",
                export("a", "a.img", ""),
                export("b", "b.img", "")
            ),
        );
        let new = load(
            d.path(),
            &format!(
                "{BASE}{}{}",
                export("a", "a.img", ""),
                export("c", "c.img", "")
            ),
        );
        let p = plan(&old, &new);
        assert_eq!(p.add, ["c"]);
        assert_eq!(p.remove, ["b"]);
        assert!(
            p.allow.is_empty() && !p.access && p.restart.is_empty(),
            "{p:?}"
        );
        assert!(plan(&old, &old).is_empty());
        let f = in_force(&old, &new);
        let names: Vec<_> = f.exports.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
    }

    #[test]
    fn allow_lists_change_live() {
        let d = tempfile::tempdir().unwrap();
        let old = load(d.path(), &format!("{BASE}{}", export("a", "a.img", "")));
        let new = load(
            d.path(),
            &format!(
                "listen = \"127.0.0.1\"\nallow = [\"10.0.0.1\"]\n{}",
                export("a", "a.img", "allow = [\"10.0.0.1\"]")
            ),
        );
        let p = plan(&old, &new);
        assert_eq!(p.allow, ["a"]);
        assert!(p.access);
        assert!(p.restart.is_empty(), "{p:?}");
        let f = in_force(&old, &new);
        assert_eq!(f.allow, ["10.0.0.1"]);
        assert_eq!(f.exports[0].allow, ["10.0.0.1"]);
        assert!(
            plan(&f, &new).is_empty(),
            "once applied, nothing is left to do"
        );
    }

    #[test]
    fn what_cannot_change_live_is_kept_and_said() {
        let d = tempfile::tempdir().unwrap();
        let old = load(d.path(), &format!("{BASE}{}", export("a", "a.img", "")));
        let new = load(
            d.path(),
            &format!(
                "{BASE}tcp_port = 9999\ncredits = 4\n{}",
                export(
                    "a",
                    "other.img",
                    "read_only = true\nallow = [\"10.1.0.0/16\"]"
                )
            ),
        );
        let p = plan(&old, &new);
        assert_eq!(p.allow, ["a"], "the allow-list still applies");
        assert_eq!(p.restart.len(), 2, "{p:?}");
        assert!(p.restart[0].starts_with("export a: path, read_only changed: needs a restart"));
        assert!(p.restart[1].starts_with("tcp_port, queue_depth, credits changed"));
        let f = in_force(&old, &new);
        assert_eq!(f.exports[0].path, Path::new("a.img"));
        assert!(!f.exports[0].read_only);
        assert_eq!(f.exports[0].allow, ["10.1.0.0/16"]);
        assert_eq!(f.tcp_port, old.tcp_port);
        // Still pending at the next reload, and still said.
        assert_eq!(plan(&f, &new).restart.len(), 2);
    }
}
