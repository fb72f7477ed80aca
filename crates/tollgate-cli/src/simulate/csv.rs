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
    /// A message naming the columns there are.
    pub fn column(&self, name: &str) -> Result<usize, String> {
        let names: Vec<&str> = (0..self.fields)
            .map(|i| self.field(i).unwrap_or(""))
            .collect();
        names.iter().position(|n| *n == name).ok_or_else(|| {
            format!(
                "the CSV header has no column {name:?} (its columns: {})",
                names.join(", ")
            )
        })
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
}
