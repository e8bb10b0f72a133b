//! Job traces: readers for the Microsoft Philly (Pollux processing),
//! Microsoft ITP (ElasticFlow release) and Alibaba openb formats, and a
//! documented generic CSV. Every reader checks every row and reports the
//! first bad one with its line number; nothing panics on bad input.

pub mod csv;

use std::fmt;
use std::str::FromStr;

use self::csv::{CsvError, Header, Record, records};

/// One job of a trace, in trace units.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    /// Line of the file the job came from (its identity: traces have duplicates).
    pub line: usize,
    /// Submission time in seconds on the trace's clock.
    pub submit_s: f64,
    /// Run time in seconds.
    pub duration_s: f64,
    pub gpus: u32,
    /// Who the job belongs to for fairness: Philly's virtual cluster, a CSV's user.
    pub group: String,
    /// Allowed GPU models; empty = any.
    pub gpu_models: Vec<String>,
    pub cpus_milli: u64,
    pub memory_mb: u64,
    /// A MIG profile: the job asks for `gpus` instances of it, not whole GPUs.
    pub mig: Option<gpool_core::MigProfile>,
    /// A share of one GPU in thousandths (openb's `gpu_milli` below 1000): the job shares a GPU.
    pub gpu_milli: Option<u16>,
    /// The accelerator kind the job asks for; `None`: any GPU (`gpool sim --job-kinds` can assign them).
    pub kind: Option<gpool_core::DeviceKind>,
}

/// Trace file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Philly,
    Itp,
    Openb,
    Csv,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "philly" => Ok(Format::Philly),
            "itp" => Ok(Format::Itp),
            "openb" | "alibaba" => Ok(Format::Openb),
            "csv" => Ok(Format::Csv),
            other => Err(format!("unknown trace format {other:?}: expected philly, itp, openb or csv")),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Philly => "philly",
            Format::Itp => "itp",
            Format::Openb => "openb",
            Format::Csv => "csv",
        })
    }
}

/// Why a trace could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("line {line}: {what}")]
    Row { line: usize, what: String },
    #[error("the trace is empty (no header line)")]
    Empty,
    #[error("cannot tell the trace format from its header ({0}); pass --format philly|itp|openb|csv")]
    UnknownFormat(String),
    #[error(
        "invalid window {0:?}: expected FROM..TO with dates (2017-10-01..2017-11-30, or with a time 2017-10-01 06:00:00) or seconds (0..86400)"
    )]
    Window(String),
}

impl From<CsvError> for TraceError {
    fn from(e: CsvError) -> TraceError {
        TraceError::Row { line: e.line, what: e.what }
    }
}

/// Guesses the format from the header line.
pub fn detect(text: &str) -> Result<Format, TraceError> {
    let header = text.lines().next().ok_or(TraceError::Empty)?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let has = |c: &str| cols.iter().any(|x| x.eq_ignore_ascii_case(c));
    if has("timestamp") && has("num_gpus") && has("cluster") {
        Ok(Format::Philly)
    } else if has("submission_time") && has("num_gpu") {
        Ok(Format::Itp)
    } else if has("gpu_milli") && has("creation_time") {
        Ok(Format::Openb)
    } else if has("submit") && has("duration") && has("gpus") {
        Ok(Format::Csv)
    } else {
        Err(TraceError::UnknownFormat(header.chars().take(120).collect()))
    }
}

/// Reads a whole trace. Jobs come back sorted by submission time, ties in file order.
pub fn parse(text: &str, format: Format) -> Result<Vec<TraceJob>, TraceError> {
    let recs = records(text)?;
    let (head, rows) = recs.split_first().ok_or(TraceError::Empty)?;
    let header = Header::new(head);
    let mut jobs = match format {
        Format::Philly => philly(&header, rows)?,
        Format::Itp => itp(&header, rows)?,
        Format::Openb => openb(&header, rows)?,
        Format::Csv => generic(&header, rows)?,
    };
    jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s).then(a.line.cmp(&b.line)));
    Ok(jobs)
}

struct Row<'a> {
    rec: &'a Record,
}

