//! One simulated EtherCAT SubDevice Controller (ESC): its register/RAM space and the behaviour
//! behind the registers a master uses (AL state machine, SII EEPROM interface, FMMU/SM, DC).

use crate::coe::{CoeServer, Image};
use crate::dc::{self, DcClock, DcStatus, LoopRegs};
use crate::frame::{Cmd, get_u16, get_u32, put_u16};
use crate::mailbox::{self, MailboxState, Parsed};
use crate::od::Od;
use crate::pdi;
use crate::pdo::Direction;
use crate::sii::{self, PdSm};
use crate::spec::{DeviceSpec, Profile};

/// Size of the simulated address space: 4 KiB registers + 8 KiB process RAM.
pub const MEM_SIZE: usize = 0x3000;
/// Nanoseconds a frame needs from one device to the next by default (the DC receive-time
/// model; a device's `hop_ns` in the segment description).
pub const HOP_NS: u64 = 500;

pub mod reg {
    pub const TYPE: usize = 0x0000;
    pub const BUILD: usize = 0x0002;
    pub const FMMU_COUNT: usize = 0x0004;
    pub const SM_COUNT: usize = 0x0005;
    pub const RAM_SIZE: usize = 0x0006;
    pub const PORT_DESC: usize = 0x0007;
    pub const FEATURES: usize = 0x0008;
    pub const STATION_ADDR: usize = 0x0010;
    pub const STATION_ALIAS: usize = 0x0012;
    pub const DL_STATUS: usize = 0x0110;
    pub const WD_DIVIDER: usize = 0x0400;
    pub const WD_PDI: usize = 0x0410;
    pub const WD_SM: usize = 0x0420;
    /// RX error counters, 2 bytes per port: invalid frame counter at 0x0300 + 2p, physical RX
    /// error counter at 0x0301 + 2p.
    pub const RX_ERROR: usize = 0x0300;
    /// Forwarded RX error counter of port p at 0x0308 + p.
    pub const FWD_RX_ERROR: usize = 0x0308;
    /// ECAT processing unit error counter.
    pub const EPU_ERROR: usize = 0x030c;
    /// PDI error counter.
    pub const PDI_ERROR: usize = 0x030d;
    /// Lost link counter of port p at 0x0310 + p.
    pub const LOST_LINK: usize = 0x0310;
    pub const AL_CONTROL: usize = 0x0120;
    pub const AL_STATUS: usize = 0x0130;
    pub const AL_STATUS_CODE: usize = 0x0134;
    pub const PDI_CONTROL: usize = 0x0140;
    pub const SII_CONTROL: usize = 0x0502;
    pub const SII_ADDRESS: usize = 0x0504;
    pub const SII_DATA: usize = 0x0508;
    pub const FMMU0: usize = 0x0600;
    pub const SM0: usize = 0x0800;
    pub const DC_PORT0: usize = 0x0900;
    pub const DC_SYSTEM_TIME: usize = 0x0910;
    pub const DC_RECEIVE_TIME: usize = 0x0918;
    pub const DC_OFFSET: usize = 0x0920;
    pub const DC_DELAY: usize = 0x0928;
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from(get_u32(b, at)) | (u64::from(get_u32(b, at + 4)) << 32)
}

/// AL states (ETG1000.6 Table 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AlState {
    Init = 1,
    PreOp = 2,
    Boot = 3,
    SafeOp = 4,
    Op = 8,
}

impl AlState {
    pub fn from_u8(v: u8) -> Option<AlState> {
        Some(match v {
            1 => AlState::Init,
            2 => AlState::PreOp,
            3 => AlState::Boot,
            4 => AlState::SafeOp,
            8 => AlState::Op,
            _ => return None,
        })
    }
}

/// AL status codes the simulator raises (ETG1000.6 Table 11).
pub mod al_code {
    pub const INVALID_STATE_CHANGE: u16 = 0x0011;
    pub const UNKNOWN_STATE: u16 = 0x0012;
    pub const INVALID_MAILBOX_CONFIG: u16 = 0x0016;
    pub const SYNC_ERROR: u16 = 0x001a;
    pub const SM_WATCHDOG: u16 = 0x001b;
    pub const INVALID_OUTPUT_CONFIG: u16 = 0x001d;
    pub const INVALID_INPUT_CONFIG: u16 = 0x001e;
}

/// The error counters of one ESC (registers 0x0300..=0x0313), as a master reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounters {
    /// Invalid frames received, per port (0x0300 + 2p): a bad FCS or frame structure.
    pub invalid_frame: [u8; 4],
    /// Physical layer RX errors, per port (0x0301 + 2p).
    pub rx_error: [u8; 4],
    /// Frames received already marked as erroneous by an ESC before, per port (0x0308 + p).
    pub forwarded: [u8; 4],
    /// Invalid frames passing the EtherCAT processing unit (0x030C).
    pub processing_unit: u8,
    /// Errors of the process data interface (0x030D).
    pub pdi: u8,
    /// Link losses, per port (0x0310 + p).
    pub lost_link: [u8; 4],
}

impl ErrorCounters {
    /// Decode the 20 bytes read from 0x0300.
    pub fn from_registers(r: &[u8; 20]) -> Self {
        let mut c = ErrorCounters {
            processing_unit: r[0x0c],
            pdi: r[0x0d],
            ..Default::default()
        };
        for p in 0..4 {
            c.invalid_frame[p] = r[2 * p];
            c.rx_error[p] = r[2 * p + 1];
            c.forwarded[p] = r[8 + p];
            c.lost_link[p] = r[0x10 + p];
        }
        c
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Fmmu {
    logical: u32,
    len: u32,
    physical: u16,
    read: bool,
    write: bool,
}

/// What one device did with one logical datagram, for the WKC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogicalHit {
    pub read: bool,
    pub write: bool,
}

/// One ESC.
pub struct Esc {
    spec: DeviceSpec,
    /// Position in the chain (0 = next to the master).
    position: usize,
    /// Which ports have a link (port 0 faces the master; the others lead to the devices
    /// behind this one). Set by [`crate::Segment`] from the wiring.
    links: [bool; 4],
    /// Per port: nanoseconds from the frame's arrival at port 0 to its return at that port,
    /// after the devices behind it (the port receive times, 0x0900..0x090F); 0 for port 0.
    port_ns: [u64; 4],
    /// Nanoseconds from the first device's port 0 to this device's (its place in the
    /// processing order; the DC model's local times are read at the frame's arrival).
    arrival_ns: u64,
    mem: Box<[u8]>,
    eeprom: Vec<u8>,
    pd_sms: Vec<PdSm>,
    fmmus: [Fmmu; 16],
    n_fmmus: usize,
    /// Control-register reads still answered with BUSY after an SII command.
    sii_busy_reads: u8,
    /// Device application cycle counter (see [`crate::pdi`]).
    pd_counter: u32,
    /// Process data was exchanged in the frame being processed.
    pd_touched: bool,
    /// The distributed clock (used when `spec.dc`; see [`crate::dc`]).
    dc: DcClock,
    /// The CoE server of a CoE device (`spec.coe`).
    coe: Option<CoeServer>,
    /// The FoE server of a device with `[[device.file]]` (its files survive power cycles).
    foe: Option<crate::foe::FoeServer>,
    /// The EoE endpoint of a device with `[device.eoe]` (its network survives power cycles).
    eoe: Option<crate::eoe::EoeEndpoint>,
    /// The mailbox sync managers' device side.
    mbx: MailboxState,
    /// Process data bytes the device exchanges now (outputs, inputs): the SII's for a device
    /// without CoE, the assigned and mapped PDOs of a CoE device (fixed at PRE-OP -> SAFE-OP).
    pd_len: (u16, u16),
    /// The drive model of a `profile = "cia402"` device, and the time of its last step.
    drive: Option<(crate::cia402::Drive, Option<u64>)>,
    /// The time of the frame being processed ([`Esc::tick`]).
    now_ns: u64,
    /// An AL state change under way (`[device.timing]`): from, to, when it completes.
    pending_al: Option<(AlState, AlState, u64)>,
    /// The SII interface is BUSY until then (`[device.timing]` sii_read_us).
    sii_busy_until: u64,
    /// When the master last wrote this device's outputs in OP (the sync-manager watchdog,
    /// `[device.timing] sm_watchdog`), and whether the frame being processed wrote them.
    last_output_ns: Option<u64>,
    outputs_written: bool,
    /// Frames that brought its outputs since it last entered SAFE-OP (taken in OP only, but
    /// seen in SAFE-OP: `[device.timing] op_outputs`).
    outputs_offered: u32,
    offered_in_frame: bool,
}

impl Esc {
    pub fn new(spec: DeviceSpec, position: usize, chain_len: usize) -> Self {
        // A loaded segment has been checked (`SegmentSpec::from_toml`); one built in code with
        // more strings than an SII holds is a bug of that code.
        let eeprom = sii::build_image(&spec)
            .unwrap_or_else(|e| panic!("device {position} ({:?}): {e}", spec.name));
        let pd_sms = sii::process_data_sms(&spec);
        let coe = spec
            .coe
            .as_ref()
            .map(|c| CoeServer::new(Od::build(&spec, c)));
        let pd_len = (spec.outputs, spec.inputs);
        let spec_dc = spec.dc_clock;
        let foe = (!spec.files.is_empty()).then(|| crate::foe::FoeServer::new(&spec.files));
        let eoe = spec
            .eoe
            .as_ref()
            .map(|e| crate::eoe::EoeEndpoint::new(e.mac));
        let mut esc = Esc {
            eoe,
            drive: None,
            coe,
            foe,
            mbx: MailboxState::default(),
            pd_len,
            spec,
            position,
            links: [true, position + 1 < chain_len, false, false],
            mem: vec![0u8; MEM_SIZE].into_boxed_slice(),
            eeprom,
            pd_sms,
            fmmus: [Fmmu::default(); 16],
            n_fmmus: 0,
            sii_busy_reads: 0,
            pd_counter: 0,
            pd_touched: false,
            dc: DcClock::new(spec_dc, position, position as u64 * HOP_NS),
            port_ns: [0, 2 * HOP_NS * (chain_len - 1 - position) as u64, 0, 0],
            arrival_ns: position as u64 * HOP_NS,
            now_ns: 0,
            pending_al: None,
            sii_busy_until: 0,
            last_output_ns: None,
            outputs_written: false,
            outputs_offered: 0,
            offered_in_frame: false,
        };
        esc.power_on();
        esc
    }

