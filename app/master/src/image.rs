//! The process image the application reads and writes every cycle, and typed accessors to its
//! entries.
//!
//! The master copies each subdevice's inputs into [`ProcessImage`] after the exchange and its
//! outputs back into ethercrab's image before the next one, so the application works on one
//! plain, contiguous buffer per direction with no lock held. An accessor ([`Input`], [`Output`])
//! is resolved once from the [`Layout`] (by name or index:subindex) and is then a bit offset:
//! reading or writing it does no lookup and allocates nothing.
//!
//! Bit order is EtherCAT's: little endian, bit 0 of a byte first (ETG.1000.4 §5.3).

use crate::layout::{DataType, Direction, Entry, Layout, LayoutError};
use std::marker::PhantomData;

/// A value type an entry can be read as.
pub trait PdoValue: Copy + Default + Send + 'static {
    /// Its width in bits.
    const BITS: u8;
    /// Its name, for errors.
    const NAME: &'static str;
    /// Whether an entry of this data type can be read as `Self` (the width is checked apart).
    fn accepts(dt: DataType) -> bool;
    /// From the raw little-endian bits (the low `BITS` bits of `raw`).
    fn from_raw(raw: u64) -> Self;
    /// To raw bits.
    fn to_raw(self) -> u64;
}

macro_rules! int_value {
    ($t:ty, $bits:expr, $name:expr, $signed:expr) => {
        impl PdoValue for $t {
            const BITS: u8 = $bits;
            const NAME: &'static str = $name;
            fn accepts(dt: DataType) -> bool {
                // Integers of the right width, whatever their signedness (a UINT16 status word
                // read as i16 is the user's choice), and unknown types; never floats.
                !dt.is_float()
            }
            #[inline]
            fn from_raw(raw: u64) -> Self {
                raw as $t
            }
            #[inline]
            fn to_raw(self) -> u64 {
                if $signed {
                    (self as i64 as u64) & (u64::MAX >> (64 - $bits))
                } else {
                    self as u64
                }
            }
        }
    };
}

int_value!(u8, 8, "u8", false);
int_value!(u16, 16, "u16", false);
int_value!(u32, 32, "u32", false);
int_value!(u64, 64, "u64", false);
int_value!(i8, 8, "i8", true);
int_value!(i16, 16, "i16", true);
int_value!(i32, 32, "i32", true);
int_value!(i64, 64, "i64", true);

impl PdoValue for bool {
    const BITS: u8 = 1;
    const NAME: &'static str = "bool";
    fn accepts(dt: DataType) -> bool {
        !dt.is_float()
    }
    #[inline]
    fn from_raw(raw: u64) -> Self {
        raw & 1 != 0
    }
    #[inline]
    fn to_raw(self) -> u64 {
        u64::from(self)
    }
}

impl PdoValue for f32 {
    const BITS: u8 = 32;
    const NAME: &'static str = "f32";
    fn accepts(dt: DataType) -> bool {
        dt == DataType::Real32 || !dt.is_known()
    }
    #[inline]
    fn from_raw(raw: u64) -> Self {
        f32::from_bits(raw as u32)
    }
    #[inline]
    fn to_raw(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl PdoValue for f64 {
    const BITS: u8 = 64;
    const NAME: &'static str = "f64";
    fn accepts(dt: DataType) -> bool {
        dt == DataType::Real64 || !dt.is_known()
    }
    #[inline]
    fn from_raw(raw: u64) -> Self {
        f64::from_bits(raw)
    }
    #[inline]
    fn to_raw(self) -> u64 {
        self.to_bits()
    }
}

/// A resolved input entry: read it with [`ProcessImage::get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input<T> {
    bit: u32,
    generation: u32,
    _t: PhantomData<fn() -> T>,
}

/// A resolved output entry: write it with [`ProcessImage::set`], read back with
/// [`ProcessImage::get_output`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output<T> {
    bit: u32,
    generation: u32,
    _t: PhantomData<fn() -> T>,
}

impl<T> Input<T> {
    /// Bit position in the input image.
    pub fn bit_offset(&self) -> u32 {
        self.bit
    }
}

impl<T> Output<T> {
    /// Bit position in the output image.
    pub fn bit_offset(&self) -> u32 {
        self.bit
    }
}

fn check<T: PdoValue>(e: &Entry) -> Result<u32, LayoutError> {
    if e.bits != T::BITS || !T::accepts(e.data_type) {
        return Err(LayoutError::Type {
            entry: format!("{} (position {}, {})", e.name, e.position, e.address()),
            bits: e.bits,
            data_type: e.data_type,
            asked: T::NAME,
        });
    }
    Ok(e.bit_offset)
}

