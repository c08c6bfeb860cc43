//! Test support shared by the master's integration tests.

// Each test binary includes this module and uses a part of it.
#![allow(dead_code)]

/// Whether a run failed on a timeout: a bring-up PDU, an EEPROM read, a mailbox or a state
/// change that did not come back in time. The in-process segment answers inside the send, so
/// on this target a timeout is the test machine's scheduling (a starved setup thread), a
/// verdict retried as `ecsim::noise` says; any other error is a defect of the code.
pub fn timed_out(e: &rtcat_master::Error) -> bool {
    use rtcat_master::Error;
    match e {
        Error::Bus { source, .. } => matches!(source, ethercrab::error::Error::Timeout(_)),
        Error::GaveUp { last, .. } => timed_out(last),
        Error::Stopped(inner) => timed_out(inner),
        // An SDO's mailbox timeout: the error names it in its text (rtcat's CoE client says
        // "no answer within N ms").
        Error::Device(d) => {
            let m = d.to_string().to_ascii_lowercase();
            m.contains("timeout") || m.contains("no answer within")
        }
        _ => false,
    }
}

/// A run inside an attempt (`ecsim::noise::within_machine_noise`): `Err` naming the timeout
/// when it failed on one ([`timed_out`]), a panic on any other error.
pub fn run_attempt(
    spec: rtcat_master::RunSpec,
    app: &mut dyn rtcat_master::Application,
) -> Result<rtcat_master::Outcome, String> {
    match rtcat_master::run_simple(spec, app) {
        Ok(out) => Ok(out),
        Err(e) if timed_out(&e) => Err(format!("run: {e}")),
        Err(e) => panic!("run: {e}"),
    }
}

use rtcat_master::Setup;
use rtcat_master::coe::Port;

/// The ESC registers of `configure` as a CoE client's port: SDOs from inside the bring-up.
pub struct SetupPort<'s, 'a> {
    pub setup: &'s mut Setup<'a>,
    pub position: u16,
}

impl Port for SetupPort<'_, '_> {
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error> {
        self.setup
            .read_register(self.position, register, buf)
            .map_err(|_| ethercrab::error::Error::Internal)
    }

    fn write(&mut self, register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error> {
        self.setup
            .write_register(self.position, register, data)
            .map_err(|_| ethercrab::error::Error::Internal)
    }
}
