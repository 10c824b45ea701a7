//! Where the module's files are, and reading and writing them with errors that say what
//! went wrong in the module's terms.

use std::{
    ffi::OsString,
    fs, io,
    path::{Path, PathBuf},
};

use crate::error::{Error, Result};

/// Names another sysfs root, so the tool can be tested against a fake tree.
pub const ROOT_ENV: &str = "RDMADISK_SYSFS";

/// The sysfs tree the tool works on.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    pub fn at(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    /// `/sys`, or the directory `RDMADISK_SYSFS` names.
    pub fn from_env() -> Sysfs {
        Sysfs::from_var(std::env::var_os(ROOT_ENV))
    }

    fn from_var(var: Option<OsString>) -> Sysfs {
        match var {
            // An empty value is what `RDMADISK_SYSFS= cmd` gives when one means "unset".
            Some(v) if !v.is_empty() => Sysfs::at(v),
            _ => Sysfs::at("/sys"),
        }
    }

    /// `class/rdmadisk/ctl`, the module's control directory.
    pub fn ctl_dir(&self) -> PathBuf {
        self.root.join("class/rdmadisk/ctl")
    }

    pub fn ctl_file(&self, name: &str) -> PathBuf {
        self.ctl_dir().join(name)
    }

    /// `block/<disk>`, blk-mq's own directory of the disk.
    pub fn block_dir(&self, disk: &str) -> PathBuf {
        self.root.join("block").join(disk)
    }

    /// `block/<disk>/rdmadisk`, the module's files for the disk.
    pub fn disk_dir(&self, disk: &str) -> PathBuf {
        self.block_dir(disk).join("rdmadisk")
    }

    /// Fails with [`Error::NotLoaded`] unless the control directory is there.
    pub fn check_loaded(&self) -> Result<()> {
        let ctl = self.ctl_dir();
        if ctl.is_dir() {
            Ok(())
        } else {
            Err(Error::NotLoaded { ctl })
        }
    }
}

/// Reads a whole file.
pub fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|err| Error::Io {
        action: "read",
        path: path.to_owned(),
        err,
    })
}

/// Reads a file that an older module may not have; `None` when it is absent.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(Error::Io {
            action: "read",
            path: path.to_owned(),
            err,
        }),
    }
}

/// Writes `value` and a newline to a sysfs file in one write, as `echo` does: the module
/// parses each write whole. `shown` is `value` as it may appear in an error (a secret hidden).
pub fn write(path: &Path, value: &str, shown: &str) -> Result<()> {
    use io::Write;
    let mut line = format!("{value}\n").into_bytes();
    // No `create`: a missing file must fail, not appear as a new regular file.
    let res = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| (e, true))
        .and_then(|mut f| f.write_all(&line).map_err(|e| (e, false)));
    // A map line may carry a key.
    rdmadisk_proto::auth::wipe(&mut line);
    match res {
        Ok(()) => Ok(()),
        // Only the open checks who may write; an EACCES from the write itself is the
        // module's answer (map_device gives it when the target refuses the secret).
        Err((err, true)) if err.kind() == io::ErrorKind::PermissionDenied => {
            Err(Error::PermissionDenied {
                path: path.to_owned(),
            })
        }
        // Opening failed for another reason than permission: there is no such file (or no
        // such disk any more), which is not the kernel judging the value.
        Err((err, true)) => Err(Error::Io {
            action: "open",
            path: path.to_owned(),
            err,
        }),
        // The write itself failed: that is the module's store handler saying no.
        Err((err, false)) => Err(Error::Refused {
            path: path.to_owned(),
            what: shown.to_owned(),
            err,
            hint: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_comes_from_the_environment() {
        assert_eq!(Sysfs::from_var(None).root, Path::new("/sys"));
        assert_eq!(Sysfs::from_var(Some("".into())).root, Path::new("/sys"));
        let s = Sysfs::from_var(Some("/srv/fake-sysfs".into()));
        assert_eq!(
            s.ctl_file("devices"),
            Path::new("/srv/fake-sysfs/class/rdmadisk/ctl/devices")
        );
        assert_eq!(
            s.disk_dir("rdmadisk3"),
            Path::new("/srv/fake-sysfs/block/rdmadisk3/rdmadisk")
        );
    }

    #[test]
    fn a_missing_ctl_directory_means_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sysfs::at(dir.path());
        let e = s.check_loaded().unwrap_err();
        assert!(matches!(e, Error::NotLoaded { .. }));
        assert!(e.to_string().starts_with("rdmadisk is not loaded: no "));
        fs::create_dir_all(s.ctl_dir()).unwrap();
        s.check_loaded().unwrap();
    }

    #[test]
    fn writes_add_a_newline_and_never_create() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("knob");
        let e = write(&f, "1", "1").unwrap_err();
        assert!(matches!(e, Error::Io { action: "open", .. }), "{e:?}");
        assert!(!f.exists());
        fs::write(&f, "old value that is longer\n").unwrap();
        write(&f, "1", "1").unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), "1\n");
        assert_eq!(read_optional(&dir.path().join("none")).unwrap(), None);
    }
}
