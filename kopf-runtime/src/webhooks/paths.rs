//! The handlers' URL paths: a handler's id beneath the server's root path,
//! quoted as Kopf quotes it.

/// A handler id as a URL path segment (Kopf's `urllib.parse.quote`: `/`
/// and the unreserved characters stay as they are).
pub(crate) fn quote(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A URL path's `%XX` escapes decoded; `None` if they make no UTF-8.
pub(crate) fn unquote(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = path.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_quoted_as_kopf_quotes_them_and_unquoted_back() {
        assert_eq!(quote("check/spec.size"), "check/spec.size");
        assert_eq!(quote("a b%"), "a%20b%25");
        assert_eq!(unquote("a%20b%25").as_deref(), Some("a b%"));
        assert_eq!(unquote("%zz").as_deref(), Some("%zz"));
    }
}