impl Layout {
    /// The input entry called `name` (or `PDO.entry`), unique in the segment, as a `T`.
    pub fn input<T: PdoValue>(&self, name: &str) -> Result<Input<T>, LayoutError> {
        self.input_of(None, name)
    }

    /// The output entry called `name` (or `PDO.entry`), unique in the segment, as a `T`.
    pub fn output<T: PdoValue>(&self, name: &str) -> Result<Output<T>, LayoutError> {
        self.output_of(None, name)
    }

    /// The input entry called `name` (or `PDO.entry`) of the subdevice at `position` (or, with
    /// `None`, unique in the segment), as a `T`.
    pub fn input_of<T: PdoValue>(
        &self,
        position: Option<u16>,
        name: &str,
    ) -> Result<Input<T>, LayoutError> {
        let e = self.by_name(Direction::Inputs, position, name)?;
        Ok(Input {
            bit: check::<T>(e)?,
            generation: self.generation,
            _t: PhantomData,
        })
    }

    /// The output entry called `name` (or `PDO.entry`) of the subdevice at `position` (or,
    /// with `None`, unique in the segment), as a `T`.
    pub fn output_of<T: PdoValue>(
        &self,
        position: Option<u16>,
        name: &str,
    ) -> Result<Output<T>, LayoutError> {
        let e = self.by_name(Direction::Outputs, position, name)?;
        Ok(Output {
            bit: check::<T>(e)?,
            generation: self.generation,
            _t: PhantomData,
        })
    }

    /// The input entry `index:subindex` of the subdevice at `position`.
    pub fn input_at<T: PdoValue>(
        &self,
        position: u16,
        index: u16,
        subindex: u8,
    ) -> Result<Input<T>, LayoutError> {
        let e = self.by_address(Direction::Inputs, position, index, subindex)?;
        Ok(Input {
            bit: check::<T>(e)?,
            generation: self.generation,
            _t: PhantomData,
        })
    }

    /// The output entry `index:subindex` of the subdevice at `position`.
    pub fn output_at<T: PdoValue>(
        &self,
        position: u16,
        index: u16,
        subindex: u8,
    ) -> Result<Output<T>, LayoutError> {
        let e = self.by_address(Direction::Outputs, position, index, subindex)?;
        Ok(Output {
            bit: check::<T>(e)?,
            generation: self.generation,
            _t: PhantomData,
        })
    }
}

/// Per-subdevice byte ranges of the image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Area {
    input: (u32, u32),
    output: (u32, u32),
}

/// The process image of one segment: all inputs, then (separately) all outputs, in position
/// order, as the [`Layout`] of the same generation describes them.
#[derive(Debug, Clone, Default)]
pub struct ProcessImage {
    inputs: Vec<u8>,
    outputs: Vec<u8>,
    areas: Vec<Area>,
    generation: u32,
    stale: u64,
}

#[inline]
fn read_bits(buf: &[u8], bit: u32, bits: u8) -> Option<u64> {
    let start = (bit / 8) as usize;
    let shift = bit % 8;
    if shift == 0 && bits.is_multiple_of(8) {
        // Whole bytes: the common case.
        let n = usize::from(bits / 8);
        let src = buf.get(start..start + n)?;
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(src);
        return Some(u64::from_le_bytes(b));
    }
    let end = (bit as usize + usize::from(bits)).div_ceil(8);
    let src = buf.get(start..end)?;
    let mut v: u128 = 0;
    for (i, &b) in src.iter().enumerate() {
        v |= u128::from(b) << (8 * i);
    }
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    Some((v >> shift) as u64 & mask)
}

#[inline]
fn write_bits(buf: &mut [u8], bit: u32, bits: u8, value: u64) -> bool {
    let start = (bit / 8) as usize;
    let shift = bit % 8;
    if shift == 0 && bits.is_multiple_of(8) {
        let n = usize::from(bits / 8);
        let Some(dst) = buf.get_mut(start..start + n) else {
            return false;
        };
        dst.copy_from_slice(&value.to_le_bytes()[..n]);
        return true;
    }
    let end = (bit as usize + usize::from(bits)).div_ceil(8);
    let Some(dst) = buf.get_mut(start..end) else {
        return false;
    };
    let mask: u128 = if bits == 64 {
        u128::from(u64::MAX)
    } else {
        (1u128 << bits) - 1
    } << shift;
    let val = (u128::from(value) << shift) & mask;
    for (i, b) in dst.iter_mut().enumerate() {
        let m = (mask >> (8 * i)) as u8;
        *b = (*b & !m) | ((val >> (8 * i)) as u8 & m);
    }
    true
}

impl ProcessImage {
    /// An image shaped like `layout`, all zero.
    pub fn for_layout(layout: &Layout) -> Self {
        ProcessImage {
            inputs: vec![0; layout.input_bytes as usize],
            outputs: vec![0; layout.output_bytes as usize],
            areas: layout
                .subdevices
                .iter()
                .map(|s| Area {
                    input: (s.input_offset, s.input_bytes),
                    output: (s.output_offset, s.output_bytes),
                })
                .collect(),
            generation: layout.generation,
            stale: 0,
        }
    }