impl Row<'_> {
    fn err(&self, what: impl Into<String>) -> TraceError {
        TraceError::Row { line: self.rec.line, what: what.into() }
    }

    fn get(&self, i: usize, name: &str) -> Result<&str, TraceError> {
        self.rec.fields.get(i).map(|s| s.trim()).ok_or_else(|| {
            self.err(format!("{} fields, but column {name:?} is number {}", self.rec.fields.len(), i + 1))
        })
    }

    fn float(&self, i: usize, name: &str) -> Result<f64, TraceError> {
        let s = self.get(i, name)?;
        let v: f64 = s.parse().map_err(|_| self.err(format!("{name} {s:?} is not a number")))?;
        if !v.is_finite() || v < 0.0 {
            return Err(self.err(format!("{name} {s:?} must be a finite number ≥ 0")));
        }
        Ok(v)
    }

    fn int(&self, i: usize, name: &str) -> Result<u64, TraceError> {
        let s = self.get(i, name)?;
        s.parse().map_err(|_| self.err(format!("{name} {s:?} is not a whole number ≥ 0")))
    }

    fn gpus(&self, i: usize, name: &str) -> Result<u32, TraceError> {
        let v = self.int(i, name)?;
        u32::try_from(v).ok().filter(|g| *g <= 100_000).ok_or_else(|| self.err(format!("{name} {v} is out of range")))
    }
}

fn job(line: usize, submit_s: f64, duration_s: f64, gpus: u32, group: &str) -> TraceJob {
    TraceJob {
        line,
        submit_s,
        duration_s,
        gpus,
        group: group.to_string(),
        gpu_models: Vec::new(),
        cpus_milli: 0,
        memory_mb: 0,
        mig: None,
        gpu_milli: None,
        kind: None,
    }
}

/// Philly (Pollux): `timestamp,duration,num_gpus,gpu_time,cluster`; naive timestamps.
fn philly(h: &Header, rows: &[Record]) -> Result<Vec<TraceJob>, TraceError> {
    let (ts, dur, gpus, vc) =
        (h.require("timestamp")?, h.require("duration")?, h.require("num_gpus")?, h.require("cluster")?);
    rows.iter()
        .map(|rec| {
            let r = Row { rec };
            let t = r.get(ts, "timestamp")?;
            let submit =
                parse_datetime(t).ok_or_else(|| r.err(format!("timestamp {t:?} is not YYYY-MM-DD HH:MM:SS")))?;
            let g = r.gpus(gpus, "num_gpus")?;
            if g == 0 {
                return Err(r.err("num_gpus must be at least 1"));
            }
            Ok(job(rec.line, submit as f64, r.float(dur, "duration")?, g, r.get(vc, "cluster")?))
        })
        .collect()
}

/// ITP (ElasticFlow): `job_id,submission_time,duration,num_gpu`, integer seconds.
fn itp(h: &Header, rows: &[Record]) -> Result<Vec<TraceJob>, TraceError> {
    let (sub, dur, gpus) = (h.require("submission_time")?, h.require("duration")?, h.require("num_gpu")?);
    rows.iter()
        .map(|rec| {
            let r = Row { rec };
            let g = r.gpus(gpus, "num_gpu")?;
            if g == 0 {
                return Err(r.err("num_gpu must be at least 1"));
            }
            Ok(job(rec.line, r.int(sub, "submission_time")? as f64, r.int(dur, "duration")? as f64, g, "itp"))
        })
        .collect()
}

