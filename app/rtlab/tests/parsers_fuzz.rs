//! Property tests of every parser `rtcat report` runs on files it did not write: summary.json,
//! .hdr, cyclictest histograms, ladder.csv and manifest.json, and the whole report on a mutated
//! bench directory. Inputs are valid files with random edits (byte flips, insertions of
//! troublesome tokens, deletions, truncation) and random bytes. Whatever the input: no panic,
//! and an error names the file.

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::sample::Index;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Tokens that have broken parsers: overflowing, negative, non-finite, control and table characters.
const TOKENS: &[&str] = &[
    "18446744073709551616",
    "18446744073709552",
    "99999999999999999999",
    "4294967295",
    "-1",
    "1e309",
    "NaN",
    "0",
    "\u{0}",
    "\n",
    "|",
    ",",
    "\"",
    "{",
    "]",
    "# Histogram\n",
    "# Max Latencies: ",
    "\u{ff}",
];

#[derive(Debug, Clone)]
enum Edit {
    Set(Index, u8),
    Insert(Index, usize),
    Delete(Index, usize),
    Truncate(Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<Index>(), 0..TOKENS.len()).prop_map(|(i, t)| Edit::Insert(i, t)),
        (any::<Index>(), 1usize..64).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<Index>().prop_map(Edit::Truncate),
    ]
}

fn mutate(mut b: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        if b.is_empty() {
            break;
        }
        match e {
            Edit::Set(i, v) => {
                let k = i.index(b.len());
                b[k] = *v;
            }
            Edit::Insert(i, t) => {
                let k = i.index(b.len());
                b.splice(k..k, TOKENS[*t].bytes());
            }
            Edit::Delete(i, n) => {
                let k = i.index(b.len());
                let end = (k + n).min(b.len());
                b.drain(k..end);
            }
            Edit::Truncate(i) => {
                let k = i.index(b.len());
                b.truncate(k);
            }
        }
    }
    b
}

fn input() -> impl Strategy<Value = (bool, Vec<Edit>, Vec<u8>)> {
    (
        // mostly mutated valid files, sometimes plain random bytes
        prop::bool::weighted(0.85),
        prop::collection::vec(edit(), 1..12),
        prop::collection::vec(any::<u8>(), 0..2048),
    )
}

fn bytes_for(valid: &[u8], (mutated, edits, random): &(bool, Vec<Edit>, Vec<u8>)) -> Vec<u8> {
    if *mutated {
        mutate(valid.to_vec(), edits)
    } else {
        random.clone()
    }
}

