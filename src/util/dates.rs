//! Dates and date-times, the one place they are spelled and parsed: a
//! `Date` is stored as days since 1970-01-01, a `DateTime` as milliseconds
//! since the epoch (UTC); both are written as ISO 8601 / RFC 3339 text.

/// `"2024-05-01"` -> days since the epoch.
pub fn days_from_date(s: &str) -> Option<i32> {
    let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from((d - epoch).num_days()).ok()
}

/// An RFC 3339 date-time -> milliseconds since the epoch.
pub fn ms_from_datetime(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|d| d.timestamp_millis())
}

/// Days since the epoch -> `"2024-05-01"`.
pub fn date_string(days: i32) -> String {
    chrono::DateTime::from_timestamp(days as i64 * 86_400, 0)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| days.to_string())
}

/// Milliseconds since the epoch -> RFC 3339 in UTC, to the millisecond.
pub fn datetime_string(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_date_times_round_trip() {
        assert_eq!(days_from_date("1970-01-02"), Some(1));
        assert_eq!(days_from_date("2020-01-02"), Some(18263));
        assert_eq!(date_string(18263), "2020-01-02");
        assert_eq!(days_from_date("2020-13-01"), None);
        let ms = ms_from_datetime("2024-05-01T10:00:00.250+02:00").unwrap();
        assert_eq!(datetime_string(ms), "2024-05-01T08:00:00.250Z");
        assert_eq!(ms_from_datetime("yesterday"), None);
    }
}