    /// The EoE endpoint of a device with `[device.eoe]`.
    pub fn eoe(&self) -> Option<&crate::eoe::EoeEndpoint> {
        self.eoe.as_ref()
    }

    /// Put the device's network (its `[device.eoe] tap`) behind its EoE endpoint.
    pub fn attach_eoe(&mut self) -> std::io::Result<()> {
        let (Some(e), Some(spec)) = (self.eoe.as_mut(), self.spec.eoe.as_ref()) else {
            return Ok(());
        };
        match &spec.tap {
            Some(t) if !e.attached() => e.attach(t),
            _ => Ok(()),
        }
    }

    /// Hand over the EoE endpoint (with its network) to the device that replaces this one.
    pub(crate) fn take_eoe(&mut self) -> Option<crate::eoe::EoeEndpoint> {
        self.eoe.take()
    }

    pub(crate) fn set_eoe(&mut self, e: Option<crate::eoe::EoeEndpoint>) {
        if e.is_some() && self.spec.eoe.is_some() {
            self.eoe = e;
        }
    }

    /// Power-on state: registers back to reset values, station address lost, INIT.
    pub fn power_on(&mut self) {
        self.mem.fill(0);
        let m = &mut self.mem;
        m[reg::TYPE] = 0x11;
        put_u16(m, reg::BUILD, 0x0001);
        m[reg::FMMU_COUNT] = 8;
        m[reg::SM_COUNT] = 8;
        m[reg::RAM_SIZE] = 8;
        // Two bits per port, 0b11 = MII: ports 0 and 1, a fork adds port 3, a cross port 2 and 3.
        m[reg::PORT_DESC] = match self.spec.ports {
            4 => 0xff,
            3 => 0xcf,
            _ => 0x0f,
        };
        let features: u16 = 0x0001 | if self.spec.dc { 0x000c } else { 0 };
        put_u16(m, reg::FEATURES, features);
        // The ESC loads the alias from EEPROM word 4 at power-on.
        put_u16(m, reg::STATION_ALIAS, get_u16(&self.eeprom, 8));
        self.update_dl_status();
        let m = &mut self.mem;
        put_u16(m, reg::AL_STATUS, AlState::Init as u16);
        m[reg::PDI_CONTROL] = 0x05;
        // Watchdog divider and times after power-on: 2498 (+2) x 40 ns = 100 µs units, PDI and
        // SM watchdogs 1000 units = 100 ms (ET1100 register description 0x0400/0x0410/0x0420).
        put_u16(m, reg::WD_DIVIDER, 0x09c2);
        put_u16(m, reg::WD_PDI, 0x03e8);
        put_u16(m, reg::WD_SM, 0x03e8);
        // SII: 8-byte reads, 2-byte addressing.
        m[reg::SII_CONTROL] = 0xc0;
        self.fmmus = [Fmmu::default(); 16];
        self.n_fmmus = 0;
        self.sii_busy_reads = 0;
        self.sii_busy_until = 0;
        self.pending_al = None;
        self.last_output_ns = None;
        self.outputs_written = false;
        self.outputs_offered = 0;
        self.offered_in_frame = false;
        self.pd_counter = 0;
        self.pd_touched = false;
        // A power cycle loses what the master configured over CoE (the dictionary is RAM).
        self.mbx = MailboxState::default();
        if let Some(c) = &mut self.coe {
            c.reset();
        }
        if let Some(f) = &mut self.foe {
            f.reset();
        }
        if let Some(e) = &mut self.eoe {
            e.power_on();
        }
        self.pd_len = (self.spec.outputs, self.spec.inputs);
        if self.spec.dc {
            self.dc.power_on();
            let m = &mut self.mem;
            put_u16(
                m,
                dc::reg::SPEED_COUNTER_START,
                dc::SPEED_COUNTER_START_RESET,
            );
            m[dc::reg::DIFF_FILTER_DEPTH] = dc::DIFF_FILTER_DEPTH_RESET;
            m[dc::reg::SPEED_FILTER_DEPTH] = dc::SPEED_FILTER_DEPTH_RESET;
        }
        let cia402 = self.spec.coe.as_ref().and_then(|c| c.profile) == Some(Profile::Cia402);
        self.drive = cia402.then(|| (crate::cia402::Drive::default(), None));
    }

    /// The drive model of a `profile = "cia402"` device.
    pub fn drive(&self) -> Option<&crate::cia402::Drive> {
        self.drive.as_ref().map(|(d, _)| d)
    }

    /// Fault the drive of a `profile = "cia402"` device with this 0x603F error code (at its
    /// next cycle); false for another device.
    pub fn inject_drive_fault(&mut self, code: u16) -> bool {
        match &mut self.drive {
            Some((d, _)) => {
                d.inject(code);
                true
            }
            None => false,
        }
    }

    /// The CoE server (a CoE device only).
    pub fn coe(&self) -> Option<&CoeServer> {
        self.coe.as_ref()
    }

    /// The process data bytes (outputs, inputs) the device exchanges now.
    pub fn pd_len(&self) -> (u16, u16) {
        self.pd_len
    }

    /// Queue an emergency message (CoE devices; ignored by others). It is put into SM1 when the
    /// mailbox is idle; at most [`mailbox::MAX_QUEUED`] wait.
    pub fn queue_emergency(&mut self, code: u16, register: u8, data: [u8; 5]) -> bool {
        if self.coe.is_none() || self.mbx.emergencies.len() >= mailbox::MAX_QUEUED {
            return false;
        }
        let f = mailbox::frame(
            mailbox::kind::COE,
            &crate::coe::emergency_frame(code, register, data),
        );
        self.mbx.emergencies.push_back(f);
        self.mailbox_service();
        true
    }

    pub fn spec(&self) -> &DeviceSpec {
        &self.spec
    }

    /// DL status (0x0110) from the wiring (ET1100 register description, "DL Status"): bit 0 PDI
    /// operational; bits 4..7 physical link on port 0..3; then per port p bit 8 + 2p loop closed
    /// and bit 9 + 2p communication established. A port with a link is open with communication;
    /// a port without one — the end of a line or a branch, a port the device does not implement
    /// (port descriptor 0x0007), a pulled cable — is closed (the frame turns back there), as an
    /// ESC in auto mode closes it by itself: what a `link down` leaves at port 0 of the first
    /// device.
    fn update_dl_status(&mut self) {
        let mut dl: u16 = 0x0001;
        for (p, &link) in self.links.iter().enumerate() {
            dl |= if link {
                (0x0010 << p) | (0x0200 << (2 * p))
            } else {
                0x0100 << (2 * p)
            };
        }
        put_u16(&mut self.mem, reg::DL_STATUS, dl);
    }

