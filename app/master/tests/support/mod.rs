//! Test support shared by the master's integration tests.

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
