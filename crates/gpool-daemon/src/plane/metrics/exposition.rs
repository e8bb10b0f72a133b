//! The families of one scrape, written by the `prometheus` crate's text
//! encoder (format 0.0.4, what Prometheus and `promtool check metrics`
//! read): it escapes label values, spells the histogram's `+Inf` bucket and
//! declares each family once. gpool only says which series have which value.
//!
//! A value that is not a finite number (a sensor's NaN, an infinity) is left
//! out, as a reading the device did not give is: the encoder would print
//! Rust's `inf`, which the format does not have.

use prometheus::proto::MetricType;
use prometheus::proto::{Bucket, Counter, Gauge, Histogram as ProtoHistogram, LabelPair, Metric, MetricFamily};

use super::Histogram;

/// What a family's values mean.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Gauge,
    Counter,
}

/// The families of a scrape, in the order they are added.
#[derive(Default)]
pub(super) struct Families(Vec<MetricFamily>);

fn label_pairs<K: AsRef<str>, V: AsRef<str>>(labels: impl IntoIterator<Item = (K, V)>) -> Vec<LabelPair> {
    labels
        .into_iter()
        .map(|(k, v)| {
            let mut p = LabelPair::default();
            p.set_name(k.as_ref().to_string());
            p.set_value(v.as_ref().to_string());
            p
        })
        .collect()
}

impl Families {
    fn push(&mut self, name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) {
        // A family without a series is no family (the encoder refuses it).
        if metrics.is_empty() {
            return;
        }
        let mut f = MetricFamily::default();
        f.set_name(name.to_string());
        f.set_help(help.to_string());
        f.set_field_type(kind);
        f.set_metric(metrics);
        self.0.push(f);
    }

    /// A family of plain values; series without a value are left out.
    pub(super) fn add<L, K, V>(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        series: impl IntoIterator<Item = (Option<f64>, L)>,
    ) where
        L: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let metrics = series
            .into_iter()
            .filter_map(|(v, labels)| {
                let v = v.filter(|v| v.is_finite())?;
                let mut m = Metric::from_label(label_pairs(labels));
                match kind {
                    Kind::Gauge => {
                        let mut g = Gauge::default();
                        g.set_value(v);
                        m.set_gauge(g);
                    }
                    Kind::Counter => {
                        let mut c = Counter::default();
                        c.set_value(v);
                        m.set_counter(c);
                    }
                }
                Some(m)
            })
            .collect();
        let kind = match kind {
            Kind::Gauge => MetricType::GAUGE,
            Kind::Counter => MetricType::COUNTER,
        };
        self.push(name, help, kind, metrics);
    }

    /// One value without labels.
    pub(super) fn one(&mut self, name: &str, kind: Kind, help: &str, v: f64) {
        self.add(name, kind, help, [(Some(v), Vec::<(&str, &str)>::new())]);
    }

    /// A family of histograms, one per label set.
    pub(super) fn histograms<'a, L, K, V>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (&'a Histogram, L)>,
    ) where
        L: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let metrics = series
            .into_iter()
            .map(|(h, labels)| {
                let buckets = h
                    .bounds
                    .iter()
                    .zip(&h.counts)
                    .filter(|(b, _)| b.is_finite())
                    .map(|(b, c)| {
                        let mut bucket = Bucket::default();
                        bucket.set_upper_bound(*b);
                        bucket.set_cumulative_count(*c);
                        bucket
                    })
                    .collect();
                let mut p = ProtoHistogram::default();
                p.set_bucket(buckets);
                p.set_sample_count(h.count);
                p.set_sample_sum(if h.sum.is_finite() { h.sum } else { 0.0 });
                let mut m = Metric::from_label(label_pairs(labels));
                m.set_histogram(p);
                m
            })
            .collect();
        self.push(name, help, MetricType::HISTOGRAM, metrics);
    }

    /// The text exposition format.
    pub(super) fn encode(&self) -> String {
        let mut out = String::with_capacity(256 * self.0.len());
        // Only an empty family or name is refused, and `push` adds neither.
        if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&self.0, &mut out) {
            out = format!("# gpool could not write its metrics: {e}\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_are_no_number_are_left_out_and_buckets_end_at_plus_inf() {
        let mut f = Families::default();
        let l = |v: &'static str| [("gpu", v)];
        f.add(
            "g",
            Kind::Gauge,
            "a gauge",
            [(Some(f64::INFINITY), l("0")), (Some(f64::NAN), l("1")), (Some(2.5), l("2"))],
        );
        f.add("empty", Kind::Gauge, "no series", [(None, l("0"))]);
        let mut h = Histogram::wait_seconds();
        h.observe(3.0);
        f.histograms("h_seconds", "a histogram", [(&h, [("q", "a\"b\\c\nd")])]);
        let text = f.encode();
        assert!(
            text.contains("g{gpu=\"2\"} 2.5\n") && !text.contains("gpu=\"0\"") && !text.contains("gpu=\"1\""),
            "{text}"
        );
        assert!(!text.contains("empty"), "{text}");
        assert!(text.contains("h_seconds_bucket{q=\"a\\\"b\\\\c\\nd\",le=\"+Inf\"} 1\n"), "{text}");
        assert!(text.contains("h_seconds_bucket{q=\"a\\\"b\\\\c\\nd\",le=\"5\"} 1\n"), "{text}");
        assert!(!text.contains("inf\n") && !text.contains("NaN"), "{text}");
    }
}
