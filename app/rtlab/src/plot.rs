//! Plots of `rtcat report` (each as SVG and PNG):
//! - `<metric>-histogram-<source>`: latency histogram per stage (log latency bins, log count axis);
//! - `<metric>-percentiles`: latency vs 1 − quantile (both log scale), one curve per source/stage;
//! - `wake-bars-<source>`: per stage bars of mean, P99 and worst max (log axis).
//!
//! `<metric>` is `wake` (wake lateness) or `exec` (execution time, when any input has it).
//! Text is drawn with the DejaVu Sans subset in `assets/` (see `assets/LICENSE-DejaVu.txt`), so no
//! system font library is needed; SVG text stays text (`<text>` elements).

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Context, Result, anyhow};
use hdrhistogram::Histogram;
use plotters::coord::Shift;
use plotters::prelude::*;
use safefs::Dir;

use crate::outfile::OUTPUT_MODE;
use crate::report::{Source, stage_rows};

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");
static REGISTER: Once = Once::new();

fn register_font() {
    REGISTER.call_once(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| ())
            .expect("the embedded font is valid");
    });
}

/// Series colours, in order (RGB); chosen to be distinct and readable on white.
pub const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

/// Legend mark of series `i`: a filled box for solid series, a thin bar for dashed ones.
fn legend_mark(i: usize, x: i32, y: i32, c: RGBColor) -> Rectangle<(i32, i32)> {
    let h = if i < COLORS.len() { 6 } else { 1 };
    Rectangle::new([(x, y - h), (x + 16, y + h)], c.filled())
}

macro_rules! de {
    ($e:expr) => {
        $e.map_err(|e| anyhow!("drawing: {e:?}"))
    };
}

const BINS_PER_DECADE: f64 = 20.0;

/// The power of ten at or below `v` (for log axes; 0.001 at least).
fn decade_floor(v: f64) -> f64 {
    10f64.powf(v.max(0.001).log10().floor())
}

/// Axis label: no decimals from 10 up, at most 3 significant digits below.
fn fmt_num(v: f64) -> String {
    if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}").trim_end_matches(".0").to_string()
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

/// Series `i` as a line: the first COLORS.len() series solid, the next ones dashed in the same
/// colours.
fn draw_line<'a, DB: DrawingBackend + 'a, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'a, DB, CT>,
    i: usize,
    name: &str,
    pts: Vec<(f64, f64)>,
) -> Result<()> {
    let c = color(i);
    let anno = if i < COLORS.len() {
        de!(chart.draw_series(LineSeries::new(pts, c.stroke_width(2))))?
    } else {
        de!(chart.draw_series(DashedLineSeries::new(pts, 8, 5, c.stroke_width(2))))?
    };
    anno.label(name)
        .legend(move |(x, y)| legend_mark(i, x, y, c));
    Ok(())
}

/// The legend box, at `pos`, in the same style on every plot.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> Result<()> {
    de!(chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw())
    .map(|_| ())
}

/// Which latency a plot shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Wake,
    Exec,
}

impl Metric {
    fn id(self) -> &'static str {
        match self {
            Metric::Wake => "wake",
            Metric::Exec => "exec",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Metric::Wake => "wake lateness",
            Metric::Exec => "execution time",
        }
    }
}

/// A named latency distribution to plot.
struct Series {
    name: String,
    hist: Histogram<u64>,
}

fn series_of(src: &Source, metric: Metric, prefix: bool) -> Vec<Series> {
    src.stages
        .iter()
        .filter_map(|st| {
            let h = match metric {
                Metric::Wake => Some(st.pooled_wake()),
                Metric::Exec => st.pooled_exec(),
            }?;
            (!h.is_empty()).then(|| Series {
                name: if prefix {
                    format!("{}/{}", src.label, st.name)
                } else {
                    st.name.clone()
                },
                hist: h,
            })
        })
        .collect()
}