    /// The link of port 0 (towards the master) goes down or comes back (the segment counts the
    /// losses in 0x0310).
    pub(crate) fn set_upstream_link(&mut self, up: bool) {
        self.links[0] = up;
        self.update_dl_status();
    }

    /// The wiring around this device changed (a device behind it unplugged, powered off or
    /// back): which ports have a link, and per port the time from the frame's arrival at port
    /// 0 to its return there after the devices behind it.
    pub(crate) fn set_ports(&mut self, links: [bool; 4], port_ns: [u64; 4]) {
        self.links = links;
        self.port_ns = port_ns;
        self.update_dl_status();
    }

    /// Frames now reach this device `arrival_ns` after the first device (a branch before it in
    /// the processing order got shorter or longer): the local times a frame reads move with
    /// it; the clock itself does not jump.
    pub(crate) fn set_arrival(&mut self, arrival_ns: u64) {
        let delta = arrival_ns as i64 - self.arrival_ns as i64;
        self.arrival_ns = arrival_ns;
        self.dc.shift(delta);
    }

    /// A frame reaches the device at `now_ns`: what the device's own time has finished since
    /// (`[device.timing]`) takes effect first — an AL state change, a mailbox response.
    pub(crate) fn tick(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        if let Some((from, to, due)) = self.pending_al
            && now_ns >= due
        {
            self.pending_al = None;
            self.complete_transition(from, to);
        }
        if (self.mbx.ready_at > 0 && now_ns >= self.mbx.ready_at) || self.eoe.is_some() {
            // An EoE device also looks at its network with every frame: what it sent waits for
            // an idle mailbox.
            self.mailbox_service();
        }
        self.sm_watchdog(now_ns);
    }

    /// The sync-manager watchdog (`[device.timing] sm_watchdog`): in OP, outputs not written
    /// for the watchdog time take the device to SAFE-OP with 0x001B. A watchdog time of 0
    /// switches it off, as on a real ESC.
    fn sm_watchdog(&mut self, now_ns: u64) {
        if !self.spec.timing.sm_watchdog {
            return;
        }
        if self.al_state() != AlState::Op as u8 {
            self.last_output_ns = None;
            return;
        }
        let units = u64::from(get_u16(&self.mem, reg::WD_SM));
        let unit_ns = (u64::from(get_u16(&self.mem, reg::WD_DIVIDER)) + 2) * 40;
        if let Some(last) = self.last_output_ns
            && units > 0
            && now_ns.saturating_sub(last) > units * unit_ns
        {
            self.last_output_ns = None;
            self.raise_error(AlState::SafeOp, al_code::SM_WATCHDOG);
        }
    }

    /// Finish at once whatever the device's own time still holds back (an AL state change),
    /// for a segment configured without a master ([`crate::Segment::preconfigure`]).
    pub(crate) fn settle(&mut self) {
        if let Some((from, to, _)) = self.pending_al.take() {
            self.complete_transition(from, to);
        }
    }

    /// Add `n` to the 8-bit error counter at `at`; error counters stop at 0xFF (ET1100 register
    /// description, 0x0300..0x0313: "counting is stopped when 0xFF is reached").
    pub(crate) fn count(&mut self, at: usize, n: u8) {
        self.mem[at] = self.mem[at].saturating_add(n);
    }

    /// Nanoseconds from the first device's port 0 to this device's, with the wiring as it is
    /// now (what a master's propagation delay of this device should come to).
    pub fn arrival_ns(&self) -> u64 {
        self.arrival_ns
    }

    /// Whether port `p` has a link: port 0 unless the cable towards the master is down, the
    /// others when a powered device is plugged in behind them.
    pub fn port_linked(&self, p: usize) -> bool {
        self.links.get(p).copied().unwrap_or(false)
    }

    /// The error counters 0x0300..=0x0313.
    pub fn error_counters(&self) -> ErrorCounters {
        let r: &[u8; 20] = self.mem[reg::RX_ERROR..reg::RX_ERROR + 20]
            .try_into()
            .expect("20 bytes");
        ErrorCounters::from_registers(r)
    }

    pub fn station_address(&self) -> u16 {
        get_u16(&self.mem, reg::STATION_ADDR)
    }

    pub fn al_state(&self) -> u8 {
        self.mem[reg::AL_STATUS] & 0x0f
    }

    pub fn al_error(&self) -> bool {
        self.mem[reg::AL_STATUS] & 0x10 != 0
    }

    pub fn al_status_code(&self) -> u16 {
        get_u16(&self.mem, reg::AL_STATUS_CODE)
    }

    pub fn pd_counter(&self) -> u32 {
        self.pd_counter
    }

    /// Raw view of the address space (tests, debugging).
    pub fn mem(&self) -> &[u8] {
        &self.mem
    }

    pub fn eeprom(&self) -> &[u8] {
        &self.eeprom
    }

    fn set_al_status(&mut self, state: u8, error: bool, code: u16) {
        let v = u16::from(state) | if error { 0x10 } else { 0 };
        put_u16(&mut self.mem, reg::AL_STATUS, v);
        put_u16(&mut self.mem, reg::AL_STATUS_CODE, code);
    }

    /// Fault injection: the device application drops to `state` and flags an error.
    pub fn raise_error(&mut self, state: AlState, code: u16) {
        self.set_al_status(state as u8, true, code);
    }

    /// Whether the master may access [a, a+len) at all (the DC block exists only with DC).
    fn accessible(&self, a: usize, len: usize) -> bool {
        let end = a + len;
        if end > MEM_SIZE {
            return false;
        }
        if !self.spec.dc && a < 0x0a00 && end > 0x0900 {
            return false;
        }
        true
    }

    /// The bits of register byte `a` (below 0x1000) a master's write may change; the others are
    /// read-only for the master, reserved, or computed by the ESC (Beckhoff ET1100 datasheet,
    /// section II "Register description": the "ECAT" access column of each register). Writes
    /// with a side effect but nothing stored (the error counters' clear) have mask 0; their
    /// effect is in [`Esc::after_write`].
    fn write_mask(a: usize) -> u8 {
        match a {
            // Configured station address; the alias (0x0012) is loaded from the SII, r/- for ECAT.
            0x0010..=0x0011 => 0xff,
            // ESC DL control, physical read/write offset.
            0x0100..=0x0103 | 0x0108..=0x0109 => 0xff,
            // AL control: state, error acknowledge, device identification.
            0x0120 => 0x3f,
            // ECAT event mask.
            0x0200..=0x0203 => 0xff,
            // Watchdog divider, PDI and SM watchdog times.
            0x0400..=0x0401 | 0x0410..=0x0411 | 0x0420..=0x0421 => 0xff,
            // SII: EEPROM configuration (PDI offer, force ECAT access); control/status: only the
            // write enable (bit 0) and the three command bits (8-10) — 8-byte reads (bit 6),
            // emulation, algorithm, the error and busy bits are the ESC's; address; the data
            // register's first two bytes (what a write command writes).
            0x0500 => 0x03,
            0x0502 => 0x01,
            0x0503 => 0x07,
            0x0504..=0x0509 => 0xff,
            // FMMUs (16 bytes each): start/stop/physical start bits are 3 bits wide, the type
            // 2 bits, activate 1 bit, bytes 13-15 reserved.
            0x0600..=0x06ff => match a % 16 {
                0..=5 | 8 | 9 => 0xff,
                6 | 7 | 10 => 0x07,
                11 => 0x03,
                12 => 0x01,
                _ => 0,
            },
            // Sync managers (8 bytes each): start, length, control (bit 7 reserved), activate
            // (enable, repeat, latch events); status (5) and PDI control (7) are read-only.
            0x0800..=0x087f => match a % 8 {
                0..=3 => 0xff,
                4 => 0x7f,
                6 => 0xc3,
                _ => 0,
            },
            // DC: a write to port 0's receive time latches all ports; system time (the write is
            // compared, not stored as such), offset, delay; speed counter start (15 bits);
            // filter depths (4 bits); receive time latch mode; cyclic unit control;
            // activation; start time; SYNC0/SYNC1 cycle times; latch controls. Receive times
            // of the other ports, the processing unit's receive time, the difference
            // registers, pulse length, activation and SYNC status, next SYNC1, latch
            // status and times are the ESC's.
            0x0900..=0x0903 | 0x0910..=0x0917 | 0x0920..=0x092b | 0x0930 => 0xff,
            0x0931 => 0x7f,
            0x0934..=0x0935 => 0x0f,
            0x0936 => 0x01,
            0x0980 => 0x31,
            0x0981 => 0xff,
            0x0990..=0x0997 | 0x09a0..=0x09a7 => 0xff,
            0x09a8..=0x09a9 => 0x03,
            _ => 0,
        }
    }

