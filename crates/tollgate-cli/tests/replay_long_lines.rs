//! `tollgate replay` reads lines in constant memory: a line over the cap
//! (`tollgate_cli::lines::MAX_LINE_BYTES`, 64 KiB) is one error line and the
//! replay goes on with the next line.

use std::io::{self, Read};

use tollgate_cli::replay::{self, Memory};

/// 64 KiB, the documented cap (spelled out so that a change of the cap
/// shows up here).
const CAP: usize = 64 * 1024;

/// An input made on the fly, never held in memory: `head`, then `filler`
/// bytes of `a` with no newline, then `tail`.
struct Generated {
    head: io::Cursor<Vec<u8>>,
    filler: u64,
    tail: io::Cursor<Vec<u8>>,
}

impl Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.head.read(buf)?;
        if n > 0 {
            return Ok(n);
        }
        if self.filler > 0 {
            let n = buf
                .len()
                .min(usize::try_from(self.filler).unwrap_or(usize::MAX));
            buf[..n].fill(b'a');
            self.filler -= n as u64;
            return Ok(n);
        }
        self.tail.read(buf)
    }
}

fn run(input: impl Read) -> (String, replay::Summary) {
    let mut out = Vec::new();
    let summary = replay::replay(
        io::BufReader::with_capacity(1 << 16, input),
        &mut out,
        &mut Memory::default(),
    )
    .expect("replay");
    (String::from_utf8(out).expect("utf-8"), summary)
}

#[test]
fn a_256_mib_line_is_one_error_and_the_replay_goes_on() {
    let input = Generated {
        head: io::Cursor::new(b"new token-bucket 2 1000\nallow x ".to_vec()),
        filler: 256 << 20,
        tail: io::Cursor::new(b"\nallow app 0\nallow app 1\nallow app 2\n".to_vec()),
    };
    let (out, summary) = run(input);
    assert_eq!(
        out,
        format!("ok\nerror: line 2: line longer than {CAP} bytes\ntrue\ntrue\nfalse\n")
    );
    assert_eq!((summary.answered, summary.failed), (4, 1));
}

#[test]
fn the_cap_counts_the_bytes_before_the_newline() {
    // `allow` + padding spaces + ` app 0`: exactly CAP bytes passes, one more fails.
    let line = |len: usize| {
        let call = "allow app 0";
        format!("{}{call}\n", " ".repeat(len - call.len()))
    };
    let session = format!(
        "new gcra 5 1000\n{}{}allow app 1\n",
        line(CAP),
        line(CAP + 1)
    );
    let (out, _) = run(session.as_bytes());
    assert_eq!(
        out,
        format!("ok\ntrue\nerror: line 3: line longer than {CAP} bytes\ntrue\n")
    );
}

#[test]
fn an_over_long_last_line_without_newline_is_reported() {
    let input = Generated {
        head: io::Cursor::new(b"new gcra 5 1000\n".to_vec()),
        filler: (CAP as u64) * 3,
        tail: io::Cursor::new(Vec::new()),
    };
    let (out, summary) = run(input);
    assert_eq!(
        out,
        format!("ok\nerror: line 2: line longer than {CAP} bytes\n")
    );
    assert_eq!(summary.failed, 1);
}
