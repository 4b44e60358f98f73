//! The shop's clock: its own, kept in the database, by default; the
//! machine's, or a fixed instant for tests.
//!
//! The shop runs on China Standard Time (UTC+08:00, no daylight saving), so
//! local time is a fixed offset from Unix time and needs no time-zone data.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

/// The shop's time zone.
pub(super) const SHOP_TIME_ZONE: &str = "Asia/Shanghai";
/// The shop's offset from UTC, as written in ISO 8601.
pub(super) const SHOP_UTC_OFFSET: &str = "+08:00";
const UTC_OFFSET_SECONDS: i64 = 8 * 3600;
const SECONDS_PER_DAY: i64 = 86_400;
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Where the demo shop gets "now" from: refund ids (`RF` + date + sequence),
/// creation times, coupon expiry and `getCurrentTime` all read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoClock {
    /// The shop's own clock, which read `started_at` when the machine's
    /// clock read `machine_started_at` and has kept the machine's pace
    /// since. A database keeps its clock's start (see `DemoDb::open`), so
    /// that a restart, or another process on the same file, goes on from
    /// where the shop was.
    Running {
        started_at: ShopTime,
        machine_started_at: ShopTime,
    },
    /// The machine's clock.
    System,
    /// Always this instant, so that ids and times in tests are stable.
    Fixed(ShopTime),
}

impl DemoClock {
    /// The current shop time.
    pub fn now(self) -> ShopTime {
        self.at(ShopTime::machine_now())
    }

    /// The shop time when the machine's clock reads `machine_now`. A
    /// running clock never reads earlier than its start (the seed is dated
    /// before it), even when the machine's clock is set back.
    fn at(self, machine_now: ShopTime) -> ShopTime {
        match self {
            Self::Running {
                started_at,
                machine_started_at,
            } => {
                let elapsed = machine_now.unix_seconds - machine_started_at.unix_seconds;
                ShopTime {
                    unix_seconds: started_at.unix_seconds.saturating_add(elapsed.max(0)),
                }
            }
            Self::System => machine_now,
            Self::Fixed(time) => time,
        }
    }
}

/// An instant, shown in shop-local time. Parses from and displays as
/// `YYYY-MM-DD HH:MM:SS` (local time), e.g. `2026-06-29 14:00:00`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShopTime {
    unix_seconds: i64,
}

/// Text that is not a valid `YYYY-MM-DD HH:MM:SS` shop time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid shop time `{0}`: expected a valid `YYYY-MM-DD HH:MM:SS` (year 1970-9999)")]
pub struct InvalidShopTime(String);

/// A shop-local time split into calendar fields.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    weekday: &'static str,
}

impl ShopTime {
    /// What the machine's clock reads. One set before 1970 reads as 1970.
    pub(super) fn machine_now() -> Self {
        let seconds = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        Self {
            unix_seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        }
    }

    fn civil(self) -> Civil {
        let local = self.unix_seconds + UTC_OFFSET_SECONDS;
        let days = local.div_euclid(SECONDS_PER_DAY);
        let in_day = local.rem_euclid(SECONDS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        // 1970-01-01 was a Thursday (index 3 counting from Monday).
        let weekday = WEEKDAYS[usize::try_from((days + 3).rem_euclid(7)).unwrap_or(0)];
        Civil {
            year,
            month,
            day,
            hour: in_day / 3600,
            minute: in_day / 60 % 60,
            second: in_day % 60,
            weekday,
        }
    }

    /// The local date without separators, as used in ids: `20260629`.
    pub(super) fn compact_date(self) -> String {
        let c = self.civil();
        format!("{:04}{:02}{:02}", c.year, c.month, c.day)
    }

    /// The local date: `2026-06-29`.
    pub(super) fn date(self) -> String {
        let c = self.civil();
        format!("{:04}-{:02}-{:02}", c.year, c.month, c.day)
    }

    /// ISO 8601 with the shop's offset: `2026-06-29T14:00:00+08:00`.
    pub(super) fn iso8601(self) -> String {
        let c = self.civil();
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{SHOP_UTC_OFFSET}",
            c.year, c.month, c.day, c.hour, c.minute, c.second
        )
    }