    /// Refresh registers whose value depends on the moment they are read.
    fn before_read(&mut self, a: usize, len: usize, now_ns: u64) {
        let end = a + len;
        if a <= reg::SII_CONTROL + 1 && end > reg::SII_CONTROL + 1 {
            // BUSY for one status read after a command, and as long as the EEPROM access takes
            // (`[device.timing]`).
            if self.sii_busy_reads > 0 || now_ns < self.sii_busy_until {
                self.sii_busy_reads = self.sii_busy_reads.saturating_sub(1);
                self.mem[reg::SII_CONTROL + 1] |= 0x80;
            } else {
                self.mem[reg::SII_CONTROL + 1] &= !0x80;
            }
        }
        if self.spec.dc && a < 0x0a00 && end > reg::DC_SYSTEM_TIME {
            self.dc_before_read(a, end, now_ns);
        }
    }

    /// The DC registers computed when read.
    fn dc_before_read(&mut self, a: usize, end: usize, now_ns: u64) {
        let touches = |lo: usize, n: usize| a < lo + n && end > lo;
        let regs = self.loop_regs();
        if touches(reg::DC_SYSTEM_TIME, 8) {
            let sys = self.dc.system(now_ns, regs.offset, regs.speed_start);
            self.mem[reg::DC_SYSTEM_TIME..reg::DC_SYSTEM_TIME + 8]
                .copy_from_slice(&sys.to_le_bytes());
        }
        let m = &mut self.mem;
        if touches(dc::reg::SYSTEM_TIME_DIFF, 4) {
            let d = self.dc.diff_register();
            m[dc::reg::SYSTEM_TIME_DIFF..dc::reg::SYSTEM_TIME_DIFF + 4]
                .copy_from_slice(&d.to_le_bytes());
        }
        if touches(dc::reg::SPEED_COUNTER_DIFF, 2) {
            put_u16(
                m,
                dc::reg::SPEED_COUNTER_DIFF,
                self.dc.speed_diff_register(regs.speed_start),
            );
        }
        if touches(dc::reg::SYNC0_STATUS, 1) {
            m[dc::reg::SYNC0_STATUS] = self.dc.sync0_status(now_ns, regs);
        }
        if touches(dc::reg::SIM_DC_STATUS, 1) {
            m[dc::reg::SIM_DC_STATUS] =
                u8::from(self.dc.in_sync()) | (u8::from(self.dc.sync0().is_some()) << 1);
        }
        if touches(dc::reg::SIM_LATE_FRAMES, 4) {
            let late = self.dc.late().min(u64::from(u32::MAX)) as u32;
            m[dc::reg::SIM_LATE_FRAMES..dc::reg::SIM_LATE_FRAMES + 4]
                .copy_from_slice(&late.to_le_bytes());
        }
    }

    /// The loop's registers as the master wrote them.
    fn loop_regs(&self) -> LoopRegs {
        let m = &self.mem;
        LoopRegs {
            offset: get_u64(m, reg::DC_OFFSET),
            delay: get_u32(m, reg::DC_DELAY),
            speed_start: get_u16(m, dc::reg::SPEED_COUNTER_START) & 0x7fff,
            diff_depth: m[dc::reg::DIFF_FILTER_DEPTH] & 0x0f,
            speed_depth: m[dc::reg::SPEED_FILTER_DEPTH] & 0x0f,
        }
    }

    fn local_time(&self, now_ns: u64) -> u64 {
        self.dc.local(now_ns)
    }

    fn write_bytes(&mut self, a: usize, data: &[u8], now_ns: u64) {
        let end = a + data.len();
        if a >= 0x1000 {
            self.mem[a..end].copy_from_slice(data);
            return;
        }
        for (i, &b) in data.iter().enumerate() {
            let (at, mask) = (a + i, Self::write_mask(a + i));
            self.mem[at] = (self.mem[at] & !mask) | (b & mask);
        }
        self.after_write(a, end, now_ns);
    }

    fn after_write(&mut self, a: usize, end: usize, now_ns: u64) {
        let touches = |lo: usize, hi: usize| a < hi && end > lo;
        if touches(reg::AL_CONTROL, reg::AL_CONTROL + 1) {
            self.al_control(self.mem[reg::AL_CONTROL]);
        }
        if touches(reg::SII_CONTROL, reg::SII_CONTROL + 2) {
            self.sii_command();
        }
        if a < reg::LOST_LINK + 4 && end > reg::RX_ERROR {
            self.clear_counters(touches);
        }
        if touches(reg::FMMU0, reg::FMMU0 + 0x100) {
            self.parse_fmmus();
        }
        if self.coe.is_some() && touches(reg::SM0 + 6, reg::SM0 + 8 + 7) {
            self.mailbox_sm_activate();
        }
        if self.spec.dc && touches(reg::DC_PORT0, reg::DC_PORT0 + 4) {
            self.latch_dc(now_ns);
        }
        if self.spec.dc && a < 0x0a00 && end > reg::DC_SYSTEM_TIME {
            self.dc_after_write(a, end, now_ns);
        }
    }

    /// The DC registers with an effect when written.
    fn dc_after_write(&mut self, a: usize, end: usize, now_ns: u64) {
        let touches = |lo: usize, n: usize| a < lo + n && end > lo;
        if touches(reg::DC_OFFSET, 8) || touches(dc::reg::SPEED_COUNTER_START, 2) {
            // The local copy of the system time moved, or the master restarts the loop:
            // what the loop measured no longer holds.
            let speed = touches(dc::reg::SPEED_COUNTER_START, 2);
            self.dc.reset_loop(speed);
        }
        // A 32-bit write (ARMW of a 32-bit reference) starts at 0x0910 and covers 4 bytes.
        if a <= reg::DC_SYSTEM_TIME && end >= reg::DC_SYSTEM_TIME + 4 {
            let wide = end >= reg::DC_SYSTEM_TIME + 8;
            let received = if wide {
                get_u64(&self.mem, reg::DC_SYSTEM_TIME)
            } else {
                u64::from(get_u32(&self.mem, reg::DC_SYSTEM_TIME))
            };
            let regs = self.loop_regs();
            self.dc.compare(now_ns, received, wide, regs);
        }
        if touches(dc::reg::ACTIVATION, 1) {
            let m = &self.mem;
            let (act, start, cycle) = (
                m[dc::reg::ACTIVATION],
                get_u64(m, dc::reg::START_TIME),
                get_u32(m, dc::reg::SYNC0_CYCLE),
            );
            let regs = self.loop_regs();
            self.dc.activate(now_ns, act, start, cycle, regs);
        }
    }

    /// A new clock for a device that frames reach `arrival_ns` after the first device (at
    /// construction and for a replaced device; [`crate::Segment`] sets the ports' times).
    pub(crate) fn set_timing(&mut self, arrival_ns: u64) {
        self.dc = DcClock::new(self.spec.dc_clock, self.position, arrival_ns);
        self.arrival_ns = arrival_ns;
    }

    /// The device's distributed clock at simulation time `now_ns` (a DC device only).
    pub fn dc_status(&mut self, now_ns: u64) -> Option<DcStatus> {
        if !self.spec.dc {
            return None;
        }
        let regs = self.loop_regs();
        let system_ns = self.dc.system(now_ns, regs.offset, regs.speed_start);
        Some(DcStatus {
            position: self.position,
            local_ns: self.dc.local(now_ns),
            system_ns,
            drift_ppm: self.dc.drift_ppm(),
            correction_ppm: self.dc.correction_ppm(),
            diff_register: self.dc.diff_register(),
            diff_ns: self.dc.diff_ns(),
            in_sync: self.dc.in_sync(),
            sync0: self.dc.sync0(),
            late: self.dc.late(),
            on_time: self.dc.on_time(),
        })
    }

    /// The clock model (a DC device's; tests).
    pub fn dc_clock(&self) -> Option<&DcClock> {
        self.spec.dc.then_some(&self.dc)
    }