/// A file-name-safe form of a label.
pub fn file_label(l: &str) -> String {
    l.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Log-spaced bins (in µs) of a histogram: (lower edge, upper edge, count).
fn log_bins(h: &Histogram<u64>, lo_us: f64, hi_us: f64) -> Vec<(f64, f64, u64)> {
    let k0 = (lo_us.log10() * BINS_PER_DECADE).floor() as i64;
    let k1 = (hi_us.log10() * BINS_PER_DECADE).floor() as i64;
    let mut bins: Vec<(f64, f64, u64)> = (k0..=k1)
        .map(|k| {
            (
                10f64.powf(k as f64 / BINS_PER_DECADE),
                10f64.powf((k + 1) as f64 / BINS_PER_DECADE),
                0,
            )
        })
        .collect();
    for v in h.iter_recorded() {
        let us = (v.value_iterated_to().max(1)) as f64 / 1000.0;
        let k = ((us.log10() * BINS_PER_DECADE).floor() as i64).clamp(k0, k1);
        bins[(k - k0) as usize].2 += v.count_at_value();
    }
    bins
}

fn draw_histogram<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    metric: Metric,
    series: &[Series],
) -> Result<()> {
    de!(root.fill(&WHITE))?;
    let lo = series
        .iter()
        .map(|s| s.hist.min().max(1))
        .min()
        .unwrap_or(1) as f64
        / 1000.0;
    let hi = series
        .iter()
        .map(|s| s.hist.max().max(1))
        .max()
        .unwrap_or(1) as f64
        / 1000.0;
    let binned: Vec<Vec<(f64, f64, u64)>> =
        series.iter().map(|s| log_bins(&s.hist, lo, hi)).collect();
    let x0 = binned
        .iter()
        .filter_map(|b| b.first().map(|x| x.0))
        .fold(f64::MAX, f64::min);
    let x1 = binned
        .iter()
        .filter_map(|b| b.last().map(|x| x.1))
        .fold(0.0, f64::max);
    let ymax = binned
        .iter()
        .flatten()
        .map(|b| b.2)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut chart = de!(ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), (0.5..ymax * 2.0).log_scale()))?;
    de!(chart
        .configure_mesh()
        .x_desc(format!("{} (µs, log scale)", metric.title()))
        .y_desc("samples per bin (log scale)")
        .y_label_formatter(&|v| fmt_num(*v))
        .x_label_formatter(&|v| fmt_num(*v))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw())?;
    for (i, (s, bins)) in series.iter().zip(&binned).enumerate() {
        // a step outline; empty bins drop to the floor of the axis
        let first = bins.iter().position(|b| b.2 > 0).unwrap_or(0);
        let last = bins.iter().rposition(|b| b.2 > 0).unwrap_or(0);
        let mut pts = Vec::new();
        for b in &bins[first..=last] {
            let y = if b.2 == 0 { 0.5 } else { b.2 as f64 };
            pts.push((b.0, y));
            pts.push((b.1, y));
        }
        draw_line(&mut chart, i, &s.name, pts)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    de!(root.present())?;
    Ok(())
}

fn percentile_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    // x = -log10(1 - q), from q = 0 up to the last quantile the sample count resolves
    let n = h.len().max(1) as f64;
    let kmax = n.log10();
    let mut pts = Vec::new();
    let mut k = 0.0;
    while k <= kmax + 1e-9 {
        let q = 1.0 - 10f64.powf(-k);
        pts.push((k, h.value_at_quantile(q).max(1) as f64 / 1000.0));
        k += 0.05;
    }
    pts.push((kmax, h.max().max(1) as f64 / 1000.0));
    pts
}

fn quantile_label(k: f64) -> String {
    let k = k.round() as i32;
    match k {
        0 => "1 (P0)".into(),
        1 => "0.1 (P90)".into(),
        2 => "0.01 (P99)".into(),
        k => format!("1e-{k} (P{})", 100.0 - 100.0 * 10f64.powi(-k)),
    }
}

