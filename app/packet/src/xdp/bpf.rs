//! The kernel side of the AF_XDP link, made with raw `bpf(2)` calls (no libbpf, no C): an XSKMAP
//! holding the socket, the tiny XDP program that redirects EtherCAT frames into it, and the BPF
//! link that attaches the program to the interface.
//!
//! Sources: the bpf(2) man page and `include/uapi/linux/bpf.h` (the `bpf_attr` layouts below,
//! checked against the 6.x headers), Documentation/bpf/standardization/instruction-set.rst
//! (the instruction encoding), Documentation/networking/af_xdp.rst (XSKMAP, redirect by
//! `rx_queue_index`), Documentation/bpf/map_xskmap.rst.
//!
//! Why a BPF *link* (BPF_LINK_CREATE, Linux ≥ 5.9) rather than netlink's IFLA_XDP: the
//! program stays attached exactly as long as the link's file descriptor is open, so a master
//! that crashes or is killed leaves nothing on the interface (the kernel detaches it when the
//! process's descriptors close), and the next run attaches afresh instead of stacking on a
//! stale program. A program attached by another tool (netlink, `ip link set … xdp`) makes
//! BPF_LINK_CREATE fail with EBUSY: that one is not ours to replace, and the error says so.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

// bpf(2) commands, map/program/attach types (include/uapi/linux/bpf.h).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS` (enum xdp_action): hand the frame to the kernel's stack as if no program ran.
const XDP_PASS: i32 = 2;

/// `XDP_FLAGS_SKB_MODE` (include/uapi/linux/if_link.h): generic XDP, after the skb is built.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, in the driver's receive path.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `union bpf_attr`, as the zeroed 144 bytes of the 6.x headers; each command fills its fields
/// at their offsets. The kernel accepts a larger attr than it knows if the tail is zero.
#[repr(C, align(8))]
struct Attr([u8; 144]);

impl Attr {
    fn new() -> Self {
        Attr([0; 144])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn name(&mut self, at: usize, name: &str) -> &mut Self {
        let n = name.len().min(15);
        self.0[at..at + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, writable bpf_attr of the size passed; every pointer stored in
    // it points to memory alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn fd_of(rc: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(rc as RawFd) }
}

/// An XSKMAP of `entries` slots (key: receive queue index; value: an AF_XDP socket's fd).
pub fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, BPF_MAP_TYPE_XSKMAP)
        .u32(4, 4)
        .u32(8, 4)
        .u32(12, entries)
        .name(28, "rtcat_xsks");
    bpf(BPF_MAP_CREATE, &mut a).map(fd_of)
}

/// Put socket `xsk` into slot `queue` of the XSKMAP `map`.
pub fn set_xsk(map: &OwnedFd, queue: u32, xsk: RawFd) -> io::Result<()> {
    let key = queue;
    let value = xsk as u32;
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, &value as *const u32 as u64)
        .u64(24, 0); // BPF_ANY
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
}

/// One eBPF instruction (`struct bpf_insn`): opcode, the two 4-bit registers, offset, immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    // The C bitfield `dst_reg:4, src_reg:4` puts dst in the low nibble on a little-endian
    // machine and in the high one on a big-endian machine.
    let regs = if cfg!(target_endian = "little") {
        dst | (src << 4)
    } else {
        (dst << 4) | src
    };
    Insn {
        code,
        regs,
        off,
        imm,
    }
}

// Opcodes (instruction-set.rst): class | operation | source.
const MOV64_REG: u8 = 0x07 | 0xb0 | 0x08; // BPF_ALU64 | BPF_MOV | BPF_X
const MOV64_IMM: u8 = 0x07 | 0xb0; // BPF_ALU64 | BPF_MOV | BPF_K
const ADD64_IMM: u8 = 0x07; // BPF_ALU64 | BPF_ADD | BPF_K
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const LDX_B: u8 = 0x71; // BPF_LDX | BPF_MEM | BPF_B
const JGT_REG: u8 = 0x05 | 0x20 | 0x08; // BPF_JMP | BPF_JGT | BPF_X
const JNE_IMM: u8 = 0x05 | 0x50; // BPF_JMP | BPF_JNE | BPF_K
const LD_IMM64: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW (two instructions)
const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

/// Length of the program [`program`] builds.
pub const PROGRAM_LEN: usize = 18;

