//! The nginx/Apache "combined" access log format:
//!
//! ```text
//! 203.0.113.7 - frank [02/Dec/2026:10:00:00 +0000] "GET /v1/x HTTP/1.1" 200 512 "-" "curl/8.0" "key-42"
//! ```
//!
//! Fields are separated by spaces; `[...]` and `"..."` (with `\"` escapes)
//! are one field each, given without their brackets or quotes. Fields
//! after the user agent (a custom `log_format` that appends e.g.
//! `"$http_x_api_key"`) are reached by number.

/// The named fields of the combined format, with their 1-based positions
/// (nginx's variable names).
pub const FIELD_NAMES: [(&str, usize); 9] = [
    ("remote_addr", 1),
    ("remote_logname", 2),
    ("remote_user", 3),
    ("time_local", 4),
    ("request", 5),
    ("status", 6),
    ("body_bytes_sent", 7),
    ("http_referer", 8),
    ("http_user_agent", 9),
];

/// The 0-based position of a field given by name or by 1-based number.
///
/// # Errors
/// A message listing the names when `field` is neither.
pub fn field_index(field: &str) -> Result<usize, String> {
    if let Some((_, position)) = FIELD_NAMES.iter().find(|(name, _)| *name == field) {
        return Ok(position - 1);
    }
    match field.parse::<usize>() {
        Ok(position) if position >= 1 => Ok(position - 1),
        _ => Err(format!(
            "unknown combined log field {field:?}: use a position (1, 2, ...) or one of {}",
            FIELD_NAMES.map(|(name, _)| name).join(", ")
        )),
    }
}

/// The fields at 0-based positions `first` and `second`, scanning the line
/// only as far as the later of the two.
///
/// # Errors
/// A message when the line ends before either field, or a bracket or quote
/// is not closed.
pub fn two_fields(line: &str, first: usize, second: usize) -> Result<(&str, &str), String> {
    let last = first.max(second);
    let (mut a, mut b) = ("", "");
    let mut rest = line;
    for index in 0..=last {
        rest = rest.trim_start_matches(' ');
        if rest.is_empty() {
            return Err(format!(
                "the line has {index} fields, field {} is missing",
                last + 1
            ));
        }
        let (field, after) = next_field(rest).ok_or_else(|| {
            format!(
                "field {} opens with {:?} and is never closed",
                index + 1,
                &rest[..1]
            )
        })?;
        if index == first {
            a = field;
        }
        if index == second {
            b = field;
        }
        rest = after;
    }
    Ok((a, b))
}

/// Splits the first field off `rest` (which starts with a non-space):
/// `None` when a bracket or quote is not closed.
fn next_field(rest: &str) -> Option<(&str, &str)> {
    let bytes = rest.as_bytes();
    match bytes[0] {
        b'[' => {
            let end = memchr::memchr(b']', bytes)?;
            Some((&rest[1..end], &rest[end + 1..]))
        }
        b'"' => {
            let mut at = 1;
            loop {
                at += memchr::memchr2(b'"', b'\\', &bytes[at..])?;
                if bytes[at] == b'\\' {
                    at += 2;
                    if at > bytes.len() {
                        return None;
                    }
                    continue;
                }
                return Some((&rest[1..at], &rest[at + 1..]));
            }
        }
        _ => {
            let end = memchr::memchr(b' ', bytes).unwrap_or(bytes.len());
            Some((&rest[..end], &rest[end..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"203.0.113.7 - frank [02/Dec/2026:10:00:00 +0000] "GET /a\"b HTTP/1.1" 200 512 "-" "curl/8.0 (x)" "key-42""#;

    #[test]
    fn fields_by_name_and_number() {
        let (client, time) = two_fields(LINE, 0, 3).unwrap();
        assert_eq!(
            (client, time),
            ("203.0.113.7", "02/Dec/2026:10:00:00 +0000")
        );
        assert_eq!(
            two_fields(LINE, 4, 8).unwrap(),
            (r#"GET /a\"b HTTP/1.1"#, "curl/8.0 (x)")
        );
        assert_eq!(
            two_fields(LINE, field_index("10").unwrap(), 2).unwrap(),
            ("key-42", "frank")
        );
        assert_eq!(field_index("http_user_agent"), Ok(8));
        assert!(field_index("0").unwrap_err().contains("remote_addr"));
        assert!(field_index("agent")
            .unwrap_err()
            .contains("http_user_agent"));
    }

    #[test]
    fn short_and_unclosed_lines_say_so() {
        assert_eq!(
            two_fields("1.2.3.4 - -", 0, 3).unwrap_err(),
            "the line has 3 fields, field 4 is missing"
        );
        assert_eq!(
            two_fields("1.2.3.4 - - [02/Dec/2026:10:00:00 +0000", 0, 3).unwrap_err(),
            "field 4 opens with \"[\" and is never closed"
        );
        assert!(two_fields(r#"a b c [t] "GET \"#, 0, 4).is_err());
    }
}
