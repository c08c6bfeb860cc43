//! The CoE example (`examples/coe`) made a line of any length: what the tests of the bring-up's
//! SII cache and of its overlapped configuration bring up.

use ecsim::SegmentSpec;
use rtcat_master::Config;

/// The example's configuration.
pub const CONFIG: &str = include_str!("../../../../examples/coe/rtcat.toml");
const SEGMENT: &str = include_str!("../../../../examples/coe/segment.toml");

/// The example's devices repeated to `n` (positions 0, 1, 2 = DIO8, AI4, SERVO, ...), each
/// with its own serial.
pub fn segment(n: usize) -> SegmentSpec {
    let base = SegmentSpec::from_toml(SEGMENT).expect("examples/coe/segment.toml");
    let mut s = base.clone();
    s.devices = (0..n)
        .map(|i| {
            let mut d = base.devices[i % base.devices.len()].clone();
            d.serial = 1000 + i as u32;
            d
        })
        .collect();
    s
}

/// `text` (the example's configuration, or a variant of it) with the segment checks dropped
/// and the servo's entry by identity, so that it configures every third device of [`segment`].
pub fn config(text: &str) -> Config {
    let mut c = Config::parse(text, "examples/coe/rtcat.toml").expect("example config");
    c.segment = Default::default();
    for d in &mut c.device {
        if d.position == Some(2) {
            d.position = None;
            d.vendor_id = Some(ecsim::spec::REFERENCE_VENDOR);
            d.product_id = Some(0x0003_0003);
        }
    }
    c
}
