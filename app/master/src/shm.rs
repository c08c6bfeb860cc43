//! The shared-memory process image (`[shm]`, `--shm NAME`): an application [`Layer`] that
//! publishes every cycle of the application it wraps for other programs and lets them own
//! output entries (the hooks it does not add to reach the wrapped application unchanged). The format and the client library are the `rtcat-shm` crate
//! (`app/shm/FORMAT.md`).
//!
//! Per cycle, after the inner application: the client writers' owned entries are merged into
//! the outputs (so those entries are the clients', bit-exactly, and the snapshot shows what goes
//! out with the next exchange), then the cycle is published (one seqlock write; no allocation,
//! no system call). Writer events (attached, stale, resumed, detached) go to the event stream.
//!
//! At every bring-up and recovery (`configure`) the object is kept when the layout is the same,
//! else replaced (REPLACED in the old one, a new one with another generation). RECOVERING while
//! the master re-initialises the segment, STOPPED at the end of the run.

use crate::application::{AppError, Application, Cycle, Layer, Recovery, Setup, ShutdownReason};
use crate::axis::AxisConfig;
use crate::config::ConfigError;
use crate::invalid::Invalid;
use crate::layout::{DataType, Direction, Entry, Layout};
use crate::stats::{EventKind, ShmWriterChange};
use rtcat_shm::{
    CycleInfo, DeclaredWriter, EntryRef, Hold, OutputEntry, Publisher, PublisherConfig, State,
    Value, WriterEventKind,
};
use serde::Deserialize;

/// The control socket's side of the image (format v3): what the binary hands out.
pub use rtcat_shm::{Ask, Hub, Refusal};

/// Default `[shm] writer_timeout_cycles`: 100 ms at the default 1 ms period.
pub const DEFAULT_WRITER_TIMEOUT_CYCLES: u64 = 100;
/// Largest `[shm] writer_timeout_cycles` (about 17 minutes at 1 ms).
pub const MAX_WRITER_TIMEOUT_CYCLES: u64 = 1_000_000;

/// `[shm]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShmConfig {
    /// The image's label (the memfd's name, `/memfd:rtcat:NAME` in `/proc/PID/fd`); None: no
    /// shared image. `--shm NAME` sets it. Nothing is created under this name (format v3): the
    /// image is handed out over the control socket, which a shared image therefore needs.
    pub name: Option<String>,
    /// Cycles without a heartbeat after which a writer is stale and its entries go to their
    /// safe values.
    pub writer_timeout_cycles: u64,
    /// `[[shm.writer]]`: writers declared here, with the entries they own.
    pub writer: Vec<ShmWriterConfig>,
    /// `[[shm.safe]]`: safe values of output entries (default 0).
    pub safe: Vec<ShmSafeValue>,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            name: None,
            writer_timeout_cycles: DEFAULT_WRITER_TIMEOUT_CYCLES,
            writer: Vec::new(),
            safe: Vec::new(),
        }
    }
}

/// `[[shm.writer]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShmWriterConfig {
    /// Its name (1..=31 bytes): a client attaching with it gets this writer's slot.
    pub name: String,
    /// The output entries it owns, `POSITION:NAME` (`"0:Outputs.Output 1"`).
    pub entries: Vec<String>,
}

/// `[[shm.safe]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShmSafeValue {
    /// The output entry, `POSITION:NAME`.
    pub entry: String,
    /// Its safe value (an integer, a float for REAL32/REAL64, or a boolean).
    pub value: SafeValue,
}

/// A safe value as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SafeValue {
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
}

impl SafeValue {
    fn value(self) -> Value {
        match self {
            SafeValue::Bool(b) => Value::Bool(b),
            SafeValue::Int(i) => Value::Signed(i),
            SafeValue::Float(f) => Value::Real(f),
        }
    }
}

/// `POSITION:NAME` split (the syntax only; resolution needs the layout).
fn split_entry(s: &str) -> Option<(u16, &str)> {
    let (p, n) = s.split_once(':')?;
    let p: u16 = p.trim().parse().ok()?;
    (!n.is_empty()).then_some((p, n))
}

