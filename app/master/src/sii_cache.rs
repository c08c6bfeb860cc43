//! The SII images a bring-up reads (the categories the layout needs), kept by identity across
//! bring-ups, recoveries and — with `[bus] sii_cache = PATH` — restarts of the process.
//!
//! An SII is read through the ESC a few words per command, each command keeping the EEPROM
//! interface busy for about 680 µs on an ET1100 (docs/NOTES.md §7.4): a drive's PDO and string
//! categories are tens of commands. A cached image is never used blindly: before it serves a
//! subdevice, that subdevice's identity (vendor, product, revision, as ethercrab read them in its
//! scan) must equal the entry's, and its [`Shape`] — the standard mailbox and protocol words, the
//! EEPROM size and SII version words, and the type and length of every category — is read from
//! the device (3 + one command per category, a fraction of the full read) and must equal the
//! entry's. Anything else is a miss (or an invalidation), and the SII is read in full again.
//!
//! The file is written atomically (`safefs`), bounded ([`MAX_ENTRIES`], [`MAX_FILE_BYTES`]), and
//! checked on load: magic, format version, a CRC-32 over the whole, every length within bounds,
//! every image decodable and carrying in its fixed area the identity it is filed under. A file
//! failing any of these is refused as a whole, logged with the reason, and the run starts with
//! an empty cache (then overwrites the file with what it reads).

use crate::error::{Error, Result};
use crate::sii::{self, Sii};
use std::path::Path;
use std::sync::Mutex;

/// Most identities kept: a large segment has a few dozen kinds of devices.
pub const MAX_ENTRIES: usize = 256;

/// Largest cache file: what is read from disk is bounded whatever the file holds.
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// Most categories a shape lists (a real SII has about ten).
const MAX_CATEGORIES: usize = 512;

const MAGIC: &[u8; 8] = b"RTCATSII";
const FORMAT: u16 = 1;

/// Vendor ID, product code, revision number.
pub type Key = (u32, u32, u32);

/// Reads `buf.len()` bytes of a subdevice's SII from a word address on.
pub type ReadFn<'a> = dyn Fn(u16, &mut [u8]) -> Result<()> + 'a;

/// What is compared with the device before a cached image is used: standard mailbox (words
/// 0x18..0x1B) and mailbox protocols (0x1C), which decide CoE or not; EEPROM size and SII
/// version (0x3E, 0x3F); then (type, length in words) of every category up to the end marker.
/// A rewritten SII (another ESI, a firmware update that changed the PDOs without a new
/// revision, against the ESI rules) changes a category length in practice; the identity words
/// are compared separately. The checksum word 0x07 is not used: it covers the station alias
/// (word 0x04), which differs between otherwise identical devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape(Vec<u16>);

/// What happened to the lookups of a cache (a run's, or one bring-up's tool).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// A cached image served a subdevice after its shape matched.
    pub hits: u32,
    /// No image for that identity: read in full.
    pub misses: u32,
    /// An image for that identity whose shape differed from the device's: read in full again
    /// and replaced.
    pub invalidated: u32,
}

#[derive(Debug, Clone)]
struct Entry {
    key: Key,
    shape: Shape,
    image: Vec<u8>,
    sii: Sii,
    used: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: Vec<Entry>,
    tick: u64,
    dirty: bool,
    counts: Counts,
}

/// The cache: shared by the threads of an overlapped configuration (a lock held only for
/// lookups and inserts, never across a bus access).
#[derive(Debug, Default)]
pub struct SiiCache {
    inner: Mutex<Inner>,
}

