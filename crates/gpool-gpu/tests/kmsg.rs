//! The kernel log read for real: an XID line written to /dev/kmsg (as the
//! NVIDIA driver would) is counted for its GPU at the next drain, and lines
//! from before the reader opened are not. The bus id is one no machine has
//! (`ffff:ff:1f`), so no real monitoring takes the line for a real fault.
//! Writing /dev/kmsg needs root: elsewhere the test says so and checks the
//! refusal names what is missing.

use gpool_gpu::smi::kmsg::KernelLog;

#[test]
fn an_xid_the_kernel_logs_is_counted_for_its_gpu() {
    let write = |line: &str| std::fs::write("/dev/kmsg", format!("{line}\n"));
    if write("gpool test: before the reader opens: NVRM: Xid (PCI:ffff:ff:1f): 13, gpool test").is_err() {
        let err = KernelLog::open().err().unwrap_or_default();
        eprintln!("/dev/kmsg is not writable here (not root): checked only that opening says why: {err}");
        assert!(err.is_empty() || err.contains("CAP_SYSLOG"), "{err}");
        return;
    }
    let mut k = KernelLog::open().expect("root reads /dev/kmsg");
    write("NVRM: Xid (PCI:ffff:ff:1f): 79, pid=1, name=gpool-test, GPU has fallen off the bus (gpool test).")
        .expect("write");
    k.drain();
    assert_eq!(k.of("0000FFFF:FF:1F.0"), (1, vec![79]), "only the line after the reader opened");
    k.drain();
    assert_eq!(k.of("0000FFFF:FF:1F.0"), (1, vec![79]), "a drain reads each line once");
}