/// Alibaba openb: pods with CPU/memory requests, GPU counts, fractional GPU
/// shares and allowed GPU models. A fractional share (`gpu_milli` below 1000
/// on one GPU) becomes a GPU share. Run time is from scheduling (or
/// creation, for pods never scheduled) to deletion.
fn openb(h: &Header, rows: &[Record]) -> Result<Vec<TraceJob>, TraceError> {
    let cpu = h.require("cpu_milli")?;
    let mem = h.require("memory_mib")?;
    let gpus = h.require("num_gpu")?;
    let spec = h.require("gpu_spec")?;
    let created = h.require("creation_time")?;
    let deleted = h.require("deletion_time")?;
    let scheduled = h.require("scheduled_time")?;
    let qos = h.find("qos");
    let milli = h.find("gpu_milli");
    rows.iter()
        .map(|rec| {
            let r = Row { rec };
            let c = r.int(created, "creation_time")?;
            let d = r.int(deleted, "deletion_time")?;
            let s = match r.get(scheduled, "scheduled_time")? {
                "" => c,
                _ => r.int(scheduled, "scheduled_time")?,
            };
            if d < s {
                return Err(r.err(format!("deletion_time {d} is before the pod started at {s}")));
            }
            let group = match qos {
                Some(q) => r.get(q, "qos")?,
                None => "openb",
            };
            let mut j = job(rec.line, c as f64, (d - s) as f64, r.gpus(gpus, "num_gpu")?, group);
            j.cpus_milli = r.int(cpu, "cpu_milli")?;
            j.memory_mb = r.int(mem, "memory_mib")?;
            if let Some(m) = milli {
                let m = r.int(m, "gpu_milli")?;
                if j.gpus == 1 && (1..1000).contains(&m) {
                    j.gpu_milli = Some(m as u16);
                }
            }
            j.gpu_models = r
                .get(spec, "gpu_spec")?
                .split('|')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            Ok(j)
        })
        .collect()
}

/// Generic CSV, see docs/simulator.md: `submit` and `duration` in seconds,
/// `gpus`; optional `user`, `gpu_model`, `cpus`, `memory_mb`, `mig` (a MIG
/// profile: `gpus` instances of it instead of whole GPUs), `kind`
/// (`nvidia.com/gpu`, `amd.com/gpu`, `google.com/tpu`; empty or `any`: any GPU).
fn generic(h: &Header, rows: &[Record]) -> Result<Vec<TraceJob>, TraceError> {
    let (sub, dur, gpus) = (h.require("submit")?, h.require("duration")?, h.require("gpus")?);
    let (user, model, cpus, mem) = (h.find("user"), h.find("gpu_model"), h.find("cpus"), h.find("memory_mb"));
    let (mig, kind) = (h.find("mig"), h.find("kind"));
    rows.iter()
        .map(|rec| {
            let r = Row { rec };
            let group = match user {
                Some(u) => r.get(u, "user")?,
                None => "user",
            };
            let mut j = job(rec.line, r.float(sub, "submit")?, r.float(dur, "duration")?, r.gpus(gpus, "gpus")?, group);
            if let Some(m) = model {
                j.gpu_models = r
                    .get(m, "gpu_model")?
                    .split('|')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
            }
            if let Some(c) = cpus {
                j.cpus_milli = (r.float(c, "cpus")? * 1000.0) as u64;
            }
            if let Some(m) = mem {
                j.memory_mb = r.int(m, "memory_mb")?;
            }
            if let Some(m) = mig {
                let text = r.get(m, "mig")?.trim();
                if !text.is_empty() {
                    j.mig =
                        Some(text.parse().map_err(|e: gpool_core::resources::MigProfileError| r.err(e.to_string()))?);
                }
            }
            if let Some(k) = kind {
                j.kind = match r.get(k, "kind")?.trim() {
                    "" | "any" => None,
                    text => Some(text.parse().map_err(|e: String| r.err(format!("kind: {e}")))?),
                };
            }
            if j.gpus == 0 && j.cpus_milli == 0 {
                return Err(r.err("a job must ask for at least one GPU or some CPU"));
            }
            Ok(j)
        })
        .collect()
}

/// Seconds since 1970-01-01 of a naive `YYYY-MM-DD HH:MM:SS` (or
/// `YYYY-MM-DD`, or `YYYY-MM-DD HH:MM`), read as UTC.
pub fn parse_datetime(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = match s.split_once([' ', 'T']) {
        Some((d, t)) => (d, Some(t)),
        None => (s, None),
    };
    let date: jiff::civil::Date = date.parse().ok()?;
    let time: jiff::civil::Time = match time {
        None => jiff::civil::Time::midnight(),
        Some(t) => t.parse().ok()?,
    };
    let zoned = date.to_datetime(time).to_zoned(jiff::tz::TimeZone::UTC).ok()?;
    Some(zoned.timestamp().as_second())
}