    /// Process data passed the device in the frame at `now_ns`: SYNC0's late count.
    pub(crate) fn dc_process_data(&mut self, now_ns: u64) {
        if self.spec.dc && self.pd_touched {
            let regs = self.loop_regs();
            self.dc.process_data(now_ns, regs);
        }
    }

    /// A write to an error counter clears it or its group, whatever the value written (ET1100
    /// register description, 0x0300..0x0313): one of 0x0300..0x030B clears all of 0x0300..0x030B;
    /// 0x030C and 0x030D clear themselves; one of 0x0310..0x0313 clears all four.
    fn clear_counters(&mut self, touches: impl Fn(usize, usize) -> bool) {
        let m = &mut self.mem;
        if touches(reg::RX_ERROR, reg::EPU_ERROR) {
            m[reg::RX_ERROR..reg::EPU_ERROR].fill(0);
        }
        if touches(reg::EPU_ERROR, reg::EPU_ERROR + 1) {
            m[reg::EPU_ERROR] = 0;
        }
        if touches(reg::PDI_ERROR, reg::PDI_ERROR + 1) {
            m[reg::PDI_ERROR] = 0;
        }
        if touches(reg::LOST_LINK, reg::LOST_LINK + 4) {
            m[reg::LOST_LINK..reg::LOST_LINK + 4].fill(0);
        }
    }

    /// A write to the port-0 receive time latches the receive times of all ports: port 0 when
    /// the frame arrives, every other port with a link when it comes back through it after the
    /// devices behind it (processing order 0 -> 3 -> 1 -> 2); 0 for a port without a link.
    fn latch_dc(&mut self, now_ns: u64) {
        let t0 = self.local_time(now_ns);
        let m = &mut self.mem;
        for p in 0..4 {
            let t = if p == 0 || self.links[p] {
                (t0 + self.port_ns[p]) as u32
            } else {
                0
            };
            m[reg::DC_PORT0 + 4 * p..reg::DC_PORT0 + 4 * p + 4].copy_from_slice(&t.to_le_bytes());
        }
        m[reg::DC_RECEIVE_TIME..reg::DC_RECEIVE_TIME + 8].copy_from_slice(&t0.to_le_bytes());
    }

    /// AL control written: run the state machine (ETG1000.6 §6.4).
    fn al_control(&mut self, ctrl: u8) {
        let requested = ctrl & 0x0f;
        let ack = ctrl & 0x10 != 0;
        let current = self.al_state();
        if self.al_error() {
            if !ack {
                // An error must be acknowledged before any state request is honoured.
                return;
            }
            self.set_al_status(current, false, 0);
        }
        let Some(target) = AlState::from_u8(requested) else {
            self.set_al_status(current, true, al_code::UNKNOWN_STATE);
            return;
        };
        use AlState::*;
        let from = AlState::from_u8(current).unwrap_or(Init);
        let allowed = matches!(
            (from, target),
            (_, Init)
                | (Init, PreOp)
                | (Init, Boot)
                | (Boot, Boot)
                | (PreOp, PreOp)
                | (PreOp, SafeOp)
                | (SafeOp, SafeOp)
                | (SafeOp, PreOp)
                | (SafeOp, Op)
                | (Op, Op)
                | (Op, SafeOp)
                | (Op, PreOp)
        );
        if !allowed {
            self.set_al_status(current, true, al_code::INVALID_STATE_CHANGE);
            return;
        }
        // The simulator's bootstrap mailbox (SII words 0x14..0x17) is the standard one.
        if from == Init
            && matches!(target, PreOp | Boot)
            && let Some(code) = self.check_mailbox_config()
        {
            self.set_al_status(current, true, code);
            return;
        }
        if from == PreOp && target == SafeOp {
            self.pd_len = self.configured_pd_len();
        }
        if from == PreOp
            && target == SafeOp
            && let Some(code) = self.check_pd_config()
        {
            self.set_al_status(current, true, code);
            return;
        }
        // A request while another change is under way replaces it (the firmware serves the
        // latest AL control); the AL status keeps the old state until the change completes.
        let delay = self.spec.timing.transition_ns(from as u8, target as u8);
        if delay > 0 {
            self.pending_al = Some((from, target, self.now_ns + delay));
            return;
        }
        self.pending_al = None;
        self.complete_transition(from, target);
    }

    /// The device application has done what the AL state change `from` -> `target` needs.
    fn complete_transition(&mut self, from: AlState, target: AlState) {
        use AlState::*;
        if target == Init {
            // Leaving the configured states resets process data; the station address stays.
            self.pd_counter = 0;
            self.reset_mailbox();
        }
        if from == PreOp && target == SafeOp {
            // The application publishes valid inputs before it reports SAFE-OP.
            self.publish_inputs();
        }
        if target == SafeOp {
            self.outputs_offered = 0;
        }
        let want = u32::from(self.spec.timing.op_outputs);
        if from == SafeOp && target == Op && want > 0 && self.outputs_offered < want {
            self.set_al_status(SafeOp as u8, true, al_code::SM_WATCHDOG);
            return;
        }
        let frames = u64::from(self.spec.timing.dc_op_frames);
        if from == SafeOp
            && target == Op
            && frames > 0
            && self.dc.sync0().is_some()
            && self.dc.on_time_since_on() < frames
        {
            self.set_al_status(SafeOp as u8, true, al_code::SYNC_ERROR);
            return;
        }
        self.set_al_status(target as u8, false, 0);
        if from == Init && matches!(target, PreOp | Boot) {
            self.mailbox_service();
        }
    }

    /// The process data sizes the device expects: the SII's, or for a CoE device what its
    /// dictionary assigns and maps now.
    fn configured_pd_len(&self) -> (u16, u16) {
        match &self.coe {
            None => (self.spec.outputs, self.spec.inputs),
            Some(c) => (
                c.od.pd_bits(Direction::Outputs).div_ceil(8) as u16,
                c.od.pd_bits(Direction::Inputs).div_ceil(8) as u16,
            ),
        }
    }

    /// INIT -> PRE-OP of a CoE device: SM0 and SM1 must be the mailboxes the SII declares.
    fn check_mailbox_config(&self) -> Option<u16> {
        self.coe.as_ref()?;
        for (n, start, mode) in [
            (0usize, sii::MBX_OUT_ADDR, 0x06u8),
            (1, sii::MBX_IN_ADDR, 0x02),
        ] {
            let (s, len, control, enabled) = self.sm(n);
            if !enabled || s != start || len != sii::MBX_SIZE || control & 0x0f != mode {
                return Some(al_code::INVALID_MAILBOX_CONFIG);
            }
        }
        None
    }

    /// SM `n`: start, length, control, enabled.
    fn sm(&self, n: usize) -> (u16, u16, u8, bool) {
        let base = reg::SM0 + 8 * n;
        (
            get_u16(&self.mem, base),
            get_u16(&self.mem, base + 2),
            self.mem[base + 4],
            self.mem[base + 6] & 1 != 0,
        )
    }

    /// PRE-OP -> SAFE-OP: every process-data SM must be configured as the EEPROM declares (a
    /// CoE device: as its dictionary assigns and maps; an SM of 0 bytes may stay disabled).
    fn check_pd_config(&self) -> Option<u16> {
        for sm in &self.pd_sms {
            let base = reg::SM0 + 8 * usize::from(sm.index);
            let start = get_u16(&self.mem, base);
            let len = get_u16(&self.mem, base + 2);
            let enabled = self.mem[base + 6] & 1 != 0;
            // A CoE device has one SM per direction, sized by what it assigns now; a device
            // without a mailbox has the SII's sizes, per SM (a 16-channel terminal has two).
            let want = match (&self.coe, sm.usage) {
                (Some(_), 3) => self.pd_len.0,
                (Some(_), _) => self.pd_len.1,
                (None, _) => sm.len,
            };
            if want == 0 && (!enabled || len == 0) {
                continue;
            }
            // The mode and direction bits (0..3) must be the SII's: a master that writes an
            // input SM as an output (or a mailbox) is refused like a real device refuses it.
            let control = self.mem[base + 4];
            if !enabled || start != sm.start || len != want || control & 0x0f != sm.control & 0x0f {
                return Some(if sm.usage == 3 {
                    al_code::INVALID_OUTPUT_CONFIG
                } else {
                    al_code::INVALID_INPUT_CONFIG
                });
            }
        }
        None
    }