    /// The local day of the week, in English: `Monday`.
    pub(super) fn weekday(self) -> &'static str {
        self.civil().weekday
    }
}

impl fmt::Display for ShopTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.civil();
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            c.year, c.month, c.day, c.hour, c.minute, c.second
        )
    }
}

impl FromStr for ShopTime {
    type Err = InvalidShopTime;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidShopTime(text.to_owned());
        let (date, time) = text.split_once(' ').ok_or_else(invalid)?;
        let date: Vec<&str> = date.split('-').collect();
        let time: Vec<&str> = time.split(':').collect();
        let [year, month, day] = date[..] else {
            return Err(invalid());
        };
        let [hour, minute, second] = time[..] else {
            return Err(invalid());
        };
        let number = |field: &str, digits: usize, max: u32| -> Result<u32, InvalidShopTime> {
            if field.len() != digits || !field.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            field
                .parse::<u32>()
                .ok()
                .filter(|value| *value <= max)
                .ok_or_else(invalid)
        };
        let year = number(year, 4, 9999)?;
        let month = number(month, 2, 12)?;
        let day = number(day, 2, 31)?;
        let (hour, minute, second) = (
            number(hour, 2, 23)?,
            number(minute, 2, 59)?,
            number(second, 2, 59)?,
        );
        if year < 1970 || month == 0 || day == 0 || day > days_in_month(year, month) {
            return Err(invalid());
        }
        let days = days_from_civil(i64::from(year), month, day);
        let local = days * SECONDS_PER_DAY
            + i64::from(hour) * 3600
            + i64::from(minute) * 60
            + i64::from(second);
        Ok(Self {
            unix_seconds: local - UTC_OFFSET_SECONDS,
        })
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date `days` after 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both are in range by construction: month 1..=12, day 1..=31.
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_shop_local_time() {
        let time: ShopTime = "2026-06-29 14:03:09".parse().unwrap();
        assert_eq!(time.to_string(), "2026-06-29 14:03:09");
        assert_eq!(time.compact_date(), "20260629");
        assert_eq!(time.date(), "2026-06-29");
        assert_eq!(time.iso8601(), "2026-06-29T14:03:09+08:00");
        assert_eq!(time.weekday(), "Monday");
        // 14:03:09 in Shanghai is 06:03:09 UTC.
        assert_eq!(time.unix_seconds, 1_782_712_989);
    }

    #[test]
    fn local_midnight_is_the_previous_utc_day() {
        let time: ShopTime = "2024-03-01 00:30:00".parse().unwrap();
        assert_eq!(time.compact_date(), "20240301");
        assert_eq!(time.weekday(), "Friday");
    }

    #[test]
    fn rejects_malformed_and_impossible_times() {
        for text in [
            "2026-06-29",
            "2026-6-29 14:00:00",
            "2026-02-29 00:00:00",
            "2026-13-01 00:00:00",
            "2026-06-31 00:00:00",
            "2026-06-29 24:00:00",
            "1969-12-31 23:59:59",
            "2026-06-29T14:00:00",
            "+026-06-29 14:00:00",
        ] {
            assert!(text.parse::<ShopTime>().is_err(), "{text} parsed");
        }
        assert!("2024-02-29 23:59:59".parse::<ShopTime>().is_ok());
    }

    #[test]
    fn fixed_clock_does_not_move() {
        let time: ShopTime = "2026-06-29 14:00:00".parse().unwrap();
        assert_eq!(DemoClock::Fixed(time).now(), time);
    }

    #[test]
    fn a_running_clock_keeps_the_machines_pace_from_its_start() {
        let time = |text: &str| text.parse::<ShopTime>().unwrap();
        let clock = DemoClock::Running {
            started_at: time("2026-06-29 14:00:00"),
            machine_started_at: time("2026-12-01 22:00:00"),
        };
        assert_eq!(
            clock.at(time("2026-12-01 22:00:00")),
            time("2026-06-29 14:00:00")
        );
        assert_eq!(
            clock.at(time("2026-12-03 23:30:15")),
            time("2026-07-01 15:30:15")
        );
        // The machine's clock set back: the shop's stays at its start.
        assert_eq!(
            clock.at(time("2026-11-30 08:00:00")),
            time("2026-06-29 14:00:00")
        );
    }
}
