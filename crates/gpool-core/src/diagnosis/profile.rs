//! Where a job's time goes: its main thread's CPU stacks, as `py-spy
//! record --format raw --idle` writes them (`frame;frame;frame COUNT`, root
//! first), joined with its accelerator's busy time over the same window,
//! into one named bottleneck and the fix to try (the verdict `gpool
//! profile` shows and `gpool advise` repeats).
//!
//! Each sample is given to one activity by its frames, in this order of
//! precedence: data loading (a `__getitem__`, a DataLoader, image decoding:
//! waiting there, even asleep, is waiting for data), synchronisation,
//! host-to-device copies, the optimizer, NumPy compute, other Python, and
//! idle waiting (a main thread parked in `sleep`, `wait`, `select`).
//! Native frames (py-spy `--native`) are read too: `.item()` shows as
//! `_local_scalar_dense`, copies as `copy_`.
//!
//! Pure: text and numbers in, a [`Verdict`] out.

use std::collections::BTreeMap;
use std::fmt;

/// What a sample of the main thread was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Activity {
    DataLoading,
    Sync,
    HostToDevice,
    Optimizer,
    /// NumPy (or another array library) computing on the CPU.
    CpuCompute,
    /// Python running that is none of the above.
    Python,
    /// Parked: sleeping, waiting on a lock, a queue or a socket.
    Idle,
}

impl Activity {
    pub fn as_str(self) -> &'static str {
        match self {
            Activity::DataLoading => "data loading",
            Activity::Sync => "synchronisation",
            Activity::HostToDevice => "host-to-device copies",
            Activity::Optimizer => "optimizer",
            Activity::CpuCompute => "CPU compute (NumPy)",
            Activity::Python => "other Python",
            Activity::Idle => "idle",
        }
    }
}

/// The one thing that holds the job back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bottleneck {
    InputBound,
    CpuBound,
    SyncBound,
    AcceleratorBound,
    /// Nothing dominates, or too few samples to say.
    Unclear,
}

impl Bottleneck {
    pub fn as_str(self) -> &'static str {
        match self {
            Bottleneck::InputBound => "input-bound",
            Bottleneck::CpuBound => "CPU-bound",
            Bottleneck::SyncBound => "sync-bound",
            Bottleneck::AcceleratorBound => "accelerator-bound",
            Bottleneck::Unclear => "unclear",
        }
    }
}

impl fmt::Display for Bottleneck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One collapsed stack and how many samples it had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Root first.
    pub frames: Vec<String>,
    pub count: u64,
}

/// Why a profile could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile line {line}: {why}")]
pub struct ProfileError {
    pub line: usize,
    pub why: String,
}

/// Parses collapsed stacks (`a;b;c 12` per line). `process …` and
/// `thread (0x…)` root frames that py-spy adds with `--subprocesses` or
/// `--threads` are dropped; a stack with nothing else (a thread that ran no
/// Python, which `--idle` records) is skipped, as are blank lines.
pub fn parse_collapsed(text: &str) -> Result<Vec<Stack>, ProfileError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let err = |why: &str| ProfileError {
            line: i + 1,
            why: format!("{why}: {:?}", line.chars().take(80).collect::<String>()),
        };
        // A bare count: a thread with no frame at all (py-spy's `--idle` writes ` 198`).
        if line.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let (stack, count) = line.rsplit_once(' ').ok_or_else(|| err("no sample count after the stack"))?;
        let count: u64 = count.parse().map_err(|_| err("the sample count is not a number"))?;
        let frames: Vec<String> = stack
            .split(';')
            .map(str::trim)
            .filter(|f| !f.is_empty() && !f.starts_with("process ") && !f.starts_with("thread ("))
            .map(str::to_string)
            .collect();
        if !frames.is_empty() {
            out.push(Stack { frames, count });
        }
    }
    Ok(out)
}

/// Whether a stack is the main thread's: its root is the script's
/// `<module>` (other threads start in `threading`'s `_bootstrap`).
pub fn is_main_thread(s: &Stack) -> bool {
    // With `--native`, the interpreter's own C frames come first
    // (`0x7fa0… (libc.so.6)`, `Py_RunMain (python3.11)`): the first Python
    // frame decides.
    let python = |f: &&String| f.starts_with("<module>") || f.contains(".py:");
    s.frames.iter().find(python).is_some_and(|f| f.starts_with("<module>"))
}

fn any(frames: &[String], needles: &[&str]) -> bool {
    frames.iter().any(|f| needles.iter().any(|n| f.contains(n)))
}

