//! How a simulated device derives its inputs from its outputs, so that a master can check that
//! process data crossed the wire both ways, byte for byte.
//!
//! Once per cycle -- after the frame that wrote its outputs (OP), or for a device without outputs
//! after the frame that read its inputs -- a device increments its cycle counter `c` and writes
//! its inputs:
//! - bytes `0..min(4, len)`: `c` as little-endian u32 (truncated for short images);
//! - byte `k >= 4`: `outputs[(k - 4) % outputs.len()] ^ 0x5a`, or `(c as u8).wrapping_add(k)` for a
//!   device without outputs.
//!
//! When outputs and inputs travel in the same frame (the usual single-frame image), the inputs a
//! master reads in cycle n are computed from the outputs it wrote in cycle n-1; when the image is
//! split over several frames and a device's inputs travel in a later frame than its outputs, they
//! already echo cycle n. Either way the counter advances by exactly one per cycle.

/// Input byte `k` of a device with cycle counter `counter` and the given outputs.
#[inline]
pub fn input_byte(counter: u32, outputs: &[u8], k: usize) -> u8 {
    if k < 4 {
        counter.to_le_bytes()[k]
    } else if outputs.is_empty() {
        (counter as u8).wrapping_add(k as u8)
    } else {
        outputs[(k - 4) % outputs.len()] ^ 0x5a
    }
}

/// Compute a device's inputs from its counter and its current outputs.
pub fn device_inputs(counter: u32, outputs: &[u8], inputs: &mut [u8]) {
    for (k, b) in inputs.iter_mut().enumerate() {
        *b = input_byte(counter, outputs, k);
    }
}

/// Check inputs read from a device against the outputs written one exchange earlier. Returns the
/// device counter found in the inputs, or None when any byte does not match.
pub fn check_inputs(inputs: &[u8], prev_outputs: &[u8]) -> Option<u32> {
    let mut c = [0u8; 4];
    let n = inputs.len().min(4);
    c[..n].copy_from_slice(&inputs[..n]);
    let counter = u32::from_le_bytes(c);
    inputs
        .iter()
        .enumerate()
        .all(|(k, b)| *b == input_byte(counter, prev_outputs, k))
        .then_some(counter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let outs: Vec<u8> = (0..22).collect();
        for len in [1usize, 3, 4, 22, 600] {
            let mut ins = vec![0u8; len];
            device_inputs(77, &outs, &mut ins);
            assert_eq!(
                check_inputs(&ins, &outs),
                Some(77 & (u32::MAX >> (32 - 8 * len.min(4) as u32)))
            );
            if len > 4 {
                ins[len - 1] ^= 1;
                assert_eq!(check_inputs(&ins, &outs), None);
            }
        }
    }
}
