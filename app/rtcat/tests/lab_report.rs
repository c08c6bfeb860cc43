//! `report`: golden tables on fixed inputs, valid plots with the expected series, clear errors for
//! malformed or partial inputs.
//!
//! Regenerate the golden files after an intended change with `UPDATE_GOLDEN=1 cargo test -p rtcat --test lab_report`
//! and review the diff.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)]
#[path = "../../rtlab/examples/make_fixtures.rs"]
mod make_fixtures;

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rtlab/tests")
}

fn inputs() -> Vec<&'static str> {
    vec![
        "stock",
        "rt",
        "bench",
        "cyclictest-2t.txt",
        "cyclictest-histfile.txt",
    ]
}

fn report(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("report")
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn golden(name: &str, actual: &str) {
    let p = here().join("golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        fs::write(&p, actual).unwrap();
    }
    let want = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if want != actual {
        let line = want.lines().zip(actual.lines()).position(|(a, b)| a != b);
        panic!(
            "{name} differs from the golden file (first differing line {line:?}):\n--- golden\n{want}\n--- actual\n{actual}"
        );
    }
}

#[test]
fn fixtures_are_reproducible() {
    let tmp = tempfile::tempdir().unwrap();
    make_fixtures::make(tmp.path()).unwrap();
    let fx = here().join("fixtures");
    let mut n = 0;
    for src in ["stock", "rt", "bench"] {
        let mut stack = vec![tmp.path().join(src)];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                    continue;
                }
                let rel = e.path().strip_prefix(tmp.path()).unwrap().to_path_buf();
                let committed = fs::read(fx.join(&rel))
                    .unwrap_or_else(|_| panic!("fixture {} missing", rel.display()));
                assert!(
                    committed == fs::read(e.path()).unwrap(),
                    "fixture {} differs from make_fixtures",
                    rel.display()
                );
                n += 1;
            }
        }
    }
    // 2 ladders x (manifest + csv + 3 stages x 2 runs x 3 files) + bench (3 files)
    assert_eq!(n, 2 * (2 + 18) + 3);
}

#[test]
fn golden_markdown() {
    let (code, out, err) = report(&inputs(), &here().join("fixtures"));
    assert_eq!(code, 0, "{err}");
    golden("report.md", &out);
}

#[test]
fn golden_csv() {
    let mut a = inputs();
    a.extend(["--format", "csv"]);
    let (code, out, err) = report(&a, &here().join("fixtures"));
    assert_eq!(code, 0, "{err}");
    golden("report.csv", &out);
}

/// A label with the CSV's delimiter and quote is quoted, its quotes doubled (RFC 4180 §2.6, 2.7);
/// a label without them is not.
#[test]
fn csv_quotes_labels_that_need_it() {
    let (code, out, err) = report(
        &[
            "stock",
            "rt",
            "--label",
            "stock, \"5.10\"",
            "--label",
            "rt",
            "--format",
            "csv",
        ],
        &here().join("fixtures"),
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].starts_with("\"stock, \"\"5.10\"\"\",s0,ladder,"),
        "{}",
        lines[1]
    );
    assert!(
        lines.iter().any(|l| l.starts_with("rt,s0,ladder,")),
        "{out}"
    );
    let columns = lines[0].split(',').count();
    assert_eq!(columns, 31, "{}", lines[0]);
}

#[test]
fn golden_json_and_labels() {
    let (code, out, err) = report(
        &[
            "stock",
            "rt",
            "--label",
            "stock 5.10",
            "--label",
            "PREEMPT_RT",
            "--format",
            "json",
        ],
        &here().join("fixtures"),
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "rtcat.report/1");
    assert_eq!(v["sources"][1]["label"], "PREEMPT_RT");
    golden("report.json", &out);
}

#[test]
fn out_file_matches_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.md");
    let (code, stdout, _) = report(
        &["stock", "--out", out.to_str().unwrap()],
        &here().join("fixtures"),
    );
    assert_eq!(code, 0);
    assert!(stdout.is_empty());
    let (_, direct, _) = report(&["stock"], &here().join("fixtures"));
    assert_eq!(fs::read_to_string(out).unwrap(), direct);
}