/// A time window on the trace's clock, `from` inclusive, `to` inclusive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub from: f64,
    pub to: f64,
}

impl FromStr for Window {
    type Err = TraceError;
    /// `2017-10-01..2017-11-30` (a date alone as the end means the end of that day),
    /// `2017-10-01 06:00:00..2017-10-02 06:00:00`, or seconds `0..86400`.
    fn from_str(s: &str) -> Result<Window, TraceError> {
        let err = || TraceError::Window(s.to_string());
        let (a, b) = s.split_once("..").ok_or_else(err)?;
        let point = |x: &str, end: bool| -> Option<f64> {
            let x = x.trim();
            if let Ok(v) = x.parse::<f64>() {
                return v.is_finite().then_some(v);
            }
            let t = parse_datetime(x)?;
            let date_only = !x.contains([' ', 'T']);
            Some(if end && date_only { t + 86_399 } else { t } as f64)
        };
        let w = Window { from: point(a, false).ok_or_else(err)?, to: point(b, true).ok_or_else(err)? };
        if w.to < w.from {
            return Err(err());
        }
        Ok(w)
    }
}

/// Keeps the jobs submitted within `window` (if any), moves time 0 to the
/// window's start (or the first submission), and divides inter-arrival
/// times by `load_scale` (2.0 = twice the load).
pub fn prepare(mut jobs: Vec<TraceJob>, window: Option<Window>, load_scale: f64) -> Vec<TraceJob> {
    if let Some(w) = window {
        jobs.retain(|j| j.submit_s >= w.from && j.submit_s <= w.to);
    }
    let origin = window.map(|w| w.from).or_else(|| jobs.first().map(|j| j.submit_s)).unwrap_or(0.0);
    let scale = if load_scale > 0.0 && load_scale.is_finite() { load_scale } else { 1.0 };
    for j in &mut jobs {
        j.submit_s = (j.submit_s - origin) / scale;
    }
    jobs
}