    /// The layout generation this image belongs to.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Read an input. An accessor of another layout generation reads the default value (and is
    /// counted, [`ProcessImage::stale_accesses`]): resolve accessors again in `configure`.
    #[inline]
    pub fn get<T: PdoValue>(&mut self, e: &Input<T>) -> T {
        if e.generation != self.generation {
            self.stale += 1;
            return T::default();
        }
        read_bits(&self.inputs, e.bit, T::BITS).map_or_else(T::default, T::from_raw)
    }

    /// Write an output (takes effect with the next exchange).
    #[inline]
    pub fn set<T: PdoValue>(&mut self, e: &Output<T>, value: T) {
        if e.generation != self.generation
            || !write_bits(&mut self.outputs, e.bit, T::BITS, value.to_raw())
        {
            self.stale += 1;
        }
    }

    /// Read back an output.
    #[inline]
    pub fn get_output<T: PdoValue>(&mut self, e: &Output<T>) -> T {
        if e.generation != self.generation {
            self.stale += 1;
            return T::default();
        }
        read_bits(&self.outputs, e.bit, T::BITS).map_or_else(T::default, T::from_raw)
    }

    /// Accesses through accessors of another generation so far.
    pub fn stale_accesses(&self) -> u64 {
        self.stale
    }

    /// The whole input image.
    pub fn inputs(&self) -> &[u8] {
        &self.inputs
    }

    /// The whole output image.
    pub fn outputs(&self) -> &[u8] {
        &self.outputs
    }

    /// The whole output image, writable.
    pub fn outputs_mut(&mut self) -> &mut [u8] {
        &mut self.outputs
    }

    /// The input image and the output image, writable, at once (a filter that derives outputs
    /// from inputs, as the shared image's "hold the actual value").
    pub fn inputs_outputs_mut(&mut self) -> (&[u8], &mut [u8]) {
        (&self.inputs, &mut self.outputs)
    }

    /// Number of subdevices.
    pub fn subdevices(&self) -> usize {
        self.areas.len()
    }

    /// The inputs of the subdevice at `position` (empty if there is none): decode them with an
    /// `ethercrab-wire` derive (`MyInputs::unpack_from_slice`) if you prefer structs.
    pub fn inputs_of(&self, position: usize) -> &[u8] {
        self.areas.get(position).map_or(&[], |a| {
            &self.inputs[a.input.0 as usize..(a.input.0 + a.input.1) as usize]
        })
    }

    /// The outputs of the subdevice at `position`, writable (`MyOutputs::pack_to_slice`).
    pub fn outputs_of_mut(&mut self, position: usize) -> &mut [u8] {
        match self.areas.get(position) {
            Some(a) => &mut self.outputs[a.output.0 as usize..(a.output.0 + a.output.1) as usize],
            None => &mut [],
        }
    }

    /// The outputs of the subdevice at `position`.
    pub fn outputs_of(&self, position: usize) -> &[u8] {
        self.areas.get(position).map_or(&[], |a| {
            &self.outputs[a.output.0 as usize..(a.output.0 + a.output.1) as usize]
        })
    }

    /// The whole input image, writable: for the master, which copies the received inputs in.
    pub(crate) fn inputs_mut(&mut self) -> &mut [u8] {
        &mut self.inputs
    }

    /// An image of `inputs` and `outputs` bytes and no subdevices (tests of the frames).
    #[cfg(test)]
    pub(crate) fn with_sizes(inputs: usize, outputs: usize) -> Self {
        ProcessImage {
            inputs: vec![0; inputs],
            outputs: vec![0; outputs],
            areas: Vec::new(),
            generation: 0,
            stale: 0,
        }
    }

