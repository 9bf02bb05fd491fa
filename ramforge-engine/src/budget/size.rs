//! Memory sizes as people write and read them: `--ram 1.5G` parsed, byte counts printed.

/// 1 KiB, MiB, GiB, TiB.
pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = KIB * 1024;
pub(crate) const GIB: u64 = MIB * 1024;
const TIB: u64 = GIB * 1024;

/// Why a memory size string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error(
        "memory size {0:?}: expected a number with an optional unit (e.g. 8G, 512MiB, 1.5G, 800K)"
    )]
    /// Not a number with an optional unit.
    Malformed(String),
    /// A unit that is not one of the powers of 1024.
    #[error("memory size {0:?}: unknown unit (use B, K/KB/KiB, M/MB/MiB, G/GB/GiB or T/TB/TiB; all are powers of 1024)")]
    UnknownUnit(String),
    /// A negative size.
    #[error("memory size {0:?} is negative")]
    Negative(String),
    /// A size of zero bytes.
    #[error("memory size {0:?} is zero")]
    Zero(String),
    /// More bytes than 64 bits hold.
    #[error("memory size {0:?} does not fit in 64 bits")]
    Overflow(String),
}

/// Parses a memory size such as `8G`, `8GiB`, `8192M`, `512MiB`, `1.5G`, `800K` or `123456`.
///
/// Every unit is a power of 1024 (`800K` = 819200 bytes, `1GB` = 2^30 bytes), units are
/// case-insensitive, a fraction is allowed and rounded down to whole bytes, and the result is at
/// least one byte.
pub fn parse_memory_size(text: &str) -> Result<u64, SizeError> {
    let s = text.trim();
    if s.starts_with('-') {
        return Err(SizeError::Negative(text.to_string()));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(num_end);
    let unit = unit.trim();
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(SizeError::Malformed(text.to_string()));
    }
    let multiplier = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => TIB,
        _ => return Err(SizeError::UnknownUnit(text.to_string())),
    };
    let overflow = || SizeError::Overflow(text.to_string());
    // Integer arithmetic throughout, so 1.5G is exactly 1.5 * 2^30.
    let int_value: u128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse::<u128>().map_err(|_| overflow())?
    };
    let mut bytes = int_value
        .checked_mul(multiplier as u128)
        .ok_or_else(overflow)?;
    if !frac_part.is_empty() {
        // Only as many fraction digits as can matter for a u64 result are used.
        let digits = &frac_part[..frac_part.len().min(24)];
        let frac: u128 = digits.parse().map_err(|_| overflow())?;
        let scale = 10u128.pow(digits.len() as u32);
        bytes = bytes
            .checked_add(frac * multiplier as u128 / scale)
            .ok_or_else(overflow)?;
    }
    let bytes = u64::try_from(bytes).map_err(|_| overflow())?;
    if bytes == 0 {
        return Err(SizeError::Zero(text.to_string()));
    }
    Ok(bytes)
}

/// Formats a byte count for people: `512 B`, `1.5 KiB`, `40.0 MiB`, `1.25 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes < KIB {
        format!("{bytes} B")
    } else if bytes < MIB {
        format!("{:.1} KiB", b / KIB as f64)
    } else if bytes < GIB {
        format!("{:.1} MiB", b / MIB as f64)
    } else {
        format!("{:.2} GiB", b / GIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes_use_powers_of_1024_and_any_case() {
        let cases = [
            ("8G", 8 * GIB),
            ("8GiB", 8 * GIB),
            ("8gb", 8 * GIB),
            ("8192M", 8 * GIB),
            ("512MiB", 512 * MIB),
            ("512mib", 512 * MIB),
            ("1.5G", 3 * GIB / 2),
            ("800K", 819_200),
            ("800kb", 819_200),
            ("800KiB", 819_200),
            ("40M", 40 * MIB),
            ("1T", TIB),
            ("123456", 123_456),
            ("100B", 100),
            (" 2 MiB ", 2 * MIB),
            ("0.5K", 512),
            (".5K", 512),
            ("1.", 1),
        ];
        for (text, want) in cases {
            assert_eq!(parse_memory_size(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_sizes_are_refused_with_the_reason() {
        assert!(matches!(
            parse_memory_size(""),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            parse_memory_size("abc"),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            parse_memory_size("G"),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            parse_memory_size("1.2.3G"),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            parse_memory_size("12X"),
            Err(SizeError::UnknownUnit(_))
        ));
        assert!(matches!(
            parse_memory_size("12 MBs"),
            Err(SizeError::UnknownUnit(_))
        ));
        assert!(matches!(
            parse_memory_size("1e9"),
            Err(SizeError::UnknownUnit(_))
        ));
        assert!(matches!(
            parse_memory_size("-5M"),
            Err(SizeError::Negative(_))
        ));
        assert!(matches!(parse_memory_size("0"), Err(SizeError::Zero(_))));
        assert!(matches!(
            parse_memory_size("0.0001K"),
            Err(SizeError::Zero(_))
        ));
        assert!(matches!(parse_memory_size("0G"), Err(SizeError::Zero(_))));
        assert!(matches!(
            parse_memory_size("16777216T"),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(
            parse_memory_size("99999999999999999999999999999999999999999"),
            Err(SizeError::Overflow(_))
        ));
        assert_eq!(parse_memory_size("18446744073709551615"), Ok(u64::MAX));
        assert!(matches!(
            parse_memory_size("18446744073709551616"),
            Err(SizeError::Overflow(_))
        ));
        let msg = parse_memory_size("12X").unwrap_err().to_string();
        assert!(msg.contains("12X") && msg.contains("1024"), "{msg}");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(40 * MIB), "40.0 MiB");
        assert_eq!(human_bytes(5 * GIB / 4), "1.25 GiB");
    }
}