/// The XDP program: an EtherCAT frame (EtherType 0x88a4 right after the two MAC addresses, no
/// VLAN tag) goes to the socket in the XSKMAP slot of the queue it arrived on, or on to the
/// stack when no socket is there; every other frame passes to the stack untouched (the host's
/// IP traffic, the floor benchmark's pings, LLDP).
///
/// `struct xdp_md` (the context in r1): data at 0, data_end at 4, rx_queue_index at 16.
/// `bpf_redirect_map(map, key, flags)`: the low bits of `flags` are the action when the slot
/// is empty (Linux ≥ 5.3), XDP_PASS here.
pub fn program(map_fd: RawFd) -> [Insn; PROGRAM_LEN] {
    let [hi, lo] = crate::ETHERCAT_ETHERTYPE.to_be_bytes();
    const PASS: i16 = 16;
    [
        /* 0 */ insn(MOV64_REG, 6, 1, 0, 0), // r6 = ctx
        /* 1 */ insn(LDX_W, 2, 6, 0, 0), // r2 = data
        /* 2 */ insn(LDX_W, 3, 6, 4, 0), // r3 = data_end
        /* 3 */ insn(MOV64_REG, 4, 2, 0, 0), // r4 = data
        /* 4 */ insn(ADD64_IMM, 4, 0, 0, crate::ETH_HEADER_LEN as i32), // r4 += 14
        /* 5 */ insn(JGT_REG, 4, 3, PASS - 6, 0), // shorter than a header: pass
        /* 6 */ insn(LDX_B, 4, 2, 12, 0), // r4 = EtherType, high byte
        /* 7 */ insn(JNE_IMM, 4, 0, PASS - 8, i32::from(hi)),
        /* 8 */ insn(LDX_B, 4, 2, 13, 0), // low byte
        /* 9 */ insn(JNE_IMM, 4, 0, PASS - 10, i32::from(lo)),
        /* 10 */ insn(LDX_W, 2, 6, 16, 0), // r2 = rx_queue_index
        /* 11 */ insn(LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // r1 = the map
        /* 12 */ insn(0, 0, 0, 0, 0),
        /* 13 */ insn(MOV64_IMM, 3, 0, 0, XDP_PASS), // r3 = flags: pass when no socket
        /* 14 */ insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        /* 15 */ insn(EXIT, 0, 0, 0, 0),
        /* 16 */ insn(MOV64_IMM, 0, 0, 0, XDP_PASS), // PASS: r0 = XDP_PASS
        /* 17 */ insn(EXIT, 0, 0, 0, 0),
    ]
}

/// Load [`program`] for `map`. On a verifier refusal the error carries the verifier's log.
pub fn load_program(map: &OwnedFd) -> io::Result<OwnedFd> {
    let insns = program(map.as_raw_fd());
    // The program calls no GPL-only helper; the string is the program's own licence.
    let license = c"MIT";
    let mut log = [0u8; 4096];
    let mut a = Attr::new();
    a.u32(0, BPF_PROG_TYPE_XDP)
        .u32(4, PROGRAM_LEN as u32)
        .u64(8, insns.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1) // log_level: the verifier's log on failure
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .name(48, "rtcat_ecat")
        .u32(68, BPF_XDP); // expected_attach_type
    match bpf(BPF_PROG_LOAD, &mut a) {
        Ok(fd) => Ok(fd_of(fd)),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let text = text.trim();
            if text.is_empty() {
                Err(e)
            } else {
                Err(io::Error::new(e.kind(), format!("{e}; verifier: {text}")))
            }
        }
    }
}

/// Attach `prog` to interface `ifindex` in `mode` ([`XDP_FLAGS_DRV_MODE`] or
/// [`XDP_FLAGS_SKB_MODE`]): attached while the returned link fd is open.
pub fn attach(prog: &OwnedFd, ifindex: u32, mode: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, BPF_XDP)
        .u32(12, mode);
    bpf(BPF_LINK_CREATE, &mut a).map(fd_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_jumps_land_on_the_pass_exit_and_the_map_load_is_wide() {
        let p = program(7);
        // Every conditional jump goes to instruction 16 (r0 = XDP_PASS), relative to the next.
        for (i, ins) in p.iter().enumerate() {
            if ins.code == JGT_REG || ins.code == JNE_IMM {
                assert_eq!(i as i16 + 1 + ins.off, 16, "jump at {i}");
            }
        }
        assert_eq!(p[16], insn(MOV64_IMM, 0, 0, 0, XDP_PASS));
        assert_eq!(p[17].code, EXIT);
        assert_eq!(p[15].code, EXIT);
        // The 64-bit immediate load takes two slots; the map fd rides in the first.
        assert_eq!(p[11].code, LD_IMM64);
        assert_eq!(p[11].imm, 7);
        assert_eq!(p[12], insn(0, 0, 0, 0, 0));
        // It compares the EtherType bytes 0x88 and 0xa4.
        assert_eq!((p[7].imm, p[9].imm), (0x88, 0xa4));
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