/// The activity of one stack (see the module's order of precedence).
pub fn classify(frames: &[String]) -> Activity {
    const DATA: &[&str] = &[
        "__getitem__",
        "__getitems__",
        "_next_data",
        "dataloader",
        "DataLoader",
        "torch/utils/data",
        "collate",
        "PIL/",
        "Image.open",
        "imread",
        "decode_image",
        "read_image",
        "torchvision/io",
        "cv2",
    ];
    // `Synchronize`: cudaStreamSynchronize, cuCtxSynchronize, hipDeviceSynchronize… (native frames).
    const SYNC: &[&str] = &["synchronize", "Synchronize", "_local_scalar_dense", "item (", "tolist ("];
    const COPY: &[&str] = &["copy_", "_to_copy", "pin_memory", "cudaMemcpy", "cuMemcpy", "hipMemcpy"];
    const OPTIM: &[&str] = &["torch/optim", "/optim/", "optimizer", "zero_grad"];
    const ARRAY: &[&str] = &["numpy/", "numpy.", "cblas", "dgemm", "sgemm", "openblas", "mkl_", "(scipy/"];
    const PARKED: &[&str] = &["sleep", "wait (", "select (", "poll (", "acquire", "recv", "accept (", "futex"];
    let leaf = frames.last().map(String::as_str).unwrap_or("");
    if any(frames, DATA) {
        Activity::DataLoading
    } else if any(frames, SYNC) {
        Activity::Sync
    } else if any(frames, COPY) {
        Activity::HostToDevice
    } else if any(frames, OPTIM) {
        Activity::Optimizer
    } else if any(frames, ARRAY) || leaf.contains("dot (") || leaf.contains("matmul") {
        Activity::CpuCompute
    } else if PARKED.iter().any(|p| leaf.contains(p)) {
        Activity::Idle
    } else {
        Activity::Python
    }
}

/// What `gpool profile` concludes.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Main-thread samples read.
    pub samples: u64,
    /// Share of those samples per activity, 0 to 1.
    pub shares: BTreeMap<Activity, f64>,
    /// Mean accelerator utilisation over the window, percent; `None`
    /// without an accelerator or readings.
    pub accelerator_busy_pct: Option<f64>,
    pub bottleneck: Bottleneck,
    /// The numbers behind the verdict, in a sentence.
    pub why: String,
    /// What to try.
    pub fix: String,
}

impl Verdict {
    pub fn share(&self, a: Activity) -> f64 {
        self.shares.get(&a).copied().unwrap_or(0.0)
    }
}

/// Fewer main-thread samples than this say nothing (a 5 s profile at py-spy's 100 Hz has 500).
pub const MIN_SAMPLES: u64 = 50;

