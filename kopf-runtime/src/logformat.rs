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
//! - [`PlainLines`]: the whole line without colours, `time level spans:
//!   target: fields`, each part written as a piece of text rather than
//!   through a format string.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// Lines as `tracing-subscriber`'s default (`Full`) format writes them
/// without colours, with [`UtcTime`] (or no time) and the target:
/// `2026-11-30T23:58:16.123456Z  INFO span{a=1}:kopf::objects: message key=value`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlainLines {
    time: bool,
}

impl PlainLines {
    /// Lines that start with the time.
    pub(crate) fn new() -> Self {
        Self { time: true }
    }
}

impl<S, N> FormatEvent<S, N> for PlainLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // Records of the `log` crate carry their own level and target.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        if self.time {
            if UtcTime.format_time(&mut writer).is_err() {
                writer.write_str("<unknown time>")?;
            }
            writer.write_char(' ')?;
        }
        writer.write_str(level_text(meta.level()))?;
        writer.write_char(' ')?;
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                seen = true;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
            }
            if seen {
                writer.write_char(' ')?;
            }
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// A level as the default format writes it: five characters wide.
fn level_text(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

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
            let fraction = fraction(micros);
            w.write_str(std::str::from_utf8(&fraction).map_err(|_| fmt::Error)?)
        })
    }
}

/// `.123456Z`: the microseconds of a second (below 1,000,000) in six
/// digits, as `format!(".{micros:06}Z")` writes them.
fn fraction(micros: u32) -> [u8; 8] {
    let mut text = *b".000000Z";
    let mut rest = micros;
    for digit in text[1..7].iter_mut().rev() {
        *digit = b"0123456789"[(rest % 10) as usize];
        rest /= 10;
    }
    text
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
            .with_max_level(Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, &emit);
        let ours = Captured::default();
        let writer = ours.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .fmt_fields(PlainFields)
            .event_format(PlainLines { time: false })
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
    fn lines_are_written_as_the_default_formatter_writes_them() {
        let (default, ours) = both(|| {
            tracing::trace!(target: "a::b", "every level");
            tracing::debug!("every level");
            tracing::info!("every level");
            tracing::warn!("every level");
            tracing::error!("every level");
            let outer = tracing::info_span!("outer", resource = "configmaps", n = 2);
            outer.in_scope(|| {
                tracing::info!("in one span");
                let inner = tracing::info_span!("inner");
                inner.in_scope(|| tracing::info!(k = 1, "in two spans, one without fields"));
            });
        });
        assert_eq!(ours, default);
        assert!(
            ours.contains(" INFO outer{resource=\"configmaps\" n=2}:inner: "),
            "{ours}"
        );
        assert!(ours.contains("TRACE a::b: every level\n"), "{ours}");
    }

    #[test]
    fn a_timed_line_starts_with_the_time() {
        let lines = Captured::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(PlainFields)
            .event_format(PlainLines::new())
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || tracing::warn!(target: "t", "late"));
        let text = lines.text();
        let (time, rest) = text.split_once(' ').expect("a time, then the rest");
        let _: jiff::Timestamp = time.parse().expect("RFC 3339");
        assert_eq!(rest, " WARN t: late\n");
    }

    #[test]
    fn fractions_of_a_second_have_six_digits() {
        for micros in [0, 7, 45_000, 123_456, 999_999] {
            let fraction = fraction(micros);
            assert_eq!(
                std::str::from_utf8(&fraction).expect("ASCII"),
                format!(".{micros:06}Z")
            );
        }
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
