//! Turning a byte offset in the config text into a line, a column and a
//! snippet with a caret, for error messages. The message and the line
//! quoted are shown with the passwords of their URLs masked
//! ([`redact_urls_in`]): a `[store] url` may hold one, and the error is
//! printed by `tollgate check` and logged by a refused reload.

use tollgate_redis::redact_urls_in;

use crate::Error;

/// An [`Error::InvalidConfig`] for `message` at byte `offset` of `text`.
pub fn error_at(text: &str, offset: usize, message: impl Into<String>) -> Error {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[..offset].matches('\n').count() + 1;
    let column = text[line_start..offset].chars().count() + 1;
    let source_line = redact_urls_in(text[line_start..line_end].trim_end_matches('\r'));
    // Keep the snippet short and printable whatever the file holds.
    let shown: String = source_line
        .chars()
        .take(120)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    // The caret's place in the masked line: the length of the masked text
    // before it (exact unless the offset is inside a password).
    let caret_column = redact_urls_in(&text[line_start..offset]).chars().count();
    let gutter = format!("{line} | ");
    let caret_pad = " ".repeat(gutter.len() + caret_column.min(120));
    Error::InvalidConfig {
        origin: None,
        line,
        column,
        message: redact_urls_in(&message.into()),
        snippet: format!("{gutter}{shown}\n{caret_pad}^"),
    }
}

/// The key whose value starts at byte `offset` of `text`: the last `key =`
/// before it on its line (an inline table holds several). `None` when the
/// offset is not at a value's start (an unknown key's refusal points at
/// the key). What a refusal of that value is about.
pub fn key_at(text: &str, offset: usize) -> Option<&str> {
    let before_offset = text.get(..offset.min(text.len()))?;
    let line = before_offset
        .rfind('\n')
        .map_or(before_offset, |i| &before_offset[i + 1..]);
    let (before, between) = line.rsplit_once('=')?;
    if !between.trim().is_empty() {
        return None;
    }
    let before = before.trim_end();
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    // The run of bare characters that ends it (ASCII: a char boundary).
    let key = &before[before.trim_end_matches(bare).len()..];
    (!key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_of_a_value_is_the_last_before_it_on_its_line() {
        let text = "limit = -1\nfree = [{ name = \"a\", limit = -1 }]\n[plans]\n";
        assert_eq!(key_at(text, text.find("-1").unwrap()), Some("limit"));
        let inline = text.rfind("-1").unwrap();
        assert_eq!(key_at(text, inline), Some("limit"), "not \"free\"");
        assert_eq!(key_at(text, text.find("\"a\"").unwrap()), Some("name"));
        assert_eq!(key_at(text, text.find("plans").unwrap()), None);
        // An unknown key is refused where it stands, not at a value.
        let unknown = "free = [{ limit = 5, windw = \"2s\" }]\n";
        assert_eq!(key_at(unknown, unknown.find("windw").unwrap()), None);
        // Whatever comes before, never a panic (found by the config fuzz
        // test: a multi-byte character before the key).
        let accented = "é= 1\nlimité = -1\n";
        assert_eq!(key_at(accented, accented.find("-1").unwrap()), None);
        assert_eq!(key_at(accented, 1), None);
    }

    #[test]
    fn lines_and_columns_count_from_one() {
        let text = "a = 1\nbb = \"é2\"\n";
        match error_at(text, text.find('2').unwrap(), "bad") {
            Error::InvalidConfig {
                line,
                column,
                snippet,
                ..
            } => {
                assert_eq!((line, column), (2, 8));
                assert_eq!(snippet, "2 | bb = \"é2\"\n           ^");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
