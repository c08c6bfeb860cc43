//! # rtcat-master: a real-time EtherCAT master as a library
//!
//! The master of [rtcat](https://github.com/rtcat/rtcat) on [ethercrab]: it brings a segment to
//! OP, runs the cyclic exchange on absolute deadlines in a pinned `SCHED_FIFO` thread with locked
//! memory, measures every cycle (wake lateness, execution time, round trip, missed deadlines,
//! working counter, lost frames), recovers from faults by re-initialising the segment without
//! restarting, and shuts down cleanly (outputs zero, SAFE-OP, INIT). Your code is the
//! [`Application`]: it sees the segment at every bring-up and runs in the cycle.
//!
//! ```no_run
//! use rtcat_master::{Application, Config, Cycle, Input, Output, RunSpec, Setup, Stop, Target};
//!
//! #[derive(Default)]
//! struct Conveyor {
//!     io: Option<(Input<bool>, Output<bool>)>,
//! }
//!
//! impl Application for Conveyor {
//!     fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), rtcat_master::AppError> {
//!         // Resolved once per bring-up; the cycle then does no lookup.
//!         self.io = Some((setup.input("Input 1")?, setup.output("Output 1")?));
//!         Ok(())
//!     }
//!
//!     fn cycle(&mut self, cx: &mut Cycle<'_>) {
//!         let Some((sensor, motor)) = self.io else { return };
//!         if cx.status.is_good() {
//!             let on = cx.get(&sensor);
//!             cx.set(&motor, on);
//!         } else {
//!             cx.set(&motor, false); // a bad cycle stops the conveyor
//!         }
//!     }
//! }
//!
//! let spec = RunSpec::new(Config::default(), Target::Iface("ecat0".into()), Stop::new());
//! let outcome = rtcat_master::run_simple(spec, &mut Conveyor::default()).unwrap();
//! println!("{} cycles, {} missed deadlines", outcome.rec.cycles, outcome.rec.missed_deadlines);
//! ```
//!
//! ## Data flow
//! [`Config`] → [`run`] (bring-up, recovery, then the real-time loop) → [`stats`] ([`Recorder`]:
//! histograms, counters; [`Event`]s) → the caller (results files, status lines, service
//! notifications live in the `rtcat` binary). The library prints nothing: failures during
//! bring-up go to the [`log`] crate and to [`EventKind`] events.
//!
//! ## Process data
//! At every bring-up, in PRE-OP, the master reads the mapping each subdevice will run with (CoE
//! 0x1C12/0x1C13 and the PDOs they list, or the SII PDO categories) into a [`Layout`]: every
//! entry's subdevice, PDO, index:subindex, name, bit offset, bit length and data type. After OP
//! the image ethercrab configured is checked against it. [`Setup::input`] / [`Setup::output`]
//! resolve entries to typed accessors ([`Input`], [`Output`]: bool, u8…u64, i8…i64, f32, f64);
//! [`ProcessImage::inputs_of`] gives a subdevice's bytes for `ethercrab-wire` structs.
//!
//! ## Features
//! - `sim`: the in-process simulated segment (`ecsim`) as `Target::Sim`. Off by default: a
//!   controller built without it does not contain the simulator.
//!
//! ## Real-time rules of the cycle
//! [`Application::cycle`] runs on the cyclic thread: it must not allocate, lock, block, print
//! or make system calls. The master's own part of the cycle keeps to the same rules; its tests
//! count allocations and minor page faults over thousands of cycles.

#![deny(missing_docs)]

