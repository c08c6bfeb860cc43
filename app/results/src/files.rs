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

/// A JSON result file (`summary.json`, `manifest.json`): its name, size limit and checks. The
/// readers and writers below are the same for each.
pub(crate) trait JsonFile: serde::Serialize + serde::de::DeserializeOwned {
    /// File name in its directory.
    const FILE: &'static str;
    /// Largest file read.
    const LIMIT: u64;
    /// What it is, for errors (`rtcat.summary/1 summary`).
    const WHAT: &'static str;
    /// The checks after parsing; the error names the field.
    fn check(&self) -> Result<()>;
}

/// Parses and checks the text of `path`; errors name `path` and the field.
pub(crate) fn parse_json<T: JsonFile>(text: &str, path: &Path) -> Result<T> {
    let v: T = serde_json::from_str(text).map_err(|e| Error::Json {
        path: path.to_path_buf(),
        what: T::WHAT,
        reason: e.to_string(),
    })?;
    v.check().map_err(|e| e.in_file(path))?;
    Ok(v)
}

/// Reads a file the caller named (links in `path` followed), at most `T::LIMIT` bytes.
pub(crate) fn read_json<T: JsonFile>(path: &Path) -> Result<T> {
    let text = safefs::read_to_string_bounded(path, T::LIMIT)?;
    parse_json(&text, path)
}

/// Reads `T::FILE` in `dir` without following a link.
pub(crate) fn read_json_in<T: JsonFile>(dir: &Dir) -> Result<T> {
    let (text, path) = read_text_in(dir, T::FILE, T::LIMIT)?;
    parse_json(&text, &path)
}

/// Pretty JSON with a final newline.
pub(crate) fn to_json<T: JsonFile>(v: &T) -> Result<String> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| Error::Encode {
            what: T::FILE.to_string(),
            reason: e.to_string(),
        })
}

/// Writes `T::FILE` into `dir` atomically, never following a link.
pub(crate) fn write_json_to<T: JsonFile>(v: &T, dir: &Dir) -> Result<()> {
    write_text_in(dir, T::FILE, &to_json(v)?)
}

/// Writes `path` atomically through its directory (opened as named).
pub(crate) fn write_json<T: JsonFile>(v: &T, path: &Path) -> Result<()> {
    let (dir, name) = split_path(path)?;
    write_text_in(&dir, name, &to_json(v)?)
}
