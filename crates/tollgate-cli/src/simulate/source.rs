//! Reading the logs: each file streamed line by line (constant memory per
//! file), the requests of several files merged in time order.
//!
//! The merge takes, at each step, the earliest next request among the files
//! (ties: the file named first). Within one file lines are taken in their
//! order: a line with a time earlier than the one before it is decided
//! where it stands, with that earlier time, and the limiter answers it by
//! its rule for times that go backwards (as at the latest time seen for
//! that client).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::format::{Format, LineError, LineParser, Parsed};
use crate::lines::{Line, LineReader, MAX_LINE_BYTES};

/// How many malformed lines are kept to be shown (all are counted).
pub const SHOWN_MALFORMED: usize = 20;

/// One malformed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedLine {
    /// The file, as named on the command line.
    pub file: String,
    /// The 1-based line number in that file.
    pub line: u64,
    /// What is wrong with it.
    pub reason: String,
}

/// The malformed lines of a run: all counted, the first
/// [`SHOWN_MALFORMED`] kept.
#[derive(Debug, Clone, Default)]
pub struct Malformed {
    /// How many lines were malformed.
    pub count: u64,
    /// The first of them.
    pub shown: Vec<MalformedLine>,
}

impl Malformed {
    fn add(&mut self, file: &str, line: u64, reason: String) {
        self.count += 1;
        if self.shown.len() < SHOWN_MALFORMED {
            self.shown.push(MalformedLine {
                file: file.to_owned(),
                line,
                reason,
            });
        }
    }
}

/// One request as the merge hands it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// The client id.
    pub client: &'a str,
    /// Epoch milliseconds.
    pub time_ms: u64,
}

/// One log file, positioned on its next request.
struct Source {
    name: String,
    reader: LineReader<BufReader<File>>,
    parser: LineParser,
    line: Vec<u8>,
    client: String,
    time_ms: u64,
}

impl Source {
    /// Moves to the next request: `false` at the end of the file.
    fn advance(&mut self, malformed: &mut Malformed) -> Result<bool, String> {
        loop {
            let read = self
                .reader
                .next_line(&mut self.line)
                .map_err(|e| format!("{}: {e}", self.name))?;
            let number = self.reader.lines_read();
            let parsed = match read {
                None => return Ok(false),
                Some(Line::TooLong) => Err(LineError::Malformed(format!(
                    "line longer than {} bytes",
                    self.reader.max_line_bytes()
                ))),
                Some(Line::Read) => self.parser.parse(&self.line),
            };
            match parsed {
                Ok(Parsed::Nothing) => {}
                Ok(Parsed::Request { client, time_ms }) => {
                    self.client.clear();
                    self.client.push_str(client);
                    self.time_ms = time_ms;
                    return Ok(true);
                }
                Err(LineError::Malformed(reason)) => malformed.add(&self.name, number, reason),
                Err(LineError::Fatal(reason)) => {
                    return Err(format!("{}: line {number}: {reason}", self.name))
                }
            }
        }
    }
}

/// The requests of several files, in time order.
pub struct Merge {
    sources: Vec<Source>,
    next: BinaryHeap<Reverse<(u64, usize)>>,
    handed_out: Option<usize>,
    total_bytes: u64,
}

impl Merge {
    /// Opens every file and reads up to its first request.
    ///
    /// # Errors
    /// A message naming the file that cannot be opened or read, or whose
    /// CSV header lacks a column.
    pub fn open(
        paths: &[impl AsRef<Path>],
        format: Format,
        client: Option<&str>,
        time: Option<&str>,
        malformed: &mut Malformed,
    ) -> Result<Self, String> {
        let mut merge = Merge {
            sources: Vec::with_capacity(paths.len()),
            next: BinaryHeap::with_capacity(paths.len()),
            handed_out: None,
            total_bytes: 0,
        };
        for path in paths {
            let path = path.as_ref();
            let name = path.display().to_string();
            let file = File::open(path).map_err(|e| format!("cannot open {name}: {e}"))?;
            merge.total_bytes += file.metadata().map_or(0, |m| m.len());
            merge.sources.push(Source {
                name,
                reader: LineReader::new(BufReader::with_capacity(1 << 16, file), MAX_LINE_BYTES),
                parser: LineParser::new(format, client, time)?,
                line: Vec::with_capacity(512),
                client: String::new(),
                time_ms: 0,
            });
        }
        for index in 0..merge.sources.len() {
            merge.advance(index, malformed)?;
        }
        Ok(merge)
    }

    fn advance(&mut self, index: usize, malformed: &mut Malformed) -> Result<(), String> {
        let source = &mut self.sources[index];
        if source.advance(malformed)? {
            self.next.push(Reverse((source.time_ms, index)));
        }
        Ok(())
    }

    /// The next request in time order, `None` after the last.
    ///
    /// # Errors
    /// A read error, or a fatal line (see [`Merge::open`]).
    pub fn next_request(
        &mut self,
        malformed: &mut Malformed,
    ) -> Result<Option<Request<'_>>, String> {
        if let Some(index) = self.handed_out.take() {
            self.advance(index, malformed)?;
        }
        let Some(Reverse((_, index))) = self.next.pop() else {
            return Ok(None);
        };
        self.handed_out = Some(index);
        let source = &self.sources[index];
        Ok(Some(Request {
            client: &source.client,
            time_ms: source.time_ms,
        }))
    }

    /// The size of all the files, in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes read so far, over all the files.
    pub fn bytes_read(&self) -> u64 {
        self.sources.iter().map(|s| s.reader.bytes_read()).sum()
    }

    /// Lines read so far, over all the files.
    pub fn lines_read(&self) -> u64 {
        self.sources.iter().map(|s| s.reader.lines_read()).sum()
    }
}
