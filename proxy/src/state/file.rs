//! The state file on disk: written whole or not at all, read with a bound.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The temporary file a save writes before renaming it over `path`: in the same directory
/// (a rename within one file system is atomic), named after it.
#[must_use]
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Replaces `path` with `bytes` atomically: they are written to [`temp_path`] (mode 0600:
/// the file holds the sketches' hash seeds), synced, renamed over `path`, and the directory
/// is synced, so after a crash at any point `path` holds either its old bytes or the new
/// ones, whole.
///
/// # Errors
/// The first I/O error, the temporary file removed (the old file stays as it was).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = temp_path(path);
    // A temporary file left by a crash may carry other permissions: start from none.
    let _ = std::fs::remove_file(&temp);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(err);
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// What reading a state file found.
#[derive(Debug)]
pub(crate) enum Found {
    /// There is no file (a first start).
    Missing,
    /// Its bytes.
    Bytes(Vec<u8>),
    /// It is larger than `limit` bytes.
    TooLarge {
        /// Its size.
        size: u64,
    },
}

/// Reads `path` if it holds at most `limit` bytes.
///
/// # Errors
/// I/O errors other than a missing file.
pub(crate) fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Found> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(err) => return Err(err),
    };
    let size = file.metadata()?.len();
    if size > limit {
        return Ok(Found::TooLarge { size });
    }
    let mut bytes = Vec::new();
    // `take`: the file may grow after the size was read.
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Ok(Found::TooLarge {
            size: bytes.len() as u64,
        });
    }
    Ok(Found::Bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory, removed when dropped (not named after the process id: ids are
    /// reused, and a directory an earlier process left would hold its files).
    fn dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("tollgate-file-{name}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_not() {
        let dir = dir("limit");
        let path = dir.path().join("state");
        std::fs::write(&path, [7u8; 10]).unwrap();
        assert!(
            matches!(read_bounded(&path, 10).unwrap(), Found::Bytes(bytes) if bytes == [7u8; 10])
        );
        assert!(matches!(
            read_bounded(&path, 9).unwrap(),
            Found::TooLarge { size: 10 }
        ));
    }

    #[test]
    fn a_path_that_cannot_be_opened_is_an_error_not_a_first_start() {
        // Taken for a missing file, the fault would be logged as a first start ("no state file
        // yet") and the saved state silently not restored.
        let not_a_dir = dir("not-a-dir");
        let file = not_a_dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let err = read_bounded(&file.join("state"), 100).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotADirectory);
        let missing_dir = dir("missing");
        let missing = missing_dir.path().join("state");
        assert!(matches!(
            read_bounded(&missing, 100).unwrap(),
            Found::Missing
        ));
    }

    #[test]
    fn a_bare_file_name_is_written_and_its_directory_synced() {
        // Its parent is "": the directory synced is the current one.
        let name = format!(".tollgate-state-test-{}", std::process::id());
        let path = Path::new(&name);
        let written = write_atomic(path, b"state");
        let read = std::fs::read(path);
        let _ = std::fs::remove_file(path);
        written.unwrap();
        assert_eq!(read.unwrap(), b"state");
    }
}
