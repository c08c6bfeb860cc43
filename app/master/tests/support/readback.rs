//! A segment brought to OP and read back while it cycles: the layout the bring-up gave the
//! application and every subdevice's sync manager (0x0800), FMMU (0x0600) and DC (0x0900)
//! areas, read through the master's register queue (`tests/pd_registers.rs`,
//! `tests/own_bringup.rs`).

use ecsim::{Faults, SegmentSpec};
use rtcat_master::acyclic::{SdoClient, sdo_queue};
use rtcat_master::{AppError, Application, Config, Cycle, Layout, Setup, Stop};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Keeps the bring-up's layout and says when every subdevice has been valid and in OP for a
/// while.
struct Keep {
    layout: Arc<Mutex<Option<Layout>>>,
    good: u32,
    up: Arc<AtomicBool>,
}

impl Application for Keep {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        *self.layout.lock().unwrap_or_else(|e| e.into_inner()) = Some(setup.layout().clone());
        Ok(())
    }
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let well = cx
            .status
            .subdevices
            .iter()
            .all(|d| d.data_valid && d.in_op());
        self.good = if well { self.good + 1 } else { 0 };
        if self.good >= 20 {
            self.up.store(true, Ordering::Release);
        }
    }
}

/// `len` bytes of `position`'s registers from `address`, in pieces the register queue carries.
fn registers(c: &SdoClient, position: u16, address: u16, len: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let n = (len - out.len()).min(32);
        let at = address + out.len() as u16;
        let d = c
            .read_register(position, at, n as u8, Duration::from_secs(1))
            .map_err(|e| format!("position {position} register {at:#06x}: {e:?}"))?;
        out.extend_from_slice(&d.as_slice()[..n]);
    }
    Ok(out)
}

/// What one subdevice's register areas hold, read in OP.
pub struct Regs {
    /// 0x0800..0x087F: 16 sync managers.
    pub sm: Vec<u8>,
    /// 0x0600..0x06FF: 16 FMMUs.
    pub fmmu: Vec<u8>,
    /// 0x0900..0x09AF of a device with a distributed clock (empty without): receive times,
    /// system time, offset, delay, SYNC activation, start time, SYNC0 and SYNC1 cycle times
    /// (at offsets 0x20, 0x28, 0x81, 0x90, 0xA0, 0xA4).
    pub dc: Vec<u8>,
}

/// The layout and, per position, its registers.
pub type Read = (Layout, Vec<Regs>);

pub fn read_back(cfg: Config, spec: SegmentSpec) -> Result<Read, String> {
    let n = spec.devices.len();
    let (client, service) = sdo_queue(16, Duration::from_micros(300));
    let stop = Stop::new();
    let mut run = super::line::sim_run(
        cfg,
        spec,
        Faults::new(),
        stop.clone(),
        Duration::from_secs(60),
    );
    run.sdo = Some(service);
    let layout = Arc::new(Mutex::new(None));
    let up = Arc::new(AtomicBool::new(false));
    let mut app = Keep {
        layout: layout.clone(),
        good: 0,
        up: up.clone(),
    };
    let reader = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        while !up.load(Ordering::Acquire) {
            if t0.elapsed() > Duration::from_secs(50) {
                stop.request();
                return Err("not in OP within 50 s".to_string());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let r = (0..n as u16)
            .map(|p| {
                // ESC features (0x0008) bit 2: it has a distributed clock.
                let has_dc = registers(&client, p, 0x0008, 2)?[0] & 0x04 != 0;
                Ok(Regs {
                    sm: registers(&client, p, 0x0800, 128)?,
                    fmmu: registers(&client, p, 0x0600, 256)?,
                    dc: if has_dc {
                        registers(&client, p, 0x0900, 0xb0)?
                    } else {
                        Vec::new()
                    },
                })
            })
            .collect::<Result<Vec<_>, String>>();
        stop.request();
        r
    });
    let ran = rtcat_master::run_simple(run, &mut app).map_err(|e| format!("run: {e}"));
    let regs = reader.join().expect("reader")?;
    ran?;
    let layout = layout.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok((layout.ok_or("no layout")?, regs))
}

/// An SM's registers (8 bytes) without its status byte (offset 5: read only, the device's).
pub fn sm_fields(r: &[u8]) -> [u8; 7] {
    [r[0], r[1], r[2], r[3], r[4], r[6], r[7]]
}
