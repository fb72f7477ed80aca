//! CSV logs: a header line naming the columns, then one request per line.
//! Splitting a record (quotes, doubled quotes, commas inside quotes) is
//! `csv-core`'s job; a record must fit on one line.

/// Splits CSV lines into fields, reusing its buffers from line to line.
pub struct CsvSplitter {
    reader: csv_core::Reader,
    input: Vec<u8>,
    output: Vec<u8>,
    ends: Vec<usize>,
    fields: usize,
}

impl Default for CsvSplitter {
    fn default() -> Self {
        Self {
            reader: csv_core::Reader::new(),
            input: Vec::new(),
            output: Vec::new(),
            ends: Vec::new(),
            fields: 0,
        }
    }
}

impl CsvSplitter {
    /// Splits one line (without its `\n`) into fields, read with [`Self::field`].
    ///
    /// # Errors
    /// A message when a quoted field is not closed on the line.
    pub fn split(&mut self, line: &[u8]) -> Result<usize, String> {
        self.reader.reset();
        self.input.clear();
        self.input.extend_from_slice(line);
        self.input.push(b'\n');
        // A record's fields are never longer than the line, nor more numerous.
        self.output.resize(self.input.len(), 0);
        self.ends.resize(self.input.len() + 1, 0);
        let (result, _, _, fields) =
            self.reader
                .read_record(&self.input, &mut self.output, &mut self.ends);
        if result != csv_core::ReadRecordResult::Record {
            self.fields = 0;
            return Err("a quoted field is not closed on its line".to_owned());
        }
        self.fields = fields;
        Ok(fields)
    }

    /// The field at 0-based `index` of the line last split, as text.
    ///
    /// # Errors
    /// A message when the record is shorter or the field is not UTF-8.
    pub fn field(&self, index: usize) -> Result<&str, String> {
        if index >= self.fields {
            return Err(format!(
                "the record has {} fields, column {} is missing",
                self.fields,
                index + 1
            ));
        }
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        std::str::from_utf8(&self.output[start..self.ends[index]])
            .map_err(|_| format!("column {} is not valid UTF-8", index + 1))
    }

    /// The column of the line last split (a header) whose name is `name`.
    ///
    /// # Errors
    /// A message naming the columns there are, when none is `name` or more
    /// than one is (which of them holds the field would be a guess).
    pub fn column(&self, name: &str) -> Result<usize, String> {
        let names: Vec<String> = (0..self.fields)
            .map(|i| {
                let start = if i == 0 { 0 } else { self.ends[i - 1] };
                String::from_utf8_lossy(&self.output[start..self.ends[i]]).into_owned()
            })
            .collect();
        let mut columns = (0..names.len()).filter(|&i| names[i] == name);
        match (columns.next(), columns.next()) {
            (Some(column), None) => Ok(column),
            (Some(first), Some(second)) => Err(format!(
                "the CSV header names column {name:?} more than once (columns {} and {})",
                first + 1,
                second + 1
            )),
            (None, _) => Err(format!(
                "the CSV header has no column {name:?} (its columns: {})",
                names.join(", ")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_fields_with_commas_and_quotes() {
        let mut csv = CsvSplitter::default();
        assert_eq!(csv.split(br#"time,client,path"#), Ok(3));
        assert_eq!(csv.column("client"), Ok(1));
        assert!(csv.column("ip").unwrap_err().contains("time, client, path"));
        assert_eq!(csv.split(br#"1000,"a,""b""",/x"#), Ok(3));
        assert_eq!(csv.field(1), Ok(r#"a,"b""#));
        assert_eq!(csv.field(2), Ok("/x"));
        assert!(csv.field(3).unwrap_err().contains("3 fields"));
        assert!(csv.split(br#"1000,"open"#).is_err());
        assert_eq!(csv.split(b"5,b"), Ok(2));
        assert_eq!(csv.field(0), Ok("5"));
    }

    #[test]
    fn a_header_column_named_twice_or_not_utf8_is_named() {
        let mut csv = CsvSplitter::default();
        assert_eq!(csv.split(b"client,time,client"), Ok(3));
        assert_eq!(
            csv.column("client"),
            Err(
                "the CSV header names column \"client\" more than once (columns 1 and 3)"
                    .to_owned()
            )
        );
        assert_eq!(csv.column("time"), Ok(1));
        assert_eq!(csv.split(b"cli\xffent,time"), Ok(2));
        let error = csv.column("client").unwrap_err();
        assert!(
            error.contains("its columns: cli\u{fffd}ent, time"),
            "{error}"
        );
    }
}
