//! Bodies sent in a transfer coding other than one `chunked`, which no
//! front end reads: hyper takes one `chunked` coding off and hands on the
//! rest as the body, so the coded bytes of `gzip, chunked`, or the inner
//! chunks of `chunked, chunked`, would be read (or forwarded) as the body.

use http::header::TRANSFER_ENCODING;
use http::HeaderMap;

/// Why the `Transfer-Encoding` of `headers` cannot be read, if it cannot:
/// any coding but `chunked`, or `chunked` more than once (RFC 9112 §7.1.1
/// forbids applying it twice), over every `Transfer-Encoding` line. One
/// pass over the field's lines, none when there is none.
pub fn unsupported_transfer_coding(headers: &HeaderMap) -> Option<String> {
    let mut chunked = 0;
    for value in headers.get_all(TRANSFER_ENCODING) {
        let codings = value.to_str().unwrap_or("?");
        for coding in codings.split(',') {
            chunked += 1;
            if !coding.trim().eq_ignore_ascii_case("chunked") || chunked > 1 {
                return Some(refusal(headers));
            }
        }
    }
    None
}

/// The refusal, quoting the whole field (its lines joined, as one list).
fn refusal(headers: &HeaderMap) -> String {
    let field: Vec<&str> = headers
        .get_all(TRANSFER_ENCODING)
        .iter()
        .map(|value| value.to_str().unwrap_or("?"))
        .collect();
    format!(
        "Transfer-Encoding {:?} is not supported: send the body by length, or chunked once",
        field.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(TRANSFER_ENCODING, line.parse().unwrap());
        }
        headers
    }

    #[test]
    fn one_chunked_coding_is_read_and_anything_else_is_not() {
        for fine in [&[][..], &["chunked"], &["CHUNKED"], &[" chunked "]] {
            assert_eq!(
                unsupported_transfer_coding(&headers(fine)),
                None,
                "{fine:?}"
            );
        }
        for bad in [
            &["gzip, chunked"][..],
            &["gzip"],
            &["chunked, chunked"],
            &["chunked", "chunked"],
            &["gzip", "chunked"],
            &["identity, chunked"],
        ] {
            let why = unsupported_transfer_coding(&headers(bad)).expect("refused");
            assert!(why.contains("chunked once"), "{bad:?}: {why}");
            assert!(
                why.contains(&format!("{:?}", bad.join(", "))),
                "{bad:?}: {why}"
            );
        }
    }
}
