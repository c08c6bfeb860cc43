//! The application API: what the machine's logic implements to run in the master's cycle.
//!
//! - [`Application::configure`] — at every (re)initialisation, in PRE-OP, on the master's
//!   setup thread: the subdevices, the layout of the process data, register access. Resolve the
//!   entries the cycle needs here ([`Setup::input`], [`Setup::output`]).
//! - [`Application::cycle`] — once per cycle on the real-time thread, with the process image and
//!   the cycle's status, also on bad cycles: the application decides what its outputs are
//!   then (hold, zero, quick stop). What it writes goes out with the next exchange. It must not
//!   allocate, lock, block or print.
//! - [`Application::on_recovery`] and [`Application::shutdown`] — notifications with the reason,
//!   off the real-time thread.

use crate::image::{Input, Output, PdoValue, ProcessImage};
use crate::layout::{Layout, LayoutError, Subdevice};

/// An error an application returns from `configure`: the master refuses the segment and (in
/// service mode) retries the bring-up after the back-off.
pub type AppError = Box<dyn std::error::Error + Send + Sync>;

/// The AL state code of a subdevice as it reports it (ETG.1000.6 Table 9).
pub mod al_state {
    /// No state read.
    pub const NONE: u8 = 0x00;
    /// INIT.
    pub const INIT: u8 = 0x01;
    /// PRE-OP.
    pub const PRE_OP: u8 = 0x02;
    /// BOOT.
    pub const BOOT: u8 = 0x03;
    /// SAFE-OP.
    pub const SAFE_OP: u8 = 0x04;
    /// OP.
    pub const OP: u8 = 0x08;
    /// The error indicator bit of the AL status (0x0130 bit 4), set beside the state.
    pub const ERROR: u8 = 0x10;

    /// The state of a code without the error indicator (`0x14`, SAFE-OP + error: SAFE-OP).
    pub const fn state(code: u8) -> u8 {
        code & 0x0f
    }
}

/// Per-subdevice status of one cycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubdeviceStatus {
    /// AL state code as read this cycle ([`al_state`]); unchanged when the frame was lost.
    pub al_state: u8,
    /// Its inputs in the image are this cycle's and its outputs were written by the segment:
    /// the frame came back, the subdevice is in OP, and the working counter is the expected one
    /// or short by exactly the shares of the subdevices not in OP.
    pub data_valid: bool,
}

impl SubdeviceStatus {
    /// In OP.
    pub fn in_op(&self) -> bool {
        self.al_state == al_state::OP
    }
}

/// The status of one cycle, as the application sees it.
#[derive(Debug, Clone, Copy)]
pub struct CycleStatus<'a> {
    /// Cycle number since the start of the run (continues across recoveries).
    pub cycle: u64,
    /// The absolute deadline this cycle woke for (CLOCK_MONOTONIC, ns).
    pub deadline_ns: u64,
    /// When the thread woke (CLOCK_MONOTONIC, ns).
    pub wake_ns: u64,
    /// Working counter the segment should return.
    pub expected_wkc: u16,
    /// Working counter returned (0 when the frame was lost).
    pub wkc: u16,
    /// No response within the response timeout: inputs are the previous cycle's.
    pub frames_lost: bool,
    /// Per subdevice, in position order.
    pub subdevices: &'a [SubdeviceStatus],
}

impl CycleStatus<'_> {
    /// Everything came back as expected: frame, working counter, every subdevice in OP.
    pub fn is_good(&self) -> bool {
        !self.frames_lost
            && self.wkc == self.expected_wkc
            && self.subdevices.iter().all(SubdeviceStatus::in_op)
    }
}

/// What the application gets every cycle.
pub struct Cycle<'a> {
    /// The cycle's status.
    pub status: &'a CycleStatus<'a>,
    /// The process image: this cycle's inputs, the outputs to send.
    pub image: &'a mut ProcessImage,
    pub(crate) data_errors: &'a mut u32,
    pub(crate) first_error: &'a mut Option<u16>,
    pub(crate) events: &'a mut rtrb::Producer<crate::stats::Event>,
}

