//! The master's fixed capacities: how large a segment, a process image and a cycle's frames can
//! be. A leaf: it imports nothing of the crate, so every module can name a limit without an
//! import running back up to the module that happens to use it most.

use ethercrab::PduStorage;

/// Largest segment the master runs: the capacity of ethercrab's subdevice group (the const
/// generic of `init_single_group`; one more and the scan fails with `Capacity(SubDevice)`).
/// A power of two, as ethercrab's group index map needs. 1024 costs ~250 KiB per group, and the
/// bring-up (ethercrab's state transitions move the group by value) about 20 MiB of the
/// master thread's 64 MiB stack in a debug build; 4096 overflows it.
pub const MAX_SUBDEVICES: usize = 1024;
/// Stack of the thread that brings a segment up (see [`MAX_SUBDEVICES`]).
pub const SETUP_STACK: usize = 64 << 20;
/// Largest process image, inputs plus outputs of all subdevices: the group's PDI storage (one
/// byte more and the transition to SAFE-OP fails with `PdiTooLong`). Sent as LRWs of at most
/// [`LRW_CHUNK`] bytes, one after the other: 15 frames per cycle at the limit.
pub const MAX_PDI_BYTES: usize = 16384;
/// Frames ethercrab may have in flight (it sends a cycle's frames one after the other and at most
/// two at once during the bring-up).
pub const MAX_FRAMES: usize = 32;
/// Largest datagram payload per frame: ethercrab splits the process image into LRWs of this size.
pub const LRW_CHUNK: usize = 1100;
/// Most SII bytes read per subdevice for the layout: far above any real device's categories
/// (EEPROMs are 2..64 KiB), and a bound on what a broken EEPROM can make the master read.
pub const MAX_SII_BYTES: usize = 64 * 1024;
/// Bytes of one frame slot of ethercrab's PDU storage.
pub const FRAME_DATA: usize = PduStorage::element_size(LRW_CHUNK);
/// ethercrab's PDU storage at these limits.
pub(crate) type Storage = PduStorage<MAX_FRAMES, FRAME_DATA>;