    /// The inputs of the subdevice at `position`, writable: for the master, which copies the
    /// received inputs in.
    pub(crate) fn inputs_of_mut(&mut self, position: usize) -> &mut [u8] {
        match self.areas.get(position) {
            Some(a) => &mut self.inputs[a.input.0 as usize..(a.input.0 + a.input.1) as usize],
            None => &mut [],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Identity, MappingSource, PdoSource, SubdeviceSource};
    use proptest::prelude::*;

    fn layout() -> Layout {
        let dev = SubdeviceSource {
            address: 0x1001,
            alias: 0,
            name: "Mixed".into(),
            identity: Identity::default(),
            coe: false,
            mapping: MappingSource::Sii,
            pdos: vec![
                PdoSource {
                    index: 0x1a00,
                    name: None,
                    sync_manager: 3,
                    direction: Direction::Inputs,
                    entries: vec![
                        (0x6000, 1, 1, Some("Bit".into()), 0x01),
                        (0x6000, 2, 3, Some("Three".into()), 0x33),
                        (0x6001, 1, 16, Some("Word".into()), 0x06),
                        (0x6002, 1, 32, Some("Real".into()), 0x08),
                    ],
                },
                PdoSource {
                    index: 0x1600,
                    name: None,
                    sync_manager: 2,
                    direction: Direction::Outputs,
                    entries: vec![
                        (0x7000, 1, 1, Some("Out bit".into()), 0x01),
                        (0x7000, 2, 16, Some("Unaligned".into()), 0x03),
                        (0x0000, 0, 7, None, 0),
                    ],
                },
            ],
        };
        Layout::build(3, &[dev]).unwrap()
    }

    #[test]
    fn typed_accessors_read_and_write_bits() {
        let l = layout();
        let mut img = ProcessImage::for_layout(&l);
        assert_eq!((img.inputs().len(), img.outputs().len()), (7, 3));
        img.inputs_of_mut(0)
            .copy_from_slice(&[0b1011_0101, 0x34, 0x12, 0, 0, 0xc0, 0x3f]);
        // Entries are packed: 1 bit, 3 bits, then the u16 from bit 4 and the f32 from bit 20.
        assert!(img.get(&l.input::<bool>("Bit").unwrap()));
        let word: Input<u16> = l.input("Word").unwrap();
        assert_eq!(word.bit_offset(), 4);
        let real: Input<f32> = l.input("Real").unwrap();
        assert_eq!(real.bit_offset(), 20);
        let raw = u64::from_le_bytes([0b1011_0101, 0x34, 0x12, 0, 0, 0xc0, 0x3f, 0]);
        assert_eq!(img.get(&word), ((raw >> 4) & 0xffff) as u16);
        assert_eq!(img.get(&real).to_bits(), ((raw >> 20) & 0xffff_ffff) as u32);

        let ob: Output<bool> = l.output("Out bit").unwrap();
        let ow: Output<i16> = l.output("Unaligned").unwrap();
        img.set(&ow, -2);
        img.set(&ob, true);
        assert_eq!(img.get_output(&ow), -2);
        assert!(img.get_output(&ob));
        assert_eq!(img.outputs(), &[0xfd, 0xff, 0x01]);
        img.set(&ob, false);
        assert_eq!(img.outputs(), &[0xfc, 0xff, 0x01]);
        assert_eq!(img.stale_accesses(), 0);
    }

    #[test]
    fn wrong_types_and_names_are_refused() {
        let l = layout();
        let e = l.input::<u8>("Word").unwrap_err().to_string();
        assert!(
            e.contains("Word (position 0, 0x6001:01) is 16 bits of UINT16"),
            "{e}"
        );
        assert!(e.contains("as u8"), "{e}");
        assert!(l.input::<f32>("Word").is_err());
        assert!(l.input::<u16>("Real").is_err());
        assert!(l.input::<bool>("Nope").is_err());
        // Padding is never an entry.
        assert!(l.output_at::<u8>(0, 0, 0).is_err());
    }

    #[test]
    fn accessors_of_another_generation_are_inert() {
        let l = layout();
        let w: Input<u16> = l.input("Word").unwrap();
        let o: Output<bool> = l.output("Out bit").unwrap();
        let mut l2 = l.clone();
        l2.generation += 1;
        let mut img = ProcessImage::for_layout(&l2);
        img.inputs_of_mut(0).fill(0xff);
        assert_eq!(img.get(&w), 0);
        img.set(&o, true);
        assert_eq!(img.outputs(), &[0, 0, 0]);
        assert_eq!(img.stale_accesses(), 2);
    }

    proptest! {
        #[test]
        fn bits_round_trip(bit in 0u32..64, bits in 1u8..=64, value in any::<u64>(), fill in any::<u8>()) {
            let mut buf = [fill; 17];
            let before = buf;
            let v = if bits == 64 { value } else { value & ((1 << bits) - 1) };
            prop_assert!(write_bits(&mut buf, bit, bits, v));
            prop_assert_eq!(read_bits(&buf, bit, bits), Some(v));
            // Bits outside the field are untouched.
            for i in 0..(17 * 8) as u32 {
                if i < bit || i >= bit + u32::from(bits) {
                    let (b, s) = ((i / 8) as usize, i % 8);
                    prop_assert_eq!((buf[b] >> s) & 1, (before[b] >> s) & 1);
                }
            }
        }

        #[test]
        fn out_of_range_never_panics(bit in any::<u32>(), bits in 1u8..=64) {
            let mut buf = [0u8; 4];
            let _ = read_bits(&buf, bit, bits);
            let _ = write_bits(&mut buf, bit, bits, 1);
        }
    }
}
