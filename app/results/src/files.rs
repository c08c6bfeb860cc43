//! Opening the files of a result directory: the path-based API opens the directory as the caller
//! named it, the `Dir`-based one reads through a handle that follows no link.

use std::path::{Path, PathBuf};

use safefs::Dir;

use crate::{Error, Result};

/// The directory (opened as the user named it) and the file name of `path`.
pub(crate) fn split_path(path: &Path) -> Result<(Dir, &str)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::NotAFileName {
            path: path.to_path_buf(),
        })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((Dir::open_named(parent)?, name))
}

/// Reads `name` in `dir` (a regular file of at most `limit` bytes, not a link) as UTF-8.
pub(crate) fn read_text_in(dir: &Dir, name: &str, limit: u64) -> Result<(String, PathBuf)> {
    let path = dir.path().join(name);
    let bytes = dir.read_bounded(name, limit)?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok((text, path)),
        Err(_) => Err(Error::NotUtf8 { path }),
    }
}

/// Writes `text` as `name` in `dir` atomically with [`crate::RESULT_FILE_MODE`].
pub(crate) fn write_text_in(dir: &Dir, name: &str, text: &str) -> Result<()> {
    dir.write_atomic(name, text.as_bytes(), crate::RESULT_FILE_MODE)?;
    Ok(())
}

/// Pretty JSON with a final newline.
pub(crate) fn to_json<T: serde::Serialize>(v: &T, what: &str) -> Result<String> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| Error::Encode {
            what: what.to_string(),
            reason: e.to_string(),
        })
}
