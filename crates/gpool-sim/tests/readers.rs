//! Trace readers never panic: any text either parses or fails with a line number inside the file.

use gpool_sim::trace::{Format, TraceError, parse};
use proptest::prelude::*;

const HEADERS: [(&str, Format); 4] = [
    ("timestamp,duration,num_gpus,gpu_time,cluster", Format::Philly),
    ("job_id,submission_time,duration,num_gpu", Format::Itp),
    (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time",
        Format::Openb,
    ),
    ("submit,duration,gpus,user,gpu_model,cpus,memory_mb", Format::Csv),
];

fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,7}",
        "[0-9]{1,5}\\.[0-9]{1,2}",
        "-[0-9]{1,3}",
        "2017-1[0-2]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9]",
        "[a-zA-Z|]{0,8}",
        "\"[a-z,]{0,5}\"",
        "\"\"\"?",
        Just(String::new()),
        "[\\PC]{0,4}",
    ]
}

fn row() -> impl Strategy<Value = String> {
    prop::collection::vec(field(), 0..13).prop_map(|f| f.join(","))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn readers_never_panic_and_errors_point_inside_the_file(
        header in 0usize..4,
        rows in prop::collection::vec(row(), 0..12),
        crlf in any::<bool>(),
    ) {
        let (h, format) = HEADERS[header];
        let nl = if crlf { "\r\n" } else { "\n" };
        let text = format!("{h}{nl}{}", rows.join(nl));
        let lines = text.split('\n').count();
        match parse(&text, format) {
            Ok(jobs) => {
                prop_assert!(jobs.iter().all(|j| j.duration_s >= 0.0 && j.submit_s.is_finite()));
                prop_assert!(jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s), "sorted by submission");
            }
            Err(TraceError::Row { line, what }) => {
                prop_assert!(line >= 1 && line <= lines, "line {} of {}: {}", line, lines, what);
                prop_assert!(!what.is_empty());
            }
            Err(other) => prop_assert!(false, "unexpected error kind: {}", other),
        }
    }

    #[test]
    fn arbitrary_bytes_do_not_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), format in 0usize..4) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse(&text, HEADERS[format].1);
        let _ = gpool_sim::trace::detect(&text);
    }
}
