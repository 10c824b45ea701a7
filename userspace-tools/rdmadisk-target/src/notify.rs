//! Readiness for systemd (`Type=notify`): the target tells the service manager when it is
//! ready (its listeners are up, so a unit ordered after it finds the ports open), what it is
//! doing, and when it is stopping, through the datagram socket in `NOTIFY_SOCKET`
//! (sd_notify(3)). Without that variable (not started by systemd) every call does nothing.
//! The protocol is a few `KEY=value` lines per datagram: no need for libsystemd.

use std::io;
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `"READY=1\nSTATUS=serving"`) to the service manager, if there is one.
/// A failure is logged, never fatal: the target serves whether systemd hears it or not.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = notify_to(&path.to_string_lossy(), state) {
        log::warn!("cannot notify the service manager: {e}");
    }
}

/// Sends `state` to the socket `path`: a file system path, or `@name` for an abstract one.
pub fn notify_to(path: &str, state: &str) -> io::Result<()> {
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(path)?,
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_arrives_as_one_datagram() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notify");
        let rx = UnixDatagram::bind(&p).unwrap();
        notify_to(p.to_str().unwrap(), "READY=1\nSTATUS=serving").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");
        assert!(notify_to(dir.path().join("none").to_str().unwrap(), "READY=1").is_err());
    }

    #[test]
    fn an_abstract_socket_works_too() {
        let name = format!("rdmadisk-target-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        notify_to(&format!("@{name}"), "STOPPING=1").unwrap();
        let mut buf = [0u8; 16];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }
}