fn png_info(p: &Path) -> (u32, u32, Vec<u8>) {
    let bytes = fs::read(p).unwrap();
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{}: not a PNG",
        p.display()
    );
    let dec = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size()];
    let info = r.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

fn has_color(rgb: &[u8], c: (u8, u8, u8)) -> usize {
    rgb.chunks_exact(3)
        .filter(|p| p[0] == c.0 && p[1] == c.1 && p[2] == c.2)
        .count()
}

/// Text contents of the SVG's `<text>` elements (trimmed, entities as written).
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

fn hex(c: (u8, u8, u8)) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

#[test]
fn plots_are_valid_with_expected_series() {
    let tmp = tempfile::tempdir().unwrap();
    let pd = tmp.path().join("plots");
    let (code, _, err) = report(
        &[
            "stock",
            "rt",
            "cyclictest-2t.txt",
            "--plots",
            pd.to_str().unwrap(),
            "--plot-size",
            "800x500",
        ],
        &here().join("fixtures"),
    );
    assert_eq!(code, 0, "{err}");
    let mut names: Vec<String> = fs::read_dir(&pd)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into())
        .collect();
    names.sort();
    let mut want = vec![];
    for base in [
        "exec-histogram-rt",
        "exec-histogram-stock",
        "exec-percentiles",
        "wake-bars-cyclictest-2t.txt",
        "wake-bars-rt",
        "wake-bars-stock",
        "wake-histogram-cyclictest-2t.txt",
        "wake-histogram-rt",
        "wake-histogram-stock",
        "wake-percentiles",
    ] {
        want.push(format!("{base}.png"));
        want.push(format!("{base}.svg"));
    }
    assert_eq!(names, want);

    let expected: Vec<(&str, Vec<&str>)> = vec![
        ("wake-histogram-stock", vec!["s0", "s1", "s2"]),
        ("exec-histogram-rt", vec!["s0", "s1", "s2"]),
        (
            "wake-histogram-cyclictest-2t.txt",
            vec!["cyclictest-t0", "cyclictest-t1"],
        ),
        (
            "wake-percentiles",
            vec![
                "stock/s0",
                "stock/s1",
                "stock/s2",
                "rt/s0",
                "rt/s1",
                "rt/s2",
                "cyclictest-2t.txt/cyclictest-t0",
                "cyclictest-2t.txt/cyclictest-t1",
            ],
        ),
        (
            "exec-percentiles",
            vec![
                "stock/s0", "stock/s1", "stock/s2", "rt/s0", "rt/s1", "rt/s2",
            ],
        ),
        ("wake-bars-stock", vec!["mean", "P99", "max (worst run)"]),
    ];
    for (base, series) in expected {
        let svg = fs::read_to_string(pd.join(format!("{base}.svg"))).unwrap();
        assert!(svg.starts_with("<svg"), "{base}.svg");
        assert!(
            svg.contains("width=\"800\"") && svg.contains("height=\"500\""),
            "{base}.svg size"
        );
        assert!(svg.trim_end().ends_with("</svg>"), "{base}.svg not closed");
        let texts = svg_texts(&svg);
        let (w, h, rgb) = png_info(&pd.join(format!("{base}.png")));
        assert_eq!((w, h), (800, 500), "{base}.png size");
        for (i, s) in series.iter().enumerate() {
            let c = rtlab::plot::COLORS[i];
            assert!(
                texts.iter().any(|t| t == s),
                "{base}.svg: no legend entry {s} in {texts:?}"
            );
            assert!(
                svg.contains(&hex(c)),
                "{base}.svg: no element in the colour of {s}"
            );
            assert!(has_color(&rgb, c) > 100, "{base}.png: series {s} not drawn");
        }
        // no series beyond the expected ones
        let extra = rtlab::plot::COLORS[series.len()];
        assert!(
            !svg.contains(&hex(extra)),
            "{base}.svg: unexpected extra series"
        );
        assert_eq!(
            has_color(&rgb, extra),
            0,
            "{base}.png: unexpected extra series"
        );
    }
    // the histogram's axes and title are text in the SVG
    let svg = fs::read_to_string(pd.join("wake-histogram-stock.svg")).unwrap();
    let texts = svg_texts(&svg);
    assert!(
        texts.iter().any(|t| t == "wake lateness histogram: stock"),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t == "samples per bin (log scale)"),
        "{texts:?}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Breaks a copy of the stock ladder with `f`; returns (exit code, stderr).
