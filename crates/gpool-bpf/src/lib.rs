//! # gpool-bpf
//!
//! Device control for cgroup v2: where cgroup v1 has `devices.deny`, v2
//! runs a BPF program of type `BPF_PROG_TYPE_CGROUP_DEVICE` at every open
//! or `mknod` of a device file by a task of the group (as runc and systemd
//! do). [`DeviceFilter`] is that program, written out instruction by
//! instruction (it is a dozen instructions: no compiler, no object file);
//! [`DeviceFilter::attach`] loads it and attaches it to a group's
//! directory. The group keeps it until the group is removed.
//!
//! This crate is the workspace's one exception to `unsafe_code = "forbid"`:
//! the `bpf(2)` system call, which neither `rustix` nor `nix` wraps.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Why a filter could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("open the control group {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error(
        "the kernel refused the device program (bpf BPF_PROG_LOAD: {source}); it needs CONFIG_CGROUP_BPF and root{log}"
    )]
    Load { source: std::io::Error, log: String },
    #[error("attach the device program to {path} (bpf BPF_PROG_ATTACH): {source}")]
    Attach { path: String, source: std::io::Error },
}

/// A device's kind, as the kernel's device context gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Block = 1,
    Char = 2,
}

/// A program that denies these devices (by kind, major and minor number)
/// and allows every other.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceFilter {
    pub deny: Vec<(DeviceKind, u32, u32)>,
}

/// One BPF instruction (`struct bpf_insn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u8,
    /// Destination register in the low four bits, source in the high four.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | dst, off, imm }
}

// Opcodes (linux/bpf.h, linux/bpf_common.h).
const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const ALU64_AND_K: u8 = 0x57; // BPF_ALU64 | BPF_AND | BPF_K
const ALU64_MOV_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const JMP_JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const JMP_JEQ_K: u8 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JMP_EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
/// Other programs attached above (systemd's) keep running too: a device
/// is opened only if all allow it.
const BPF_F_ALLOW_MULTI: u32 = 2;

impl DeviceFilter {
    /// The program's instructions. The context (`struct
    /// bpf_cgroup_dev_ctx`) holds `access_type` (access << 16 | kind),
    /// `major` and `minor`, as three 32-bit words; the program returns 1
    /// to allow, 0 to deny.
    pub fn program(&self) -> Vec<Insn> {
        let mut p = vec![
            insn(LDX_MEM_W, 2, 1, 0, 0),        // r2 = ctx->access_type
            insn(ALU64_AND_K, 2, 0, 0, 0xffff), // r2 = kind
            insn(LDX_MEM_W, 3, 1, 4, 0),        // r3 = ctx->major
            insn(LDX_MEM_W, 4, 1, 8, 0),        // r4 = ctx->minor
        ];
        // Per denied device three tests: kind, major, minor; a mismatch skips
        // to the next device, a full match jumps to "deny".
        let n = self.deny.len();
        let allow = 4 + 3 * n; // index of "allow"
        let deny = allow + 2;
        for (i, (kind, major, minor)) in self.deny.iter().enumerate() {
            let at = 4 + 3 * i;
            let next = at + 3;
            p.push(insn(JMP_JNE_K, 2, 0, (next - (at + 1)) as i16, *kind as i32));
            p.push(insn(JMP_JNE_K, 3, 0, (next - (at + 2)) as i16, *major as i32));
            p.push(insn(JMP_JEQ_K, 4, 0, (deny - (at + 3)) as i16, *minor as i32));
        }
        p.push(insn(ALU64_MOV_K, 0, 0, 0, 1)); // allow: r0 = 1
        p.push(insn(JMP_EXIT, 0, 0, 0, 0));
        p.push(insn(ALU64_MOV_K, 0, 0, 0, 0)); // deny: r0 = 0
        p.push(insn(JMP_EXIT, 0, 0, 0, 0));
        p
    }

