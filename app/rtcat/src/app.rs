//! The application hook: what the machine does with the process data every cycle.
//!
//! Called in the cyclic thread right after the exchange, once per subdevice, with that cycle's
//! inputs; the outputs it writes go out with the next cycle. It must not allocate, lock or block.

/// Per-cycle process-data hook.
pub trait Application: Send {
    /// Called once per subdevice (in position order) after each exchange. Return `false` when the
    /// inputs are not what the application expects (counted as a data error).
    fn cycle(&mut self, cycle: u64, position: usize, inputs: &[u8], outputs: &mut [u8]) -> bool;

    /// The segment was (re-)initialised with these output sizes per position: forget any state
    /// of the old one and allocate what the cycles will need (called outside the cyclic path).
    fn reset(&mut self, _output_lens: &[usize]) {}
}

/// The reference behaviour: all outputs held at zero, inputs ignored.
#[derive(Debug, Default)]
pub struct ZeroOutputs;

impl Application for ZeroOutputs {
    fn cycle(&mut self, _cycle: u64, _position: usize, _inputs: &[u8], outputs: &mut [u8]) -> bool {
        outputs.fill(0);
        true
    }
}

/// For the simulated segment: writes a changing pattern and checks, byte for byte, that every
/// device's inputs echo the outputs (see `ecsim::pdi`), so a run proves data flows both ways.
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
    fn cycle(&mut self, cycle: u64, position: usize, inputs: &[u8], outputs: &mut [u8]) -> bool {
        let Some(prev) = self.prev.get_mut(position) else {
            return true;
        };
        let current = &mut self.current[position];
        if prev.len() != outputs.len() {
            // Layout differs from what reset() announced: nothing to compare against.
            return false;
        }
        // Inputs echo the previous exchange's outputs, or this exchange's when they travel in a
        // later frame than the outputs (multi-frame images).
        let ok = !self.seeded[position]
            || ecsim::pdi::check_inputs(inputs, prev).is_some()
            || ecsim::pdi::check_inputs(inputs, current).is_some();
        prev.copy_from_slice(current);
        for (k, b) in outputs.iter_mut().enumerate() {
            *b = pattern(cycle + 1, position, k);
        }
        current.copy_from_slice(outputs);
        self.seeded[position] = true;
        ok
    }

    fn reset(&mut self, output_lens: &[usize]) {
        self.prev = output_lens.iter().map(|&n| vec![0; n]).collect();
        self.current = self.prev.clone();
        self.seeded = vec![false; output_lens.len()];
    }
}
