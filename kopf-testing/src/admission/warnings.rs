//! The `Warning` headers of a response, as the API server's warning
//! recorder writes them: each text once, in order; once the texts add up
//! to more than 4,096 characters, every one (those written too) is cut to
//! 256, and those past 4,096 characters of cut texts are dropped. A text
//! with control characters is never sent.

use std::collections::HashSet;

/// The most characters of warning text a response carries.
const TOTAL_CHARS: usize = 4 * 1024;

/// The most characters of one warning once the total is exceeded.
const ITEM_CHARS: usize = 256;

/// A `Warning` header value: `299 - "text"`, the text escaped as a quoted
/// string; `None` for a text with control characters, which the API
/// server does not send (its `NewWarningHeader` refuses it).
pub(crate) fn warning_header(text: &str) -> Option<String> {
    if text.chars().any(char::is_control) {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("299 - \"");
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Some(out)
}

/// `text` cut to [`ITEM_CHARS`] characters, and its length in characters.
fn truncated(text: &str) -> (&str, usize) {
    match text.char_indices().nth(ITEM_CHARS) {
        Some((end, _)) => (&text[..end], ITEM_CHARS),
        None => (text, text.chars().count()),
    }
}

/// The `Warning` header values for a response with these warnings, in
/// the order they were given.
pub(crate) fn warning_headers(warnings: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut kept: Vec<&str> = Vec::new();
    let mut headers = Vec::new();
    let (mut written, mut truncating) = (0, false);
    for text in warnings.iter().filter(|t| !t.is_empty()) {
        if truncating && written >= TOTAL_CHARS {
            break;
        }
        if !seen.insert(text.as_str()) {
            continue;
        }
        kept.push(text);
        let (text, chars) = if truncating {
            truncated(text)
        } else {
            (text.as_str(), text.chars().count())
        };
        let Some(header) = warning_header(text) else {
            continue;
        };
        if truncating || written + chars <= TOTAL_CHARS {
            written += chars;
            headers.push(header);
            continue;
        }
        // Over the total: write them all again, cut.
        truncating = true;
        written = 0;
        headers.clear();
        for text in &kept {
            let (text, chars) = truncated(text);
            if let Some(header) = warning_header(text) {
                written += chars;
                headers.push(header);
            }
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_become_quoted_header_values() {
        assert_eq!(
            warning_header("say \"hi\" \\o/").as_deref(),
            Some("299 - \"say \\\"hi\\\" \\\\o/\"")
        );
        assert_eq!(warning_header("two\nlines"), None);
    }

    #[test]
    fn warnings_are_deduplicated_then_cut_then_dropped() {
        let long = |c: char, n: usize| c.to_string().repeat(n);
        let mut given = vec![
            long('a', 1000),
            long('a', 1000),
            long('b', 100),
            "say \"hi\"".to_string(),
            "bad\u{7}".to_string(),
        ];
        let headers = warning_headers(&given);
        assert_eq!(headers.len(), 3, "deduplicated, control characters dropped");
        assert_eq!(headers[0].len(), 1000 + 8);
        given.extend((0..20).map(|i| long(char::from(b'c' + i), 300)));
        let headers = warning_headers(&given);
        let cut = format!("299 - \"{}\"", long('a', ITEM_CHARS));
        assert_eq!(headers[0], cut, "written ones are cut once over the total");
        assert_eq!(headers[1], format!("299 - \"{}\"", long('b', 100)));
        let total: usize = headers.iter().map(|h| h.len() - 8).sum();
        assert!(total <= TOTAL_CHARS + ITEM_CHARS, "{total}");
        // 1,108 characters and ten of 300 go over 4,096: all are cut to
        // 2,924 characters, five more of 256 reach 4,204, the rest go.
        assert_eq!(headers.len(), 3 + 15, "{}", headers.len());
        assert!(headers.iter().all(|h| h.chars().count() <= ITEM_CHARS + 8));
    }

    #[test]
    fn cuts_fall_between_characters() {
        let text = "ñ".repeat(300);
        let (cut, chars) = truncated(&text);
        assert_eq!((cut.chars().count(), chars), (ITEM_CHARS, ITEM_CHARS));
    }
}
