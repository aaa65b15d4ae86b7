//! [`Body`]: the object's body as a handler reads it.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

/// The object's body, the `body` parameter: read it as a
/// [`serde_json::Value`] (`kw.body["spec"]`, `&*kw.body`), to which it
/// dereferences.
///
/// A daemon or timer keeps its object's body as JSON text between its
/// calls, not as a `Value`: a tree of maps costs several times the text, and
/// a timer at rest should hold what it needs to tick and no more. Such a
/// body is decoded on its first read in a call (once per call, shared by
/// the call's clones); [`name`](Self::name), [`namespace`](Self::namespace)
/// and [`uid`](Self::uid) never decode it. Every other handler gets the
/// body decoded already.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// let body = kopf_runtime::Body::from(json!({"metadata": {"name": "x"}, "spec": {"size": 1}}));
/// assert_eq!(body["spec"]["size"], 1);
/// assert_eq!(body.name(), Some("x"));
/// let shared: Arc<serde_json::Value> = body.to_arc();
/// assert_eq!(shared["spec"]["size"], 1);
/// ```
#[derive(Clone)]
pub struct Body(Repr);

#[derive(Clone)]
enum Repr {
    Decoded(Arc<Value>),
    Encoded {
        encoded: EncodedBody,
        decoded: OnceLock<Arc<Value>>,
    },
}

impl Body {
    /// A body decoded from `encoded` when first read.
    pub(crate) fn lazy(encoded: EncodedBody) -> Self {
        Self(Repr::Encoded {
            encoded,
            decoded: OnceLock::new(),
        })
    }

    /// The body as a shared `Value` (decoded now if it was not yet).
    #[must_use]
    pub fn to_arc(&self) -> Arc<Value> {
        Arc::clone(self.value())
    }

    /// `metadata.name`.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        self.identity("name")
    }

    /// `metadata.namespace` (`None` for cluster-scoped objects).
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.identity("namespace")
    }

    /// `metadata.uid`.
    #[must_use]
    pub fn uid(&self) -> Option<&str> {
        self.identity("uid")
    }

    /// The decoded body, decoding it now if it was not yet.
    fn value(&self) -> &Arc<Value> {
        match &self.0 {
            Repr::Decoded(value) => value,
            Repr::Encoded { encoded, decoded } => {
                decoded.get_or_init(|| Arc::new(encoded.decode()))
            }
        }
    }

    /// One of `metadata`'s `name`, `namespace`, `uid`, without decoding.
    fn identity(&self, key: &str) -> Option<&str> {
        match &self.0 {
            Repr::Decoded(value) => meta_str(value, key),
            Repr::Encoded { encoded, .. } => encoded.identity(key, || self.value()),
        }
    }
}

fn meta_str<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    body.get("metadata")?.get(key)?.as_str()
}

