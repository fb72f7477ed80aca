//! Reading lines in constant memory, for `replay` and `simulate`.
//!
//! `BufRead::read_until` grows its buffer to the whole line: a gigabyte
//! without a newline becomes a gigabyte (and more, as the vector doubles) in
//! memory. [`LineReader`] keeps at most `max_line_bytes` of a line; the rest
//! of an over-long line is skipped as it is read and the line is reported as
//! [`Line::TooLong`], so that the caller can print one error for it and go on
//! with the next line.

use std::io::{self, BufRead};

/// The longest line `replay` and `simulate` accept, in bytes, not counting
/// its end (`\n`). A replay call or an access-log line is a few hundred
/// bytes; 64 KiB leaves room for long URLs and user agents while bounding
/// what one line can cost.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The UTF-8 byte-order mark.
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// What [`LineReader::next_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A line, now in the caller's buffer without its `\n`.
    Read,
    /// A line longer than the cap; it was skipped up to and including its
    /// `\n`, and the caller's buffer holds only its first `max_line_bytes`
    /// bytes (enough to tell what kind of line it was).
    TooLong,
}

/// Reads lines of at most a given length from a [`BufRead`], in constant
/// memory whatever the input, and counts the lines and bytes read.
pub struct LineReader<R> {
    input: R,
    max_line_bytes: usize,
    bytes_read: u64,
    lines_read: u64,
    /// Whether the input's buffer was used up by the last line: the next
    /// one needs a read, which may wait (a quiet standard input).
    drained: bool,
}

impl<R: BufRead> LineReader<R> {
    /// Reads `input`, refusing lines longer than `max_line_bytes` (see
    /// [`MAX_LINE_BYTES`] for the cap the commands use).
    pub fn new(input: R, max_line_bytes: usize) -> Self {
        Self {
            input,
            max_line_bytes,
            bytes_read: 0,
            lines_read: 0,
            drained: true,
        }
    }

    /// The cap on a line's length, in bytes.
    pub fn max_line_bytes(&self) -> usize {
        self.max_line_bytes
    }

    /// Bytes consumed from the input so far (for progress bars).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Lines read so far, too-long ones included: the number of the line
    /// last returned.
    pub fn lines_read(&self) -> u64 {
        self.lines_read
    }

    /// Reads the next line into `line` (cleared first, the `\n` left out).
    /// `None` at the end of the input; a last line without `\n` counts.
    ///
    /// # Errors
    /// I/O errors of the input.
    pub fn next_line(&mut self, line: &mut Vec<u8>) -> io::Result<Option<Line>> {
        self.next_line_or_stop(line, &mut || Ok(true))
    }

    /// [`Self::next_line`], calling `before_reading` first whenever the
    /// input must be read (its buffer holds no more of the line), which may
    /// wait for as long as the input is quiet: it returns whether to read
    /// (false: `None`, as at the end of the input, the part of a line read
    /// so far dropped).
    ///
    /// # Errors
    /// I/O errors of the input, and those of `before_reading`.
    pub fn next_line_or_stop(
        &mut self,
        line: &mut Vec<u8>,
        before_reading: &mut dyn FnMut() -> io::Result<bool>,
    ) -> io::Result<Option<Line>> {
        line.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            if self.drained && !before_reading()? {
                return Ok(None);
            }
            let available = match self.input.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                break;
            }
            any = true;
            let newline = memchr::memchr(b'\n', available);
            let content = &available[..newline.unwrap_or(available.len())];
            if !too_long {
                let room = self.max_line_bytes - line.len();
                too_long = content.len() > room;
                line.extend_from_slice(&content[..content.len().min(room)]);
            }
            let used = newline.map_or(available.len(), |at| at + 1);
            self.drained = used == available.len();
            self.input.consume(used);
            self.bytes_read += used as u64;
            if newline.is_some() {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        // A byte-order mark some editors put first is no part of a line:
        // every format reads the first line as any other.
        if self.lines_read == 0 && line.starts_with(UTF8_BOM) {
            line.drain(..UTF8_BOM.len());
        }
        self.lines_read += 1;
        Ok(Some(if too_long { Line::TooLong } else { Line::Read }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_lines(input: &[u8], max: usize) -> Vec<Result<String, ()>> {
        // A tiny buffer, so that lines straddle many `fill_buf` calls.
        let mut reader = LineReader::new(io::BufReader::with_capacity(3, input), max);
        let mut line = Vec::new();
        let mut out = Vec::new();
        while let Some(found) = reader.next_line(&mut line).unwrap() {
            assert!(line.len() <= max);
            out.push(match found {
                Line::Read => Ok(String::from_utf8(line.clone()).unwrap()),
                Line::TooLong => {
                    assert_eq!(line.len(), max, "the prefix is kept");
                    Err(())
                }
            });
        }
        assert_eq!(reader.bytes_read(), input.len() as u64);
        assert_eq!(reader.lines_read(), out.len() as u64);
        out
    }

    #[test]
    fn a_byte_order_mark_before_the_first_line_is_dropped() {
        let input = b"\xef\xbb\xbfnew x\n\xef\xbb\xbfabc";
        let lines = all_lines(input, 10);
        assert_eq!(lines[0], Ok("new x".into()));
        // Only the input's first bytes are a mark; elsewhere they are data.
        assert_eq!(lines[1], Ok("\u{feff}abc".into()));
    }

    #[test]
    fn lines_up_to_the_cap_pass_and_longer_ones_are_skipped_whole() {
        let input = b"abcd\nabcde\n\nxy\nabcdefghij\nz";
        assert_eq!(
            all_lines(input, 4),
            vec![
                Ok("abcd".into()),
                Err(()),
                Ok(String::new()),
                Ok("xy".into()),
                Err(()),
                Ok("z".into())
            ]
        );
    }

    #[test]
    fn an_over_long_last_line_without_newline_is_reported() {
        assert_eq!(
            all_lines(b"ok\n0123456789", 5),
            vec![Ok("ok".into()), Err(())]
        );
        assert_eq!(all_lines(b"", 5), vec![]);
    }
}