fn broken(f: impl FnOnce(&Path)) -> (i32, String) {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("stock");
    copy_dir(&here().join("fixtures/stock"), &d);
    f(&d);
    let (code, out, err) = report(&["stock"], tmp.path());
    assert!(out.is_empty(), "printed a table for a broken input");
    (code, err)
}

/// A way to break a ladder directory.
type Breaker = Box<dyn FnOnce(&Path)>;

fn edit_json(p: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_str(&fs::read_to_string(p).unwrap()).unwrap();
    f(&mut v);
    fs::write(p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn malformed_or_partial_inputs_name_the_file() {
    let cases: Vec<(&str, Breaker, &str)> = vec![
        (
            "missing run",
            Box::new(|d| fs::remove_dir_all(d.join("s1/run2")).unwrap()),
            "stock/s1/run2: missing (manifest.json lists stage s1 with 2 runs)",
        ),
        (
            "truncated hdr",
            Box::new(|d| {
                let p = d.join("s0/run1/wake_lateness_ns.hdr");
                let b = fs::read(&p).unwrap();
                fs::write(&p, &b[..b.len() / 2]).unwrap();
            }),
            "stock/s0/run1/wake_lateness_ns.hdr: not a valid HdrHistogram V2 file",
        ),
        (
            "missing hdr",
            Box::new(|d| fs::remove_file(d.join("s2/run1/exec_ns.hdr")).unwrap()),
            "stock/s2/run1/exec_ns.hdr: missing",
        ),
        (
            "hdr of another run",
            Box::new(|d| {
                let mut h = rtcat_results::new_histogram();
                h.record(5000).unwrap();
                rtcat_results::write_hdr(&d.join("s1/run1/exec_ns.hdr"), &h).unwrap();
            }),
            "stock/s1/run1/exec_ns.hdr: holds 1 samples but summary.json exec_ns.count is 400",
        ),
        (
            "csv differs",
            Box::new(|d| {
                let p = d.join("ladder.csv");
                let t = fs::read_to_string(&p)
                    .unwrap()
                    .replacen(",400,", ",401,", 1);
                fs::write(&p, t).unwrap();
            }),
            "stock/ladder.csv: the row for s0 run 1 differs from",
        ),
        (
            "csv row missing",
            Box::new(|d| {
                let p = d.join("ladder.csv");
                let t: Vec<String> = fs::read_to_string(&p)
                    .unwrap()
                    .lines()
                    .filter(|l| !l.starts_with("s2,2,"))
                    .map(String::from)
                    .collect();
                fs::write(&p, t.join("\n") + "\n").unwrap();
            }),
            "stock/ladder.csv: no row for s2 run 2 (partial ladder? see --allow-partial)",
        ),
        (
            "csv garbage",
            Box::new(|d| {
                let p = d.join("ladder.csv");
                let t = fs::read_to_string(&p).unwrap() + "s1,1,abc\n";
                fs::write(&p, t).unwrap();
            }),
            "stock/ladder.csv: line 8: 3 fields, expected 12",
        ),
        (
            "csv missing",
            Box::new(|d| fs::remove_file(d.join("ladder.csv")).unwrap()),
            "stock/ladder.csv: cannot read",
        ),
        (
            "summary field missing",
            Box::new(|d| {
                edit_json(&d.join("s0/run2/summary.json"), |v| {
                    v.as_object_mut().unwrap().remove("recoveries");
                })
            }),
            "stock/s0/run2/summary.json: not a valid rtcat.summary/1 summary: missing field `recoveries`",
        ),
        (
            "summary inconsistent",
            Box::new(|d| {
                edit_json(&d.join("s0/run2/summary.json"), |v| {
                    v["wake_lateness_ns"]["p99"] = 99_999_999.into()
                })
            }),
            "stock/s0/run2/summary.json: wake_lateness_ns: p99 (99999999) is greater than p999",
        ),
        (
            "summary wrong type",
            Box::new(|d| {
                edit_json(&d.join("s1/run1/summary.json"), |v| {
                    v["cycles"] = "many".into()
                })
            }),
            "stock/s1/run1/summary.json: not a valid rtcat.summary/1 summary: invalid type: string \"many\"",
        ),
        (
            "summary of another stage",
            Box::new(|d| {
                edit_json(&d.join("s1/run1/summary.json"), |v| {
                    v["stage"] = "s2".into()
                })
            }),
            "stock/s1/run1/summary.json: stage is \"s2\" but the run lies under stage s1",
        ),
        (
            "run from another kernel",
            Box::new(|d| {
                edit_json(&d.join("s2/run2/summary.json"), |v| {
                    v["system"]["kernel_release"] = "6.12.57".into()
                })
            }),
            "stock/s2/run2/summary.json: measured on board / kernel 6.12.57, but manifest.json says board / kernel 5.10.160",
        ),
        (
            "manifest schema",
            Box::new(|d| {
                edit_json(&d.join("manifest.json"), |v| {
                    v["schema"] = "rtcat.ladder/9".into()
                })
            }),
            "stock/manifest.json: schema: expected \"rtcat.ladder/1\"",
        ),
        (
            "manifest runs",
            Box::new(|d| edit_json(&d.join("manifest.json"), |v| v["runs"] = 3.into())),
            "stock/s0/run3: missing (manifest.json lists stage s0 with 3 runs)",
        ),
        (
            "manifest not json",
            Box::new(|d| fs::write(d.join("manifest.json"), "{").unwrap()),
            "stock/manifest.json: not a valid rtcat.ladder/1 manifest",
        ),
    ];
    for (name, f, want) in cases {
        let (code, err) = broken(f);
        assert_eq!(code, 1, "{name}: exit code; stderr: {err}");
        assert!(
            err.contains(want),
            "{name}: stderr {err:?} does not contain {want:?}"
        );
    }
}

#[test]
fn other_bad_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("empty")).unwrap();
    let (code, _, err) = report(&["empty"], tmp.path());
    assert_eq!(code, 1);
    assert!(
        err.contains("empty: neither manifest.json (ladder) nor summary.json (bench output) found"),
        "{err}"
    );

    let (code, _, err) = report(&["nonexistent"], tmp.path());
    assert_eq!(code, 1);
    assert!(err.contains("nonexistent: No such file"), "{err}");

    let ct = fs::read_to_string(here().join("fixtures/cyclictest-2t.txt")).unwrap();
    let cut: String = ct.lines().take(120).map(|l| format!("{l}\n")).collect();
    fs::write(tmp.path().join("ct-cut.txt"), cut).unwrap();
    let (code, _, err) = report(&["ct-cut.txt"], tmp.path());
    assert_eq!(code, 1);
    assert!(
        err.contains("ct-cut.txt: no \"# Total:\" line (truncated file?)"),
        "{err}"
    );

    fs::write(tmp.path().join("notes.txt"), "hello\n").unwrap();
    let (code, _, err) = report(&["notes.txt"], tmp.path());
    assert_eq!(code, 1);
    assert!(
        err.contains("notes.txt: not a cyclictest histogram"),
        "{err}"
    );

    let fx = here().join("fixtures");
    let (code, _, err) = report(&["stock", "rt", "--label", "a"], &fx);
    assert_eq!(code, 2);
    assert!(err.contains("--label: 1 label(s) for 2 input(s)"), "{err}");
    let (code, _, err) = report(&["stock", "rt", "--label", "a", "--label", "a"], &fx);
    assert_eq!(code, 2);
    assert!(
        err.contains("--label: two inputs are labelled \"a\""),
        "{err}"
    );
    let (code, _, err) = report(&["stock", "--plot-size", "10x10"], &fx);
    assert_eq!(code, 2);
    assert!(err.contains("--plot-size: 10x10 is outside"), "{err}");
}