fn draw_percentiles<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    metric: Metric,
    series: &[Series],
) -> Result<()> {
    de!(root.fill(&WHITE))?;
    let curves: Vec<Vec<(f64, f64)>> = series.iter().map(|s| percentile_points(&s.hist)).collect();
    let xmax = curves
        .iter()
        .flatten()
        .map(|p| p.0)
        .fold(1.0, f64::max)
        .ceil();
    let ylo = curves
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(f64::MAX, f64::min);
    let ylo = decade_floor(ylo);
    let yhi = curves
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(ylo * 10.0);
    let mut chart = de!(ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .margin_right(60)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax, (ylo * 0.8..yhi * 1.5).log_scale()))?;
    de!(chart
        .configure_mesh()
        .x_desc("1 − quantile (log scale)")
        .y_desc(format!("{} (µs, log scale)", metric.title()))
        .y_label_formatter(&|v| fmt_num(*v))
        .x_labels(xmax as usize + 1)
        .x_label_formatter(&|k| {
            if (k - k.round()).abs() < 1e-6 {
                quantile_label(*k)
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw())?;
    for (i, (s, pts)) in series.iter().zip(curves).enumerate() {
        draw_line(&mut chart, i, &s.name, pts)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    de!(root.present())?;
    Ok(())
}

/// Bars per stage: (stage, [mean, P99, worst max] in µs).
fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    groups: &[(String, [f64; 3])],
) -> Result<()> {
    de!(root.fill(&WHITE))?;
    let n = groups.len().max(1);
    let vals = groups.iter().flat_map(|g| g.1).map(|v| v.max(0.001));
    let ylo = decade_floor(vals.clone().fold(f64::MAX, f64::min) * 0.5);
    let yhi = vals.fold(0.0, f64::max).max(ylo * 10.0) * 2.0;
    let names: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
    let fmt = move |x: &f64| -> String {
        if (x - x.round()).abs() > 1e-6 || *x < -0.1 {
            return String::new();
        }
        names.get(x.round() as usize).cloned().unwrap_or_default()
    };
    let mut chart = de!(ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, (ylo..yhi).log_scale()))?;
    de!(chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("stage")
        .y_desc("wake lateness (µs, log scale)")
        .y_label_formatter(&|v| fmt_num(*v))
        .x_labels(n)
        .x_label_formatter(&fmt)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw())?;
    for (j, name) in ["mean", "P99", "max (worst run)"].iter().enumerate() {
        let c = color(j);
        let bars = groups.iter().enumerate().map(move |(i, g)| {
            let x = i as f64 - 0.38 + j as f64 * 0.26;
            Rectangle::new([(x, ylo), (x + 0.24, g.1[j].max(0.001))], c.filled())
        });
        de!(chart.draw_series(bars))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    de!(root.present())?;
    Ok(())
}

/// Renders one plot as `<base>.svg` and `<base>.png` in memory, then writes both atomically
/// through the directory handle (a link planted at either name is replaced, never followed).
macro_rules! render {
    ($dir:expr, $base:expr, $size:expr, |$root:ident| $body:expr) => {{
        let svg_name = format!("{}.svg", $base);
        let png_name = format!("{}.png", $base);
        let svg_path = $dir.path().join(&svg_name);
        let png_path = $dir.path().join(&png_name);
        let mut svg = String::new();
        {
            let $root = SVGBackend::with_string(&mut svg, $size).into_drawing_area();
            $body.with_context(|| format!("{}", svg_path.display()))?;
        }
        $dir.write_atomic(&svg_name, svg.as_bytes(), OUTPUT_MODE)?;
        let (w, h) = $size;
        let mut buf = vec![0u8; (w * h * 3) as usize];
        {
            let $root = BitMapBackend::with_buffer(&mut buf, $size).into_drawing_area();
            $body.with_context(|| format!("{}", png_path.display()))?;
        }
        let png = encode_png(&png_path, w, h, &buf)?;
        $dir.write_atomic(&png_name, &png, OUTPUT_MODE)?;
        vec![svg_path, png_path]
    }};
}

fn encode_png(path: &Path, w: u32, h: u32, rgb: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut wr = enc
        .write_header()
        .with_context(|| format!("{}: PNG header", path.display()))?;
    wr.write_image_data(rgb)
        .with_context(|| format!("{}: PNG data", path.display()))?;
    wr.finish()
        .with_context(|| format!("{}: PNG end", path.display()))?;
    Ok(out)
}

/// Writes every plot for `sources` into the directory `dir` names (opened as named; the files
/// below it are written as in [`write_plots_in`]).
pub fn write_plots(sources: &[Source], dir: &Path, size: (u32, u32)) -> Result<Vec<PathBuf>> {
    write_plots_in(sources, &Dir::open_named(dir)?, size)
}

/// Writes every plot for `sources` into `dir`, each file atomically and never through a link;
/// returns the files written (SVG and PNG pairs).
pub fn write_plots_in(sources: &[Source], dir: &Dir, size: (u32, u32)) -> Result<Vec<PathBuf>> {
    register_font();
    let mut files = Vec::new();
    let multi = sources.len() > 1;
    for metric in [Metric::Wake, Metric::Exec] {
        let mut all = Vec::new();
        for src in sources {
            let s = series_of(src, metric, false);
            if s.is_empty() {
                continue;
            }
            let title = format!("{} histogram: {}", metric.title(), src.label);
            let base = format!("{}-histogram-{}", metric.id(), file_label(&src.label));
            files.extend(render!(dir, base, size, |root| draw_histogram(
                &root, &title, metric, &s
            )));
            all.extend(series_of(src, metric, multi));
        }
        if all.is_empty() {
            continue;
        }
        let title = format!("{} percentiles", metric.title());
        let base = format!("{}-percentiles", metric.id());
        files.extend(render!(dir, base, size, |root| draw_percentiles(
            &root, &title, metric, &all
        )));
    }
    for src in sources {
        let groups: Vec<(String, [f64; 3])> = stage_rows(src)
            .into_iter()
            .map(|r| {
                (
                    r.stage,
                    [
                        r.wake_mean_ns.mean / 1000.0,
                        r.wake_p99_ns.mean / 1000.0,
                        r.wake_max_ns.worst / 1000.0,
                    ],
                )
            })
            .collect();
        let title = format!("wake lateness per stage: {}", src.label);
        let base = format!("wake-bars-{}", file_label(&src.label));
        files.extend(render!(dir, base, size, |root| draw_bars(
            &root, &title, &groups
        )));
    }
    Ok(files)
}
