//! The control socket: a unix stream socket on which the running target answers
//! `rdmadisk-target clients`. One request per connection, a line (`clients` or
//! `clients-json`); the answer, then the target closes it. Only root may connect (the socket
//! is 0600): the list shows who is attached from where.

use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use crate::config::{ClientsArgs, FileConf, DEFAULT_CONTROL_SOCKET};
use crate::engine::Target;
use crate::{logging, registry};

/// Binds the control socket at `p`. A socket file left by a target that is gone is replaced;
/// one a running target answers on is not.
pub fn bind(p: &Path) -> io::Result<UnixListener> {
    if let Ok(m) = std::fs::symlink_metadata(p) {
        if !m.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            ));
        }
        if UnixStream::connect(p).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "another target answers on it",
            ));
        }
        std::fs::remove_file(p)?;
    }
    let l = UnixListener::bind(p)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Answers on `l` until the target stops, then removes the socket file.
pub fn serve(t: Arc<Target>, l: UnixListener, path: PathBuf) {
    if let Err(e) = l.set_nonblocking(true) {
        log::error!("control socket: cannot poll it: {e}");
        return;
    }
    while !t.stopping() {
        match l.accept() {
            Ok((s, _)) => {
                if let Err(e) = answer(&t, s) {
                    log::debug!("control socket: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let fds = [Some(l.as_raw_fd()), t.stop_fd()];
                if crate::wake::readable(&fds, Some(t.idle_wait())).is_err() {
                    thread::sleep(crate::conn::TICK);
                }
            }
            Err(e) => {
                log::warn!("control socket: accept failed: {e}");
                thread::sleep(crate::conn::TICK);
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}

fn answer(t: &Target, s: UnixStream) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(&s).take(256).read_line(&mut line)?;
    let clients = t.registry.clients();
    let now = SystemTime::now();
    let out = match line.trim() {
        "clients" => registry::to_table(&clients, now),
        "clients-json" => registry::to_json(&clients, now),
        other => format!("error: unknown request {other:?}\n"),
    };
    (&s).write_all(out.as_bytes())
}

/// The socket named by the flags: `--socket`, else the config's `control_socket`, else the
/// default.
fn socket_path(a: &ClientsArgs) -> Result<PathBuf, String> {
    if let Some(p) = &a.socket {
        return Ok(p.clone());
    }
    if let Some(c) = &a.config {
        if let Some(p) = FileConf::read(c)?.control_socket {
            return Ok(p);
        }
    }
    Ok(PathBuf::from(DEFAULT_CONTROL_SOCKET))
}

/// `rdmadisk-target clients`: 0 with the list printed, 1 if the target cannot be asked.
pub fn run(a: &ClientsArgs) -> ExitCode {
    let res = socket_path(a).and_then(|p| {
        let mut s = UnixStream::connect(&p).map_err(|e| {
            format!(
                "{}: {e} (is the target running, with this control_socket?)",
                p.display()
            )
        })?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let req = if a.json {
            "clients-json\n"
        } else {
            "clients\n"
        };
        s.write_all(req.as_bytes())
            .map_err(|e| format!("{}: {e}", p.display()))?;
        let mut out = String::new();
        s.read_to_string(&mut out)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        match out.strip_prefix("error: ") {
            Some(e) => Err(format!("{}: the target says: {}", p.display(), e.trim())),
            None => Ok(out),
        }
    });
    match res {
        Ok(out) => {
            logging::out(&out);
            ExitCode::SUCCESS
        }
        Err(e) => {
            logging::error_line(&e);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_socket_is_not_taken_over_and_a_stale_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.sock");
        let l = bind(&p).unwrap();
        assert_eq!(bind(&p).unwrap_err().kind(), io::ErrorKind::AddrInUse);
        drop(l);
        assert!(bind(&p).is_ok(), "a socket nobody answers on is replaced");
        let f = dir.path().join("file");
        std::fs::write(&f, "x").unwrap();
        assert!(bind(&f).is_err());
    }
}