impl SiiCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A worker that panicked cannot leave an entry half-written (inserts are one push).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lookups so far.
    pub fn counts(&self) -> Counts {
        self.lock().counts
    }

    /// Identities held.
    pub fn keys(&self) -> Vec<Key> {
        self.lock().entries.iter().map(|e| e.key).collect()
    }

    /// Whether something was read since the last [`SiiCache::save`] or load.
    pub fn is_dirty(&self) -> bool {
        self.lock().dirty
    }

    /// The decoded SII for a subdevice of identity `key`: from the cache when the device's shape
    /// (read with `read`) matches the entry's, otherwise read in full with `read` (the
    /// categories in `wanted`) and kept.
    pub fn get_or_read(&self, key: Key, read: &ReadFn<'_>, wanted: &[u16]) -> Result<Sii> {
        let cached = {
            let g = self.lock();
            g.entries.iter().find(|e| e.key == key).map(|e| {
                (
                    e.shape.clone(),
                    e.sii.clone(),
                    holds(&e.image, &e.shape, wanted),
                )
            })
        };
        let invalidated = match cached {
            // Kept with fewer categories than wanted (by a reader that needs fewer: the
            // ethercrab bring-up's, the tools'): read again with these.
            Some((_, _, false)) => false,
            Some((shape, sii, true)) => {
                if read_shape(read)? == shape {
                    let mut g = self.lock();
                    g.tick += 1;
                    let tick = g.tick;
                    if let Some(e) = g.entries.iter_mut().find(|e| e.key == key) {
                        e.used = tick;
                    }
                    g.counts.hits += 1;
                    return Ok(sii);
                }
                log::info!(
                    "SII cache: the device with identity {} no longer has the cached SII's \
                     layout; reading it again",
                    show(key)
                );
                true
            }
            None => false,
        };
        let (image, shape) = read_image(read, Some(wanted))?;
        let sii = Sii::parse(&image).map_err(|e| Error::SegmentMismatch(format!("SII: {e}")))?;
        let mut g = self.lock();
        if invalidated {
            g.counts.invalidated += 1;
        } else {
            g.counts.misses += 1;
        }
        g.insert(key, shape, image, sii.clone());
        Ok(sii)
    }

    /// Load the cache file at `path`: a missing file is an empty cache; a file that is not a
    /// cache of this format, or is damaged, is refused as a whole with the reason logged (the
    /// run then starts empty and replaces it on save).
    pub fn load(path: &Path) -> SiiCache {
        let cache = SiiCache::default();
        match read_file(path) {
            Ok(None) => {}
            Ok(Some(bytes)) => match decode(&bytes) {
                Ok(entries) => {
                    let mut g = cache.lock();
                    for (key, shape, image, sii) in entries {
                        g.insert(key, shape, image, sii);
                    }
                    g.dirty = false;
                }
                Err(why) => log::warn!(
                    "SII cache {}: ignored ({why}); the SII is read from the devices",
                    path.display()
                ),
            },
            Err(why) => log::warn!(
                "SII cache {}: not read ({why}); the SII is read from the devices",
                path.display()
            ),
        }
        cache
    }

    /// Write the cache to `path` atomically (temporary file, fsync, rename), mode 0600.
    pub fn save(&self, path: &Path) -> std::result::Result<(), String> {
        let bytes = {
            let g = self.lock();
            encode(&g.entries)
        };
        let (dir, name) = split(path)?;
        let dir = safefs::Dir::create_all(dir).map_err(|e| e.to_string())?;
        dir.write_atomic(name, &bytes, 0o600)
            .map_err(|e| e.to_string())?;
        self.lock().dirty = false;
        Ok(())
    }
}

impl Inner {
    /// Insert or replace, then evict the least recently used entries beyond the bounds.
    fn insert(&mut self, key: Key, shape: Shape, image: Vec<u8>, sii: Sii) {
        self.tick += 1;
        self.dirty = true;
        self.entries.retain(|e| e.key != key);
        self.entries.push(Entry {
            key,
            shape,
            image,
            sii,
            used: self.tick,
        });
        while self.entries.len() > MAX_ENTRIES || encoded_len(&self.entries) > MAX_FILE_BYTES {
            let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.entries.remove(oldest);
        }
    }
}

fn show(k: Key) -> String {
    format!(
        "vendor {:#010x} product {:#010x} revision {:#010x}",
        k.0, k.1, k.2
    )
}

