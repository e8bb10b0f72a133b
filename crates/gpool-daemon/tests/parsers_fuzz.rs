//! Fuzzing, as property tests over arbitrary input: the job-spec parser
//! (JSON and YAML, one spec or a batch), the checks at the API's boundary
//! and the conversion to the scheduler's spec, and the duration and
//! quantity parsers never panic, whatever they are given (issue 12). Each
//! run draws new cases; a failure prints the input that broke it.

use gpool_api::quantity::{parse_bytes, parse_cpu_milli, parse_duration};
use gpool_daemon::plane::{convert, http, input};
use proptest::prelude::*;

/// Spec-shaped text: keys and values a spec has, nested and mixed with noise,
/// so that the parsers get past their first byte.
fn spec_like() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "command",
        "name",
        "env",
        "resources",
        "nvidia.com/gpu",
        "replicas",
        "queue",
        "priority",
        "gracePeriod",
        "timeLimit",
        "estimate",
        "nodeSelector",
        "affinity",
        "labels",
        "dependsOn",
        "retries",
        "jobs",
        "cpu",
        "memory",
        "stopSignal",
        "workdir",
        "preemptible",
        "onNodeFailure",
        "onStraggler",
        "interactive",
        "detachGrace",
        "expose",
        "gpuModel",
        "required",
        "key",
        "operator",
        "values",
        "weight",
        "nvidia.com/mig-1g.10gb",
        "gpool.io/gpu-memory",
    ]);
    let value = prop::sample::select(vec![
        "1",
        "-1",
        "0",
        "1e309",
        "NaN",
        "\"\"",
        "[]",
        "{}",
        "null",
        "true",
        "\"2h\"",
        "\"1.5Gi\"",
        "\"x\\u0000\"",
        "[\"sh\",\"-c\",\"true\"]",
        "\"high\"",
        "18446744073709551616",
        "\"999999999999d\"",
        "\"500m\"",
        "[1,2]",
    ]);
    prop::collection::vec((key, value, any::<bool>()), 0..12).prop_map(|fields| {
        let body: Vec<String> = fields
            .into_iter()
            .map(|(k, v, nest)| if nest { format!("\"{k}\": {{\"{k}\": {v}}}") } else { format!("\"{k}\": {v}") })
            .collect();
        format!("{{{}}}", body.join(","))
    })
}

fn check(body: &[u8]) {
    for yaml in [false, true] {
        if let Ok(specs) = http::submission(body, yaml) {
            for s in &specs {
                if input::spec(s, false).is_ok() {
                    let _ = convert::to_core(s, "u", "t", 0);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn the_spec_parser_never_panics_on_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&body);
    }

    #[test]
    fn the_spec_parser_never_panics_on_spec_like_text(body in spec_like()) {
        check(body.as_bytes());
    }

    /// An interactive session's frames, as the shim reads a client's: any
    /// bytes end in frames, a clean end, or an error; never a panic, and a
    /// frame read again from its encoding is the same frame.
    #[test]
    fn terminal_frames_never_panic_and_round_trip(body in prop::collection::vec(any::<u8>(), 0..512)) {
        use gpool_api::terminal::read_frame;
        let mut r = &body[..];
        while let Ok(Some(frame)) = read_frame(&mut r) {
            let again = frame.encode();
            prop_assert_eq!(read_frame(&mut &again[..]).ok().flatten(), Some(frame));
        }
    }

    #[test]
    fn quantity_and_duration_parsers_never_panic(s in "\\PC{0,24}|[0-9.eE+-]{0,24}[a-zA-Z]{0,3}") {
        let _ = parse_duration(&s);
        let _ = parse_bytes(&s);
        let _ = parse_cpu_milli(&s);
    }
}
