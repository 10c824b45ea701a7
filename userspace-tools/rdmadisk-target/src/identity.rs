//! Each export's identity (its UUID and serial), which clients show in sysfs and udev names
//! links after (docs/design.md, "Identity").
//!
//! The UUID is the configured one (`uuid = "..."`, `--export NAME=PATH,uuid=...`), else one
//! kept beside the export so that it survives restarts:
//! - a regular file: a random UUID made once and kept in the sidecar file `PATH.rdmadisk-id`
//!   (if that cannot be written, one derived from the path, as below);
//! - an RBD image (`rbd:POOL/IMAGE`) or a block device: one derived from the path (a hash
//!   of it). Every gateway of an image derives the same one, which a client failing over
//!   between them needs; a block device should be named by a stable path
//!   (`/dev/disk/by-id/...`) or be given its UUID.
//!
//! The serial is the configured one, else the UUID's first 16 hex digits.

use std::io::Write;
use std::path::{Path, PathBuf};

use rdmadisk_proto::auth::Sha256;
use rdmadisk_proto::wire::{Identity, Serial, Uuid, UUID_LEN};

use crate::config::ExportSpec;

/// Where a file export keeps the UUID made for it.
pub fn sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".rdmadisk-id");
    PathBuf::from(s)
}

/// A UUID derived from `what`: a SHA-256 of it, marked as an RFC 9562 version 8 (custom)
/// UUID.
pub fn derived(what: &str) -> Uuid {
    let mut h = Sha256::new();
    h.update(b"rdmadisk export identity\0");
    h.update(what.as_bytes());
    let d = h.finish();
    let mut u = [0u8; UUID_LEN];
    u.copy_from_slice(&d[..UUID_LEN]);
    u[6] = (u[6] & 0x0f) | 0x80;
    u[8] = (u[8] & 0x3f) | 0x80;
    Uuid(u)
}

/// A random (version 4) UUID.
pub fn random() -> Uuid {
    let mut u = [0u8; UUID_LEN];
    let mut got = 0;
    while got < u.len() {
        // SAFETY: getrandom writes at most the given length into the buffer we own.
        let n = unsafe { libc::getrandom(u[got..].as_mut_ptr().cast(), u.len() - got, 0) };
        if n > 0 {
            got += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            panic!("getrandom failed: {}", std::io::Error::last_os_error());
        }
    }
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    Uuid(u)
}

/// The UUID kept in `side`, made and written there (atomically: a temporary file renamed) if
/// there is none yet.
fn kept(side: &Path) -> Result<Uuid, String> {
    match std::fs::read_to_string(side) {
        Ok(text) => {
            return Uuid::parse(text.trim())
                .ok_or_else(|| format!("{}: not a UUID: {:?}", side.display(), text.trim()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", side.display())),
    }
    let u = random();
    let dir = side.parent().filter(|d| !d.as_os_str().is_empty());
    let mut tmp = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))
        .map_err(|e| format!("{}: {e}", side.display()))?;
    writeln!(tmp, "{u}")
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| format!("{}: {e}", side.display()))?;
    // Two targets starting at once on one file: the first link wins, and the other reads back
    // what is there (a rename would let the last one win after the first had read its own).
    match tmp.persist_noclobber(side) {
        Ok(_) => {
            // The new name survives a power loss with its directory's entry.
            if let Some(d) = dir {
                let _ = std::fs::File::open(d).and_then(|f| f.sync_all());
            }
        }
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {}", side.display(), e.error)),
    }
    let text = std::fs::read_to_string(side).map_err(|e| format!("{}: {e}", side.display()))?;
    Uuid::parse(text.trim()).ok_or_else(|| format!("{}: not a UUID", side.display()))
}

/// The identity of `e`, and where its UUID came from (for the start-up line).
pub fn resolve(e: &ExportSpec, block_device: bool) -> Result<(Identity, String), String> {
    let (uuid, from) = match (e.uuid, &e.rbd) {
        (Some(u), _) => (u, "configured".to_string()),
        (None, Some(r)) => (
            derived(&format!("rbd:{}/{}", r.pool, r.image)),
            "derived from the image name".to_string(),
        ),
        (None, None) if block_device => (
            derived(&format!("dev:{}", e.path.display())),
            format!("derived from the path {}", e.path.display()),
        ),
        (None, None) => {
            let side = sidecar(&e.path);
            match kept(&side) {
                Ok(u) => (u, format!("kept in {}", side.display())),
                // A file in a directory the target may not write (a read-only image): one
                // derived from the path, as for a block device, rather than no start.
                Err(err) if !side.exists() => (
                    derived(&format!("file:{}", e.path.display())),
                    format!("derived from the path: cannot keep one: {err}"),
                ),
                Err(err) => return Err(err),
            }
        }
    };
    let serial = e.serial.unwrap_or_else(|| uuid.default_serial());
    Ok((Identity { uuid, serial }, from))
}

/// Parses a configured UUID.
pub fn parse_uuid(whose: &str, s: &str) -> Result<Uuid, String> {
    Uuid::parse(s).ok_or_else(|| {
        format!("{whose}: uuid {s:?}: expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex, not nil)")
    })
}

/// Parses a configured serial.
pub fn parse_serial(whose: &str, s: &str) -> Result<Serial, String> {
    Serial::new(s.as_bytes())
        .map_err(|_| format!("{whose}: serial {s:?}: expected 1-20 characters of [A-Za-z0-9._-]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_is_stable_and_marked() {
        let a = derived("rbd:rbd/img");
        assert_eq!(a, derived("rbd:rbd/img"));
        assert_ne!(a, derived("rbd:rbd/img2"));
        assert_eq!(a.0[6] >> 4, 8);
        assert_eq!(a.0[8] >> 6, 2);
        let r = random();
        assert_eq!(r.0[6] >> 4, 4);
        assert_ne!(r, random());
    }

    #[test]
    fn sidecar_is_made_once() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("vol0.img");
        let side = sidecar(&f);
        assert_eq!(side, d.path().join("vol0.img.rdmadisk-id"));
        let u = kept(&side).unwrap();
        assert_eq!(kept(&side).unwrap(), u);
        assert_eq!(std::fs::read_to_string(&side).unwrap(), format!("{u}\n"));
        std::fs::write(&side, "junk\n").unwrap();
        assert!(kept(&side).unwrap_err().contains("not a UUID"));
    }

    #[test]
    fn parse_errors_say_what() {
        assert!(parse_uuid("export a", "x")
            .unwrap_err()
            .contains("export a: uuid \"x\""));
        assert!(parse_serial("export a", "a b")
            .unwrap_err()
            .contains("1-20 characters"));
        assert_eq!(parse_serial("e", "SN1").unwrap().as_str(), "SN1");
    }
}
