//! Essences encoded byte for byte as Kopf encodes them: Python's
//! `json.dumps(essence, separators=(',', ':'))`.
//!
//! Three things set Python's output apart from `serde_json::to_string`:
//!
//! - **Key order.** Python keeps the order in which keys were inserted.
//!   Kopf copies the body (whose objects the API server sends with sorted
//!   keys), drops `apiVersion`, `kind`, `metadata` and `status`, puts
//!   `metadata` back with `labels`, then `annotations`, and then copies the
//!   handlers' extra fields, each key it creates going last in its object.
//!   A [`KeyOrder`] says which keys were so appended, and in what order;
//!   every other key is written in sorted order, before them.
//! - **ASCII only.** Every character outside `' '..='~'` is escaped as
//!   `\uXXXX` (lowercase hex, UTF-16 surrogate pairs beyond U+FFFF);
//!   `serde_json` writes UTF-8 and leaves DEL unescaped.
//! - **Floats.** Python's `repr`: the shortest digits that round-trip, in
//!   positional notation for exponents from -4 to 15 (`0.0001`, `1e+16`,
//!   `1e-05`, `100.0`).

use std::io;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use serde_json::ser::Formatter;

/// The keys of one object that Kopf appends after the others, in the
/// order it appends them, each with the order of its own keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyOrder<'k> {
    appended: Vec<(&'k str, KeyOrder<'k>)>,
    /// Copied whole from the body: its keys are all in sorted order.
    whole: bool,
}

impl<'k> KeyOrder<'k> {
    /// The order of the key `key` appended to this object, appended now if
    /// it is new.
    pub(crate) fn append(&mut self, key: &'k str) -> &mut KeyOrder<'k> {
        let at = match self.appended.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                self.appended.push((key, KeyOrder::default()));
                self.appended.len() - 1
            }
        };
        &mut self.appended[at].1
    }

    /// Records that a value copied from the body replaced the one at
    /// `path` (creating what leads to it): Kopf's `dicts.ensure`. Below a
    /// value copied whole, nothing moves: the keys there already exist.
    pub(crate) fn copy(&mut self, path: impl IntoIterator<Item = &'k str>) {
        let mut node = self;
        for key in path {
            if node.whole {
                return;
            }
            node = node.append(key);
        }
        node.appended.clear();
        node.whole = true;
    }

    fn of(&self, key: &str) -> Option<&KeyOrder<'k>> {
        self.appended
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, o)| o)
    }
}

/// `value` as Python's `json.dumps(value, separators=(',', ':'))` writes it,
/// its objects' keys in `order`.
pub(crate) fn encode(value: &Value, order: &KeyOrder<'_>) -> String {
    let mut out = Vec::with_capacity(128);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    Ordered { value, order }
        .serialize(&mut serializer)
        .expect("invariant: a JSON value always serializes into memory");
    String::from_utf8(out).expect("invariant: the output is ASCII")
}

/// A value to serialize with its objects' keys in an order.
struct Ordered<'a> {
    value: &'a Value,
    order: &'a KeyOrder<'a>,
}

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Object(map) = self.value else {
            return self.value.serialize(serializer);
        };
        if self.order.whole || self.order.appended.is_empty() {
            return self.value.serialize(serializer);
        }
        let mut out = serializer.serialize_map(Some(map.len()))?;
        let sorted = map.iter().filter(|(key, _)| self.order.of(key).is_none());
        for (key, value) in sorted {
            out.serialize_entry(key, value)?;
        }
        for (key, order) in &self.order.appended {
            if let Some(value) = map.get(*key) {
                out.serialize_entry(key, &Ordered { value, order })?;
            }
        }
        out.end()
    }
}

/// `serde_json`'s compact output, with Python's escapes and floats.
struct PythonFormatter;

impl Formatter for PythonFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // `"`, `\` and the control characters come as escapes already.
        if fragment.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            return writer.write_all(fragment.as_bytes());
        }
        let mut plain = 0;
        for (at, c) in fragment.char_indices() {
            if (' '..='~').contains(&c) {
                continue;
            }
            writer.write_all(&fragment.as_bytes()[plain..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            plain = at + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[plain..])
    }

    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(python_float(value).as_bytes())
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }
}

/// Python's `repr` of a finite float.
fn python_float(value: f64) -> String {
    // Rust's `{:e}` gives the shortest digits that round-trip, as Python's.
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("invariant: `{:e}` always writes an exponent");
    let exponent: i32 = exponent
        .parse()
        .expect("invariant: `{:e}` writes a decimal exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if value.is_sign_negative() { "-" } else { "" };
    if (-4..16).contains(&exponent) {
        if exponent < 0 {
            let zeros = "0".repeat((-exponent - 1) as usize);
            format!("{sign}0.{zeros}{digits}")
        } else {
            let whole = exponent as usize + 1;
            let (int, frac) = if digits.len() > whole {
                (digits[..whole].to_owned(), &digits[whole..])
            } else {
                (format!("{digits:0<whole$}"), "0")
            };
            format!("{sign}{int}.{frac}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let esign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{first}{dot}{rest}e{esign}{:02}", exponent.abs())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn floats_are_written_as_pythons_repr() {
        // From CPython: `repr(x)` of each.
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.000123, "0.000123"),
            (1.5e-7, "1.5e-07"),
            (123456789.125, "123456789.125"),
            (9999999999999998.0, "9999999999999998.0"),
            (1e16, "1e+16"),
            (1.2345e20, "1.2345e+20"),
            (1e100, "1e+100"),
            (-1e-100, "-1e-100"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ];
        for (value, python) in cases {
            assert_eq!(python_float(value), python, "{value:e}");
        }
    }

    #[test]
    fn strings_are_ascii_with_pythons_escapes() {
        let value = json!({"s": "a\"b\\c\n\t\u{1}\u{7f}é€😀/~"});
        assert_eq!(
            encode(&value, &KeyOrder::default()),
            r#"{"s":"a\"b\\c\n\t\u0001\u007f\u00e9\u20ac\ud83d\ude00/~"}"#
        );
    }

    #[test]
    fn appended_keys_go_last_in_their_order_and_the_rest_sorted() {
        let value = json!({
            "data": {"b": 1, "a": 2},
            "metadata": {"annotations": {"z": "1", "y": "2"}, "labels": {"l": "v"}, "generation": 3},
            "spec": {"size": 1},
            "status": {"phase": "Running", "conditions": [{"type": "B", "status": "A"}]},
        });
        let mut order = KeyOrder::default();
        order.append("metadata").copy(["labels"]);
        order.copy(["metadata", "annotations"]);
        order.copy(["status", "phase"]);
        order.copy(["metadata", "generation"]);
        order.copy(["status", "conditions"]);
        // Inside a value copied whole, nothing moves.
        order.copy(["metadata", "labels", "l"]);
        assert_eq!(
            encode(&value, &order),
            concat!(
                r#"{"data":{"a":2,"b":1},"spec":{"size":1},"#,
                r#""metadata":{"labels":{"l":"v"},"annotations":{"y":"2","z":"1"},"generation":3},"#,
                r#""status":{"phase":"Running","conditions":[{"status":"A","type":"B"}]}}"#,
            )
        );
        // A key copied whole again stays where it was, its keys sorted.
        order.copy(["status"]);
        assert!(encode(&value, &order).ends_with(
            r#""status":{"conditions":[{"status":"A","type":"B"}],"phase":"Running"}}"#
        ));
    }
}
