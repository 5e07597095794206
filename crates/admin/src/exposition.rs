//! Content negotiation of `GET /metrics`: which Prometheus text format the
//! scraper gets.
//!
//! Prometheus ≥ 2.5 asks for OpenMetrics first in its `Accept`
//! (`application/openmetrics-text;version=1.0.0,…,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`);
//! curl, browsers and older scrapers ask for nothing in particular and get
//! the classic text format, which every Prometheus-compatible reader takes.
//! The rule: OpenMetrics when `Accept` names `application/openmetrics-text`
//! with a quality at least as high as any other acceptable type, the classic
//! text format otherwise. Never an error: a malformed `Accept` reads as
//! "anything".

/// The text format of a metrics exposition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    /// OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`).
    OpenMetrics,
    /// The classic Prometheus text format (`text/plain; version=0.0.4`).
    Text,
}

impl MetricsFormat {
    /// The format an `Accept` header value asks for (`None`: no header).
    pub fn negotiate(accept: Option<&str>) -> MetricsFormat {
        let Some(accept) = accept else { return MetricsFormat::Text };
        let (mut open, mut other) = (0.0_f32, 0.0_f32);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0));
            if media == "application/openmetrics-text" {
                open = open.max(q);
            } else {
                other = other.max(q);
            }
        }
        if open > 0.0 && open >= other {
            MetricsFormat::OpenMetrics
        } else {
            MetricsFormat::Text
        }
    }

    /// The format a `format=` query parameter forces, if any.
    ///
    /// # Errors
    /// A message naming the accepted values for any other `format`.
    pub fn from_query(query: Option<&str>) -> Result<Option<MetricsFormat>, String> {
        let Some(value) = query.into_iter().flat_map(|q| q.split('&')).find_map(|p| p.strip_prefix("format=")) else {
            return Ok(None);
        };
        match value {
            "text" => Ok(Some(MetricsFormat::Text)),
            "openmetrics" => Ok(Some(MetricsFormat::OpenMetrics)),
            other => Err(format!("unknown metrics format `{other}` (expected text or openmetrics)")),
        }
    }

    /// The `Content-Type` the exposition is served with.
    pub fn content_type(self) -> &'static str {
        match self {
            MetricsFormat::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            MetricsFormat::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MetricsFormat::{self, OpenMetrics, Text};

    #[test]
    fn accept_headers_pick_the_format() {
        let prometheus_2_42 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                               version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, want) in [
            (None, Text),
            (Some("*/*"), Text),
            (Some(prometheus_2_42), OpenMetrics),
            (Some("text/plain;version=0.0.4;q=1,*/*;q=0.1"), Text),
            (Some("application/openmetrics-text"), OpenMetrics),
            (Some("Application/OpenMetrics-Text; version=1.0.0"), OpenMetrics),
            (Some("application/openmetrics-text;q=0.2,text/plain;q=0.9"), Text),
            (Some("application/openmetrics-text;q=0"), Text),
            (Some(";;,garbage;q=x"), Text),
        ] {
            assert_eq!(MetricsFormat::negotiate(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn a_query_forces_the_format() {
        assert_eq!(MetricsFormat::from_query(None), Ok(None));
        assert_eq!(MetricsFormat::from_query(Some("x=1")), Ok(None));
        assert_eq!(MetricsFormat::from_query(Some("x=1&format=text")), Ok(Some(Text)));
        assert_eq!(MetricsFormat::from_query(Some("format=openmetrics")), Ok(Some(OpenMetrics)));
        assert!(MetricsFormat::from_query(Some("format=json")).expect_err("refused").contains("json"));
    }
}
