//! The application `rtcat bench --sim` and `--check-echo` run: it writes a changing pattern and
//! checks, byte for byte, that every subdevice's inputs echo the outputs (the simulator's
//! deterministic input rule, `ecsim::pdi`), so a run proves data flows both ways. It compares
//! against the outputs actually sent, so entries other programs own through the shared-memory
//! image (`[shm]`) are checked too.

use crate::{AppError, Application, Cycle, Setup};

/// The echo check.
#[derive(Debug, Default)]
pub struct EchoCheck {
    /// Outputs sent in the previous exchange and in the current one, per position.
    prev: Vec<Vec<u8>>,
    current: Vec<Vec<u8>>,
    seeded: Vec<bool>,
}

fn pattern(cycle: u64, position: usize, k: usize) -> u8 {
    (cycle as u8)
        .wrapping_mul(31)
        .wrapping_add(position as u8)
        .wrapping_add(k as u8)
}

impl Application for EchoCheck {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        let lens = setup.layout().output_sizes();
        self.prev = lens.iter().map(|&n| vec![0; n]).collect();
        self.current = self.prev.clone();
        self.seeded = vec![false; lens.len()];
        Ok(())
    }

    /// A subdevice brought back on its own starts its echo anew (its device application
    /// restarted: what it echoes first is not what the last exchange sent).
    fn on_subdevice(&mut self, event: &crate::SubdeviceEvent) {
        if let Some(s) = self.seeded.get_mut(usize::from(event.position)) {
            *s = false;
        }
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        // Only after a complete exchange: with a wrong WKC some inputs are stale, and the outputs
        // of the last good cycle stay in place.
        if !cx.status.is_good() {
            return;
        }
        let cycle = cx.status.cycle;
        for position in 0..cx.image.subdevices().min(self.prev.len()) {
            let prev = &mut self.prev[position];
            let current = &mut self.current[position];
            // What this exchange sent: the image's outputs as the previous cycle left them, with
            // whatever an application wrapped around this one wrote after it (the shared image's
            // client writers), not just this pattern.
            let sent = cx.image.outputs_of(position);
            let n = sent.len().min(current.len());
            current[..n].copy_from_slice(&sent[..n]);
            let inputs = cx.image.inputs_of(position);
            // Inputs echo the previous exchange's outputs, or this exchange's when they travel
            // in a later frame than the outputs (multi-frame images).
            let ok = !self.seeded[position]
                || ecsim::pdi::check_inputs(inputs, prev).is_some()
                || ecsim::pdi::check_inputs(inputs, current).is_some();
            prev.copy_from_slice(current);
            let outputs = cx.image.outputs_of_mut(position);
            for (k, b) in outputs.iter_mut().enumerate() {
                *b = pattern(cycle + 1, position, k);
            }
            self.seeded[position] = true;
            if !ok {
                cx.data_error(position as u16);
            }
        }
    }
}