impl Deref for Body {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl AsRef<Value> for Body {
    fn as_ref(&self) -> &Value {
        self
    }
}

impl From<Arc<Value>> for Body {
    fn from(value: Arc<Value>) -> Self {
        Self(Repr::Decoded(value))
    }
}

impl From<Value> for Body {
    fn from(value: Value) -> Self {
        Self(Repr::Decoded(Arc::new(value)))
    }
}

impl From<Body> for Arc<Value> {
    fn from(body: Body) -> Self {
        match body.0 {
            Repr::Decoded(value) => value,
            Repr::Encoded { encoded, decoded } => decoded
                .into_inner()
                .unwrap_or_else(|| Arc::new(encoded.decode())),
        }
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialEq<Value> for Body {
    fn eq(&self, other: &Value) -> bool {
        **self == *other
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A body kept as its JSON text, with where its name, namespace and uid
/// are in that text (what handlers and logs read on every call): what a
/// daemon's or timer's object holds between calls. Cloning is one
/// reference count.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EncodedBody {
    text: Arc<str>,
    name: Field,
    namespace: Field,
    uid: Field,
}

/// Where one of the identity's strings is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// Not in the body (e.g. the namespace of a cluster-scoped object).
    Absent,
    /// In the text, without its quotes.
    At(Span),
    /// One that JSON escapes (no Kubernetes name, namespace or uid is
    /// one): read from the decoded body.
    Escaped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl EncodedBody {
    pub(crate) fn new(body: &Value) -> Self {
        // Writing a `Value` cannot fail: its keys are strings.
        let text: Arc<str> = serde_json::to_string(body).unwrap_or_default().into();
        let field = |key| match meta_str(body, key) {
            None => Field::Absent,
            Some(value) => Span::of(&text, value).map_or(Field::Escaped, Field::At),
        };
        Self {
            name: field("name"),
            namespace: field("namespace"),
            uid: field("uid"),
            text,
        }
    }

    /// The identity's string `key` (`name`, `namespace`, `uid`): from the
    /// text, or, for one that JSON escapes, from the body `decoded` gives.
    fn identity<'a>(&'a self, key: &str, decoded: impl FnOnce() -> &'a Value) -> Option<&'a str> {
        let field = match key {
            "name" => self.name,
            "namespace" => self.namespace,
            _ => self.uid,
        };
        match field {
            Field::Absent => None,
            Field::At(span) => Some(&self.text[span.start as usize..span.end as usize]),
            Field::Escaped => meta_str(decoded(), key),
        }
    }

    /// The body again. It was written from a `Value` by this process, so it
    /// reads back, however deep (with no recursion limit, on a stack that
    /// grows on the heap).
    pub(crate) fn decode(&self) -> Value {
        let mut json = serde_json::Deserializer::from_str(&self.text);
        json.disable_recursion_limit();
        serde::Deserialize::deserialize(serde_stacker::Deserializer::new(&mut json))
            .expect("invariant: the text was written from a Value")
    }
}

impl Span {
    /// Where `value` is written as a JSON string in `text`: any place is
    /// as good as another, the bytes are the same. `None` for a value that
    /// JSON escapes.
    fn of(text: &str, value: &str) -> Option<Self> {
        let plain = |c: char| c != '"' && c != '\\' && !c.is_control();
        if !value.chars().all(plain) {
            return None;
        }
        let start = text
            .match_indices(value)
            .map(|(at, _)| at)
            .find(|&at| text[..at].ends_with('"') && text[at + value.len()..].starts_with('"'))?;
        Some(Self {
            start: u32::try_from(start).ok()?,
            end: u32::try_from(start + value.len()).ok()?,
        })
    }
}

impl fmt::Debug for EncodedBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }))
    }

    #[test]
    fn an_encoded_body_reads_back_as_it_was_and_decodes_once_per_call() {
        let value = json!({
            "metadata": {"name": "n", "namespace": "ns", "uid": "u"},
            "spec": {"f": 1.5, "big": u64::MAX, "neg": -3, "s": "é\"\\", "deep": nested(300)},
        });
        let encoded = EncodedBody::new(&value);
        let body = Body::lazy(encoded.clone());
        assert_eq!(
            (body.name(), body.namespace(), body.uid()),
            (Some("n"), Some("ns"), Some("u"))
        );
        let Repr::Encoded { decoded, .. } = &body.0 else {
            panic!("lazy")
        };
        assert!(decoded.get().is_none(), "the identity decodes nothing");
        assert_eq!(*body, value);
        let copy = body.clone();
        assert!(
            Arc::ptr_eq(&body.to_arc(), &copy.to_arc()),
            "one decoding per call"
        );
        assert_eq!(Arc::<Value>::from(copy), Arc::new(value.clone()));
        assert_eq!(Body::lazy(encoded), Body::from(value));
    }

    #[test]
    fn an_identity_that_json_escapes_is_read_from_the_decoded_body() {
        let value = json!({"metadata": {"name": "a\"b", "uid": "u"}, "spec": {"uid": "x"}});
        let body = Body::lazy(EncodedBody::new(&value));
        assert_eq!(body.uid(), Some("u"));
        assert_eq!(body.namespace(), None, "cluster-scoped");
        let Repr::Encoded { decoded, .. } = &body.0 else {
            panic!("lazy")
        };
        assert!(
            decoded.get().is_none(),
            "an absent namespace decodes nothing"
        );
        assert_eq!(body.name(), Some("a\"b"));
        assert!(decoded.get().is_some(), "decoded for the escaped name");
    }

    #[test]
    fn a_decoded_body_answers_from_its_value() {
        let body = Body::from(json!({"metadata": {"name": "n"}}));
        assert_eq!(
            (body.name(), body.namespace(), body.uid()),
            (Some("n"), None, None)
        );
        assert_eq!(Body::from(Value::Null).name(), None);
        assert_eq!(
            format!("{body:?}"),
            r#"Object {"metadata": Object {"name": String("n")}}"#
        );
    }
}