fn split(path: &Path) -> std::result::Result<(&Path, &str), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{}: not a file name", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// The file's bytes, `None` when it does not exist. Only a file owned by this user and not
/// writable by others is read: the master acts on what it holds.
fn read_file(path: &Path) -> std::result::Result<Option<Vec<u8>>, String> {
    let (dir, name) = split(path)?;
    let dir = match safefs::Dir::open(dir) {
        Ok(d) => d,
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if !dir.exists(name) {
        return Ok(None);
    }
    let owner = safefs::Owner::Uid(nix::unistd::geteuid().as_raw());
    dir.read_private(name, MAX_FILE_BYTES as u64 + 1, owner)
        .map(Some)
        .map_err(|e| e.to_string())
}

// --- Reading from the device --------------------------------------------------------------

fn word_at(img: &[u8], w: usize) -> u16 {
    u16::from_le_bytes([img[2 * w], img[2 * w + 1]])
}

/// The shape of an image's fixed area (words 0x18..=0x1C, 0x3E, 0x3F).
fn fixed_shape(fixed: &[u8]) -> Vec<u16> {
    let mut s: Vec<u16> = (0x18..=0x1c).map(|w| word_at(fixed, w)).collect();
    s.push(word_at(fixed, 0x3e));
    s.push(word_at(fixed, 0x3f));
    s
}

/// Walk the category headers from word 0x40: calls `each(kind, words, first word of data)` and
/// stops at the end marker, a type 0, [`MAX_CATEGORIES`] or [`crate::limits::MAX_SII_BYTES`].
fn walk(
    read: &ReadFn<'_>,
    mut each: impl FnMut(u16, u16, usize) -> Result<bool>,
) -> Result<Vec<u16>> {
    let mut shape = Vec::new();
    let mut word = sii::FIXED_AREA_BYTES / 2;
    for _ in 0..MAX_CATEGORIES {
        if 2 * word + 4 > crate::limits::MAX_SII_BYTES {
            break;
        }
        let mut h = [0u8; 4];
        read(word as u16, &mut h)?;
        let kind = u16::from_le_bytes([h[0], h[1]]);
        let words = u16::from_le_bytes([h[2], h[3]]);
        if kind == sii::category::END || kind == 0 {
            break;
        }
        shape.push(kind);
        shape.push(words);
        if !each(kind, words, word + 2)? {
            break;
        }
        word += 2 + usize::from(words);
    }
    Ok(shape)
}

/// Whether `image` holds every category of `wanted` that the device of `shape` has.
fn holds(image: &[u8], shape: &Shape, wanted: &[u16]) -> bool {
    let mut held = Vec::new();
    let mut at = sii::FIXED_AREA_BYTES;
    while let Some(h) = image.get(at..at + 4) {
        let kind = u16::from_le_bytes([h[0], h[1]]);
        if kind == sii::category::END || kind == 0 {
            break;
        }
        held.push(kind);
        at += 4 + 2 * usize::from(u16::from_le_bytes([h[2], h[3]]));
    }
    // The shape: the fixed words, then (type, length) of each category.
    let fixed = fixed_shape(&[0u8; sii::FIXED_AREA_BYTES]).len();
    shape
        .0
        .get(fixed..)
        .unwrap_or(&[])
        .chunks_exact(2)
        .map(|c| c[0])
        .filter(|k| wanted.contains(k))
        .all(|k| held.contains(&k))
}

/// The device's [`Shape`], read with three commands plus one per category.
pub fn read_shape(read: &ReadFn<'_>) -> Result<Shape> {
    let mut fixed = vec![0u8; sii::FIXED_AREA_BYTES];
    read(0x18, &mut fixed[0x30..0x3a])?;
    read(0x3e, &mut fixed[0x7c..0x80])?;
    let mut s = fixed_shape(&fixed);
    s.extend(walk(read, |_, _, _| Ok(true))?);
    Ok(Shape(s))
}

/// The fixed area and the categories in `wanted` (all when `None`) of an SII, as one image
/// [`Sii::parse`] reads (the categories skipped are left out), with the device's [`Shape`].
pub fn read_image(read: &ReadFn<'_>, wanted: Option<&[u16]>) -> Result<(Vec<u8>, Shape)> {
    let mut img = vec![0u8; sii::FIXED_AREA_BYTES];
    read(0, &mut img)?;
    let mut s = fixed_shape(&img);
    let chain = walk(read, |kind, words, data| {
        if wanted.is_none_or(|w| w.contains(&kind)) {
            let start = img.len();
            if start + 4 + 2 * usize::from(words) > crate::limits::MAX_SII_BYTES {
                return Ok(false);
            }
            img.extend_from_slice(&kind.to_le_bytes());
            img.extend_from_slice(&words.to_le_bytes());
            img.resize(start + 4 + 2 * usize::from(words), 0);
            read(data as u16, &mut img[start + 4..])?;
        }
        Ok(true)
    })?;
    s.extend(chain);
    img.extend_from_slice(&sii::category::END.to_le_bytes());
    img.extend_from_slice(&0u16.to_le_bytes());
    Ok((img, Shape(s)))
}

// --- The file -----------------------------------------------------------------------------
//
// Little endian: magic (8), format (u16), entry count (u16); per entry: vendor, product,
// revision (u32 each), shape length in words (u16), the shape, image length (u32), the image;
// then the CRC-32 (IEEE) of everything before it.

fn encoded_len(entries: &[Entry]) -> usize {
    12 + entries
        .iter()
        .map(|e| 12 + 2 + 2 * e.shape.0.len() + 4 + e.image.len())
        .sum::<usize>()
        + 4
}

fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(entries));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for e in entries {
        for v in [e.key.0, e.key.1, e.key.2] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(e.shape.0.len() as u16).to_le_bytes());
        for w in &e.shape.0 {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&(e.image.len() as u32).to_le_bytes());
        out.extend_from_slice(&e.image);
    }
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

