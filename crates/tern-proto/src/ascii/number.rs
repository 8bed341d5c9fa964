//! Numbers in request lines, read as memcached reads them: C's `strtoull`/`strtol` rules where
//! 1.6.45 still calls `safe_strto*` (a storage command's flags and exptime, meta flags), and its
//! request parser's strict decimal tokens (`mcmc_tokto*`) everywhere else.

/// C's `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// C's `strtoull`/`strtoll` prefix: white space, a sign, decimal digits. Returns the sign, the
/// magnitude (saturated: `None` on overflow, which C reports as ERANGE), and the rest.
fn c_number(token: &[u8]) -> Option<(bool, Option<u64>, &[u8])> {
    let spaces = token.iter().take_while(|&&b| is_c_space(b)).count();
    let mut s = &token[spaces..];
    let mut negative = false;
    if let Some((&sign, rest)) = s.split_first() {
        if sign == b'-' || sign == b'+' {
            negative = sign == b'-';
            s = rest;
        }
    }
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut value: Option<u64> = Some(0);
    for &d in &s[..digits] {
        value = value
            .and_then(|v| v.checked_mul(10))
            .and_then(|v| v.checked_add(u64::from(d - b'0')));
    }
    let rest = &s[digits..];
    // memcached accepts a number followed by white space or the end of the token.
    if let Some(&after) = rest.first() {
        if !is_c_space(after) {
            return None;
        }
    }
    Some((negative, value, rest))
}

/// memcached's `safe_strtoull`: 64-bit unsigned, no negative numbers.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let (negative, value, _) = c_number(token)?;
    let value = value?;
    // strtoull negates a "-N"; memcached rejects the result only when it looks negative as i64.
    if negative {
        let wrapped = value.wrapping_neg();
        return if (wrapped as i64) < 0 {
            None
        } else {
            Some(wrapped)
        };
    }
    if (value as i64) < 0 && token.contains(&b'-') {
        return None;
    }
    Some(value)
}

/// memcached's `safe_strtoul` into 32 bits (client flags, verbosity): strtoul on a 64-bit
/// machine, then truncated to 32 bits.
pub fn parse_u32(token: &[u8]) -> Option<u32> {
    parse_u64(token).map(|v| v as u32)
}

/// memcached's `safe_strtol` into an `int32_t`: strtol, refused above `INT_MAX`, then truncated
/// to 32 bits (so very negative numbers wrap, as in memcached).
pub fn parse_i32(token: &[u8]) -> Option<i64> {
    let (negative, value, _) = c_number(token)?;
    let magnitude = value?;
    let value: i64 = if negative {
        if magnitude > i64::MAX as u64 + 1 {
            return None;
        }
        (magnitude as i64).wrapping_neg()
    } else {
        if magnitude > i64::MAX as u64 {
            return None;
        }
        magnitude as i64
    };
    if value > i32::MAX as i64 {
        return None;
    }
    Some(i64::from(value as i32))
}

/// mcmc's `mcmc_toktou64`/`mcmc_toktou32` (memcached 1.6.45's request parser): decimal digits
/// only (no sign, no white space), at most `max_len` of them, refused on overflow.
fn token_unsigned(token: &[u8], max_len: usize, max: u64) -> Option<u64> {
    if token.len() > max_len {
        return None;
    }
    token.iter().try_fold(0u64, |sum, &b| {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        sum.checked_mul(10)
            .and_then(|s| s.checked_add(u64::from(digit)))
            .filter(|&s| s <= max)
    })
}

/// A 64-bit unsigned token as 1.6.45 reads an incr delta or a cas unique.
pub fn token_u64(token: &[u8]) -> Option<u64> {
    token_unsigned(token, 22, u64::MAX)
}

/// A 32-bit unsigned token as 1.6.45 reads `verbosity`'s level.
pub fn token_u32(token: &[u8]) -> Option<u32> {
    token_unsigned(token, 11, u64::from(u32::MAX)).map(|v| v as u32)
}

/// A 32-bit signed token as 1.6.45 reads a value's length or a touch's exptime: an optional
/// `-` then digits (a lone `-` is 0, as in mcmc), at most 11 bytes.
pub fn token_i32(token: &[u8]) -> Option<i64> {
    let (negative, digits) = match token.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, token),
    };
    if token.len() > 11 {
        return None;
    }
    let max = if negative { 1 << 31 } else { i32::MAX as u64 };
    let magnitude = token_unsigned(digits, 11, max)? as i64;
    Some(if negative { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_follow_c() {
        assert_eq!(parse_i32(b"2147483647"), Some(2147483647));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i32(b"-5"), Some(-5));
        assert_eq!(parse_i32(b"+5"), Some(5));
        assert_eq!(parse_i32(b"5x"), None);
        assert_eq!(parse_i32(b"5\t"), Some(5));
        assert_eq!(parse_i32(b""), None);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u32(b"4294967296"), Some(0));
    }

    #[test]
    fn tokens_are_strict_decimals() {
        assert_eq!(token_i32(b"2147483647"), Some(2147483647));
        assert_eq!(token_i32(b"2147483648"), None);
        assert_eq!(token_i32(b"-2147483648"), Some(-2147483648));
        assert_eq!(token_i32(b"-2147483649"), None);
        assert_eq!(token_i32(b"-"), Some(0));
        for bad in [&b"+5"[..], b"5\t", b" 5", b"5x", b"-00000000001"] {
            assert_eq!(token_i32(bad), None, "{bad:?}");
        }
        assert_eq!(token_i32(b"0000000001"), Some(1));
        assert_eq!(token_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(token_u64(b"18446744073709551616"), None);
        assert_eq!(token_u64(b"-0"), None);
        assert_eq!(token_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(token_u32(b"4294967296"), None);
        assert_eq!(token_u32(b"000000000001"), None, "longer than 11 bytes");
    }
}