/// `{:#}`: with an `anyhow::Error`, the whole chain.
fn names_file(e: &impl std::fmt::Display, p: &Path) {
    let msg = format!("{e:#}");
    assert!(
        msg.starts_with(&p.display().to_string()),
        "error does not name {}: {msg}",
        p.display()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn summary_json_never_panics(inp in input()) {
        let valid = fs::read(fixtures().join("bench/summary.json")).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("summary.json");
        fs::write(&p, bytes_for(&valid, &inp)).unwrap();
        if let Err(e) = rtcat_results::Summary::read(&p) {
            names_file(&e, &p);
        }
    }

    #[test]
    fn manifest_json_never_panics(inp in input()) {
        let valid = fs::read(fixtures().join("rt/manifest.json")).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("manifest.json");
        fs::write(&p, bytes_for(&valid, &inp)).unwrap();
        if let Err(e) = rtcat_results::LadderManifest::read(&p) {
            names_file(&e, &p);
        }
    }

    #[test]
    fn hdr_never_panics(inp in input()) {
        let valid = fs::read(fixtures().join("rt/s1/run1/wake_lateness_ns.hdr")).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("wake_lateness_ns.hdr");
        fs::write(&p, bytes_for(&valid, &inp)).unwrap();
        match rtcat_results::read_hdr(&p) {
            Err(e) => names_file(&e, &p),
            // whatever was read can be merged with rtcat's own histograms
            Ok(h) => {
                rtcat_results::new_histogram().add(&h).unwrap();
            }
        }
    }

    /// The header fields themselves, each anywhere in its range.
    #[test]
    fn hdr_header_fields_never_panic(
        payload in any::<u32>(), sigfig in 0u32..8, low in any::<u64>(), high in any::<u64>(),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut b = Vec::new();
        b.extend_from_slice(&0x1c84_9313u32.to_be_bytes());
        b.extend_from_slice(&payload.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&sigfig.to_be_bytes());
        b.extend_from_slice(&(low % 4096).to_be_bytes());
        b.extend_from_slice(&(high >> (high % 64)).to_be_bytes());
        b.extend_from_slice(&1.0f64.to_be_bytes());
        b.extend_from_slice(&body);
        let p = Path::new("h.hdr");
        if let Err(e) = rtcat_results::parse_hdr(&b, p) {
            names_file(&e, p);
        }
    }

    #[test]
    fn cyclictest_never_panics(inp in input()) {
        let valid = fs::read(fixtures().join("cyclictest-2t.txt")).unwrap();
        let text = String::from_utf8_lossy(&bytes_for(&valid, &inp)).into_owned();
        let p = Path::new("ct.txt");
        match rtlab::cyclictest::parse(p, &text) {
            Err(e) => names_file(&e, p),
            Ok(h) => {
                for t in &h.threads {
                    let _ = t.quantile_us(0.999);
                }
            }
        }
    }

    #[test]
    fn ladder_csv_never_panics(inp in input()) {
        let valid = fs::read(fixtures().join("stock/ladder.csv")).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("ladder.csv"), bytes_for(&valid, &inp)).unwrap();
        let dir = safefs::Dir::open(tmp.path()).unwrap();
        if let Err(e) = rtcat_results::read_ladder_csv_in(&dir) {
            names_file(&e, &tmp.path().join("ladder.csv"));
        }
    }

    /// The whole report on a bench directory with a mutated summary.json or histogram.
    #[test]
    fn report_on_mutated_bench_dir_never_panics(
        which in 0usize..3, inp in input(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("bench");
        fs::create_dir(&d).unwrap();
        let names = ["summary.json", "wake_lateness_ns.hdr", "exec_ns.hdr"];
        for n in names {
            fs::copy(fixtures().join("bench").join(n), d.join(n)).unwrap();
        }
        let valid = fs::read(d.join(names[which])).unwrap();
        fs::write(d.join(names[which]), bytes_for(&valid, &inp)).unwrap();
        match rtlab::report::read_source(&d, "bench".into(), false) {
            Err(e) => names_file(&e, &d),
            Ok(src) => {
                let s = [src];
                let _ = rtlab::report::render_markdown(&s);
                let _ = rtlab::report::render_csv(&s);
                rtlab::report::render_json(&s).unwrap();
            }
        }
    }
}

/// A reader of one kind of file.
type Reader = fn(&Path) -> anyhow::Result<()>;

#[test]
fn inputs_above_their_limit_are_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, u64, Reader); 4] = [
        ("summary.json", rtcat_results::SUMMARY_LIMIT, |p| {
            rtcat_results::Summary::read(p)
                .map(|_| ())
                .map_err(Into::into)
        }),
        ("manifest.json", rtcat_results::MANIFEST_LIMIT, |p| {
            rtcat_results::LadderManifest::read(p)
                .map(|_| ())
                .map_err(Into::into)
        }),
        ("x.hdr", rtcat_results::HDR_FILE_LIMIT, |p| {
            rtcat_results::read_hdr(p).map(|_| ()).map_err(Into::into)
        }),
        ("ladder.csv", rtcat_results::LADDER_CSV_LIMIT, |p| {
            let d = safefs::Dir::open(p.parent().unwrap())?;
            rtcat_results::read_ladder_csv_in(&d)
                .map(|_| ())
                .map_err(Into::into)
        }),
    ];
    for (name, limit, read) in cases {
        let p = tmp.path().join(name);
        let f = fs::File::create(&p).unwrap();
        f.set_len(limit + 1).unwrap(); // sparse
        let e = format!("{:#}", read(&p).unwrap_err());
        assert_eq!(
            e,
            format!("{}: larger than the limit of {limit} bytes", p.display()),
            "{name}"
        );
    }
}
