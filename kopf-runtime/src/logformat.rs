//! The parts of log lines that every line repeats, written the way
//! `tracing-subscriber`'s default formatter writes them, only cheaper: an
//! operator logs a line or two for every object it handles.
//!
//! - [`UtcTime`]: `2026-11-30T23:58:16.123456Z`, with the date and time of
//!   day formatted once a second instead of for every line.
//! - [`PlainFields`]: `message key=value …` without colours; the message is
//!   scanned for control characters once and escaped (as the default
//!   formatter escapes them) only when it has any, instead of being written
//!   character by character.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// Wall-clock time in UTC with microseconds, as `tracing-subscriber`'s
/// `SystemTime` writes it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UtcTime;

thread_local! {
    /// The second last formatted on this thread, and its text up to the
    /// seconds (`2026-11-30T23:58:16`).
    static LAST_SECOND: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
}

impl FormatTime for UtcTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let now = SystemTime::now();
        let Ok(since) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            // Before 1970: rare enough to format in full.
            let ts = jiff::Timestamp::try_from(now).map_err(|_| fmt::Error)?;
            return write!(w, "{:.6}Z", jiff::tz::TimeZone::UTC.to_datetime(ts));
        };
        let second = i64::try_from(since.as_secs()).map_err(|_| fmt::Error)?;
        let micros = since.subsec_micros();
        LAST_SECOND.with_borrow_mut(|(cached, text)| {
            if *cached != second {
                let ts = jiff::Timestamp::from_second(second).map_err(|_| fmt::Error)?;
                text.clear();
                write!(text, "{:.0}", jiff::tz::TimeZone::UTC.to_datetime(ts))?;
                *cached = second;
            }
            w.write_str(text)?;
            write!(w, ".{micros:06}Z")
        })
    }
}

/// Event and span fields as the default formatter writes them without
/// colours: the message first as it is, then `name=value` (values in their
/// `Debug` form), separated by spaces; `log.*` fields (already shown as
/// the target) are left out.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PlainFields;

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct PlainVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    fn pad(&mut self) -> fmt::Result {
        if std::mem::take(&mut self.first) {
            Ok(())
        } else {
            self.writer.write_char(' ')
        }
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"))
        } else {
            self.record_debug(field, &value)
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        match value.source() {
            Some(source) => self.record_debug(
                field,
                &format_args!(
                    "{} {}.sources={}",
                    Escaped(value),
                    field.name(),
                    Sources(source)
                ),
            ),
            None => self.record_debug(field, &format_args!("{}", Escaped(value))),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        self.result = self.pad().and_then(|()| match name {
            "message" => write!(EscapingWriter(&mut self.writer), "{value:?}"),
            name => {
                let name = name.strip_prefix("r#").unwrap_or(name);
                write!(self.writer, "{name}={value:?}")
            }
        });
    }
}

/// An error's text with control characters escaped.
struct Escaped<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapingWriter(f), "{}", self.0)
    }
}

/// The chain of an error's sources: `[first, second]`, each escaped.
struct Sources<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Sources<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        let mut next = Some(self.0);
        while let Some(error) = next {
            list.entry(&format_args!("{}", Escaped(error)));
            next = error.source();
        }
        list.finish()
    }
}

/// Writes text through, escaping what could drive a terminal: ESC, BEL,
/// BS, FF and DEL as `\x1b`…, C1 controls as `\u{9b}`…. Text without them
/// (nearly all) is written in one piece.
struct EscapingWriter<W>(W);

/// Whether `c` is escaped by [`EscapingWriter`].
fn needs_escape(c: char) -> bool {
    matches!(
        c,
        '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' | '\u{80}'..='\u{9f}'
    )
}

impl<W: fmt::Write> fmt::Write for EscapingWriter<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Each escaped character is ASCII or starts with the byte 0xC2.
        let clean = !s
            .bytes()
            .any(|b| matches!(b, 0x1b | 0x07 | 0x08 | 0x0c | 0x7f | 0xc2));
        if clean || !s.chars().any(needs_escape) {
            return self.0.write_str(s);
        }
        for c in s.chars() {
            match c {
                '\x1b' => self.0.write_str("\\x1b")?,
                '\x07' => self.0.write_str("\\x07")?,
                '\x08' => self.0.write_str("\\x08")?,
                '\x0c' => self.0.write_str("\\x0c")?,
                '\x7f' => self.0.write_str("\\x7f")?,
                c if needs_escape(c) => write!(self.0, "\\u{{{:x}}}", c as u32)?,
                c => self.0.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer that keeps what the subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("not poisoned").clone()).expect("utf-8")
        }
    }

    /// The lines `emit` logs, with the default formatter and with ours.
    fn both(emit: impl Fn()) -> (String, String) {
        let default = Captured::default();
        let writer = default.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, &emit);
        let ours = Captured::default();
        let writer = ours.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .fmt_fields(PlainFields)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, &emit);
        (default.text(), ours.text())
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer \x1b[31mfailure")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner cause")]
    struct Inner;

    #[test]
    fn fields_are_written_as_the_default_formatter_writes_them() {
        let (default, ours) = both(|| {
            let object = "ns/name";
            tracing::info!(target: "kopf::objects", %object, "Handler 'x' succeeded.");
            tracing::warn!(
                count = 3,
                flag = true,
                text = "quoted",
                r#type = "raw",
                "plain"
            );
            tracing::error!(
                error = &Outer(Inner) as &(dyn std::error::Error + 'static),
                "failed"
            );
            tracing::info!("no fields at all");
            let inner = Inner;
            tracing::info!(error = &inner as &(dyn std::error::Error + 'static));
        });
        assert_eq!(ours, default);
        assert!(ours.contains("object=ns/name"), "{ours}");
        assert!(ours.contains("error.sources=[inner cause]"), "{ours}");
    }

    #[test]
    fn control_characters_in_messages_are_escaped_as_by_default() {
        let (default, ours) = both(|| {
            tracing::info!("bell \x07 escape \x1b[2J del \x7f csi \u{9b} é ü 日本");
            tracing::info!("{}", "form \x0c feed and back \x08 space");
        });
        assert_eq!(ours, default);
        assert!(ours.contains("\\x1b[2J"), "{ours}");
        assert!(ours.contains("\\u{9b}"), "{ours}");
        assert!(ours.contains("é ü 日本"), "{ours}");
    }

    #[test]
    fn the_time_is_written_as_the_default_timer_writes_it() {
        let format = |timer: &dyn FormatTime| {
            let mut text = String::new();
            timer
                .format_time(&mut Writer::new(&mut text))
                .expect("formats");
            text
        };
        // Twice: the first call fills the cache of the second, the next
        // uses it.
        for _ in 0..2 {
            let ours = format(&UtcTime);
            let default = format(&tracing_subscriber::fmt::time::SystemTime);
            assert_eq!(ours.len(), "2026-11-30T23:58:16.123456Z".len(), "{ours}");
            assert_eq!(ours.len(), default.len(), "{ours} vs {default}");
            assert!(ours.ends_with('Z') && ours.as_bytes()[19] == b'.', "{ours}");
            // Both read the clock, one after the other.
            let ours: jiff::Timestamp = ours.parse().expect("RFC 3339");
            let default: jiff::Timestamp = default.parse().expect("RFC 3339");
            let apart = default.duration_since(ours);
            assert!(
                apart >= jiff::SignedDuration::ZERO && apart < jiff::SignedDuration::from_secs(1),
                "{ours} then {default}"
            );
        }
    }
}
