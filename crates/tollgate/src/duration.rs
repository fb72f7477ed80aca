//! Durations as people write them: `"250ms"`, `"1s"`, `"15m"`, `"2h"`,
//! `"1d"`, or a bare number of milliseconds. The one format of windows and
//! timeouts, in a config file and on the command line alike.

/// The units, smallest first, with their milliseconds.
const UNITS: &[(&str, u64)] = &[
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// Parses a whole number followed by a unit (`ms`, `s`, `m`, `h` or `d`),
/// or a bare whole number of milliseconds, into milliseconds. Surrounding
/// whitespace is ignored; zero is accepted (a caller bounds its own value).
///
/// # Errors
/// A message quoting `text` and saying what is wrong with it: no number, an
/// unknown unit, or more milliseconds than a `u64` holds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    let scale = match unit {
        "" => Some(1),
        unit => UNITS.iter().find(|(name, _)| *name == unit).map(|u| u.1),
    };
    let (false, Some(scale)) = (digits.is_empty(), scale) else {
        return Err(format!(
            "invalid duration {text:?}: expected a whole number and a unit, e.g. \"250ms\", \"1s\", \"15m\", \"2h\", \"1d\", or a whole number of milliseconds"
        ));
    };
    let too_large = || format!("duration {text:?} is too large");
    let count: u64 = digits.parse().map_err(|_| too_large())?;
    count.checked_mul(scale).ok_or_else(too_large)
}

/// Milliseconds in the largest unit that divides them evenly (`"1d"`,
/// `"90s"`, `"250ms"`): what [`parse_duration`] reads back.
pub fn format_duration(ms: u64) -> String {
    UNITS
        .iter()
        .rev()
        .find(|(_, scale)| ms != 0 && ms.is_multiple_of(*scale))
        .map_or_else(
            || format!("{ms}ms"),
            |(unit, scale)| format!("{}{unit}", ms / scale),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_milliseconds() {
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("250"), Ok(250));
        assert_eq!(parse_duration(" 1s "), Ok(1_000));
        assert_eq!(parse_duration("15m"), Ok(900_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000));
        assert_eq!(parse_duration("1d"), Ok(86_400_000));
        assert_eq!(parse_duration("0s"), Ok(0));
    }

    #[test]
    fn what_is_wrong_is_said() {
        for bad in ["", "s", "1 s", "1w", "-1s", "1.5s", "1S"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.starts_with("invalid duration"), "{bad}: {error}");
        }
        for long in [
            "99999999999999999999d",
            "999999999999999d",
            "99999999999999999999",
        ] {
            let error = parse_duration(long).unwrap_err();
            assert!(error.ends_with("is too large"), "{long}: {error}");
        }
    }

    #[test]
    fn formatting_picks_the_largest_even_unit_and_reads_back() {
        for (ms, text) in [
            (86_400_000, "1d"),
            (90_000, "90s"),
            (250, "250ms"),
            (0, "0ms"),
        ] {
            assert_eq!(format_duration(ms), text);
            assert_eq!(parse_duration(text), Ok(ms));
        }
    }
}
