//! XID events from the kernel log, for nodes where NVML cannot load: the
//! driver prints every XID there (`NVRM: Xid (PCI:0000:3b:00): 79, pid=…,
//! GPU has fallen off the bus.`), and the `nvidia-smi` reports carry none.
//!
//! [`KernelLog`] reads `/dev/kmsg` without blocking from where it stood when
//! it was opened (older XIDs were acted on, or not, by an earlier agent), and
//! counts each GPU's XIDs by PCI bus id. Reading `/dev/kmsg` needs root (or
//! `CAP_SYSLOG` where `dmesg_restrict` is set); without it there are no XIDs
//! from this source, and [`KernelLog::open`] says why.

use std::collections::BTreeMap;
use std::io::Read;

use super::value::same_bus_id;
use crate::RECENT_XIDS;

/// The PCI bus id and XID of a driver's XID line, if `line` is one.
pub fn parse_xid(line: &str) -> Option<(String, u64)> {
    let rest = &line[line.find("NVRM: Xid (")? + "NVRM: Xid (".len()..];
    let (bus, rest) = rest.split_once(')')?;
    let bus = bus.strip_prefix("PCI:").unwrap_or(bus).trim();
    let digits: String = rest.trim_start_matches(':').trim_start().chars().take_while(char::is_ascii_digit).collect();
    Some((bus.to_string(), digits.parse().ok()?))
}

/// XIDs seen per GPU (by PCI bus id as the driver prints it).
#[derive(Debug, Default)]
pub struct KernelLog {
    file: Option<std::fs::File>,
    seen: BTreeMap<String, (u64, Vec<u64>)>,
}

/// A copy reads on from the same place (the descriptor is duplicated): what
/// one copy drains, the other does not see.
impl Clone for KernelLog {
    fn clone(&self) -> Self {
        KernelLog { file: self.file.as_ref().and_then(|f| f.try_clone().ok()), seen: self.seen.clone() }
    }
}

impl KernelLog {
    /// `/dev/kmsg`, from its end; `Err` says why it cannot be read.
    pub fn open() -> Result<KernelLog, String> {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open("/dev/kmsg")
            .map_err(|e| {
                format!("cannot read /dev/kmsg ({e}): XID events need root or CAP_SYSLOG where NVML is absent")
            })?;
        f.seek(SeekFrom::End(0)).map_err(|e| format!("/dev/kmsg: {e}"))?;
        Ok(KernelLog { file: Some(f), seen: BTreeMap::new() })
    }

    /// Reads what the kernel logged since the last call.
    pub fn drain(&mut self) {
        let Some(f) = self.file.as_mut() else { return };
        // One record per read; a record is at most about 8 KiB.
        let mut buf = vec![0u8; 16 * 1024];
        let mut lines = Vec::new();
        loop {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => lines.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                // Records overwritten before we read them: go on with the next.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PIPE.raw_os_error()) => continue,
                Err(_) => break,
            }
        }
        for l in lines {
            self.record(&l);
        }
    }

    /// Counts `line` if it is an XID line.
    pub fn record(&mut self, line: &str) {
        let Some((bus, xid)) = parse_xid(line) else { return };
        let (count, recent) = self.seen.entry(bus).or_default();
        *count += 1;
        recent.push(xid);
        if recent.len() > RECENT_XIDS {
            recent.remove(0);
        }
    }

    /// The XID count and recent XIDs of the GPU at `bus_id` (nvidia-smi's
    /// form, `00000000:3B:00.0`); (0, []) when it raised none.
    pub fn of(&self, bus_id: &str) -> (u64, Vec<u64>) {
        // The driver prints domain:bus:device without the function.
        let short = bus_id.rsplit_once('.').map_or(bus_id, |(b, _)| b);
        self.seen.iter().find(|(b, _)| same_bus_id(b, short)).map(|(_, (c, r))| (*c, r.clone())).unwrap_or_default()
    }

    /// Whether XIDs are read at all.
    pub fn reading(&self) -> bool {
        self.file.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_lines_as_drivers_print_them() {
        let cases = [
            (
                "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
                Some(("0000:3b:00", 79)),
            ),
            (
                "[ 1234.5] NVRM: Xid (PCI:0000:c6:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception",
                Some(("0000:c6:00", 13)),
            ),
            ("NVRM: Xid (0000:03:00): 14, Channel 00000001", Some(("0000:03:00", 14))),
            ("NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d", None),
            ("NVRM: Xid (PCI:0000:3b:00): , nothing", None),
            ("usb 1-1: new high-speed USB device", None),
        ];
        for (line, want) in cases {
            assert_eq!(parse_xid(line), want.map(|(b, x)| (b.to_string(), x)), "{line}");
        }
    }

    #[test]
    fn xids_are_counted_per_gpu_by_bus_id() {
        let mut k = KernelLog::default();
        assert!(!k.reading());
        k.record("NVRM: Xid (PCI:0000:3b:00): 13, pid=1");
        k.record("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.");
        k.record("NVRM: Xid (PCI:0000:c6:00): 48, DBE");
        assert_eq!(k.of("00000000:3B:00.0"), (2, vec![13, 79]));
        assert_eq!(k.of("00000000:C6:00.0"), (1, vec![48]));
        assert_eq!(k.of("00000000:01:00.0"), (0, vec![]));
    }
}