type Decoded = Vec<(Key, Shape, Vec<u8>, Sii)>;

fn decode(b: &[u8]) -> std::result::Result<Decoded, String> {
    if b.len() > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    if b.len() < 16 || &b[..8] != MAGIC {
        return Err("not an rtcat SII cache (magic)".into());
    }
    let (body, tail) = b.split_at(b.len() - 4);
    let crc = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if crc32(body) != crc {
        return Err("CRC mismatch: damaged".into());
    }
    let mut r = Reader { b: body, at: 8 };
    let format = r.u16()?;
    if format != FORMAT {
        return Err(format!("format {format}, this master reads {FORMAT}"));
    }
    let count = usize::from(r.u16()?);
    if count > MAX_ENTRIES {
        return Err(format!("{count} entries, at most {MAX_ENTRIES}"));
    }
    let mut out: Decoded = Vec::with_capacity(count);
    for i in 0..count {
        let key = (r.u32()?, r.u32()?, r.u32()?);
        let n = usize::from(r.u16()?);
        if n > 7 + 2 * MAX_CATEGORIES {
            return Err(format!("entry {i}: shape of {n} words"));
        }
        let shape = Shape(
            (0..n)
                .map(|_| r.u16())
                .collect::<std::result::Result<_, _>>()?,
        );
        let len = r.u32()? as usize;
        if !(sii::FIXED_AREA_BYTES..=crate::limits::MAX_SII_BYTES).contains(&len) {
            return Err(format!("entry {i}: image of {len} bytes"));
        }
        let image = r.take(len)?.to_vec();
        let sii = Sii::parse(&image).map_err(|e| format!("entry {i}: {e}"))?;
        if (sii.vendor_id, sii.product_code, sii.revision) != key
            || fixed_shape(&image)[..] != shape.0[..shape.0.len().min(7)]
        {
            return Err(format!(
                "entry {i}: filed as {} but its image says otherwise",
                show(key)
            ));
        }
        if out.iter().any(|(k, ..)| *k == key) {
            return Err(format!("entry {i}: {} twice", show(key)));
        }
        out.push((key, shape, image, sii));
    }
    if r.at != body.len() {
        return Err(format!("{} bytes after the last entry", body.len() - r.at));
    }
    Ok(out)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(format!("truncated at byte {}", self.at));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320).
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A minimal SII: fixed area with identity and CoE mailbox, a strings category and an SM
    /// category of `sms` sync managers, the end marker.
    fn image(revision: u32, sms: u16) -> Vec<u8> {
        let mut img = vec![0u8; sii::FIXED_AREA_BYTES];
        let put = |img: &mut Vec<u8>, w: usize, v: u16| {
            img[2 * w..2 * w + 2].copy_from_slice(&v.to_le_bytes())
        };
        for (w, v) in [(0x08, 0x766u32), (0x0a, 0x40002), (0x0c, revision)] {
            put(&mut img, w, v as u16);
            put(&mut img, w + 1, (v >> 16) as u16);
        }
        for (w, v) in [
            (0x18, 0x1000),
            (0x19, 128),
            (0x1a, 0x1080),
            (0x1b, 128),
            (0x1c, 4),
        ] {
            put(&mut img, w, v);
        }
        put(&mut img, 0x3e, 1);
        put(&mut img, 0x3f, 1);
        // Strings: one string "x" (count, length, byte, pad).
        img.extend_from_slice(&sii::category::STRINGS.to_le_bytes());
        img.extend_from_slice(&2u16.to_le_bytes());
        img.extend_from_slice(&[1, 1, b'x', 0]);
        img.extend_from_slice(&sii::category::SYNC_MANAGER.to_le_bytes());
        img.extend_from_slice(&(4 * sms).to_le_bytes());
        for i in 0..sms {
            img.extend_from_slice(&(0x1000 + 0x80 * i).to_le_bytes());
            img.extend_from_slice(&128u16.to_le_bytes());
            img.extend_from_slice(&[0x26, 0, 1, 1 + (i as u8 % 4)]);
        }
        img.extend_from_slice(&sii::category::END.to_le_bytes());
        img.extend_from_slice(&0u16.to_le_bytes());
        img
    }

    /// An EEPROM served word-addressed, counting the read commands (4 words per command).
    struct Eeprom {
        img: Vec<u8>,
        commands: Cell<usize>,
    }

    impl Eeprom {
        fn new(img: Vec<u8>) -> Self {
            Eeprom {
                img,
                commands: Cell::new(0),
            }
        }
        fn read(&self, word: u16, buf: &mut [u8]) -> Result<()> {
            self.commands
                .set(self.commands.get() + buf.len().div_ceil(8));
            let at = 2 * usize::from(word);
            for (i, b) in buf.iter_mut().enumerate() {
                *b = self.img.get(at + i).copied().unwrap_or(0xff);
            }
            Ok(())
        }
    }

    const WANTED: [u16; 2] = [sii::category::STRINGS, sii::category::SYNC_MANAGER];
    const KEY: Key = (0x766, 0x40002, 1);

    #[test]
    fn miss_then_hit_then_invalidated() {
        let cache = SiiCache::default();
        let dev = Eeprom::new(image(1, 4));
        let r = |w: u16, b: &mut [u8]| dev.read(w, b);
        let first = cache.get_or_read(KEY, &r, &WANTED).unwrap();
        let full = dev.commands.replace(0);
        assert_eq!(first.sync_managers.len(), 4);
        assert_eq!(
            cache.counts(),
            Counts {
                misses: 1,
                ..Counts::default()
            }
        );
        let again = cache.get_or_read(KEY, &r, &WANTED).unwrap();
        let check = dev.commands.replace(0);
        assert_eq!(again, first);
        assert_eq!(cache.counts().hits, 1);
        assert!(
            check < full,
            "a check ({check} commands) must cost less than a read ({full})"
        );
        // Same identity, another SII (a sync manager more): never served from the cache.
        let other = Eeprom::new(image(1, 5));
        let r2 = |w: u16, b: &mut [u8]| other.read(w, b);
        let s = cache.get_or_read(KEY, &r2, &WANTED).unwrap();
        assert_eq!(s.sync_managers.len(), 5);
        assert_eq!(cache.counts().invalidated, 1);
        assert_eq!(cache.keys(), vec![KEY]);
    }

    /// An image kept with fewer categories than a reader wants (the strings only, where the
    /// next one wants the sync managers too) is read again with them, and then serves both.
    #[test]
    fn an_image_without_the_categories_wanted_is_read_again() {
        let cache = SiiCache::default();
        let dev = Eeprom::new(image(1, 4));
        let r = |w: u16, b: &mut [u8]| dev.read(w, b);
        let strings_only = cache
            .get_or_read(KEY, &r, &[sii::category::STRINGS])
            .unwrap();
        assert!(strings_only.sync_managers.is_empty());
        let both = cache.get_or_read(KEY, &r, &WANTED).unwrap();
        assert_eq!(both.sync_managers.len(), 4, "not the image without them");
        assert_eq!(cache.counts().misses, 2);
        let again = cache
            .get_or_read(KEY, &r, &[sii::category::STRINGS])
            .unwrap();
        assert_eq!(again, both, "the fuller image serves the smaller want");
        assert_eq!(cache.counts().hits, 1);
        // A category the device does not have is not wanted of the image.
        cache
            .get_or_read(KEY, &r, &[sii::category::FMMU, sii::category::STRINGS])
            .unwrap();
        assert_eq!(cache.counts().hits, 2);
    }

    #[test]
    fn file_round_trip_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("sii.cache");
        let cache = SiiCache::default();
        for rev in [1, 2] {
            let dev = Eeprom::new(image(rev, 4));
            let r = |w: u16, b: &mut [u8]| dev.read(w, b);
            cache
                .get_or_read((0x766, 0x40002, rev), &r, &WANTED)
                .unwrap();
        }
        assert!(cache.is_dirty());
        cache.save(&path).unwrap();
        assert!(!cache.is_dirty());
        let loaded = SiiCache::load(&path);
        assert_eq!(loaded.keys(), cache.keys());
        assert!(!loaded.is_dirty());
        let good = std::fs::read(&path).unwrap();
        // Each damage refuses the whole file.
        let mut flipped = good.clone();
        flipped[40] ^= 1;
        let mut foreign = good.clone();
        foreign[0] = b'X';
        let truncated = good[..good.len() - 9].to_vec();
        for bad in [flipped, foreign, truncated, Vec::new(), vec![0u8; 100]] {
            std::fs::write(&path, &bad).unwrap();
            assert!(decode(&bad).is_err());
            assert!(SiiCache::load(&path).keys().is_empty());
        }
        // A valid CRC over an image filed under another identity is refused too.
        let mut e = decode(&good).unwrap();
        let entries: Vec<Entry> = e
            .drain(..)
            .map(|(key, shape, image, sii)| Entry {
                key: (key.0, key.1, key.2 + 10),
                shape,
                image,
                sii,
                used: 0,
            })
            .collect();
        let why = decode(&encode(&entries)).unwrap_err();
        assert!(why.contains("says otherwise"), "{why}");
        // Missing file: empty, no error.
        assert!(SiiCache::load(&dir.path().join("none")).keys().is_empty());
    }

    #[test]
    fn bounded() {
        let cache = SiiCache::default();
        for rev in 0..(MAX_ENTRIES as u32 + 5) {
            let dev = Eeprom::new(image(rev, 1));
            let r = |w: u16, b: &mut [u8]| dev.read(w, b);
            cache
                .get_or_read((0x766, 0x40002, rev), &r, &WANTED)
                .unwrap();
        }
        let keys = cache.keys();
        assert_eq!(keys.len(), MAX_ENTRIES);
        // The least recently used went first.
        assert!(!keys.contains(&(0x766, 0x40002, 0)));
        assert!(keys.contains(&(0x766, 0x40002, MAX_ENTRIES as u32 + 4)));
        assert!(encode(&cache.lock().entries).len() <= MAX_FILE_BYTES);
    }

    #[test]
    fn crc_reference() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
