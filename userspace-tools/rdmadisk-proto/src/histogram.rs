//! Latency histograms with log2 buckets: how the module counts its I/O latencies, how it
//! writes them into sysfs, and how a reader (rdmadiskctl, the tests) parses them back and
//! takes percentiles.
//!
//! Bucket 0 holds latencies below 2 µs; bucket `i` (1 ≤ i < [`BUCKETS`] - 1) holds
//! `2^i ..= 2^(i+1) - 1` µs; the last bucket holds everything from `2^(BUCKETS-1)` µs (33.6 s)
//! up. A bucket costs the module one relaxed atomic add, and the percentiles they give are
//! good to a factor of two, which is what telling a 100 µs path from a 10 ms one needs.
//!
//! The text form lists the non-empty buckets only, as `index:count` separated by spaces, in
//! increasing index order (an empty histogram is an empty string): a line stays short
//! however many I/Os it counts.

use core::fmt;

/// The number of buckets.
pub const BUCKETS: usize = 26;

/// The bucket of a latency of `us` microseconds.
pub const fn bucket_of(us: u64) -> usize {
    if us < 2 {
        return 0;
    }
    let log2 = (63 - us.leading_zeros()) as usize;
    if log2 >= BUCKETS - 1 {
        BUCKETS - 1
    } else {
        log2
    }
}

/// The latencies bucket `i` holds, in µs: its lowest, and its highest (`None`: no bound, the
/// last bucket).
pub const fn bucket_bounds(i: usize) -> (u64, Option<u64>) {
    let lo = if i == 0 { 0 } else { 1u64 << i };
    if i >= BUCKETS - 1 {
        (lo, None)
    } else {
        (lo, Some((1u64 << (i + 1)) - 1))
    }
}

/// The bucket that holds the `per_mille`/1000 quantile of `counts` (the smallest bucket with
/// at least that share of the samples at or below it; the rank is rounded up, as fio does);
/// `None` when there is no sample, or `per_mille` is above 1000.
pub fn percentile(counts: &[u64], per_mille: u32) -> Option<usize> {
    if per_mille > 1000 {
        return None;
    }
    // In u64 without overflow (the module compiles this too, and has no 128-bit division).
    let total = counts.iter().fold(0u64, |t, &c| t.saturating_add(c));
    if total == 0 {
        return None;
    }
    let pm = u64::from(per_mille);
    let rank = ((total / 1000) * pm + ((total % 1000) * pm).div_ceil(1000)).max(1);
    let mut seen = 0u64;
    for (i, &c) in counts.iter().enumerate() {
        seen = seen.saturating_add(c);
        if seen >= rank {
            return Some(i);
        }
    }
    None
}

/// Writes the non-empty buckets of `counts` in the text form.
pub fn write_sparse(w: &mut impl fmt::Write, counts: &[u64]) -> fmt::Result {
    let mut first = true;
    for (i, &c) in counts.iter().enumerate().filter(|(_, &c)| c > 0) {
        if !first {
            w.write_char(' ')?;
        }
        first = false;
        write!(w, "{i}:{c}")?;
    }
    Ok(())
}