impl Cycle<'_> {
    /// Read an input.
    #[inline]
    pub fn get<T: PdoValue>(&mut self, e: &Input<T>) -> T {
        self.image.get(e)
    }

    /// Write an output.
    #[inline]
    pub fn set<T: PdoValue>(&mut self, e: &Output<T>, v: T) {
        self.image.set(e, v)
    }

    /// Report that the inputs of the subdevice at `position` are not what the application
    /// expects: counted as a data error (`data_errors` in the results) with an event.
    #[inline]
    pub fn data_error(&mut self, position: u16) {
        *self.data_errors += 1;
        self.first_error.get_or_insert(position);
    }

    /// Raise a health event from the application (events.log, the event stream), stamped with
    /// this cycle. No allocation; when the ring is full the event is dropped.
    #[inline]
    pub fn raise(&mut self, kind: crate::stats::EventKind) {
        let _ = self.events.push(crate::stats::Event {
            unix_ns: crate::clock::unix_ns(),
            cycle: self.status.cycle,
            kind,
        });
    }
}

/// What `configure` can see and do: the segment in PRE-OP.
pub struct Setup<'a> {
    pub(crate) layout: &'a Layout,
    pub(crate) registers: &'a mut dyn RegisterAccess,
}

/// Register access to the subdevices (configured station addressing).
pub trait RegisterAccess {
    /// Read `buf.len()` bytes at ESC register `register` of the subdevice at `position`.
    fn read(&mut self, position: u16, register: u16, buf: &mut [u8]) -> crate::Result<()>;
    /// Write `data` at ESC register `register` of the subdevice at `position`.
    fn write(&mut self, position: u16, register: u16, data: &[u8]) -> crate::Result<()>;
    /// Read (SDO upload) the object `index:sub` of the subdevice at `position` through its CoE
    /// mailbox into `buf`; the bytes read (at most `buf.len()`). Without mailbox access (a test
    /// double) it fails.
    fn read_sdo(
        &mut self,
        position: u16,
        index: u16,
        sub: u8,
        buf: &mut [u8],
    ) -> crate::Result<usize> {
        let _ = buf;
        Err(crate::Error::Application(format!(
            "{index:#06x}:{sub:02x} of position {position}: no mailbox access here"
        )))
    }
}

impl Setup<'_> {
    /// The subdevices, in position order.
    pub fn subdevices(&self) -> &[Subdevice] {
        &self.layout.subdevices
    }

    /// The layout of the process data in effect.
    pub fn layout(&self) -> &Layout {
        self.layout
    }

    /// The input entry called `name` (or `PDO.entry`, as `Channel 1.Input`), unique in the
    /// segment, as a `T`.
    pub fn input<T: PdoValue>(&self, name: &str) -> Result<Input<T>, LayoutError> {
        self.layout.input(name)
    }

    /// The output entry called `name` (or `PDO.entry`), unique in the segment, as a `T`.
    pub fn output<T: PdoValue>(&self, name: &str) -> Result<Output<T>, LayoutError> {
        self.layout.output(name)
    }

    /// The input entry called `name` (or `PDO.entry`) of the subdevice at `position`.
    pub fn input_of<T: PdoValue>(
        &self,
        position: u16,
        name: &str,
    ) -> Result<Input<T>, LayoutError> {
        self.layout.input_of(Some(position), name)
    }

    /// The output entry called `name` (or `PDO.entry`) of the subdevice at `position`.
    pub fn output_of<T: PdoValue>(
        &self,
        position: u16,
        name: &str,
    ) -> Result<Output<T>, LayoutError> {
        self.layout.output_of(Some(position), name)
    }

    /// The input entry `index:subindex` of the subdevice at `position`.
    pub fn input_at<T: PdoValue>(
        &self,
        position: u16,
        index: u16,
        subindex: u8,
    ) -> Result<Input<T>, LayoutError> {
        self.layout.input_at(position, index, subindex)
    }

    /// The output entry `index:subindex` of the subdevice at `position`.
    pub fn output_at<T: PdoValue>(
        &self,
        position: u16,
        index: u16,
        subindex: u8,
    ) -> Result<Output<T>, LayoutError> {
        self.layout.output_at(position, index, subindex)
    }

    /// Read ESC registers of the subdevice at `position` (e.g. 0x0130 AL status).
    pub fn read_register(
        &mut self,
        position: u16,
        register: u16,
        buf: &mut [u8],
    ) -> crate::Result<()> {
        self.registers.read(position, register, buf)
    }

    /// Read the object `index:sub` of the subdevice at `position` (SDO upload through its CoE
    /// mailbox; the segment is in PRE-OP) into `buf`: the bytes read.
    pub fn read_sdo(
        &mut self,
        position: u16,
        index: u16,
        sub: u8,
        buf: &mut [u8],
    ) -> crate::Result<usize> {
        self.registers.read_sdo(position, index, sub, buf)
    }

    /// Write ESC registers of the subdevice at `position`.
    pub fn write_register(
        &mut self,
        position: u16,
        register: u16,
        data: &[u8],
    ) -> crate::Result<()> {
        self.registers.write(position, register, data)
    }
}