    /// Runs the program on a device, as the kernel would (for tests and
    /// for saying what a filter does without root).
    pub fn allows(&self, kind: DeviceKind, major: u32, minor: u32) -> bool {
        let ctx = [kind as u32, major, minor];
        let prog = self.program();
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        while let Some(i) = prog.get(pc) {
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                LDX_MEM_W if src == 1 => r[dst] = u64::from(ctx[(i.off / 4) as usize]),
                ALU64_AND_K => r[dst] &= i.imm as u64,
                ALU64_MOV_K => r[dst] = i.imm as u64,
                JMP_JNE_K if r[dst] != i.imm as u64 => pc = (pc as isize + i.off as isize) as usize,
                JMP_JEQ_K if r[dst] == i.imm as u64 => pc = (pc as isize + i.off as isize) as usize,
                JMP_JNE_K | JMP_JEQ_K => {}
                JMP_EXIT => return r[0] == 1,
                _ => return false,
            }
        }
        false
    }

    /// Loads the program and attaches it to the control group at `group`
    /// (a cgroup v2 directory). Needs root (CAP_BPF and CAP_SYS_ADMIN).
    pub fn attach(&self, group: &Path) -> Result<(), Error> {
        let dir =
            std::fs::File::open(group).map_err(|source| Error::Open { path: group.display().to_string(), source })?;
        let prog = load(&self.program())?;
        let attr = ProgAttach {
            target_fd: dir.as_raw_fd() as u32,
            attach_bpf_fd: prog.as_raw_fd() as u32,
            attach_type: BPF_CGROUP_DEVICE,
            attach_flags: BPF_F_ALLOW_MULTI,
            replace_bpf_fd: 0,
        };
        bpf(BPF_PROG_ATTACH, &attr).map_err(|source| Error::Attach { path: group.display().to_string(), source })?;
        // The group holds the program now; our descriptors may close.
        Ok(())
    }
}

/// `union bpf_attr` for `BPF_PROG_LOAD`, as far as this program needs.
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
}

/// `union bpf_attr` for `BPF_PROG_ATTACH`.
#[repr(C)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

fn load(prog: &[Insn]) -> Result<OwnedFd, Error> {
    let license = c"Apache-2.0";
    let mut log = vec![0u8; 4096];
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: prog.len() as u32,
        insns: prog.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        kern_version: 0,
        prog_flags: 0,
    };
    let fd = bpf(BPF_PROG_LOAD, &attr).map_err(|source| {
        let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
        Error::Load { source, log: if text.is_empty() { String::new() } else { format!(": verifier says: {text}") } }
    })?;
    // SAFETY: a successful BPF_PROG_LOAD returns a new descriptor that
    // nothing else owns.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `bpf(cmd, attr, sizeof attr)`; the non-negative result, or errno.
fn bpf<T>(cmd: libc::c_long, attr: &T) -> Result<libc::c_long, std::io::Error> {
    // SAFETY: `attr` is a live `repr(C)` prefix of `union bpf_attr` of the
    // size passed (the kernel zero-fills the rest); the pointers inside
    // it point to buffers that outlive the call.
    #[allow(unsafe_code)]
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *const T, std::mem::size_of::<T>() as libc::c_uint) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(r) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_denies_exactly_the_listed_devices() {
        let f = DeviceFilter {
            deny: vec![(DeviceKind::Char, 195, 1), (DeviceKind::Char, 195, 3), (DeviceKind::Char, 237, 14)],
        };
        let cases = [
            (DeviceKind::Char, 195, 0, true),
            (DeviceKind::Char, 195, 1, false),
            (DeviceKind::Char, 195, 2, true),
            (DeviceKind::Char, 195, 3, false),
            (DeviceKind::Char, 195, 255, true), // nvidiactl
            (DeviceKind::Block, 195, 1, true),
            (DeviceKind::Char, 237, 14, false), // a MIG capability
            (DeviceKind::Char, 237, 15, true),
            (DeviceKind::Char, 1, 3, true), // /dev/null
        ];
        for (kind, major, minor, allowed) in cases {
            assert_eq!(f.allows(kind, major, minor), allowed, "{kind:?} {major}:{minor}");
        }
        assert!(DeviceFilter::default().allows(DeviceKind::Char, 195, 0), "an empty filter allows all");
    }

    #[test]
    fn the_program_is_what_the_kernel_expects() {
        let p = DeviceFilter { deny: vec![(DeviceKind::Char, 195, 1)] }.program();
        assert_eq!(p.len(), 4 + 3 + 4);
        assert_eq!(p[0], Insn { code: 0x61, regs: 0x12, off: 0, imm: 0 }, "r2 = *(u32 *)(r1 + 0)");
        assert_eq!(p[6], Insn { code: 0x15, regs: 0x04, off: 2, imm: 1 }, "if r4 == 1 goto deny");
        assert_eq!(p[p.len() - 1].code, 0x95);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
