//! Bit fields of the process image: little-endian, bit `k` of an image is bit `k % 8` of byte
//! `k / 8` (ETG.1000.4 §5.4: process data is a little-endian bit string, entries are packed at
//! bit granularity).

/// Copy the `bits` bits at `bit_offset` from `src` into `dst` (the same position in both),
/// leaving every other bit of `dst` as it is. Bits beyond either slice are ignored.
#[inline]
pub fn copy_bits(dst: &mut [u8], src: &[u8], bit_offset: u32, bits: u32) {
    let start = bit_offset as usize;
    let end = start.saturating_add(bits as usize);
    let end = end.min(dst.len() * 8).min(src.len() * 8);
    if start >= end {
        return;
    }
    let (first, last) = (start / 8, (end - 1) / 8);
    if start.is_multiple_of(8) && end.is_multiple_of(8) {
        dst[first..=last].copy_from_slice(&src[first..=last]);
        return;
    }
    for i in first..=last {
        let lo = if i == first { start % 8 } else { 0 };
        let hi = if i == last { (end - 1) % 8 + 1 } else { 8 };
        let mask = ((0xffu16 << lo) & (0xffu16 >> (8 - hi))) as u8;
        dst[i] = (dst[i] & !mask) | (src[i] & mask);
    }
}

/// The `bits` (1..=64) bits at `bit_offset` as an unsigned value; bits beyond `buf` read 0.
#[inline]
pub fn read_bits(buf: &[u8], bit_offset: u32, bits: u32) -> u64 {
    let bits = bits.min(64);
    let mut v = 0u64;
    let mut k = 0u32;
    while k < bits {
        let pos = bit_offset as usize + k as usize;
        let byte = pos / 8;
        if byte >= buf.len() {
            break;
        }
        let sh = pos % 8;
        // Take as many bits of this byte as are left.
        let n = (8 - sh as u32).min(bits - k);
        let part = (u64::from(buf[byte]) >> sh) & ((1u64 << n) - 1);
        v |= part << k;
        k += n;
    }
    v
}

/// Write the low `bits` (1..=64) bits of `value` at `bit_offset`; bits beyond `buf` are dropped.
#[inline]
pub fn write_bits(buf: &mut [u8], bit_offset: u32, bits: u32, value: u64) {
    let bits = bits.min(64);
    let mut k = 0u32;
    while k < bits {
        let pos = bit_offset as usize + k as usize;
        let byte = pos / 8;
        if byte >= buf.len() {
            break;
        }
        let sh = pos % 8;
        let n = (8 - sh as u32).min(bits - k);
        let mask = (((1u16 << n) - 1) << sh) as u8;
        let part = (((value >> k) & ((1u64 << n) - 1)) << sh) as u8;
        buf[byte] = (buf[byte] & !mask) | (part & mask);
        k += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: one bit at a time.
    fn bit(buf: &[u8], k: usize) -> bool {
        buf[k / 8] >> (k % 8) & 1 == 1
    }

    proptest! {
        #[test]
        fn copy_bits_touches_exactly_the_field(
            dst in proptest::collection::vec(any::<u8>(), 1..24),
            src in proptest::collection::vec(any::<u8>(), 24),
            off in 0u32..200, len in 0u32..80,
        ) {
            let mut out = dst.clone();
            copy_bits(&mut out, &src, off, len);
            for k in 0..dst.len() * 8 {
                let inside = k >= off as usize && k < (off + len) as usize;
                let want = if inside { bit(&src, k) } else { bit(&dst, k) };
                prop_assert_eq!(bit(&out, k), want, "bit {}", k);
            }
        }

        #[test]
        fn write_then_read_round_trips(
            buf in proptest::collection::vec(any::<u8>(), 10),
            off in 0u32..16, len in 1u32..=64, v in any::<u64>(),
        ) {
            let mut b = buf.clone();
            write_bits(&mut b, off, len, v);
            let mask = if len == 64 { u64::MAX } else { (1u64 << len) - 1 };
            prop_assert_eq!(read_bits(&b, off, len), v & mask);
            for k in 0..80usize {
                if k < off as usize || k >= (off + len) as usize {
                    prop_assert_eq!(bit(&b, k), bit(&buf, k));
                }
            }
        }
    }
}