/// Why the master re-initialises the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryCause {
    /// Frames did not come back.
    FramesLost,
    /// The working counter was wrong.
    WkcMismatch {
        /// Last value received.
        got: u16,
        /// Expected value.
        expected: u16,
    },
    /// A subdevice left OP.
    NotOp {
        /// Its position.
        position: u16,
        /// Its AL state code.
        state: u8,
    },
}

/// Why a subdevice was out of OP, as its own recovery found it (`[health] recovery =
/// "subdevice"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubdeviceCause {
    /// It reported an AL error: the AL status code (0x0134, ETG.1000.6 Table 11).
    AlError(u16),
    /// It had lost its station address: it was powered off and on (or replaced).
    PowerCycled,
    /// It left OP without an error (an AL state request of its own, a sync-manager watchdog
    /// already acknowledged).
    LeftOp,
    /// The master took it out for a firmware update through the control socket (parked: its
    /// recovery left it alone until the update handed it back).
    FirmwareUpdate,
    /// A member of an optional `[[group]]` that was away from the line (its cable pulled or its
    /// power off: it did not answer) and answered again with its identity.
    Reconnected,
}

impl std::fmt::Display for SubdeviceCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubdeviceCause::AlError(code) => write!(
                f,
                "al_error code={code:#06x} text=\"{}\"",
                crate::diag::al_status_text(*code)
            ),
            SubdeviceCause::PowerCycled => f.write_str("power_cycled"),
            SubdeviceCause::LeftOp => f.write_str("left_op"),
            SubdeviceCause::FirmwareUpdate => f.write_str("firmware_update"),
            SubdeviceCause::Reconnected => f.write_str("reconnected"),
        }
    }
}

/// What happened to one subdevice while the others cycled on (`[health] recovery =
/// "subdevice"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubdeviceChange {
    /// It was seen out of OP (AL state code as the cycle read it; 0: it did not answer): its
    /// data is invalid and its own recovery starts.
    Lost {
        /// AL state code.
        state: u8,
    },
    /// It is back in OP, its data valid again.
    Back {
        /// Why it was out.
        cause: SubdeviceCause,
        /// From the cycle it was seen lost to the cycle it was seen back, ns.
        outage_ns: u64,
        /// Recovery attempts it took.
        attempts: u32,
    },
    /// One attempt to bring it back failed (retried after `[health] recovery_backoff_ms`).
    Failed {
        /// Failed attempts in a row.
        attempt: u32,
    },
    /// A device with another identity answers at its position: it is not driven (retried
    /// until the configured device is back).
    Refused {
        /// Vendor, product, revision found (SII).
        found: (u32, u32, u32),
        /// What the segment was brought up with.
        expected: (u32, u32, u32),
    },
    /// Its recovery failed `[health] subdevice_attempts` times in a row: the whole segment is
    /// re-initialised.
    GaveUp,
    /// The master took it out on purpose (`cause`: a firmware update): its data is invalid and
    /// its recovery leaves it alone until it is handed back (then [`SubdeviceChange::Back`]
    /// with the same cause).
    Parked {
        /// Why.
        cause: SubdeviceCause,
    },
    /// A member of an optional `[[group]]` that does not answer (unplugged, powered off): its
    /// data stays invalid, the rest runs on, and it is looked for every `probe_interval_ms`
    /// until it answers (then [`SubdeviceChange::Back`] with cause
    /// [`SubdeviceCause::Reconnected`]).
    Absent,
}