/// Why a histogram's text did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// An entry is not `index:count` in decimal digits.
    Malformed,
    /// An index is not below [`BUCKETS`].
    BadIndex,
    /// The indexes do not increase.
    Unordered,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::Malformed => "an entry is not index:count",
            ParseError::BadIndex => "a bucket index is out of range",
            ParseError::Unordered => "the bucket indexes do not increase",
        })
    }
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses the text form into bucket counts.
pub fn parse_sparse(s: &str) -> Result<[u64; BUCKETS], ParseError> {
    let mut out = [0u64; BUCKETS];
    let mut next = 0usize;
    for entry in s.split_ascii_whitespace() {
        let (i, c) = entry.split_once(':').ok_or(ParseError::Malformed)?;
        let (Some(i), Some(c)) = (digits(i), digits(c)) else {
            return Err(ParseError::Malformed);
        };
        let i = usize::try_from(i).map_err(|_| ParseError::BadIndex)?;
        if i >= BUCKETS {
            return Err(ParseError::BadIndex);
        }
        if i < next {
            return Err(ParseError::Unordered);
        }
        out[i] = c;
        next = i + 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::string::String;

    #[test]
    fn buckets_are_log2_of_microseconds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(3), 1);
        assert_eq!(bucket_of(4), 2);
        assert_eq!(bucket_of(4095), 11);
        assert_eq!(bucket_of(4096), 12);
        assert_eq!(bucket_of(1 << 24), 24);
        assert_eq!(bucket_of((1 << 25) - 1), 24);
        assert_eq!(bucket_of(1 << 25), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn bounds_tile_the_line() {
        assert_eq!(bucket_bounds(0), (0, Some(1)));
        assert_eq!(bucket_bounds(1), (2, Some(3)));
        assert_eq!(bucket_bounds(BUCKETS - 1), (1 << 25, None));
        for i in 1..BUCKETS {
            assert_eq!(bucket_bounds(i).0, bucket_bounds(i - 1).1.unwrap() + 1);
        }
    }

    #[test]
    fn percentiles_round_the_rank_up() {
        let mut h = [0u64; BUCKETS];
        assert_eq!(percentile(&h, 500), None);
        h[3] = 1;
        h[5] = 1;
        // Two samples: the median is the first (rank 1), p99 the second (rank 2).
        assert_eq!(percentile(&h, 500), Some(3));
        assert_eq!(percentile(&h, 990), Some(5));
        assert_eq!(percentile(&h, 0), Some(3));
        assert_eq!(percentile(&h, 1000), Some(5));
        assert_eq!(percentile(&h, 1001), None);
        h[3] = 99;
        assert_eq!(percentile(&h, 990), Some(3));
        assert_eq!(percentile(&h, 991), Some(5));
    }

    #[test]
    fn text_form() {
        let mut h = [0u64; BUCKETS];
        let mut s = String::new();
        write_sparse(&mut s, &h).unwrap();
        assert_eq!(s, "");
        h[0] = 2;
        h[12] = 7;
        h[BUCKETS - 1] = u64::MAX;
        write_sparse(&mut s, &h).unwrap();
        assert_eq!(s, "0:2 12:7 25:18446744073709551615");
        assert_eq!(parse_sparse(&s), Ok(h));
        assert_eq!(
            parse_sparse("  3:1\n"),
            Ok({
                let mut x = [0; BUCKETS];
                x[3] = 1;
                x
            })
        );
    }

    #[test]
    fn bad_text_is_refused() {
        assert_eq!(parse_sparse("3"), Err(ParseError::Malformed));
        assert_eq!(parse_sparse("3:"), Err(ParseError::Malformed));
        assert_eq!(parse_sparse(":3"), Err(ParseError::Malformed));
        assert_eq!(parse_sparse("3:+1"), Err(ParseError::Malformed));
        assert_eq!(parse_sparse("3:-1"), Err(ParseError::Malformed));
        assert_eq!(
            parse_sparse("3:18446744073709551616"),
            Err(ParseError::Malformed)
        );
        assert_eq!(parse_sparse("26:1"), Err(ParseError::BadIndex));
        assert_eq!(
            parse_sparse("99999999999999999999999:1"),
            Err(ParseError::Malformed)
        );
        assert_eq!(parse_sparse("4:1 3:1"), Err(ParseError::Unordered));
        assert_eq!(parse_sparse("4:1 4:1"), Err(ParseError::Unordered));
    }

    proptest! {
        #[test]
        fn text_round_trips(h in proptest::array::uniform26(any::<u64>())) {
            let mut s = String::new();
            write_sparse(&mut s, &h).unwrap();
            prop_assert_eq!(parse_sparse(&s), Ok(h));
        }

        #[test]
        fn a_latency_lies_in_its_bucket(us in any::<u64>()) {
            let (lo, hi) = bucket_bounds(bucket_of(us));
            prop_assert!(lo <= us && hi.is_none_or(|hi| us <= hi));
        }

        #[test]
        fn percentiles_are_monotone(h in proptest::array::uniform26(0u64..1000), a in 0u32..=1000, b in 0u32..=1000) {
            let (a, b) = (a.min(b), a.max(b));
            prop_assert!(percentile(&h, a) <= percentile(&h, b));
        }

        #[test]
        fn parsing_never_panics(s in ".{0,64}") {
            let _ = parse_sparse(&s);
        }
    }
}
