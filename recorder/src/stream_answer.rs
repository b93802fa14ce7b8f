//! What a response head says about its body before any of it is read: whether it is an
//! event stream to read at all.

use hyper::body::Incoming;
use tokentrace_format::Outcome;

/// What the response head says about the body, before any of it is read.
pub(super) struct Answer {
    content_type: Option<String>,
    content_encoding: Option<String>,
    location: Option<String>,
}

impl Answer {
    pub(super) fn of(response: &hyper::Response<Incoming>) -> Answer {
        let text = |name| {
            response
                .headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
        };
        Answer {
            content_type: text(hyper::header::CONTENT_TYPE),
            content_encoding: text(hyper::header::CONTENT_ENCODING),
            location: text(hyper::header::LOCATION),
        }
    }

    /// The same, from header values already read (the own client's parsed head).
    pub(super) fn from_parts(
        content_type: Option<&str>,
        content_encoding: Option<&str>,
        location: Option<&str>,
    ) -> Answer {
        Answer {
            content_type: content_type.map(str::to_string),
            content_encoding: content_encoding.map(str::to_string),
            location: location.map(str::to_string),
        }
    }

    /// The outcome of a response that is not a stream to read, with its message: a redirect
    /// (never followed: the measurement is of the URL given), a body in an encoding that was
    /// not asked for, or a success whose content type says it is not an event stream. A
    /// response without a content type is read as a stream.
    pub(super) fn refusal(&self, status: u16) -> Option<(Outcome, String)> {
        if (300..400).contains(&status) {
            let to = self.location.as_deref().unwrap_or("(no Location header)");
            return Some((
                Outcome::Redirect,
                format!("HTTP {status} redirect to {to}; redirects are not followed, give --url the final address"),
            ));
        }
        if !(200..300).contains(&status) {
            return None;
        }
        if let Some(encoding) = self
            .content_encoding
            .as_deref()
            .filter(|e| !e.eq_ignore_ascii_case("identity"))
        {
            return Some((
                Outcome::UnsupportedEncoding,
                format!("HTTP {status} body in content-encoding `{encoding}`, which was not asked for and is not decoded"),
            ));
        }
        let media = self
            .content_type
            .as_deref()
            .map(|t| t.split(';').next().unwrap_or_default().trim());
        match media {
            Some(m) if !m.eq_ignore_ascii_case("text/event-stream") => Some((
                Outcome::NotEventStream,
                format!("HTTP {status} answer of content type `{m}`, not an event stream"),
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(content_type: Option<&str>, encoding: Option<&str>) -> Answer {
        Answer {
            content_type: content_type.map(String::from),
            content_encoding: encoding.map(String::from),
            location: None,
        }
    }

    #[test]
    fn streams_and_untyped_bodies_are_read() {
        for t in [
            Some("text/event-stream"),
            Some("Text/Event-Stream; charset=utf-8"),
            None,
        ] {
            assert!(answer(t, None).refusal(200).is_none(), "{t:?}");
            assert!(answer(t, Some("identity")).refusal(200).is_none(), "{t:?}");
        }
        // Errors keep their own class: the body is the error text.
        assert!(answer(Some("text/html"), None).refusal(503).is_none());
    }

    #[test]
    fn other_answers_are_refused_with_their_class() {
        let class = |a: Answer, status| a.refusal(status).map(|(o, _)| o);
        assert_eq!(
            class(answer(Some("application/json"), None), 200),
            Some(Outcome::NotEventStream)
        );
        assert_eq!(
            class(answer(Some("text/event-stream"), Some("br")), 200),
            Some(Outcome::UnsupportedEncoding)
        );
        assert_eq!(class(answer(None, None), 301), Some(Outcome::Redirect));
    }
}