/// The verdict from the main thread's stacks and the accelerator's
/// utilisation readings (percent, any rate) over the same window.
pub fn verdict(stacks: &[Stack], accelerator_util: &[f64]) -> Verdict {
    let main: Vec<&Stack> = stacks.iter().filter(|s| is_main_thread(s)).collect();
    let samples: u64 = main.iter().fold(0u64, |a, s| a.saturating_add(s.count));
    let mut counts: BTreeMap<Activity, u64> = BTreeMap::new();
    for s in &main {
        let c = counts.entry(classify(&s.frames)).or_default();
        *c = c.saturating_add(s.count);
    }
    let shares: BTreeMap<Activity, f64> =
        counts.into_iter().map(|(a, c)| (a, c as f64 / samples.max(1) as f64)).collect();
    let readings: Vec<f64> = accelerator_util.iter().copied().filter(|u| u.is_finite()).collect();
    let busy = (!readings.is_empty()).then(|| readings.iter().sum::<f64>() / readings.len() as f64);
    let share = |a: Activity| shares.get(&a).copied().unwrap_or(0.0);
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    let busy_text = busy.map_or_else(|| "no accelerator readings".to_string(), |b| format!("accelerator busy {b:.0}%"));
    let cpu = share(Activity::CpuCompute) + share(Activity::Python) + share(Activity::Optimizer);
    let (bottleneck, why, fix) = if samples < MIN_SAMPLES {
        (
            Bottleneck::Unclear,
            format!("{samples} main-thread samples: too few to say (is the job a Python process?)"),
            "profile for longer, while the job is in its steady state".to_string(),
        )
    } else if share(Activity::DataLoading) >= 0.4 && busy.is_none_or(|b| b < 60.0) {
        (
            Bottleneck::InputBound,
            format!("{} of main-thread samples in data loading, {busy_text}", pct(share(Activity::DataLoading))),
            "load data ahead of the model: DataLoader(num_workers=N, pin_memory=True, prefetch_factor=4, persistent_workers=True); decode images on the GPU (DALI, torchvision.io.decode_jpeg(device='cuda')); keep the dataset on local NVMe".to_string(),
        )
    } else if share(Activity::Sync) >= 0.3 && busy.is_none_or(|b| b < 80.0) {
        // (A host that waits on an accelerator busy ≥ 80% waits for real
        // work: that is accelerator-bound, below.)
        (
            Bottleneck::SyncBound,
            format!("{} of main-thread samples waiting on the device (.item(), .cpu(), synchronize), {busy_text}", pct(share(Activity::Sync))),
            "take .item(), .cpu() and torch.cuda.synchronize() out of the step: log every N steps, keep metrics on the device".to_string(),
        )
    } else if busy.is_some_and(|b| b >= 80.0) {
        (
            Bottleneck::AcceleratorBound,
            format!("{busy_text}; the host keeps it fed"),
            "the accelerator is the limit: bf16 mixed precision, a larger batch, torch.compile, fused kernels (FlashAttention); or more accelerators".to_string(),
        )
    } else if cpu >= 0.5 && busy.is_none_or(|b| b < 50.0) {
        // Mostly NumPy, or no accelerator at work: the computing is on the
        // CPU. Otherwise the host's own overhead (Python, kernel launches, a
        // scalar read back each step) leaves a working accelerator waiting.
        let arrays = share(Activity::CpuCompute) >= 0.25 || busy.is_none_or(|b| b < 10.0);
        let fix = if arrays {
            "move the work to the accelerator (torch tensors on the device instead of NumPy arrays), or give the job more CPU cores"
        } else {
            "the host cannot keep the accelerator fed between small steps: do more per step (a larger batch), cut launch overhead with torch.compile or CUDA graphs, read scalars (.item()) every N steps; `gpool profile --native` shows the C++ frames"
        };
        (
            Bottleneck::CpuBound,
            format!(
                "{} of main-thread samples computing on the CPU ({} NumPy), {busy_text}",
                pct(cpu),
                pct(share(Activity::CpuCompute))
            ),
            fix.to_string(),
        )
    } else {
        (
            Bottleneck::Unclear,
            format!("no activity dominates ({busy_text})"),
            "look at the flame graph for the widest frames".to_string(),
        )
    };
    Verdict { samples, shares, accelerator_busy_pct: busy, bottleneck, why, fix }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stacks(text: &str) -> Vec<Stack> {
        parse_collapsed(text).expect("parses")
    }

    #[test]
    fn collapsed_stacks_parse_and_bad_lines_name_their_line() {
        let s = stacks(
            "process 42:\"python train.py\";<module> (train.py:30);step (train.py:12) 7\n\n\
             thread (0x7F0B8C1F3740);<module> (train.py:30) 3\n",
        );
        assert_eq!(s[0].frames, ["<module> (train.py:30)", "step (train.py:12)"]);
        assert_eq!((s[0].count, s[1].count), (7, 3));
        assert!(is_main_thread(&s[0]) && is_main_thread(&s[1]));
        // py-spy --native puts the interpreter's C frames first.
        let native = parse_collapsed(
            "0x7fa052a4524a (libc.so.6);<module> (tput.py:10);work (tput.py:5) 69\n\
             clone3 (libc.so.6);start_thread (libc.so.6);_bootstrap (threading.py:1002);run (threading.py:982) 5\n",
        )
        .expect("parses");
        assert!(is_main_thread(&native[0]) && !is_main_thread(&native[1]), "{native:?}");
        // A thread with no frame at all is a bare count (py-spy --idle, seen on a real H200).
        assert_eq!(parse_collapsed(" 198\n<module> (t.py:1) 3\n").expect("parses").len(), 1);
        assert!(classify(&["<module> (t.py:1)".into(), "cuStreamSynchronize (libcuda.so.1)".into()]) == Activity::Sync);
        let huge = format!("<module> (a.py:1) {m}\n<module> (a.py:2) {m}\n", m = u64::MAX);
        assert_eq!(verdict(&stacks(&huge), &[]).samples, u64::MAX, "counts saturate");
        for (bad, line) in [("a;b\n", 1), ("a 1\nb x\n", 2), ("a;b 4.5\n", 1)] {
            assert_eq!(parse_collapsed(bad).map_err(|e| e.line), Err(line), "{bad:?}");
        }
        // A thread that ran no Python has no frame left once py-spy's own roots are dropped.
        assert!(parse_collapsed("process 1:\"p\" 4\n").expect("parses").is_empty());
    }

    #[test]
    fn each_stack_goes_to_one_activity() {
        let cases = [
            ("<module> (t.py:1);train (t.py:9);__next__ (torch/utils/data/dataloader.py:630)", Activity::DataLoading),
            ("<module> (t.py:1);train (t.py:9);__getitem__ (t.py:4)", Activity::DataLoading),
            ("<module> (t.py:1);step (t.py:9);synchronize (torch/cuda/__init__.py:792)", Activity::Sync),
            ("<module> (t.py:1);step (t.py:9);at::native::_local_scalar_dense (libtorch_cpu.so)", Activity::Sync),
            ("<module> (t.py:1);step (t.py:9);at::native::copy_ (libtorch_cpu.so)", Activity::HostToDevice),
            ("<module> (t.py:1);step (t.py:9);step (torch/optim/adamw.py:180)", Activity::Optimizer),
            ("<module> (t.py:1);f (t.py:9);dot (numpy/core/multiarray.py:741)", Activity::CpuCompute),
            ("<module> (t.py:1);main (t.py:9);wait (threading.py:320)", Activity::Idle),
            ("<module> (t.py:1);main (t.py:9)", Activity::Python),
        ];
        for (stack, want) in cases {
            let frames: Vec<String> = stack.split(';').map(str::to_string).collect();
            assert_eq!(classify(&frames), want, "{stack}");
        }
    }

    /// What py-spy 0.4.3 wrote (`record --format raw --idle --rate 100`,
    /// 3 s) for a loop whose `__getitem__` sleeps 20 ms: every sample there.
    #[test]
    fn a_recorded_py_spy_profile_of_a_sleeping_getitem_is_input_bound() {
        let recorded = "<module> (loader.py:12);train (loader.py:10);Data.__getitem__ (loader.py:4) 299\n";
        let v = verdict(&stacks(recorded), &[]);
        assert_eq!((v.bottleneck, v.samples, v.share(Activity::DataLoading)), (Bottleneck::InputBound, 299, 1.0));
    }

    proptest::proptest! {
        #[test]
        fn no_text_makes_the_parser_or_the_verdict_panic(text in "\\PC{0,300}", util in proptest::collection::vec(-1e9f64..1e9, 0..5)) {
            if let Ok(s) = parse_collapsed(&text) {
                let v = verdict(&s, &util);
                proptest::prop_assert!(v.shares.values().all(|x| (0.0..=1.0).contains(x)));
            }
        }
    }

    #[test]
    fn verdicts_name_one_bottleneck() {
        let data = "<module> (t.py:30);train (t.py:20);__getitem__ (t.py:9) 420\n<module> (t.py:30);train (t.py:22) 80\n\
                    _bootstrap (threading.py:1002);run (threading.py:982) 500\n";
        let v = verdict(&stacks(data), &[5.0, 10.0, 0.0]);
        assert_eq!(v.bottleneck, Bottleneck::InputBound, "{v:?}");
        assert_eq!(v.samples, 500, "other threads are left out");
        assert!((v.share(Activity::DataLoading) - 0.84).abs() < 1e-9);
        assert!(v.why.contains("84%") && v.fix.contains("num_workers"), "{v:?}");
        // The same loop with the accelerator busy is not waiting for its data.
        assert_eq!(verdict(&stacks(data), &[95.0]).bottleneck, Bottleneck::AcceleratorBound);
        let cpu = "<module> (m.py:8) 480\n<module> (m.py:9);dot (numpy/core/multiarray.py:741) 20\n";
        assert_eq!(verdict(&stacks(cpu), &[0.0]).bottleneck, Bottleneck::CpuBound);
        assert_eq!(verdict(&stacks(cpu), &[]).bottleneck, Bottleneck::CpuBound, "no accelerator: still the CPU");
        assert!(verdict(&stacks(cpu), &[0.0]).fix.contains("NumPy arrays"));
        // A loop of small kernels with a scalar read back each step, as a real H200 showed it
        // without native frames: one module-level line, the GPU 48% busy. The host is the limit.
        let launches = "<module> (sync.py:5) 498\n<module> (sync.py:6) 1\n";
        let v = verdict(&stacks(launches), &[48.0]);
        assert_eq!(v.bottleneck, Bottleneck::CpuBound, "{v:?}");
        assert!(v.fix.contains("torch.compile") && !v.fix.contains("NumPy arrays"), "{v:?}");
        let sync = "<module> (t.py:1);step (t.py:9);synchronize (torch/cuda/__init__.py:792) 200\n<module> (t.py:1);step (t.py:8) 300\n";
        assert_eq!(verdict(&stacks(sync), &[40.0]).bottleneck, Bottleneck::SyncBound);
        // Waiting on an accelerator that is busy is waiting for real work.
        assert_eq!(verdict(&stacks(sync), &[97.0]).bottleneck, Bottleneck::AcceleratorBound);
        let few = "<module> (t.py:1) 10\n";
        assert_eq!(verdict(&stacks(few), &[0.0]).bottleneck, Bottleneck::Unclear);
        let idle = "<module> (t.py:1);main (t.py:9);wait (threading.py:320) 500\n";
        assert_eq!(verdict(&stacks(idle), &[20.0]).bottleneck, Bottleneck::Unclear);
    }
}