    /// SII control written: execute read / write / reload (ETG1000.4 §6.4.5).
    fn sii_command(&mut self) {
        let hi = self.mem[reg::SII_CONTROL + 1];
        let write_enable = self.mem[reg::SII_CONTROL] & 0x01 != 0;
        let addr = get_u32(&self.mem, reg::SII_ADDRESS) as usize * 2;
        // Error bits are cleared by a new command; only one command bit may be set.
        let cmd = hi & 0x07;
        let mut status = 0u8;
        match cmd {
            0 => {}
            0x01 => {
                let mut data = [0xffu8; 8];
                if addr < self.eeprom.len() {
                    let n = (self.eeprom.len() - addr).min(8);
                    data[..n].copy_from_slice(&self.eeprom[addr..addr + n]);
                }
                self.mem[reg::SII_DATA..reg::SII_DATA + 8].copy_from_slice(&data);
            }
            0x02 => {
                if !write_enable || addr + 2 > self.eeprom.len() {
                    status |= 0x20; // command error
                } else {
                    let (lo, hi2) = (self.mem[reg::SII_DATA], self.mem[reg::SII_DATA + 1]);
                    self.eeprom[addr] = lo;
                    self.eeprom[addr + 1] = hi2;
                }
            }
            0x04 => {
                let alias = get_u16(&self.eeprom, 8);
                put_u16(&mut self.mem, reg::STATION_ALIAS, alias);
            }
            _ => status |= 0x20,
        }
        // The command bits self-clear; the device stays busy for one status read.
        self.mem[reg::SII_CONTROL + 1] = status;
        self.mem[reg::SII_CONTROL] &= 0xc1;
        self.sii_busy_reads = if cmd == 0 { 0 } else { 1 };
        self.sii_busy_until = if cmd == 0 {
            0
        } else {
            self.now_ns + self.spec.timing.sii_ns
        };
    }

    fn parse_fmmus(&mut self) {
        self.n_fmmus = 0;
        for i in 0..16 {
            let b = reg::FMMU0 + 16 * i;
            let m = &self.mem;
            let active = m[b + 12] & 1 != 0;
            let ty = m[b + 11];
            if !active || ty & 0x03 == 0 {
                continue;
            }
            self.fmmus[self.n_fmmus] = Fmmu {
                logical: get_u32(m, b),
                len: u32::from(get_u16(m, b + 4)),
                physical: get_u16(m, b + 8),
                read: ty & 0x01 != 0,
                write: ty & 0x02 != 0,
            };
            self.n_fmmus += 1;
        }
    }

    /// Physical read into the frame; BRD/BRW OR the data in. Returns whether the WKC counts.
    pub(crate) fn phys_read(&mut self, ado: usize, data: &mut [u8], or: bool, now: u64) -> bool {
        if !self.accessible(ado, data.len()) {
            return false;
        }
        let mbx_in = self.mailbox_area(1, ado, data.len());
        if mbx_in.is_some() && !self.mbx.in_full {
            return false;
        }
        self.before_read(ado, data.len(), now);
        let src = &self.mem[ado..ado + data.len()];
        if or {
            data.iter_mut().zip(src).for_each(|(d, s)| *d |= s);
        } else {
            data.copy_from_slice(src);
        }
        if mbx_in == Some(true) {
            self.mbx.in_full = false;
            self.mem[reg::SM0 + 8 + 5] &= !0x08;
            self.mailbox_service();
        }
        true
    }

    /// Physical write from the frame. Returns whether the WKC counts.
    pub(crate) fn phys_write(&mut self, ado: usize, data: &[u8], now: u64) -> bool {
        if !self.accessible(ado, data.len()) {
            return false;
        }
        // A full SM0, and SM1 (the device's direction), refuse the master's writes.
        if self.mailbox_area(1, ado, data.len()).is_some() {
            return false;
        }
        let mbx_out = self.mailbox_area(0, ado, data.len());
        if mbx_out.is_some() && self.mbx.out_full {
            return false;
        }
        self.write_bytes(ado, data, now);
        if mbx_out == Some(true) {
            self.mbx.out_full = true;
            self.mem[reg::SM0 + 5] |= 0x08;
            self.mailbox_service();
        }
        true
    }

    /// Whether [ado, ado+len) touches the buffer of mailbox SM `n` (0 out, 1 in) of a CoE
    /// device with that SM enabled: `Some(true)` when it reaches the buffer's last byte.
    fn mailbox_area(&self, n: usize, ado: usize, len: usize) -> Option<bool> {
        self.coe.as_ref()?;
        let (start, sm_len, _, enabled) = self.sm(n);
        let (start, end) = (usize::from(start), usize::from(start) + usize::from(sm_len));
        if !enabled || sm_len == 0 || ado >= end || ado + len <= start {
            return None;
        }
        Some(ado + len >= end)
    }

    /// SM0 / SM1 activate written: a disabled mailbox SM is emptied; a toggled repeat request
    /// on SM1 puts the last response into it again and is acknowledged in 0x080F bit 1.
    fn mailbox_sm_activate(&mut self) {
        if !self.sm(0).3 {
            self.mbx.out_full = false;
            self.mem[reg::SM0 + 5] &= !0x08;
        }
        if !self.sm(1).3 {
            self.mbx.in_full = false;
            self.mem[reg::SM0 + 8 + 5] &= !0x08;
        }
        let repeat = self.mem[reg::SM0 + 8 + 6] & 0x02 != 0;
        if repeat != self.mbx.repeat {
            self.mbx.repeat = repeat;
            if let Some(last) = self.mbx.last.clone() {
                self.write_mailbox_in(&last);
            }
            let ack = &mut self.mem[reg::SM0 + 8 + 7];
            *ack = (*ack & !0x02) | if repeat { 0x02 } else { 0 };
        }
        self.mailbox_service();
    }

    /// INIT: the mailboxes are emptied and nothing waits.
    fn reset_mailbox(&mut self) {
        if self.coe.is_none() {
            return;
        }
        let repeat = self.mbx.repeat;
        self.mbx = MailboxState {
            repeat,
            ..MailboxState::default()
        };
        self.mem[reg::SM0 + 5] &= !0x08;
        self.mem[reg::SM0 + 8 + 5] &= !0x08;
    }

    /// Put `frame` into SM1's buffer (the rest zeroed): full.
    fn write_mailbox_in(&mut self, frame: &[u8]) {
        let (start, len, _, _) = self.sm(1);
        let (start, len) = (usize::from(start), usize::from(len));
        if start + len > MEM_SIZE {
            return;
        }
        let buf = &mut self.mem[start..start + len];
        buf.fill(0);
        let n = frame.len().min(len);
        buf[..n].copy_from_slice(&frame[..n]);
        self.mbx.in_full = true;
        self.mem[reg::SM0 + 8 + 5] |= 0x08;
    }

    /// The device application's mailbox handler: deliver a waiting response into an empty SM1,
    /// take a request from SM0 when nothing waits and SM1 is free, deliver an emergency when
    /// idle. The mailbox
    /// runs in PRE-OP, SAFE-OP and OP.
    fn mailbox_service(&mut self) {
        if self.coe.is_none() {
            return;
        }
        let st = self.al_state();
        // The mailbox runs in PRE-OP, SAFE-OP and OP; in BOOT for FoE only.
        if !(matches!(st, 2 | 4 | 8) || (st == 3 && self.foe.is_some())) {
            return;
        }
        // Frames from the device's network wait for the mailbox (EoE); in BOOT only FoE runs.
        if let Some(e) = &mut self.eoe {
            e.poll_network(st != 3);
        }
        loop {
            let sm1_ok = self.sm(1).3 && self.sm(1).1 as usize >= 16;
            // A response is ready once the device has had its time (`[device.timing]`).
            let ready = self.now_ns >= self.mbx.ready_at;
            if !self.mbx.in_full
                && sm1_ok
                && ready
                && let Some(r) = self.mbx.queue.pop_front()
            {
                if self.mbx.queue.is_empty() {
                    self.mbx.ready_at = 0;
                }
                self.put_response(r);
                continue;
            }
            // Like a real device's mailbox handler, take the next request only when its answer
            // can go out: SM0 stays full (and refuses writes) while SM1 is.
            if self.mbx.out_full && self.mbx.queue.is_empty() && !self.mbx.in_full {
                self.take_request();
                continue;
            }
            if !self.mbx.in_full
                && sm1_ok
                && !self.mbx.out_full
                && let Some(e) = self.mbx.emergencies.pop_front()
            {
                self.put_response(e);
                return;
            }
            // An idle mailbox carries the device's Ethernet frames to the master, one fragment
            // each time the master has read SM1.
            let room = usize::from(self.sm(1).1).saturating_sub(mailbox::HEADER);
            if !self.mbx.in_full
                && sm1_ok
                && !self.mbx.out_full
                && st != 3
                && let Some(f) = self.eoe.as_mut().and_then(|e| e.next_fragment(room))
            {
                self.put_response(mailbox::frame(mailbox::kind::EOE, &f));
            }
            return;
        }
    }

