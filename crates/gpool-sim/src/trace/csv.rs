//! Trace CSV through the `csv` crate (RFC 4180 quoting, `\n` or `\r\n`
//! line ends, rows of any width), keeping the physical line each record
//! starts on for error messages.

/// One record and the line it starts on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub line: usize,
    pub fields: Vec<String>,
}

/// A CSV error, at a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct CsvError {
    pub line: usize,
    pub what: String,
}

/// Splits `text` into records. Blank lines are skipped; rows may differ in
/// width (the caller says which columns it needs).
pub fn records(text: &str) -> Result<Vec<Record>, CsvError> {
    let mut reader = ::csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let mut out = Vec::new();
    let mut record = ::csv::StringRecord::new();
    let mut lines = Lines { bytes: text.as_bytes(), at: 0, line: 1 };
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => return Ok(out),
            Ok(true) => {
                let line = record.position().map_or(out.len() + 1, |p| lines.line_at(p.byte()));
                out.push(Record { line, fields: record.iter().map(str::to_string).collect() });
            }
            Err(e) => {
                let line = e.position().map_or(out.len() + 1, |p| p.line() as usize);
                return Err(CsvError { line, what: e.to_string() });
            }
        }
    }
}

/// Line numbers of record starts, counted forward once over the text.
struct Lines<'a> {
    bytes: &'a [u8],
    at: usize,
    line: usize,
}

impl Lines<'_> {
    /// The line a record starting at byte `at` is on. The crate takes the
    /// position before it skips blank lines and the `\n` of a `\r\n` in
    /// front of a record, so its own line number can be short.
    fn line_at(&mut self, at: u64) -> usize {
        let mut at = usize::try_from(at).unwrap_or(self.bytes.len()).clamp(self.at, self.bytes.len());
        while at < self.bytes.len() && matches!(self.bytes[at], b'\r' | b'\n') {
            at += 1;
        }
        self.line += self.bytes[self.at..at].iter().filter(|&&b| b == b'\n').count();
        self.at = at;
        self.line
    }
}

/// Column positions by header name.
pub struct Header {
    names: Vec<String>,
}

impl Header {
    pub fn new(record: &Record) -> Header {
        Header { names: record.fields.iter().map(|f| f.trim().trim_start_matches('\u{feff}').to_string()).collect() }
    }

    /// Index of a required column.
    pub fn require(&self, name: &str) -> Result<usize, CsvError> {
        self.find(name).ok_or_else(|| CsvError {
            line: 1,
            what: format!("missing column {name:?} (the header has: {})", self.names.join(", ")),
        })
    }

    pub fn find(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n.eq_ignore_ascii_case(name))
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_keep_their_line_numbers_and_quotes() {
        let text = "a,b\r\n1,\"x,y\"\n\n2,\"say \"\"hi\"\"\"\n3,\"multi\nline\"\n4,";
        let r = records(text).expect("valid");
        let got: Vec<(usize, Vec<&str>)> =
            r.iter().map(|r| (r.line, r.fields.iter().map(String::as_str).collect())).collect();
        assert_eq!(
            got,
            vec![
                (1, vec!["a", "b"]),
                (2, vec!["1", "x,y"]),
                (4, vec!["2", "say \"hi\""]),
                (5, vec!["3", "multi\nline"]),
                (7, vec!["4", ""]),
            ]
        );
    }

    #[test]
    fn quotes_are_read_as_the_csv_crate_reads_them() {
        // An unclosed quote runs to the end of the text, as in spreadsheets.
        let r = records("a,b\n1,\"open\n2,3\n").expect("lenient");
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].fields, vec!["1".to_string(), "open\n2,3\n".to_string()]);
    }
}
