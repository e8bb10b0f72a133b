//! A small CSV reader: RFC 4180 quoting, `\n` or `\r\n` line ends, and the
//! physical line number of every record for error messages.

/// One record and the line it starts on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub line: usize,
    pub fields: Vec<String>,
}

/// A CSV syntax error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct CsvError {
    pub line: usize,
    pub what: String,
}

/// Splits `text` into records. Blank lines are skipped.
pub fn records(text: &str) -> Result<Vec<Record>, CsvError> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    let mut field = String::new();
    let mut fields: Vec<String> = Vec::new();
    let mut start = 1;
    let mut in_quotes = false;
    let mut quoted_field = false;
    let mut any = false;
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.is_empty() && !quoted_field => {
                in_quotes = true;
                quoted_field = true;
                any = true;
            }
            '"' => return Err(CsvError { line, what: "a quote inside an unquoted field".into() }),
            ',' => {
                fields.push(std::mem::take(&mut field));
                quoted_field = false;
                any = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                if any || !field.is_empty() {
                    fields.push(std::mem::take(&mut field));
                    out.push(Record { line: start, fields: std::mem::take(&mut fields) });
                }
                quoted_field = false;
                any = false;
                line += 1;
                start = line;
            }
            _ => {
                if quoted_field {
                    return Err(CsvError { line, what: "text after a closing quote".into() });
                }
                field.push(c);
                any = true;
            }
        }
    }
    if in_quotes {
        return Err(CsvError { line: start, what: "a quoted field is not closed".into() });
    }
    if any || !field.is_empty() {
        fields.push(field);
        out.push(Record { line: start, fields });
    }
    Ok(out)
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
    fn syntax_errors_name_the_line() {
        let cases = [
            ("a,b\n1,\"open", 2, "not closed"),
            ("a\nx\"y\n", 2, "quote inside"),
            ("a\n\"q\"z\n", 2, "after a closing quote"),
        ];
        for (text, line, what) in cases {
            let e = records(text).expect_err(text);
            assert_eq!(e.line, line, "{text:?}");
            assert!(e.what.contains(what), "{text:?}: {e}");
        }
    }
}
