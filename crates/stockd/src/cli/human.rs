//! Times for people: the API's `*_ms` (Unix epoch milliseconds) as a UTC date and time, and how
//! far that is from now ("in 4m 12s", "3s ago").
//!
//! Only the human output uses this; `--json` shows the server's raw values. "Now" is this
//! machine's clock, while the times come from the server's: a skew between the two shows in the
//! relative part only. UTC, not local time, so that what one operator pastes reads the same to
//! another, and because the time zone database is not worth a dependency here.

use std::time::{SystemTime, UNIX_EPOCH};

const MS_PER_DAY: u64 = 86_400_000;

/// This machine's clock in Unix epoch milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// `2025-11-05 14:03:12 UTC`.
pub fn utc(ms: u64) -> String {
    let (date, seconds_of_day, _) = split(ms);
    format!("{date} {} UTC", clock(seconds_of_day))
}

/// `2025-11-05 14:03:12.923 UTC`: for event times, where milliseconds tell events apart.
pub fn utc_ms(ms: u64) -> String {
    let (date, seconds_of_day, millis) = split(ms);
    format!("{date} {}.{millis:03} UTC", clock(seconds_of_day))
}

/// `2025-11-05 14:03:12 UTC (in 4m 12s)`.
pub fn when(ms: u64, now_ms: u64) -> String {
    format!("{} ({})", utc(ms), relative(ms, now_ms))
}

/// `in 4m 12s`, `2h 5m ago`, `now` (under a second away): the two largest units.
pub fn relative(ms: u64, now_ms: u64) -> String {
    let (distance_ms, future) = if ms >= now_ms {
        (ms - now_ms, true)
    } else {
        (now_ms - ms, false)
    };
    let seconds = distance_ms / 1_000;
    if seconds == 0 {
        return "now".to_owned();
    }
    let parts = [
        (seconds / 86_400, "d"),
        (seconds / 3_600 % 24, "h"),
        (seconds / 60 % 60, "m"),
        (seconds % 60, "s"),
    ];
    let first = parts
        .iter()
        .position(|&(value, _)| value > 0)
        .unwrap_or(parts.len() - 1);
    let mut text = format!("{}{}", parts[first].0, parts[first].1);
    if let Some(&(value, unit)) = parts.get(first + 1) {
        if value > 0 {
            text.push_str(&format!(" {value}{unit}"));
        }
    }
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// The date (`YYYY-MM-DD`), the second of the day and the millisecond of `ms`.
fn split(ms: u64) -> (String, u64, u64) {
    let days = ms / MS_PER_DAY;
    let ms_of_day = ms % MS_PER_DAY;
    let (year, month, day) = civil_from_days(days);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        ms_of_day / 1_000,
        ms_of_day % 1_000,
    )
}

/// `HH:MM:SS`.
fn clock(seconds_of_day: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        seconds_of_day / 3_600,
        seconds_of_day / 60 % 60,
        seconds_of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`,
/// for days on or after the epoch, which every `*_ms` is).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01, so that a leap day is the last day of its year.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_and_exact_at_the_edges() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_ms(999), "1970-01-01 00:00:00.999 UTC");
        // From the API docs' examples, checked with `date -u -d @1795644384`; the others likewise.
        assert_eq!(utc(1_795_644_384_923), "2026-11-25 22:06:24 UTC");
        assert_eq!(utc_ms(1_795_644_384_923), "2026-11-25 22:06:24.923 UTC");
        // Leap days: 2000 is a leap year (divisible by 400), 2100 is not.
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(951_868_799_000), "2000-02-29 23:59:59 UTC");
        assert_eq!(utc(4_107_542_400_000), "2100-03-01 00:00:00 UTC");
        assert_eq!(utc(1_704_067_199_000), "2023-12-31 23:59:59 UTC");
        // The largest absolute time the API accepts (2^53 - 1 ms).
        assert_eq!(utc(9_007_199_254_740_991), "287396-10-12 08:59:00 UTC");
    }

    #[test]
    fn relative_times_name_the_two_largest_units() {
        let now = 1_000_000_000_000;
        assert_eq!(relative(now, now), "now");
        assert_eq!(relative(now + 999, now), "now");
        assert_eq!(relative(now + 12_000, now), "in 12s");
        assert_eq!(relative(now + 252_500, now), "in 4m 12s");
        assert_eq!(relative(now + 3_600_000, now), "in 1h");
        assert_eq!(relative(now - 7_500_000, now), "2h 5m ago");
        assert_eq!(
            relative(now + 2 * 86_400_000 + 3 * 3_600_000 + 59_000, now),
            "in 2d 3h"
        );
        assert_eq!(relative(now - 86_400_000 - 30_000, now), "1d ago");
        assert_eq!(
            when(1_795_644_384_923, 1_795_644_384_923 - 600_000),
            "2026-11-25 22:06:24 UTC (in 10m)"
        );
    }
}