    fn put_response(&mut self, mut r: Vec<u8>) {
        let c = self.mbx.next_counter();
        if r.len() >= mailbox::HEADER {
            r[5] = (r[5] & 0x8f) | (c << 4);
        }
        self.write_mailbox_in(&r);
        self.mbx.last = Some(r);
    }

    /// Read the request in SM0 (SM0 empty again) and queue the responses.
    fn take_request(&mut self) {
        let (start, len, _, _) = self.sm(0);
        let (start, len) = (usize::from(start), usize::from(len));
        self.mbx.out_full = false;
        self.mem[reg::SM0 + 5] &= !0x08;
        if start + len > MEM_SIZE {
            return;
        }
        let request = self.mem[start..start + len].to_vec();
        let room = usize::from(self.sm(1).1).saturating_sub(mailbox::HEADER);
        let state = AlState::from_u8(self.al_state()).unwrap_or(AlState::PreOp);
        let (out_len, in_len) = (usize::from(self.pd_len.0), usize::from(self.pd_len.1));
        let (out_at, in_at) = self.pd_addrs();
        let Some(coe) = self.coe.as_mut() else {
            return;
        };
        let boot = state == AlState::Boot;
        let mut slow = false;
        match mailbox::parse(&request, len) {
            Parsed::Error(detail) => self.mbx.queue.push_back(mailbox::error_reply(detail)),
            // In BOOT a device runs its bootloader: FoE only.
            Parsed::Coe(_) if boot => self
                .mbx
                .queue
                .push_back(mailbox::error_reply(mailbox::error::UNSUPPORTED_PROTOCOL)),
            Parsed::Eoe(_) if boot => self
                .mbx
                .queue
                .push_back(mailbox::error_reply(mailbox::error::UNSUPPORTED_PROTOCOL)),
            Parsed::Eoe(data) => match self.eoe.as_mut().map(|e| e.handle(data)) {
                Some(Ok(responses)) => {
                    for r in responses {
                        self.mbx
                            .queue
                            .push_back(mailbox::frame(mailbox::kind::EOE, &r));
                    }
                }
                Some(Err(detail)) => self.mbx.queue.push_back(mailbox::error_reply(detail)),
                None => self
                    .mbx
                    .queue
                    .push_back(mailbox::error_reply(mailbox::error::UNSUPPORTED_PROTOCOL)),
            },
            Parsed::Foe(data) => match self.foe.as_mut() {
                Some(foe) => {
                    for r in foe.handle(data, boot, room) {
                        self.mbx
                            .queue
                            .push_back(mailbox::frame(mailbox::kind::FOE, &r));
                    }
                    // New firmware, new revision (SII word 0x0C, bytes 0x18..0x1B; outside the
                    // checksummed configuration area of words 0..7).
                    if let Some(r) = foe.take_installed() {
                        self.eeprom[0x18..0x1c].copy_from_slice(&r.to_le_bytes());
                    }
                }
                None => self
                    .mbx
                    .queue
                    .push_back(mailbox::error_reply(mailbox::error::UNSUPPORTED_PROTOCOL)),
            },
            Parsed::Coe(data) => {
                let img = Image {
                    outputs: &self.mem[out_at..out_at + out_len],
                    inputs: &self.mem[in_at..in_at + in_len],
                };
                // A download to the slow object: an SDO request (CoE service 2) whose command
                // is "initiate download" (1 << 5), its index after the CoE header and command.
                slow = self.spec.timing.slow_object.is_some_and(|o| {
                    data.len() >= 5
                        && data[1] >> 4 == 2
                        && data[2] >> 5 == 1
                        && u16::from_le_bytes([data[3], data[4]]) == o
                });
                let responses = coe.handle(data, state, room, img);
                for r in responses.into_iter().take(mailbox::MAX_QUEUED) {
                    self.mbx
                        .queue
                        .push_back(mailbox::frame(mailbox::kind::COE, &r));
                }
            }
        }
        let answer_ns = if slow {
            self.spec.timing.slow_object_ns
        } else {
            self.spec.timing.mailbox_ns
        };
        if answer_ns > 0 && !self.mbx.queue.is_empty() {
            self.mbx.ready_at = self.now_ns + answer_ns;
        }
    }

    /// Physical addresses of the output and input SM buffers: a CoE device's SM2/SM3, or the
    /// first SM of each direction of a device without a mailbox (a direction's SMs lie back to
    /// back, `spec::check_sms`).
    fn pd_addrs(&self) -> (usize, usize) {
        if self.coe.is_some() {
            return (
                usize::from(sii::COE_OUTPUT_SM_ADDR),
                usize::from(sii::COE_INPUT_SM_ADDR),
            );
        }
        let first = |usage: u8, default: u16| {
            usize::from(
                self.pd_sms
                    .iter()
                    .find(|s| s.usage == usage && s.len > 0)
                    .map_or(default, |s| s.start),
            )
        };
        (first(3, sii::OUTPUT_SM_ADDR), first(4, sii::INPUT_SM_ADDR))
    }

    /// The output bytes and the input bytes of the device's memory (`out_len` at `out_at`,
    /// `in_len` at `in_at`, which do not overlap), the outputs read-only.
    fn io_split(
        mem: &mut [u8],
        (out_at, out_len): (usize, usize),
        (in_at, in_len): (usize, usize),
    ) -> (&[u8], &mut [u8]) {
        if out_at + out_len <= in_at {
            let (lo, hi) = mem.split_at_mut(in_at);
            (&lo[out_at..out_at + out_len], &mut hi[..in_len])
        } else {
            let (lo, hi) = mem.split_at_mut(out_at);
            (&hi[..out_len], &mut lo[in_at..in_at + in_len])
        }
    }

    /// Physical read-write: the frame gets the old contents, memory gets the frame's data.
    pub(crate) fn phys_read_write(&mut self, ado: usize, data: &mut [u8], now: u64) -> bool {
        if !self.accessible(ado, data.len()) {
            return false;
        }
        self.before_read(ado, data.len(), now);
        let len = data.len();
        let mut tmp = [0u8; 64];
        if len <= tmp.len() {
            tmp[..len].copy_from_slice(data);
            data.copy_from_slice(&self.mem[ado..ado + len]);
            self.write_bytes(ado, &tmp[..len], now);
        } else {
            let new = data.to_vec();
            data.copy_from_slice(&self.mem[ado..ado + len]);
            self.write_bytes(ado, &new, now);
        }
        true
    }

    /// Logical access through the FMMUs. Outputs are taken only in OP, inputs are served in
    /// SAFE-OP and OP: in SAFE-OP the WKC of an LRW is therefore 1 per device, not 3.
    pub(crate) fn logical(&mut self, cmd: Cmd, addr: u32, data: &mut [u8]) -> LogicalHit {
        let mut hit = LogicalHit::default();
        let state = self.al_state();
        let inputs_live = state == AlState::SafeOp as u8 || state == AlState::Op as u8;
        let outputs_live = state == AlState::Op as u8;
        if !inputs_live {
            return hit;
        }
        let d_start = u64::from(addr);
        let d_end = d_start + data.len() as u64;
        for f in &self.fmmus[..self.n_fmmus] {
            let f_start = u64::from(f.logical);
            let f_end = f_start + u64::from(f.len);
            let lo = f_start.max(d_start);
            let hi = f_end.min(d_end);
            if lo >= hi {
                continue;
            }
            let n = (hi - lo) as usize;
            let in_frame = (lo - d_start) as usize;
            let phys = usize::from(f.physical) + (lo - f_start) as usize;
            if phys + n > MEM_SIZE {
                continue;
            }
            if f.read && matches!(cmd, Cmd::Lrd | Cmd::Lrw) {
                data[in_frame..in_frame + n].copy_from_slice(&self.mem[phys..phys + n]);
                hit.read = true;
            }
            if f.write && outputs_live && matches!(cmd, Cmd::Lwr | Cmd::Lrw) {
                self.mem[phys..phys + n].copy_from_slice(&data[in_frame..in_frame + n]);
                hit.write = true;
                self.outputs_written = true;
            }
            if f.write && !outputs_live && matches!(cmd, Cmd::Lwr | Cmd::Lrw) {
                self.offered_in_frame = true;
            }
        }
        // The device application runs on the output sync manager event (SM-synchronous), or on
        // the input read for a device without outputs: once per cycle even when the image is
        // spread over several frames.
        if hit.write || (hit.read && self.pd_len.0 == 0) {
            self.pd_touched = true;
        }
        // A drive also runs in SAFE-OP (its statusword is live before OP; IEC 61800-7-301 /
        // ETG.6010: outputs are not valid there, so it is commanded as with controlword 0).
        if self.drive.is_some() && hit.read && !outputs_live {
            self.pd_touched = true;
        }
        hit
    }