/// The trace repeated `times` times back to back (each copy starts where the
/// previous one's submissions ended), for measuring how the simulator scales.
pub fn repeat(jobs: &[TraceJob], times: u32) -> Vec<TraceJob> {
    let span = jobs.iter().map(|j| j.submit_s).fold(0.0, f64::max) + 1.0;
    let lines = jobs.iter().map(|j| j.line).max().unwrap_or(0) + 1;
    (0..times.max(1))
        .flat_map(|k| {
            jobs.iter().map(move |j| TraceJob {
                line: j.line + k as usize * lines,
                submit_s: j.submit_s + f64::from(k) * span,
                ..j.clone()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_convert_like_the_calendar() {
        assert_eq!(parse_datetime("1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_datetime("2017-10-01 00:00:00"), Some(1_506_816_000));
        assert_eq!(parse_datetime("2000-02-29"), Some(951_782_400));
        for bad in ["2017-02-29", "2017-13-01", "2017-10-01 24:00:00", "10/01/2017", "", "2017-10-01 00:00:00:00"] {
            assert_eq!(parse_datetime(bad), None, "{bad}");
        }
    }

    #[test]
    fn each_format_reads_its_columns() {
        let philly = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n";
        let j = parse(philly, Format::Philly).expect("philly");
        assert_eq!(
            (j[0].line, j[0].duration_s, j[0].gpus, j[0].group.as_str()),
            (3, 2951.0, 2, "6214e9"),
            "sorted by time"
        );
        let itp = "job_id,submission_time,duration,num_gpu\nx,5810,288476,16\ny,5,10,1";
        let j = parse(itp, Format::Itp).expect("itp");
        assert_eq!((j[0].submit_s, j[1].gpus), (5.0, 16));
        let openb = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np0,12000,16384,1,460,V100M16|V100M32,LS,Running,100,500,120\np1,6000,1024,0,0,,BE,Pending,10,50,\n";
        let j = parse(openb, Format::Openb).expect("openb");
        assert_eq!((j[1].duration_s, j[1].gpu_models.len(), j[1].cpus_milli), (380.0, 2, 12000));
        assert_eq!((j[1].gpu_milli, j[0].gpu_milli), (Some(460), None), "a fraction of one GPU is a share");
        assert_eq!((j[0].duration_s, j[0].gpus, j[0].group.as_str()), (40.0, 0, "BE"));
        let csv = "submit,duration,gpus,user,gpu_model\n0,100,2,ana,H100-80GB\n";
        let j = parse(csv, Format::Csv).expect("csv");
        assert_eq!((j[0].group.as_str(), j[0].gpu_models.clone()), ("ana", vec!["H100-80GB".to_string()]));
    }

    #[test]
    fn bad_rows_are_reported_with_their_line() {
        let cases = [
            (
                "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,abc,1,66.0,x\n",
                Format::Philly,
                2,
                "duration",
            ),
            (
                "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1,0,66.0,x\n",
                Format::Philly,
                2,
                "at least 1",
            ),
            ("timestamp,duration,num_gpus,gpu_time,cluster\nok,1,1,1,x\n", Format::Philly, 2, "timestamp"),
            ("job_id,submission_time,duration,num_gpu\nx,1,2,3\ny,-5,2,1\n", Format::Itp, 3, "submission_time"),
            ("job_id,submission_time,duration,num_gpu\nx,1,2\n", Format::Itp, 2, "fields"),
            ("submit,duration,gpus\n0,NaN,1\n", Format::Csv, 2, "finite"),
            ("submit,duration,gpus\n0,1,0\n", Format::Csv, 2, "at least one GPU"),
        ];
        for (text, format, line, what) in cases {
            match parse(text, format) {
                Err(TraceError::Row { line: l, what: w }) => {
                    assert_eq!(l, line, "{text:?}");
                    assert!(w.contains(what), "{text:?}: {w}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert!(matches!(parse("a,b\n", Format::Itp), Err(TraceError::Row { line: 1, .. })));
    }

    #[test]
    fn formats_are_detected_from_headers() {
        assert_eq!(detect("timestamp,duration,num_gpus,gpu_time,cluster\n"), Ok(Format::Philly));
        assert_eq!(detect("job_id,submission_time,duration,num_gpu"), Ok(Format::Itp));
        assert!(matches!(detect("foo,bar"), Err(TraceError::UnknownFormat(_))));
    }

    #[test]
    fn windows_include_whole_end_days_and_rebase_time() {
        let w: Window = "2017-10-01..2017-11-30".parse().expect("window");
        assert_eq!(w.to - w.from, 61.0 * 86_400.0 - 1.0);
        let w2: Window = "100..200".parse().expect("window");
        assert_eq!((w2.from, w2.to), (100.0, 200.0));
        assert!("200..100".parse::<Window>().is_err());
        assert!("yesterday..today".parse::<Window>().is_err());
        let jobs = vec![job(2, 50.0, 1.0, 1, "a"), job(3, 150.0, 1.0, 1, "a"), job(4, 300.0, 1.0, 1, "a")];
        let kept = prepare(jobs, Some(w2), 2.0);
        assert_eq!(kept.iter().map(|j| j.submit_s).collect::<Vec<_>>(), vec![25.0]);
    }

    #[test]
    fn repeat_appends_copies_after_the_last_submission() {
        let jobs = vec![job(2, 0.0, 1.0, 1, "a"), job(3, 10.0, 1.0, 1, "a")];
        let r = repeat(&jobs, 3);
        assert_eq!(r.iter().map(|j| j.submit_s).collect::<Vec<_>>(), vec![0.0, 10.0, 11.0, 21.0, 22.0, 32.0]);
        let mut lines: Vec<usize> = r.iter().map(|j| j.line).collect();
        lines.dedup();
        assert_eq!(lines.len(), 6, "lines stay unique");
    }
}