#[test]
fn more_series_than_colours_are_all_drawn() {
    let tmp = tempfile::tempdir().unwrap();
    let pd = tmp.path().join("p");
    let (code, _, err) = report(
        &[
            "stock",
            "rt",
            "stock",
            "rt",
            "-o",
            "/dev/null",
            "--plots",
            pd.to_str().unwrap(),
        ],
        &here().join("fixtures"),
    );
    assert_eq!(code, 2, "duplicate default labels must be refused");
    assert!(
        err.contains("--label: two inputs are labelled \"stock\""),
        "{err}"
    );
    let (code, _, err) = report(
        &[
            "stock", "rt", "stock", "rt", "--label", "A", "--label", "B", "--label", "C",
            "--label", "D",
        ]
        .into_iter()
        .chain(["-o", "/dev/null", "--plots", pd.to_str().unwrap()])
        .collect::<Vec<_>>(),
        &here().join("fixtures"),
    );
    assert_eq!(code, 0, "{err}");
    let svg = fs::read_to_string(pd.join("wake-percentiles.svg")).unwrap();
    let texts = svg_texts(&svg);
    for l in ["A", "B", "C", "D"] {
        for st in ["s0", "s1", "s2"] {
            let name = format!("{l}/{st}");
            assert!(texts.contains(&name), "legend lacks {name}");
        }
    }
}