    /// End of a frame: the device application consumes outputs and produces the next inputs.
    pub(crate) fn end_of_frame(&mut self, now_ns: u64) {
        if self.outputs_written {
            self.outputs_written = false;
            self.last_output_ns = Some(now_ns);
        }
        if self.offered_in_frame {
            self.offered_in_frame = false;
            self.outputs_offered = self.outputs_offered.saturating_add(1);
        }
        if !self.pd_touched {
            return;
        }
        self.pd_touched = false;
        self.pd_counter = self.pd_counter.wrapping_add(1);
        if self.drive.is_some() {
            self.step_drive(now_ns);
        } else {
            self.publish_inputs();
        }
    }

    /// One cycle of the CiA 402 drive model ([`crate::cia402`]) instead of the `pdi` rule.
    fn step_drive(&mut self, now_ns: u64) {
        let op = self.al_state() == AlState::Op as u8;
        let out_len = usize::from(self.pd_len.0);
        let in_len = usize::from(self.pd_len.1);
        let (out_at, in_at) = self.pd_addrs();
        let (Some((drive, last)), Some(coe)) = (self.drive.as_mut(), self.coe.as_mut()) else {
            return;
        };
        let dt = last.map_or(0.0, |l| now_ns.saturating_sub(l) as f64 * 1e-9);
        *last = Some(now_ns);
        let (outputs, inputs) = Self::io_split(&mut self.mem, (out_at, out_len), (in_at, in_len));
        let emergency = drive.step(&mut coe.od, op.then_some(outputs), inputs, dt);
        if let Some((code, register)) = emergency {
            self.queue_emergency(code, register, [0; 5]);
        }
    }

    /// The device's inputs from its outputs ([`crate::pdi`]): the rule covers the bytes the
    /// input SM carries, whatever entries a CoE device maps there (its statusword is thus the
    /// low half of the counter); SDO uploads of mapped objects read the same bytes.
    fn publish_inputs(&mut self) {
        let out_len = usize::from(self.pd_len.0);
        let in_len = usize::from(self.pd_len.1);
        let (out_at, in_at) = self.pd_addrs();
        let (outputs, inputs) = Self::io_split(&mut self.mem, (out_at, out_len), (in_at, in_len));
        pdi::device_inputs(self.pd_counter, outputs, inputs);
    }

    /// Whether this device supports distributed clocks (DC registers 0x0900..0x09ff).
    pub fn has_dc(&self) -> bool {
        self.spec.dc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SegmentSpec;

    fn dc_device() -> Esc {
        let spec = SegmentSpec::uniform(1, 4, 4).with_dc(true);
        let mut e = Esc::new(spec.devices[0].clone(), 0, 1);
        e.power_on();
        e
    }

    /// Registers whose own bytes a write legitimately changes beyond the written bits: the SII
    /// control's command bits self-clear and its status reports the command; a write to port
    /// 0's receive time latches the receive times; the system time is computed on read.
    fn side_effect(a: usize) -> bool {
        matches!(a, 0x0503 | 0x0900..=0x0903 | 0x0910..=0x0917)
    }

    #[test]
    fn a_master_write_changes_only_what_the_register_description_lets_it() {
        for a in 0..0x1000usize {
            for v in [0x00u8, 0xff, 0x5a] {
                let mut e = dc_device();
                let before = e.mem().to_vec();
                e.phys_write(a, &[v], 1_000);
                let after = e.mem()[a];
                if side_effect(a) {
                    continue;
                }
                let mask = Esc::write_mask(a);
                let want = (before[a] & !mask) | (v & mask);
                // AL control drives the state machine, which may refuse and leave the request
                // as written: only the masked bits are the master's.
                assert_eq!(
                    after & !mask,
                    before[a] & !mask,
                    "{a:#06x} <- {v:#04x}: read-only bits changed ({:#04x} -> {after:#04x}, mask {mask:#04x})",
                    before[a]
                );
                if mask != 0 && !matches!(a, 0x0120) {
                    assert_eq!(after, want, "{a:#06x} <- {v:#04x}");
                }
            }
        }
    }

    /// The 16-channel output of `examples/sm01`: SM0 and SM1 at 0x0F00/0x0F01, 1 byte each,
    /// go to SAFE-OP only when each SM has the SII's start, length and control bits.
    #[test]
    fn sm0_and_sm1_process_data_must_be_configured_as_the_sii_says() {
        let spec =
            SegmentSpec::from_toml(include_str!("../../../examples/sm01/segment.toml")).unwrap();
        let configure = |sm1: [u8; 8]| {
            let mut e = Esc::new(spec.devices[2].clone(), 0, 1);
            e.phys_write(reg::AL_CONTROL, &[AlState::PreOp as u8, 0], 0);
            assert_eq!(e.al_state(), AlState::PreOp as u8);
            e.phys_write(reg::SM0, &[0x00, 0x0f, 1, 0, 0x44, 0, 1, 0], 0);
            e.phys_write(reg::SM0 + 8, &sm1, 0);
            e.phys_write(reg::AL_CONTROL, &[AlState::SafeOp as u8, 0], 0);
            (e.al_state(), e.al_error(), e.al_status_code())
        };
        let ok = [0x01, 0x0f, 1, 0, 0x44, 0, 1, 0];
        assert_eq!(configure(ok), (AlState::SafeOp as u8, false, 0));
        for (what, sm1) in [
            ("read by the master", [0x01, 0x0f, 1, 0, 0x40, 0, 1, 0]),
            ("two bytes", [0x01, 0x0f, 2, 0, 0x44, 0, 1, 0]),
            ("another start", [0x00, 0x10, 1, 0, 0x44, 0, 1, 0]),
            ("disabled", [0x01, 0x0f, 1, 0, 0x44, 0, 0, 0]),
        ] {
            assert_eq!(
                configure(sm1),
                (AlState::PreOp as u8, true, al_code::INVALID_OUTPUT_CONFIG),
                "SM1 {what}"
            );
        }
    }

    #[test]
    fn sii_control_keeps_its_read_only_bits() {
        // The defect another master found: writing the control word of a read command
        // (0x0100) cleared "8-byte reads supported" (0x0502 bit 6).
        let mut e = dc_device();
        assert_eq!(e.mem()[reg::SII_CONTROL] & 0x40, 0x40);
        e.phys_write(reg::SII_CONTROL, &[0x00, 0x01, 0, 0, 0, 0], 0);
        assert_eq!(
            e.mem()[reg::SII_CONTROL] & 0xc0,
            0xc0,
            "8-byte reads, algorithm"
        );
        // the write-enable bit is the master's
        e.phys_write(reg::SII_CONTROL, &[0x01], 0);
        assert_eq!(e.mem()[reg::SII_CONTROL] & 0x01, 0x01);
        // SM status and an FMMU's reserved bytes stay as the ESC has them
        e.phys_write(reg::SM0 + 5, &[0xff], 0);
        assert_eq!(e.mem()[reg::SM0 + 5], 0);
        e.phys_write(reg::FMMU0 + 13, &[0xff, 0xff, 0xff], 0);
        assert_eq!(&e.mem()[reg::FMMU0 + 13..reg::FMMU0 + 16], &[0, 0, 0]);
        // the alias is loaded from the SII, not written by the master
        let alias = get_u16(e.mem(), reg::STATION_ALIAS);
        e.phys_write(reg::STATION_ALIAS, &[0x34, 0x12], 0);
        assert_eq!(get_u16(e.mem(), reg::STATION_ALIAS), alias);
    }
}
