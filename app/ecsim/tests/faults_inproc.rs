//! Every injected fault is observable from the master side (ethercrab), in-process.

use ecsim::inproc::InprocDriver;
use ecsim::{FaultCommand, Faults, SegmentSpec, SimPort};
use ethercrab::std::ethercat_now;
use ethercrab::subdevice_group::Op;
use ethercrab::{
    DefaultLock, MainDevice, MainDeviceConfig, PduStorage, SubDeviceGroup, SubDeviceState, Timeouts,
};
use futures_lite::future::block_on;
use std::time::{Duration, Instant};

type Group = SubDeviceGroup<4, 256, DefaultLock, Op>;

struct Rig {
    md: MainDevice<'static>,
    group: Group,
    faults: Faults,
}

fn rig() -> Rig {
    let storage: &'static PduStorage<16, { PduStorage::element_size(1100) }> =
        Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().expect("split once");
    let faults = Faults::new();
    let port = SimPort::with_faults(SegmentSpec::reference(), faults.clone());
    std::thread::spawn(move || InprocDriver::new(tx, rx, port).run());
    let timeouts = Timeouts {
        eeprom: Duration::from_millis(500),
        pdu: Duration::from_millis(200),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<4, 256>(ethercat_now)).expect("init");
    let group = block_on(group.into_op(&md)).expect("OP");
    Rig { md, group, faults }
}

impl Rig {
    /// One cycle: Ok(wkc, states) or Err on timeout.
    fn cycle(&self) -> Result<(u16, Vec<SubDeviceState>), ethercrab::error::Error> {
        block_on(self.group.tx_rx(&self.md)).map(|r| {
            (
                r.working_counter,
                r.subdevice_states.iter().copied().collect(),
            )
        })
    }

    fn healthy_cycles(&self, n: usize) {
        for i in 0..n {
            let (wkc, states) = self.cycle().unwrap_or_else(|e| panic!("cycle {i}: {e}"));
            assert_eq!(wkc, 9, "cycle {i}");
            assert!(
                states.iter().all(|s| *s == SubDeviceState::Op),
                "{states:?}"
            );
        }
    }
}

#[test]
fn dropped_responses_time_out_then_recover() {
    let r = rig();
    r.healthy_cycles(5);
    r.faults.apply(FaultCommand::DropNext(3));
    for i in 0..3 {
        assert!(r.cycle().is_err(), "dropped response {i} must time out");
    }
    r.healthy_cycles(10);
}

#[test]
fn a_fraction_of_responses_is_lost() {
    let r = rig();
    r.faults.apply(FaultCommand::DropFraction(0.5));
    let lost = (0..40).filter(|_| r.cycle().is_err()).count();
    assert!((5..=35).contains(&lost), "lost {lost} of 40 at 50 %");
    r.faults.apply(FaultCommand::Clear);
    r.healthy_cycles(10);
}

#[test]
fn delayed_responses_show_in_the_round_trip() {
    let r = rig();
    r.healthy_cycles(3);
    r.faults.apply(FaultCommand::DelayUs(20_000));
    let t = Instant::now();
    r.healthy_cycles(3);
    assert!(
        t.elapsed() >= Duration::from_millis(60),
        "{:?}",
        t.elapsed()
    );
    r.faults.apply(FaultCommand::DelayUs(0));
    r.healthy_cycles(3);
}

#[test]
fn link_down_times_out_until_link_up() {
    let r = rig();
    r.faults.apply(FaultCommand::Link(false));
    for _ in 0..3 {
        assert!(r.cycle().is_err());
    }
    r.faults.apply(FaultCommand::Link(true));
    r.healthy_cycles(10);
}

#[test]
fn subdevice_error_drops_the_wkc_and_shows_in_al_status() {
    let r = rig();
    r.healthy_cycles(3);
    r.faults.apply(FaultCommand::SubdeviceError {
        position: 1,
        code: 0x001b,
    });
    let (wkc, states) = r.cycle().expect("cycle");
    assert_eq!(wkc, 7, "the faulted device no longer takes outputs");
    assert_eq!(states[1], SubDeviceState::SafeOp);
    let sd = r.group.subdevice(&r.md, 1).unwrap();
    // ethercrab reports the error flag with the AL status code.
    match block_on(sd.status()) {
        Err(ethercrab::error::Error::SubDevice(code)) => {
            assert_eq!(code, ethercrab::AlStatusCode::SyncManagerWatchdog)
        }
        other => panic!("expected the AL status code, got {other:?}"),
    }
    // Without acknowledging the error, a state request is ignored.
    let _ = block_on(sd.register_write(0x0120u16, 0x0008u16));
    assert_eq!(r.cycle().unwrap().0, 7);
    // Acknowledge (bit 4) and request OP: back to a full WKC.
    block_on(sd.register_write(0x0120u16, 0x0018u16)).unwrap();
    r.healthy_cycles(5);
}

#[test]
fn power_cycle_loses_every_subdevice() {
    let r = rig();
    r.healthy_cycles(3);
    r.faults.apply(FaultCommand::PowerCycle);
    let (wkc, _states) = r.cycle().expect("frames still come back");
    assert_eq!(wkc, 0, "no FMMU is configured after a power cycle");
    // The station addresses are gone: a configured-address read finds nobody.
    let sd = r.group.subdevice(&r.md, 0).unwrap();
    assert!(block_on(sd.status()).is_err());
}

#[test]
fn corrupted_wkc_is_seen_for_exactly_n_cycles() {
    let r = rig();
    r.faults.apply(FaultCommand::CorruptWkc(2));
    assert_eq!(r.cycle().unwrap().0, 8);
    assert_eq!(r.cycle().unwrap().0, 8);
    r.healthy_cycles(5);
}