impl ShmConfig {
    /// [`ShmConfig::check`] as a refusal of the file `path`.
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        self.check().map_err(|e| e.at(path))
    }

    /// Check the keys that can be checked without the segment (entry names are resolved at
    /// bring-up, against the layout).
    pub fn check(&self) -> Result<(), Invalid> {
        let bad = |key: String, value: String, message: String| Invalid {
            key,
            value,
            message,
        };
        if let Some(n) = &self.name
            && let Err(e) = rtcat_shm::valid_name(n)
        {
            let why = match e {
                rtcat_shm::Error::Name { why, .. } => why.to_string(),
                other => other.to_string(),
            };
            return Err(bad(
                "shm.name".into(),
                format!("{n:?}"),
                format!(
                    "{why} (the image's label: [A-Za-z0-9_.-], 1..=200 bytes; nothing is \
                     created under it)"
                ),
            ));
        }
        let t = self.writer_timeout_cycles;
        if !(1..=MAX_WRITER_TIMEOUT_CYCLES).contains(&t) {
            return Err(bad(
                "shm.writer_timeout_cycles".into(),
                t.to_string(),
                format!("must be 1..={MAX_WRITER_TIMEOUT_CYCLES} cycles"),
            ));
        }
        if self.writer.len() > rtcat_shm::MAX_WRITERS as usize {
            return Err(bad(
                "shm.writer".into(),
                format!("{} writers", self.writer.len()),
                format!(
                    "at most {} (the object's writer slots)",
                    rtcat_shm::MAX_WRITERS
                ),
            ));
        }
        let mut owned: Vec<(&str, usize)> = Vec::new();
        for (i, w) in self.writer.iter().enumerate() {
            let n = &w.name;
            if n.is_empty()
                || n.len() >= rtcat_shm::NAME_BYTES
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            {
                return Err(bad(
                    format!("shm.writer[{i}].name"),
                    format!("{n:?}"),
                    "must be 1..=31 bytes of A-Z a-z 0-9 _ . -".into(),
                ));
            }
            if self.writer[..i].iter().any(|o| &o.name == n) {
                return Err(bad(
                    format!("shm.writer[{i}].name"),
                    format!("{n:?}"),
                    "declared twice".into(),
                ));
            }
            if w.entries.is_empty() {
                return Err(bad(
                    format!("shm.writer[{i}].entries"),
                    "[]".into(),
                    "a declared writer owns at least one output entry".into(),
                ));
            }
            for (j, e) in w.entries.iter().enumerate() {
                if split_entry(e).is_none() {
                    return Err(bad(
                        format!("shm.writer[{i}].entries[{j}]"),
                        format!("{e:?}"),
                        "must be POSITION:NAME, e.g. \"0:Outputs.Output 1\"".into(),
                    ));
                }
                if let Some((_, k)) = owned.iter().find(|(o, _)| *o == e.as_str()) {
                    return Err(bad(
                        format!("shm.writer[{i}].entries[{j}]"),
                        format!("{e:?}"),
                        format!("already owned by shm.writer[{k}]: an entry has one owner"),
                    ));
                }
                owned.push((e, i));
            }
        }
        for (i, s) in self.safe.iter().enumerate() {
            if split_entry(&s.entry).is_none() {
                return Err(bad(
                    format!("shm.safe[{i}].entry"),
                    format!("{:?}", s.entry),
                    "must be POSITION:NAME, e.g. \"0:Outputs.Output 1\"".into(),
                ));
            }
            if self.safe[..i].iter().any(|o| o.entry == s.entry) {
                return Err(bad(
                    format!("shm.safe[{i}].entry"),
                    format!("{:?}", s.entry),
                    "has a safe value already".into(),
                ));
            }
            if let SafeValue::Float(f) = s.value
                && !f.is_finite()
            {
                return Err(bad(
                    format!("shm.safe[{i}].value"),
                    f.to_string(),
                    "must be a finite number".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Why the shared image could not be set up for a segment (a bring-up error).
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A configured entry is not an output entry of this segment (or not a unique one).
    #[error("{key} = {entry:?}: {why}")]
    Entry {
        /// The key (`shm.writer[0].entries[1]`).
        key: String,
        /// The entry name.
        entry: String,
        /// Why.
        why: String,
    },
    /// The object could not be created.
    #[error("shared-memory process image: {0}")]
    Shm(#[from] rtcat_shm::Error),
}

/// Resolve `POSITION:NAME` to the row of the entry table (outputs with a non-zero index, in
/// layout order) and the entry.
fn resolve<'l>(
    layout: &'l Layout,
    rows: &[usize],
    key: &str,
    name: &str,
) -> Result<(usize, &'l Entry), ShmError> {
    let err = |why: String| ShmError::Entry {
        key: key.to_string(),
        entry: name.to_string(),
        why,
    };
    let (pos, n) = split_entry(name).ok_or_else(|| err("must be POSITION:NAME".into()))?;
    let hits: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|&(_, &i)| layout.entries[i].position == pos && layout.entries[i].is_named(n))
        .map(|(r, _)| r)
        .collect();
    match hits.as_slice() {
        [r] => Ok((*r, &layout.entries[rows[*r]])),
        [] => {
            let names: Vec<String> = rows
                .iter()
                .map(|&i| &layout.entries[i])
                .filter(|e| e.position == pos)
                .map(|e| format!("{pos}:{}", e.qualified_name()))
                .take(16)
                .collect();
            Err(err(if names.is_empty() {
                format!("subdevice {pos} has no output entries in this segment")
            } else {
                format!(
                    "no such output entry; subdevice {pos} has {}",
                    names.join(", ")
                )
            }))
        }
        _ => Err(err(
            "names several output entries of that subdevice: use PDO.entry (rtcat pdos)".into(),
        )),
    }
}

fn entry_ref(e: &Entry, row: usize) -> EntryRef {
    use rtcat_shm::DataType as D;
    EntryRef {
        name: format!("{}:{}", e.position, e.qualified_name()),
        position: e.position,
        direction: rtcat_shm::Direction::Outputs,
        bit_offset: e.bit_offset,
        bits: u16::from(e.bits),
        data_type: match e.data_type {
            DataType::Bool => D::Bool,
            DataType::Int8 => D::Int8,
            DataType::Int16 => D::Int16,
            DataType::Int32 => D::Int32,
            DataType::Int64 => D::Int64,
            DataType::Unsigned8 => D::Unsigned8,
            DataType::Unsigned16 => D::Unsigned16,
            DataType::Unsigned32 => D::Unsigned32,
            DataType::Unsigned64 => D::Unsigned64,
            DataType::Real32 => D::Real32,
            DataType::Real64 => D::Real64,
            DataType::Bits => D::Bits,
            DataType::Other(c) => D::Other(c),
        },
        row: Some(row as u32),
    }
}

/// Position target: held at the position actual when its writer stops.
const TARGET_POSITION: u16 = 0x607a;
/// Position actual value.
const POSITION_ACTUAL: u16 = 0x6064;
/// Velocity and torque targets: 0 when their writer stops.
const ZERO_TARGETS: &[u16] = &[0x60ff, 0x6071];

/// The entry table rows of `layout` with the configured owners and safe values; the command
/// entries of the drives `axes` are bound to are the master's (never a writer's).
pub fn plan(
    cfg: &ShmConfig,
    layout: &Layout,
    axes: &[AxisConfig],
) -> Result<Vec<OutputEntry>, ShmError> {
    let rows: Vec<usize> = layout
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.direction == Direction::Outputs && e.index != 0)
        .map(|(i, _)| i)
        .collect();
    let bound: Vec<(usize, u16)> = axes
        .iter()
        .enumerate()
        .filter_map(|(a, c)| crate::axes::bound_position(c, &layout.subdevices).map(|p| (a, p)))
        .collect();
    let axis_of = |e: &Entry| {
        bound
            .iter()
            .find(|&&(_, p)| {
                p == e.position
                    && e.subindex == 0
                    && crate::axis::COMMAND_OBJECTS.contains(&e.index)
            })
            .map(|&(a, _)| a)
    };
    let mut out: Vec<OutputEntry> = rows
        .iter()
        .map(|&i| {
            let e = &layout.entries[i];
            let hold = if e.index == TARGET_POSITION && e.subindex == 0 {
                // The drive's own actual position, as wide as the target (INTEGER32 both).
                layout
                    .entries
                    .iter()
                    .find(|a| {
                        a.direction == Direction::Inputs
                            && a.position == e.position
                            && a.index == POSITION_ACTUAL
                            && a.subindex == 0
                            && a.bits == e.bits
                    })
                    .map_or(Hold::Output, |a| Hold::Input(a.bit_offset))
            } else {
                Hold::None
            };
            OutputEntry {
                bit_offset: e.bit_offset,
                bits: u16::from(e.bits),
                writer: None,
                safe: 0,
                hold,
                master: axis_of(e).is_some(),
            }
        })
        .collect();
    let axis_err = |key: String, name: &str, e: &Entry, a: usize| ShmError::Entry {
        key,
        entry: name.to_string(),
        why: format!(
            "{} ({:#06x}) of the drive at position {} is driven by axis {:?} (axis[{a}]): an \
             axis' controlword, mode and targets belong to the master, which applies its \
             limits and enable policy",
            e.name, e.index, e.position, axes[a].name
        ),
    };
    for (k, w) in cfg.writer.iter().enumerate() {
        for (j, name) in w.entries.iter().enumerate() {
            let key = format!("shm.writer[{k}].entries[{j}]");
            let (r, e) = resolve(layout, &rows, &key, name)?;
            if let Some(a) = axis_of(e) {
                return Err(axis_err(key, name, e, a));
            }
            if let Some(o) = out[r].writer {
                return Err(ShmError::Entry {
                    key,
                    entry: name.clone(),
                    why: format!("the same entry as one of shm.writer[{o}]'s: one owner only"),
                });
            }
            out[r].writer = Some(k);
        }
    }
    for (i, s) in cfg.safe.iter().enumerate() {
        let key = format!("shm.safe[{i}]");
        let (r, e) = resolve(layout, &rows, &format!("{key}.entry"), &s.entry)?;
        if let Some(a) = axis_of(e) {
            return Err(axis_err(format!("{key}.entry"), &s.entry, e, a));
        }
        if e.subindex == 0 && (e.index == TARGET_POSITION || ZERO_TARGETS.contains(&e.index)) {
            return Err(ShmError::Entry {
                key: format!("{key}.entry"),
                entry: s.entry.clone(),
                why: format!(
                    "{} ({:#06x}) is a drive target: when its writer stops it holds the actual \
                     position (0x607A) or goes to 0 (velocity, torque), never a fixed value",
                    e.name, e.index
                ),
            });
        }
        out[r].safe = entry_ref(e, r)
            .encode(s.value.value())
            .map_err(|err| ShmError::Entry {
                key: format!("{key}.value"),
                entry: s.entry.clone(),
                why: match err {
                    rtcat_shm::Error::Value { why, .. } => why,
                    other => other.to_string(),
                },
            })?;
    }
    Ok(out)
}

/// The wrapper: publishes `inner`'s cycles, applies the client writers' outputs after it.
pub struct SharedImage {
    inner: Box<dyn Application>,
    cfg: ShmConfig,
    name: String,
    period_ns: u64,
    publisher: Option<Publisher>,
    /// Where the control socket finds the image published now.
    hub: Hub,
    /// The layout JSON with generation 0 (what decides whether a re-initialisation changed it).
    layout_key: String,
    generation: u32,
    /// The axes whose drives' command entries are the master's.
    axes: Vec<AxisConfig>,
    /// The truncation of the object was reported (it is replaced at the next bring-up).
    truncation_seen: bool,
}

impl SharedImage {
    /// Wrap `inner`; the image labelled `cfg.name` is created at the first bring-up and handed
    /// out by the control socket through `hub`.
    pub fn new(
        inner: Box<dyn Application>,
        cfg: &ShmConfig,
        hub: Hub,
        period_ns: u64,
    ) -> Result<SharedImage, rtcat_shm::Error> {
        let name = cfg.name.clone().unwrap_or_default();
        rtcat_shm::valid_name(&name)?;
        // A generation a restarted master does not repeat: the wall clock's milliseconds (clients
        // compare it for equality only).
        let generation = (crate::clock::unix_ns() / 1_000_000) as u32;
        Ok(SharedImage {
            inner,
            cfg: cfg.clone(),
            name,
            period_ns,
            publisher: None,
            hub,
            layout_key: String::new(),
            generation,
            axes: Vec::new(),
            truncation_seen: false,
        })
    }

    /// The `[[axis]]` entries the wrapped application drives: their drives' controlword, mode
    /// and targets are never a client writer's (a bring-up error when declared, refused when
    /// claimed, never merged whatever a client stores in the object).
    pub fn with_axes(mut self, axes: &[AxisConfig]) -> SharedImage {
        self.axes = axes.to_vec();
        self
    }

    /// The generation of the object published now (None before the first bring-up).
    pub fn generation(&self) -> Option<u32> {
        self.publisher.as_ref().map(Publisher::generation)
    }

    fn setup(&mut self, layout: &Layout) -> Result<(), ShmError> {
        let mut l = layout.clone();
        l.generation = 0;
        let key = serde_json::to_string(&l).expect("a layout serializes");
        if let Some(p) = &self.publisher
            && key == self.layout_key
            && !p.truncated()
        {
            p.set_state(State::Live);
            return Ok(());
        }
        let rows = plan(&self.cfg, layout, &self.axes)?;
        self.generation = match self.generation.wrapping_add(1) {
            0 => 1,
            g => g,
        };
        l.generation = self.generation;
        let json = serde_json::to_string(&l).expect("a layout serializes");
        if let Some(old) = self.publisher.take() {
            self.hub.set(None);
            old.replace()?;
        }
        let writers: Vec<DeclaredWriter> = self
            .cfg
            .writer
            .iter()
            .map(|w| DeclaredWriter {
                name: w.name.clone(),
            })
            .collect();
        let pc = PublisherConfig {
            name: &self.name,
            generation: self.generation,
            period_ns: self.period_ns,
            subdevices: layout.subdevices.len() as u32,
            input_bytes: layout.input_bytes,
            output_bytes: layout.output_bytes,
            layout_json: json.as_bytes(),
            entries: &rows,
            writers: &writers,
            writer_timeout_cycles: self.cfg.writer_timeout_cycles,
        };
        let p = Publisher::create(&pc)?;
        self.hub.set(Some(p.broker()));
        self.publisher = Some(p);
        self.layout_key = key;
        Ok(())
    }
}

// A layer: every hook runs the wrapped application first; the image adds to configure, cycle,
// on_recovery and shutdown, and the others (on_subdevice, any added later) reach it unchanged.
impl Layer for SharedImage {
    fn inner(&mut self) -> &mut dyn Application {
        self.inner.as_mut()
    }

    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.inner.configure(setup)?;
        self.setup(setup.layout())?;
        Ok(())
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        self.inner.cycle(cx);
        let Some(p) = self.publisher.as_mut() else {
            return;
        };
        // One atomic load: a client shrank the object, the SIGBUS was absorbed (rtcat-shm).
        if p.truncated() != self.truncation_seen {
            self.truncation_seen = p.truncated();
            if self.truncation_seen {
                cx.raise(EventKind::ShmTruncated);
            }
        }
        let cycle = cx.status.cycle;
        let (inputs, outputs) = cx.image.inputs_outputs_mut();
        let events = p.take_writes_held(outputs, inputs, cycle);
        for e in events.iter() {
            cx.raise(EventKind::ShmWriter {
                slot: e.slot,
                pid: e.pid,
                name: e.name,
                change: match e.kind {
                    WriterEventKind::Attached => ShmWriterChange::Attached,
                    WriterEventKind::Stale => ShmWriterChange::Stale,
                    WriterEventKind::Resumed => ShmWriterChange::Resumed,
                    WriterEventKind::Detached => ShmWriterChange::Detached,
                },
            });
        }
        let st = cx.status;
        p.publish(
            &CycleInfo {
                cycle,
                deadline_ns: st.deadline_ns,
                wake_ns: st.wake_ns,
                unix_ns: crate::clock::unix_ns(),
                wkc: st.wkc,
                expected_wkc: st.expected_wkc,
                frames_lost: st.frames_lost,
            },
            cx.image.inputs(),
            cx.image.outputs(),
            st.subdevices.iter().map(|s| s.data_valid),
        );
    }

    fn on_recovery(&mut self, recovery: &Recovery) {
        self.inner.on_recovery(recovery);
        if let Some(p) = &self.publisher {
            p.set_state(State::Recovering);
        }
    }

    fn shutdown(&mut self, reason: &ShutdownReason) {
        self.inner.shutdown(reason);
        if let Some(p) = &self.publisher {
            p.set_state(State::Stopped);
        }
        self.hub.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::{RecoveryCause, RegisterAccess};
    use crate::layout::{Identity, MappingSource, PdoSource, SubdeviceSource};

    struct NoRegisters;
    impl RegisterAccess for NoRegisters {
        fn read(&mut self, _: u16, _: u16, _: &mut [u8]) -> crate::Result<()> {
            Ok(())
        }
        fn write(&mut self, _: u16, _: u16, _: &[u8]) -> crate::Result<()> {
            Ok(())
        }
    }

    fn layout(generation: u32, extra: bool) -> Layout {
        let mut outputs = vec![
            (0x7000, 1, 1, Some("Out bit".into()), 0x01),
            (0x7000, 2, 16, Some("Unaligned".into()), 0x03),
            (0x0000, 0, 7, None, 0),
        ];
        if extra {
            outputs.push((0x7001, 1, 8, Some("Extra".into()), 0x05));
        }
        let dev = SubdeviceSource {
            address: 0x1001,
            alias: 0,
            name: "Mixed".into(),
            identity: Identity::default(),
            coe: false,
            mapping: MappingSource::Sii,
            pdos: vec![
                PdoSource {
                    index: 0x1a00,
                    name: Some("Inputs".into()),
                    sync_manager: 3,
                    direction: Direction::Inputs,
                    entries: vec![(0x6000, 1, 16, Some("Word".into()), 0x06)],
                },
                PdoSource {
                    index: 0x1600,
                    name: Some("Outputs".into()),
                    sync_manager: 2,
                    direction: Direction::Outputs,
                    entries: outputs,
                },
            ],
        };
        Layout::build(generation, &[dev]).unwrap()
    }

    /// `configure` as the master calls it (the image as an [`Application`]).
    fn configure(app: &mut SharedImage, l: &Layout) -> Result<(), AppError> {
        Application::configure(
            app,
            &mut Setup {
                layout: l,
                registers: &mut NoRegisters,
            },
        )
    }

    fn cfg(name: &str) -> ShmConfig {
        ShmConfig {
            name: Some(name.into()),
            writer: vec![ShmWriterConfig {
                name: "plc".into(),
                entries: vec!["0:Unaligned".into()],
            }],
            safe: vec![ShmSafeValue {
                entry: "0:Outputs.Unaligned".into(),
                value: SafeValue::Int(-5),
            }],
            ..ShmConfig::default()
        }
    }

    #[test]
    fn kept_on_the_same_layout_replaced_on_another() {
        let name = format!("rtcat-master-test-{}", std::process::id());
        let sock = std::env::temp_dir().join(format!("{name}.sock"));
        let hub = Hub::new();
        let _serve = rtcat_shm::testkit::Serve::start(&sock, hub.clone()).unwrap();
        let mut app = SharedImage::new(
            Box::new(crate::ZeroOutputs),
            &cfg(&name),
            hub.clone(),
            1_000_000,
        )
        .unwrap();
        configure(&mut app, &layout(1, false)).unwrap();
        let g1 = app.generation().unwrap();
        let c = rtcat_shm::Client::attach(&sock).unwrap();
        assert_eq!(c.generation(), g1);
        assert!(c.layout_json().contains(&format!("\"generation\":{g1}")));
        // The declared entry is pre-owned, its safe value encoded as INTEGER16.
        let e = c.entry("0:Outputs.Unaligned").unwrap();
        assert_eq!(e.encode(Value::Signed(-5)).unwrap(), 0xfffb);
        Application::on_recovery(
            &mut app,
            &Recovery {
                bad_cycles: 3,
                cause: RecoveryCause::FramesLost,
                cycle: 10,
            },
        );
        assert_eq!(c.state(), State::Recovering);
        // The same segment again (another bring-up count): the same object, LIVE again.
        configure(&mut app, &layout(2, false)).unwrap();
        assert_eq!(app.generation(), Some(g1));
        assert_eq!(c.state(), State::Live);
        // Another layout: REPLACED, a new object with another generation.
        configure(&mut app, &layout(3, true)).unwrap();
        let g2 = app.generation().unwrap();
        assert_ne!(g1, g2);
        assert_eq!(c.state(), State::Replaced);
        let c2 = rtcat_shm::Client::attach(&sock).unwrap();
        assert_eq!(c2.generation(), g2);
        assert!(c2.entry("0:Outputs.Extra").is_ok());
        Application::shutdown(&mut app, &ShutdownReason::Duration);
        assert_eq!(c2.state(), State::Stopped);
        assert!(hub.get().is_none(), "nothing handed out after the run");
    }

    #[test]
    fn unresolvable_entries_fail_the_bring_up_naming_the_key() {
        let name = format!("rtcat-master-test-bad-{}", std::process::id());
        let mut c = cfg(&name);
        c.writer[0].entries = vec!["0:Word".into()];
        let mut app =
            SharedImage::new(Box::new(crate::ZeroOutputs), &c, Hub::new(), 1_000_000).unwrap();
        let e = configure(&mut app, &layout(1, false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shm.writer[0].entries[0] = \"0:Word\"")
                && e.contains("0:Outputs.Unaligned"),
            "{e}"
        );
        let mut c = cfg(&name);
        c.safe[0].value = SafeValue::Int(70_000);
        let mut app =
            SharedImage::new(Box::new(crate::ZeroOutputs), &c, Hub::new(), 1_000_000).unwrap();
        let e = configure(&mut app, &layout(1, false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shm.safe[0].value") && e.contains("-32768..=32767"),
            "{e}"
        );
    }

    /// Every hook the image does not add to reaches the wrapped application (issue 27: the
    /// hand-written forwarding had no `on_subdevice`, so an application under a shared image
    /// never heard of a subdevice's own recovery).
    #[test]
    fn hooks_the_image_does_not_add_to_reach_the_wrapped_application() {
        use crate::application::{SubdeviceChange, SubdeviceEvent};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU32, Ordering};
        struct Inner(Arc<AtomicU32>);
        impl Application for Inner {
            fn cycle(&mut self, _: &mut Cycle<'_>) {}
            fn on_subdevice(&mut self, _: &SubdeviceEvent) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let seen = Arc::new(AtomicU32::new(0));
        let mut image = SharedImage::new(
            Box::new(Inner(seen.clone())),
            &cfg("rtcat-master-test-hooks"),
            Hub::new(),
            1_000_000,
        )
        .unwrap();
        let app: &mut dyn Application = &mut image;
        app.on_subdevice(&SubdeviceEvent {
            position: 1,
            change: SubdeviceChange::Lost { state: 0x02 },
            cycle: 5,
        });
        assert_eq!(seen.load(Ordering::Relaxed), 1);
    }

    /// Two CSP drives at positions 0 and 1 (controlword, mode, target position, digital
    /// outputs; statusword, position actual).
    fn drives() -> Layout {
        let dev = |address| SubdeviceSource {
            address,
            alias: 0,
            name: "Drive".into(),
            identity: Identity::default(),
            coe: true,
            mapping: MappingSource::Sii,
            pdos: vec![
                PdoSource {
                    index: 0x1600,
                    name: Some("RxPDO".into()),
                    sync_manager: 2,
                    direction: Direction::Outputs,
                    entries: vec![
                        (0x6040, 0, 16, Some("Controlword".into()), 0x06),
                        (0x6060, 0, 8, Some("Mode".into()), 0x02),
                        (0x607a, 0, 32, Some("Target position".into()), 0x04),
                        (0x60fe, 1, 32, Some("Digital outputs".into()), 0x07),
                    ],
                },
                PdoSource {
                    index: 0x1a00,
                    name: Some("TxPDO".into()),
                    sync_manager: 3,
                    direction: Direction::Inputs,
                    entries: vec![
                        (0x6041, 0, 16, Some("Statusword".into()), 0x06),
                        (0x6064, 0, 32, Some("Position actual".into()), 0x04),
                    ],
                },
            ],
        };
        Layout::build(1, &[dev(0x1001), dev(0x1002)]).unwrap()
    }

    fn axis(name: &str, position: u16) -> AxisConfig {
        toml::from_str(&format!(
            "name = \"{name}\"\nposition = {position}\ncounts_per_unit = 1.0\n\
             max_velocity = 1.0\nmax_acceleration = 1.0\n"
        ))
        .unwrap()
    }

    fn writer(entries: &[&str]) -> ShmConfig {
        ShmConfig {
            name: Some("x".into()),
            writer: vec![ShmWriterConfig {
                name: "plc".into(),
                entries: entries.iter().map(|e| e.to_string()).collect(),
            }],
            ..ShmConfig::default()
        }
    }

    #[test]
    fn an_axis_drives_its_command_entries_never_a_writer() {
        let l = drives();
        let axes = [axis("x", 0)];
        for (i, e) in ["0:Controlword", "0:Mode", "0:Target position"]
            .iter()
            .enumerate()
        {
            let err = plan(&writer(&["0:Digital outputs", e]), &l, &axes)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("shm.writer[0].entries[1] = {e:?}"))
                    && err.contains("axis \"x\" (axis[0])"),
                "{i}: {err}"
            );
        }
        // The drive's other outputs, and the drive no axis is bound to, stay claimable.
        let rows = plan(
            &writer(&["0:Digital outputs", "1:Controlword", "1:Target position"]),
            &l,
            &axes,
        )
        .unwrap();
        let master: Vec<bool> = rows.iter().map(|r| r.master).collect();
        assert_eq!(
            master,
            [true, true, true, false, false, false, false, false],
            "axis x's controlword, mode, target (rows 0..3) are the master's"
        );
        // Bound by identity instead of position: the same.
        let mut by_id = axis("x", 0);
        by_id.position = None;
        by_id.vendor_id = Some(0);
        by_id.product_id = Some(0);
        assert!(plan(&writer(&["0:Controlword"]), &l, &[by_id]).is_err());
        // A safe value for an axis' entry is refused too.
        let mut c = writer(&["0:Digital outputs"]);
        c.safe = vec![ShmSafeValue {
            entry: "0:Mode".into(),
            value: SafeValue::Int(8),
        }];
        let err = plan(&c, &l, &axes).unwrap_err().to_string();
        assert!(
            err.contains("shm.safe[0].entry") && err.contains("axis \"x\""),
            "{err}"
        );
    }

    #[test]
    fn a_position_target_holds_the_actual_position_never_a_fixed_value() {
        let l = drives();
        let rows = plan(&writer(&["1:Target position"]), &l, &[]).unwrap();
        let actual = |p: u16| {
            l.entries
                .iter()
                .find(|e| e.position == p && e.index == 0x6064)
                .unwrap()
                .bit_offset
        };
        assert_eq!(rows[2].hold, Hold::Input(actual(0)));
        assert_eq!(rows[6].hold, Hold::Input(actual(1)));
        assert!(rows.iter().filter(|r| r.hold != Hold::None).count() == 2);
        let mut c = writer(&["1:Target position"]);
        c.safe = vec![ShmSafeValue {
            entry: "1:Target position".into(),
            value: SafeValue::Int(0),
        }];
        let err = plan(&c, &l, &[]).unwrap_err().to_string();
        assert!(
            err.contains("shm.safe[0].entry = \"1:Target position\"")
                && err.contains("holds the actual"),
            "{err}"
        );
    }
}
