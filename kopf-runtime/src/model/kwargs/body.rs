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
        encoded: Arc<EncodedBody>,
        decoded: OnceLock<Arc<Value>>,
    },
}

impl Body {
    /// A body decoded from `encoded` when first read.
    pub(crate) fn lazy(encoded: Arc<EncodedBody>) -> Self {
        Self(Repr::Encoded {
            encoded,
            decoded: OnceLock::new(),
        })
    }

    /// The body as a shared `Value` (decoded now if it was not yet).
    #[must_use]
    pub fn to_arc(&self) -> Arc<Value> {
        match &self.0 {
            Repr::Decoded(value) => Arc::clone(value),
            Repr::Encoded { encoded, decoded } => {
                Arc::clone(decoded.get_or_init(|| Arc::new(encoded.decode())))
            }
        }
    }

    /// `metadata.name`.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        match &self.0 {
            Repr::Decoded(value) => meta_str(value, "name"),
            Repr::Encoded { encoded, .. } => encoded.name.as_deref(),
        }
    }

    /// `metadata.namespace` (`None` for cluster-scoped objects).
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        match &self.0 {
            Repr::Decoded(value) => meta_str(value, "namespace"),
            Repr::Encoded { encoded, .. } => encoded.namespace.as_deref(),
        }
    }

    /// `metadata.uid`.
    #[must_use]
    pub fn uid(&self) -> Option<&str> {
        match &self.0 {
            Repr::Decoded(value) => meta_str(value, "uid"),
            Repr::Encoded { encoded, .. } => encoded.uid.as_deref(),
        }
    }
}

fn meta_str<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    body.get("metadata")?.get(key)?.as_str()
}

impl Deref for Body {
    type Target = Value;

    fn deref(&self) -> &Value {
        match &self.0 {
            Repr::Decoded(value) => value,
            Repr::Encoded { encoded, decoded } => {
                decoded.get_or_init(|| Arc::new(encoded.decode()))
            }
        }
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

/// A body kept as its JSON text, with the identity read from it (which
/// handlers and logs use on every call) kept beside: what a daemon's or
/// timer's object holds between calls.
#[derive(PartialEq, Eq)]
pub(crate) struct EncodedBody {
    text: Box<str>,
    name: Option<Box<str>>,
    namespace: Option<Box<str>>,
    uid: Option<Box<str>>,
}

impl EncodedBody {
    pub(crate) fn new(body: &Value) -> Self {
        let field = |key| meta_str(body, key).map(Box::from);
        Self {
            // Writing a `Value` cannot fail: its keys are strings.
            text: serde_json::to_string(body).unwrap_or_default().into(),
            name: field("name"),
            namespace: field("namespace"),
            uid: field("uid"),
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
        let encoded = Arc::new(EncodedBody::new(&value));
        let body = Body::lazy(Arc::clone(&encoded));
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
