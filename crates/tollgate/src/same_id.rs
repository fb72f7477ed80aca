//! Comparing a stored client id with the one asked for, without a call.
//!
//! Every decision compares one id (the slot whose hash tag matched), and
//! ids are short: `memcmp` behind a call cost about 20 instructions of a
//! token bucket's 280 (callgrind, BENCHMARKS.md). For ids of 4 to 24 bytes
//! two or three overlapping word loads say the same.

/// Whether `a` and `b` hold the same bytes.
#[inline]
pub(crate) fn same_id(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        // Overlapping words: together they cover every byte.
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        17..=24 => {
            word8(a, 0) == word8(b, 0)
                && word8(a, 8) == word8(b, 8)
                && word8(a, n - 8) == word8(b, n - 8)
        }
        _ => a == b,
    }
}

fn word4(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(word)
}

fn word8(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::same_id;

    /// Every length up to 40, each byte changed in turn: the words must
    /// cover every position.
    #[test]
    fn agrees_with_slice_equality_at_every_length_and_position() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_id(&a, &a.clone()), "length {n}");
            for i in 0..n {
                let mut b = a.clone();
                b[i] ^= 1;
                assert!(!same_id(&a, &b), "length {n}, byte {i}");
            }
            assert!(!same_id(&a, &a[..n.saturating_sub(1)]) || n == 0);
        }
    }
}