/// A per-subdevice notification ([`Application::on_subdevice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubdeviceEvent {
    /// Its position.
    pub position: u16,
    /// What happened.
    pub change: SubdeviceChange,
    /// The cycle that saw it.
    pub cycle: u64,
}

/// A recovery notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Consecutive bad cycles that triggered it.
    pub bad_cycles: u32,
    /// The last bad cycle's cause.
    pub cause: RecoveryCause,
    /// Cycle number when it started.
    pub cycle: u64,
}

/// Why the run ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShutdownReason {
    /// A stop was requested (`signal`: the signal that requested it, if one did).
    Stopped {
        /// The signal number.
        signal: Option<i32>,
    },
    /// The requested duration elapsed.
    Duration,
    /// The segment could not be brought back.
    Fatal(String),
}

/// The machine's logic in the cycle. Only [`Application::cycle`] is required.
pub trait Application: Send {
    /// The segment was (re)initialised and is in PRE-OP: look at it, resolve the entries the
    /// cycle needs, keep what you need (allocate here, never in `cycle`). An error refuses the
    /// segment: the bring-up fails with it.
    fn configure(&mut self, _setup: &mut Setup<'_>) -> Result<(), AppError> {
        Ok(())
    }

    /// One cycle: read inputs, write outputs. Called on bad cycles too (see
    /// [`CycleStatus::is_good`] and [`SubdeviceStatus::data_valid`]).
    fn cycle(&mut self, cycle: &mut Cycle<'_>);

    /// The master starts re-initialising the segment (the next call is `configure`).
    fn on_recovery(&mut self, _recovery: &Recovery) {}

    /// One subdevice left OP, came back, failed to come back or was refused while the others
    /// cycled on (`[health] recovery = "subdevice"`); called from the cyclic thread, before
    /// `cycle` of the cycle that saw it.
    fn on_subdevice(&mut self, _event: &SubdeviceEvent) {}

    /// The run ends: after this the master zeroes every output, then SAFE-OP, INIT.
    fn shutdown(&mut self, _reason: &ShutdownReason) {}
}

/// An application wrapped around another one: a layer (the shared-memory image, the control
/// socket's layout hook, the floor ping). Every hook has a default that hands on to
/// [`Layer::inner`], so a layer overrides only what it adds (calling the inner application
/// itself where it does), and a hook added to [`Application`] later reaches every inner
/// application without each layer forwarding it by hand. Every `Layer` is an `Application`.
pub trait Layer: Send {
    /// The application this layer wraps.
    fn inner(&mut self) -> &mut dyn Application;

    /// [`Application::configure`]; by default the inner application's.
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.inner().configure(setup)
    }

    /// [`Application::cycle`]; by default the inner application's.
    fn cycle(&mut self, cycle: &mut Cycle<'_>) {
        self.inner().cycle(cycle)
    }

    /// [`Application::on_recovery`]; by default the inner application's.
    fn on_recovery(&mut self, recovery: &Recovery) {
        self.inner().on_recovery(recovery)
    }

    /// [`Application::on_subdevice`]; by default the inner application's.
    fn on_subdevice(&mut self, event: &SubdeviceEvent) {
        self.inner().on_subdevice(event)
    }

