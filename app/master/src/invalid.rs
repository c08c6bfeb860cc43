//! One error for every configuration section: "this key has this bad value because …". Each
//! section's check returns an [`Invalid`]; the file it came from is added once, by
//! [`Invalid::at`](crate::config::ConfigError), into a [`crate::config::ConfigError`]. A leaf
//! module: the sections (`config`, `dc`, `devices`, `axis`) import it, it imports none of them.

use std::fmt::Display;

/// A refused configuration value: the key (`device[2].pdo_map[0].entries[1]`), the value found
/// and what is wrong or allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The key.
    pub key: String,
    /// The value found.
    pub value: String,
    /// What is wrong or allowed.
    pub message: String,
}

impl Invalid {
    /// `key = value: message`.
    pub fn new(key: impl Into<String>, value: impl Display, message: impl Into<String>) -> Self {
        Invalid {
            key: key.into(),
            value: value.to_string(),
            message: message.into(),
        }
    }

    /// Ok when `lo <= v <= hi`, else `key = v: must be lo..=hi<unit>`.
    pub fn range(key: &str, v: u64, lo: u64, hi: u64, unit: &str) -> Result<(), Invalid> {
        if v < lo || v > hi {
            Err(Invalid::new(key, v, format!("must be {lo}..={hi}{unit}")))
        } else {
            Ok(())
        }
    }
}

impl Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {}: {}", self.key, self.value, self.message)
    }
}

impl std::error::Error for Invalid {}

/// Longest text of a value or message quoted in full in an error; a longer one is cut and its
/// length said (a 1 MB interface name must not become a 2 MB error line in the journal).
pub const MAX_QUOTED: usize = 160;

/// `s`, or its first [`MAX_QUOTED`] bytes (at a character boundary) and its length.
pub fn clip(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= MAX_QUOTED {
        return s.into();
    }
    let mut end = MAX_QUOTED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &s[..end], s.len()).into()
}

/// Every line of `s` through [`clip`] (a parser's message quotes the offending line).
pub fn clip_lines(s: &str) -> String {
    s.split('\n').map(clip).collect::<Vec<_>>().join("\n")
}