#[test]
fn interrupted_ladder_with_allow_partial() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("stock");
    copy_dir(&here().join("fixtures/stock"), &d);
    // interrupted during s2 run 2: no run directory, no csv row
    fs::remove_dir_all(d.join("s2/run2")).unwrap();
    let p = d.join("ladder.csv");
    let t: Vec<String> = fs::read_to_string(&p)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("s2,2,"))
        .map(String::from)
        .collect();
    fs::write(&p, t.join("\n") + "\n").unwrap();
    let (code, _, err) = report(&["stock"], tmp.path());
    assert_eq!(code, 1);
    assert!(
        err.contains("stock/s2/run2: missing (manifest.json lists stage s2 with 2 runs)"),
        "{err}"
    );
    let (code, out, err) = report(&["stock", "--allow-partial"], tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  - incomplete: s2 run 2: not measured (partial ladder)\n"),
        "{out}"
    );
    let s2 = out
        .lines()
        .find(|l| l.starts_with("| stock | s2 |"))
        .unwrap();
    let cells: Vec<&str> = s2.split('|').map(str::trim).collect();
    assert_eq!(cells[5], "1", "runs of s2: {s2}");
    assert_eq!(cells[6], "400", "cycles of s2: {s2}");
    // the remaining s2 run's figures, unchanged: run 1 of the golden fixtures
    let run1: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(d.join("s2/run1/summary.json")).unwrap()).unwrap();
    let p99 = run1["wake_lateness_ns"]["p99"].as_u64().unwrap();
    assert_eq!(cells[8], format!("{:.3}", p99 as f64 / 1000.0));
    // malformed content still fails with --allow-partial
    fs::write(d.join("s1/run1/exec_ns.hdr"), b"junk").unwrap();
    let (code, _, err) = report(&["stock", "--allow-partial"], tmp.path());
    assert_eq!(code, 1);
    assert!(
        err.contains("stock/s1/run1/exec_ns.hdr: not a valid HdrHistogram V2 file"),
        "{err}"
    );
}