    /// [`Application::shutdown`]; by default the inner application's.
    fn shutdown(&mut self, reason: &ShutdownReason) {
        self.inner().shutdown(reason)
    }
}

impl<L: Layer> Application for L {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        Layer::configure(self, setup)
    }

    fn cycle(&mut self, cycle: &mut Cycle<'_>) {
        Layer::cycle(self, cycle)
    }

    fn on_recovery(&mut self, recovery: &Recovery) {
        Layer::on_recovery(self, recovery)
    }

    fn on_subdevice(&mut self, event: &SubdeviceEvent) {
        Layer::on_subdevice(self, event)
    }

    fn shutdown(&mut self, reason: &ShutdownReason) {
        Layer::shutdown(self, reason)
    }
}

/// The reference behaviour: every output held at zero, inputs ignored.
#[derive(Debug, Default)]
pub struct ZeroOutputs;

impl Application for ZeroOutputs {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        cx.image.outputs_mut().fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the hooks that reach it.
    #[derive(Default)]
    struct Inner {
        configured: u32,
        cycles: u32,
        recoveries: u32,
        shutdowns: u32,
    }

    impl Application for Inner {
        fn configure(&mut self, _setup: &mut Setup<'_>) -> Result<(), AppError> {
            self.configured += 1;
            Ok(())
        }
        fn cycle(&mut self, _cycle: &mut Cycle<'_>) {
            self.cycles += 1;
        }
        fn on_recovery(&mut self, _recovery: &Recovery) {
            self.recoveries += 1;
        }
        fn shutdown(&mut self, _reason: &ShutdownReason) {
            self.shutdowns += 1;
        }
    }

    /// A layer that adds to `cycle` only.
    struct Counting {
        inner: Inner,
        own: u32,
    }

    impl Layer for Counting {
        fn inner(&mut self) -> &mut dyn Application {
            &mut self.inner
        }
        fn cycle(&mut self, cycle: &mut Cycle<'_>) {
            self.own += 1;
            self.inner.cycle(cycle);
        }
    }

    struct NoRegisters;
    impl RegisterAccess for NoRegisters {
        fn read(&mut self, _: u16, _: u16, _: &mut [u8]) -> crate::Result<()> {
            Ok(())
        }
        fn write(&mut self, _: u16, _: u16, _: &[u8]) -> crate::Result<()> {
            Ok(())
        }
    }

    /// Every hook a layer does not override reaches the application it wraps (issue 27: a hook
    /// one hand-written wrapper forgot fell back to the default silently).
    #[test]
    fn a_layer_hands_on_every_hook_it_does_not_override() {
        let mut layer = Counting {
            inner: Inner::default(),
            own: 0,
        };
        let app: &mut dyn Application = &mut layer;
        let layout = Layout::default();
        app.configure(&mut Setup {
            layout: &layout,
            registers: &mut NoRegisters,
        })
        .unwrap();
        let mut image = ProcessImage::for_layout(&layout);
        let (mut events, _rx) = rtrb::RingBuffer::new(4);
        let status = CycleStatus {
            cycle: 0,
            deadline_ns: 0,
            wake_ns: 0,
            expected_wkc: 0,
            wkc: 0,
            frames_lost: false,
            subdevices: &[],
        };
        let (mut errors, mut first) = (0, None);
        app.cycle(&mut Cycle {
            status: &status,
            image: &mut image,
            data_errors: &mut errors,
            first_error: &mut first,
            events: &mut events,
        });
        app.on_recovery(&Recovery {
            bad_cycles: 1,
            cause: RecoveryCause::FramesLost,
            cycle: 0,
        });
        app.shutdown(&ShutdownReason::Duration);
        let i = &layer.inner;
        assert_eq!(
            (i.configured, i.cycles, i.recoveries, i.shutdowns, layer.own),
            (1, 1, 1, 1, 1)
        );
    }
}
