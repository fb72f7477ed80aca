//! Reading Redis's `INFO` text, for the store's start-up checks and the
//! tests' helpers alike.

/// The number after `field:` in `INFO`'s output (`connected_slaves`,
/// `master_repl_offset`, ...), if the field is there and holds one.
pub fn info_number(info: &str, field: &str) -> Option<u64> {
    info_text(info, field).and_then(|value| value.parse().ok())
}

/// The text of `field` in an `INFO` reply (`field:value` lines), if present.
pub fn info_text<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::info_number;

    #[test]
    fn reads_the_named_field_only() {
        let info =
            "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nmaster_repl_offset:1234\r\n";
        assert_eq!(info_number(info, "connected_slaves"), Some(2));
        assert_eq!(info_number(info, "master_repl_offset"), Some(1234));
        assert_eq!(info_number(info, "connected"), None, "a prefix of a name");
        assert_eq!(info_number(info, "role"), None, "not a number");
        assert_eq!(info_number(info, "slave_repl_offset"), None, "absent");
    }
}
