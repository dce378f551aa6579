//! The small text formats of the config file: durations (`"10s"`), sizes (`"64MiB"`) and rates
//! (`"100/10s"`), parsed once into typed values.

use std::fmt;
use std::time::Duration;

/// A rate limit: at most `count` units of weight per `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Events (or bytes) allowed per period; at least 1.
    pub count: u64,
    /// The period, non-zero.
    pub per: Duration,
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, DurationText(self.per))
    }
}

/// Formats a duration the way the config writes it (`"10s"`, `"250ms"`, `"2m"`).
#[derive(Clone, Copy, Debug)]
pub struct DurationText(pub Duration);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        match ms {
            ms if ms % 3_600_000 == 0 && ms > 0 => write!(f, "{}h", ms / 3_600_000),
            ms if ms % 60_000 == 0 && ms > 0 => write!(f, "{}m", ms / 60_000),
            ms if ms % 1_000 == 0 => write!(f, "{}s", ms / 1_000),
            ms => write!(f, "{ms}ms"),
        }
    }
}

/// Splits `"<digits><unit>"` (spaces allowed around both) into the trimmed text, the number and
/// the unit; `expected` completes "`text` is not ..." when there is no number.
fn number_and_unit<'a, T: std::str::FromStr>(
    text: &'a str,
    expected: &str,
) -> Result<(&'a str, T, &'a str), String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value = number
        .parse()
        .map_err(|_| format!("`{text}` is not {expected}"))?;
    Ok((text, value, unit.trim()))
}

/// Parses `"<number><unit>"` with unit `ms`, `s`, `m` or `h` (a bare number is seconds).
///
/// # Errors
/// A message saying what is wrong, for the config error to carry.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (text, value, unit) =
        number_and_unit::<u64>(text, "a duration: expected a number then ms, s, m or h")?;
    let millis = match unit {
        "ms" => Some(value),
        "" | "s" => value.checked_mul(1_000),
        "m" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        other => {
            return Err(format!(
                "`{text}`: unknown unit `{other}` (use ms, s, m or h)"
            ));
        }
    };
    // Whole nanoseconds must fit 64 bits (about 584 years): sketch windows and keys hold
    // them, and two longer periods would otherwise both saturate to one.
    millis
        .filter(|ms| ms.checked_mul(1_000_000).is_some())
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too long a duration (at most 584 years)"))
}

/// Parses a size: a number of bytes, or one with `KiB`, `MiB` or `GiB` (also `KB`, `MB`, `GB`,
/// taken as the same powers of two).
///
/// # Errors
/// A message saying what is wrong.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let (text, value, unit) =
        number_and_unit::<usize>(text, "a size: expected a number then KiB, MiB or GiB")?;
    let shift = match unit {
        "" | "B" => 0,
        "KiB" | "KB" | "K" => 10,
        "MiB" | "MB" | "M" => 20,
        "GiB" | "GB" | "G" => 30,
        other => {
            return Err(format!(
                "`{text}`: unknown unit `{other}` (use KiB, MiB or GiB)"
            ));
        }
    };
    value
        .checked_mul(1usize << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// Parses `"<count>/<duration>"`, e.g. `"100/10s"`; `"100/s"` means per one second.
///
/// # Errors
/// A message saying what is wrong: no slash, a count that is not a positive number, or a
/// zero or malformed period.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let (count, per) = text.split_once('/').ok_or_else(|| {
        format!("`{text}` is not a rate: expected `<count>/<period>`, e.g. `100/10s`")
    })?;
    let count = count.trim();
    let count: u64 = count.parse().map_err(|_| {
        if !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()) {
            format!("`{text}`: the count `{count}` is too large")
        } else {
            format!("`{text}`: the count `{count}` is not a whole number")
        }
    })?;
    if count == 0 {
        return Err(format!(
            "`{text}`: a rate of zero allows nothing (use the deny list)"
        ));
    }
    let per = per.trim();
    let per = if per.starts_with(|c: char| c.is_ascii_digit()) {
        parse_duration(per)?
    } else {
        parse_duration(&format!("1{per}"))?
    };
    if per.is_zero() {
        return Err(format!("`{text}`: the period must be longer than zero"));
    }
    Ok(Rate { count, per })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(
            parse_duration("10 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
        // Longer than 2^64 ns: refused, not saturated (two such periods would share a key).
        assert!(
            parse_duration("5000000000h")
                .unwrap_err()
                .contains("584 years")
        );
        assert!(parse_duration("5000000h").is_ok());
    }

    #[test]
    fn durations_print_in_their_largest_whole_unit() {
        let text = |ms: u64| DurationText(Duration::from_millis(ms)).to_string();
        let printed = [
            0, 250, 1_500, 1_000, 90_000, 60_000, 5_400_000, 3_600_000, 7_200_000,
        ]
        .map(text);
        assert_eq!(
            printed,
            [
                "0s", "250ms", "1500ms", "1s", "90s", "1m", "90m", "1h", "2h"
            ]
        );
        for ms in [1, 999, 1_001, 59_999, 61_000, 3_599_999, 3_660_000] {
            assert_eq!(parse_duration(&text(ms)), Ok(Duration::from_millis(ms)));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1GB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3TiB").is_err());
        // Units are powers of two and case matters: `1k` is refused, not read as 1000 or 1.
        assert_eq!(parse_size("1K"), Ok(1024));
        assert!(parse_size("1k").unwrap_err().contains("unknown unit `k`"));
        assert!(parse_size("1mb").unwrap_err().contains("unknown unit `mb`"));
    }

    #[test]
    fn rates() {
        let rate = parse_rate("100/10s").unwrap();
        assert_eq!(
            rate,
            Rate {
                count: 100,
                per: Duration::from_secs(10)
            }
        );
        assert_eq!(rate.to_string(), "100/10s");
        assert_eq!(parse_rate("20/s").unwrap().per, Duration::from_secs(1));
        assert_eq!(parse_rate("600/1m").unwrap().to_string(), "600/1m");
        assert!(parse_rate("0/10s").unwrap_err().contains("zero"));
        assert!(
            parse_rate("100/0s")
                .unwrap_err()
                .contains("longer than zero")
        );
        assert!(parse_rate("100").unwrap_err().contains("<count>/<period>"));
        assert!(parse_rate("x/10s").unwrap_err().contains("whole number"));
        assert!(
            parse_rate("99999999999999999999999/s")
                .unwrap_err()
                .contains("too large")
        );
        assert!(parse_rate("10/10y").unwrap_err().contains("unknown unit"));
    }
}