#[test]
fn interrupted_fatal_and_checkpoint_runs_and_bus_counts_are_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let b = tmp.path().join("bench");
    copy_dir(&here().join("fixtures/bench"), &b);
    edit_json(&b.join("summary.json"), |v| {
        // the fixture is a timer-only run, which has no bus
        v["mode"] = "sim".into();
        v["stop"] = serde_json::json!({
            "reason": "signal", "signal": "SIGTERM", "requested_duration_s": 10.0, "detail": null
        });
        v["bus"] = serde_json::json!({
            "rx_rejected": 12,
            "rx_rejected_by_reason": { "foreign_source": 10, "bad_length": 2 },
            "send_errors": 3
        });
        v["logging"] = serde_json::json!({
            "write_errors": 1, "events_dropped": 4, "samples_dropped": 0,
            "first_error": "events.log: No space left on device (os error 28)"
        });
    });
    let l = tmp.path().join("stock");
    copy_dir(&here().join("fixtures/stock"), &l);
    edit_json(&l.join("s1/run2/summary.json"), |v| {
        v["stop"] = serde_json::json!({
            "reason": "fatal", "detail": "subdevice 2 lost | no recovery"
        });
    });
    edit_json(&l.join("s2/run1/summary.json"), |v| {
        v["stop"] = serde_json::json!({ "reason": "running" });
        // zero counts: nothing to note
        v["bus"] = serde_json::json!({ "rx_rejected": 0, "send_errors": 0 });
    });
    edit_json(&l.join("s0/run1/summary.json"), |v| {
        v["stop"] = serde_json::json!({ "reason": "duration", "requested_duration_s": 0.4 });
    });
    let (code, out, err) = report(&["bench", "stock"], tmp.path());
    assert_eq!(code, 0, "{err}");
    let row = |src: &str, st: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("| {src} | {st}")))
            .unwrap_or_else(|| panic!("no row {src}/{st}:\n{out}"))
            .to_string()
    };
    assert!(row("bench", "bench").starts_with("| bench | bench (interrupted) |"));
    assert!(row("stock", "s1").starts_with("| stock | s1 (fatal) |"));
    assert!(row("stock", "s2").starts_with("| stock | s2 (checkpoint) |"));
    assert!(row("stock", "s0").starts_with("| stock | s0 |"));
    for want in [
        "- **bench** bench: interrupted by SIGTERM after 0.4 s of 10 s requested\n",
        "- **bench** bench: 12 received frame(s) refused as replies (bad_length 2, foreign_source 10), 3 send error(s)\n",
        "- **bench** bench: logging: 1 failed write(s), 4 event(s) and 0 sample(s) not written; first error: events.log: No space left on device (os error 28)\n",
        "- **stock** s1 run 2: ended by a fatal error after 0.4 s: subdevice 2 lost \\| no recovery\n",
        "- **stock** s2 run 1: a checkpoint of a run still going (0.4 s so far)\n",
    ] {
        assert!(out.contains(want), "lacks {want:?}:\n{out}");
    }
    assert!(
        !out.contains("s0 run 1:"),
        "a run that ran its duration is noted:\n{out}"
    );
    assert!(
        !out.contains("s2 run 1: 0 received"),
        "zero counts are noted:\n{out}"
    );

    let (code, csv, err) = report(&["bench", "stock", "--format", "csv"], tmp.path());
    assert_eq!(code, 0, "{err}");
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<String>> = lines
        .map(|l| {
            // the setup column is quoted; the columns checked here come after it
            let tail = l.rsplitn(5, ',').collect::<Vec<_>>();
            let mut v: Vec<String> = tail.iter().rev().map(|s| s.to_string()).collect();
            v.insert(0, l.split(',').nth(1).unwrap().to_string());
            v
        })
        .collect();
    assert_eq!(
        head[col("status")..].join(","),
        "status,rx_rejected,send_errors,log_write_errors"
    );
    let bench = rows.iter().find(|r| r[0] == "bench").unwrap();
    assert_eq!(bench[2..], ["interrupted", "12", "3", "1"]);
    let s2 = rows.iter().find(|r| r[0] == "s2").unwrap();
    assert_eq!(s2[2..], ["checkpoint", "0", "0", ""]);
    let s0 = rows.iter().find(|r| r[0] == "s0").unwrap();
    assert_eq!(s0[2..], ["", "", "", ""]);

    let (code, json, err) = report(&["bench", "stock", "--format", "json"], tmp.path());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let st = &v["sources"][0]["stages"][0];
    assert_eq!(st["status"], serde_json::json!(["interrupted"]));
    assert_eq!(st["rx_rejected"], 12);
    assert_eq!(st["send_errors"], 3);
    assert_eq!(st["log_write_errors"], 1);
    let s0 = &v["sources"][1]["stages"][0];
    assert!(
        s0.get("status").is_none() && s0.get("rx_rejected").is_none(),
        "{s0}"
    );
}