// The documented API is the facade below and the protocol modules an application uses
// directly (CoE, FoE, EoE, CiA 402 and axes, the measurements, the shared image). The other
// modules are the master's rooms: reachable for the rtcat binary, its benches and tests
// (`#[doc(hidden)]`), not the documented API (issue 27; ethercrab's lib.rs is the model).
#[doc(hidden)]
pub mod absent;
#[doc(hidden)]
pub mod acyclic;
#[doc(hidden)]
pub mod al_state;
#[doc(hidden)]
pub mod application;
#[doc(hidden)]
pub mod availability;
pub mod axes;
#[doc(hidden)]
pub mod axis;
mod branch;
#[doc(hidden)]
pub mod bringup;
#[doc(hidden)]
pub mod bus;
pub mod cia402;
#[doc(hidden)]
pub mod clock;
pub mod coe;
#[doc(hidden)]
pub mod config;
#[doc(hidden)]
pub mod cycle;
#[doc(hidden)]
pub mod dc;
mod dc_delays;
#[doc(hidden)]
pub mod dc_sampler;
#[doc(hidden)]
pub mod devices;
#[doc(hidden)]
pub mod diag;
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod echo;
pub mod eoe;
mod error;
#[doc(hidden)]
pub mod floor;
pub mod foe;
mod group;
#[doc(hidden)]
pub mod health;
pub mod hotconnect;
#[doc(hidden)]
pub mod hotconnect_config;
#[doc(hidden)]
pub mod image;
#[doc(hidden)]
pub mod invalid;
#[doc(hidden)]
pub mod layout;
#[doc(hidden)]
pub mod limits;
#[doc(hidden)]
pub mod mailbox;
#[doc(hidden)]
pub mod mapping;
#[doc(hidden)]
pub mod master;
#[doc(hidden)]
pub mod motion;
#[doc(hidden)]
pub mod netuse;
mod own_bringup;
mod own_cycle;
mod own_dc;
mod own_frames;
mod own_group;
#[doc(hidden)]
pub mod pd_registers;
mod pdu_gate;
#[doc(hidden)]
pub mod period;
mod phase_lock;
mod place;
mod region;
#[doc(hidden)]
pub mod rt;
mod scan;
#[doc(hidden)]
pub mod session;
pub mod shm;
#[doc(hidden)]
pub mod sii;
pub mod sii_cache;
pub mod stats;
mod stop;
#[doc(hidden)]
pub mod subdevice_recovery;
#[doc(hidden)]
pub mod target;
mod topology_watch;
mod tree;
#[doc(hidden)]
pub mod wait;

pub use acyclic::{SdoClient, SdoService};
pub use application::{
    AppError, Application, Cycle, CycleStatus, Layer, Recovery, RecoveryCause, Setup,
    ShutdownReason, SubdeviceCause, SubdeviceChange, SubdeviceEvent, SubdeviceStatus, ZeroOutputs,
};
pub use availability::{Availability, Figures};
pub use axis::{AxisConfig, AxisMode, ProfileConfig};
pub use bus::{Link, LinkFactory, LinkPorts};
pub use config::{
    BusConfig, CycleConfig, ExpectedDevice, HealthConfig, RecoveryPolicy, RtConfig, SegmentConfig,
    TxRxMode,
};
pub use config::{Config, ConfigError};
pub use dc::{DcConfig, DcDevice};
pub use devices::{DeviceConfig, MapEntry, PdoAssign, PdoMap, StartupSdo, Transition};
pub use diag::Registers;
pub use diag::{Probe, ScanEntry};
pub use error::{Error, Result};
pub use image::{Input, Output, PdoValue, ProcessImage};
pub use layout::{DataType, Direction, Entry, Layout, LayoutError};
pub use layout::{Identity, Pdo, Subdevice};
pub use master::{Channels, Outcome, RtApplied, RunSpec, Session, Target, run};
pub use period::Period;
pub use stats::{Event, EventKind, Live, Recorder, Sample};
pub use stop::{Stop, StopFlags};
pub use wait::WaitMode;

impl RunSpec {
    /// A run of `cfg` on `target` until `stop` is requested, with the real-time settings of the
    /// configuration.
    pub fn new(cfg: Config, target: Target, stop: Stop) -> Self {
        RunSpec {
            cfg,
            target,
            duration: None,
            no_rt: false,
            on_ready: None,
            retry_start: false,
            stop,
            sdo: None,
        }
    }
}

/// Run with the measurements' events and samples discarded: for programs that want only the
/// outcome (the histograms and counters are in it). A program that reports events while it runs
/// passes its own [`Channels`] to [`run`].
pub fn run_simple(spec: RunSpec, app: &mut dyn Application) -> Result<Outcome> {
    let (events, mut ev_rx) = rtrb::RingBuffer::new(1024);
    let live = std::sync::Arc::new(stats::Live::default());
    let mut ch = Channels {
        live,
        events,
        samples: None,
    };
    // Drain the events on a helper thread so the ring never fills (a full ring drops events,
    // which is harmless, but this keeps memory flat for runs of any length).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    let drain = std::thread::Builder::new()
        .name("rtcat-events".into())
        .spawn(move || {
            while !d2.load(std::sync::atomic::Ordering::Acquire) {
                while ev_rx.pop().is_ok() {}
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
        .map_err(|source| Error::Io {
            what: "spawn the event drain thread",
            source,
        })?;
    let r = run(spec, app, &mut ch);
    done.store(true, std::sync::atomic::Ordering::Release);
    let _ = drain.join();
    r
}
