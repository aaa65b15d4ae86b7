//! Decoding the Kubernetes protobuf encoding of the few built-in kinds that
//! `kubectl create configmap|secret|namespace|serviceaccount` send, and
//! those `kubectl create role|rolebinding|clusterrole|clusterrolebinding|token`
//! and `kubectl auth can-i` send, into JSON.
//!
//! The body is `k8s\0` followed by a `runtime.Unknown` envelope whose `raw`
//! field holds the object. Unknown fields are skipped; other kinds are refused
//! with a message asking for JSON.

use serde_json::{Map, Value, json};

use crate::objects::base64;

/// The magic prefix of Kubernetes protobuf bodies.
const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ProtobufError {
    /// The body does not start with `k8s\0`.
    #[error("the protobuf body lacks the `k8s\\0` prefix")]
    NoMagic,
    /// The wire format is broken.
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
    /// The kind is not one the emulator decodes.
    #[error(
        "the emulator decodes protobuf only for ConfigMap, Secret, Namespace, ServiceAccount, RBAC objects, access reviews and TokenRequest, not {0:?}; send application/json"
    )]
    Unsupported(String),
}

/// One field of a message: number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or(ProtobufError::Malformed("truncated varint"))?;
            self.buf = rest;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::Malformed("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if n > self.buf.len() {
            return Err(ProtobufError::Malformed("truncated field"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next field, skipping fixed-width ones; `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, ProtobufError> {
        loop {
            if self.buf.is_empty() {
                return Ok(None);
            }
            let key = self.varint()?;
            let number = key >> 3;
            match key & 7 {
                0 => return Ok(Some((number, Field::Varint(self.varint()?)))),
                1 => {
                    self.take(8)?;
                }
                2 => {
                    let len = usize::try_from(self.varint()?)
                        .map_err(|_| ProtobufError::Malformed("length too large"))?;
                    return Ok(Some((number, Field::Bytes(self.take(len)?))));
                }
                5 => {
                    self.take(4)?;
                }
                _ => return Err(ProtobufError::Malformed("unsupported wire type")),
            }
        }
    }
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, ProtobufError> {
    let mut reader = Reader { buf };
    let mut out = Vec::new();
    while let Some(f) = reader.next()? {
        out.push(f);
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| ProtobufError::Malformed("string is not UTF-8"))
}

/// A map entry (`1: key`, `2: value`), the value as text or base64.
fn entry(bytes: &[u8], binary: bool) -> Result<(String, Value), ProtobufError> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) => {
                value = Value::String(if binary { base64(b) } else { text(b)? })
            }
            _ => {}
        }
    }
    Ok((key, value))
}

fn insert_entry(
    obj: &mut Map<String, Value>,
    field: &str,
    bytes: &[u8],
    binary: bool,
) -> Result<(), ProtobufError> {
    let (k, v) = entry(bytes, binary)?;
    if let Some(map) = obj
        .entry(field)
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        map.insert(k, v);
    }
    Ok(())
}

fn push(obj: &mut Map<String, Value>, field: &str, value: Value) {
    if let Some(list) = obj.entry(field).or_insert_with(|| json!([])).as_array_mut() {
        list.push(value);
    }
}

/// Sets a string field unless empty (gogo-protobuf writes empty optional strings).
fn set_text(out: &mut Map<String, Value>, field: &str, bytes: &[u8]) -> Result<(), ProtobufError> {
    if !bytes.is_empty() {
        out.insert(field.into(), text(bytes)?.into());
    }
    Ok(())
}

fn owner_reference(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut out = Map::new();
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => drop(out.insert("kind".into(), text(b)?.into())),
            (3, Field::Bytes(b)) => set_text(&mut out, "name", b)?,
            (4, Field::Bytes(b)) => set_text(&mut out, "uid", b)?,
            (5, Field::Bytes(b)) => drop(out.insert("apiVersion".into(), text(b)?.into())),
            (6, Field::Varint(v)) => drop(out.insert("controller".into(), (v != 0).into())),
            (7, Field::Varint(v)) => drop(out.insert("blockOwnerDeletion".into(), (v != 0).into())),
            _ => {}
        }
    }
    Ok(Value::Object(out))
}

fn object_meta(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut out = Map::new();
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => set_text(&mut out, "name", b)?,
            (2, Field::Bytes(b)) => set_text(&mut out, "generateName", b)?,
            (3, Field::Bytes(b)) => set_text(&mut out, "namespace", b)?,
            (5, Field::Bytes(b)) => set_text(&mut out, "uid", b)?,
            (6, Field::Bytes(b)) => set_text(&mut out, "resourceVersion", b)?,
            (11, Field::Bytes(b)) => insert_entry(&mut out, "labels", b, false)?,
            (12, Field::Bytes(b)) => insert_entry(&mut out, "annotations", b, false)?,
            (13, Field::Bytes(b)) => push(&mut out, "ownerReferences", owner_reference(b)?),
            (14, Field::Bytes(b)) => push(&mut out, "finalizers", text(b)?.into()),
            _ => {}
        }
    }
    Ok(Value::Object(out))
}

fn name_only(bytes: &[u8], number: u64) -> Result<Value, ProtobufError> {
    let mut out = Map::new();
    for (n, f) in fields(bytes)? {
        if let (true, Field::Bytes(b)) = (n == number, f) {
            out.insert("name".into(), text(b)?.into());
        }
    }
    Ok(Value::Object(out))
}

/// How a field of a message is decoded.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// A string, left out when empty.
    Text,
    /// A repeated string.
    Texts,
    /// A varint integer.
    Int,
    /// A nested message.
    Message(Schema),
    /// A repeated nested message.
    Messages(Schema),
}

/// A message's fields: number, JSON name and shape; others are skipped.
type Schema = &'static [(u64, &'static str, Shape)];

const POLICY_RULE: Schema = &[
    (1, "verbs", Shape::Texts),
    (2, "apiGroups", Shape::Texts),
    (3, "resources", Shape::Texts),
    (4, "resourceNames", Shape::Texts),
    (5, "nonResourceURLs", Shape::Texts),
];
const SUBJECT: Schema = &[
    (1, "kind", Shape::Text),
    (2, "apiGroup", Shape::Text),
    (3, "name", Shape::Text),
    (4, "namespace", Shape::Text),
];
const ROLE_REF: Schema = &[
    (1, "apiGroup", Shape::Text),
    (2, "kind", Shape::Text),
    (3, "name", Shape::Text),
];
const RESOURCE_ATTRIBUTES: Schema = &[
    (1, "namespace", Shape::Text),
    (2, "verb", Shape::Text),
    (3, "group", Shape::Text),
    (4, "version", Shape::Text),
    (5, "resource", Shape::Text),
    (6, "subresource", Shape::Text),
    (7, "name", Shape::Text),
];
const NON_RESOURCE_ATTRIBUTES: Schema = &[(1, "path", Shape::Text), (2, "verb", Shape::Text)];
const SELF_ACCESS_SPEC: Schema = &[
    (1, "resourceAttributes", Shape::Message(RESOURCE_ATTRIBUTES)),
    (
        2,
        "nonResourceAttributes",
        Shape::Message(NON_RESOURCE_ATTRIBUTES),
    ),
];
const ACCESS_SPEC: Schema = &[
    (1, "resourceAttributes", Shape::Message(RESOURCE_ATTRIBUTES)),
    (
        2,
        "nonResourceAttributes",
        Shape::Message(NON_RESOURCE_ATTRIBUTES),
    ),
    (3, "user", Shape::Text),
    (4, "groups", Shape::Texts),
    (6, "uid", Shape::Text),
];
const RULES_SPEC: Schema = &[(1, "namespace", Shape::Text)];
const TOKEN_SPEC: Schema = &[
    (1, "audiences", Shape::Texts),
    (4, "expirationSeconds", Shape::Int),
];

/// The fields besides `metadata` of the kinds decoded by schema.
fn schema_of(kind: &str) -> Option<Schema> {
    const ROLE: Schema = &[(2, "rules", Shape::Messages(POLICY_RULE))];
    const BINDING: Schema = &[
        (2, "subjects", Shape::Messages(SUBJECT)),
        (3, "roleRef", Shape::Message(ROLE_REF)),
    ];
    Some(match kind {
        "Role" | "ClusterRole" => ROLE,
        "RoleBinding" | "ClusterRoleBinding" => BINDING,
        "SelfSubjectAccessReview" => &[(2, "spec", Shape::Message(SELF_ACCESS_SPEC))],
        "SubjectAccessReview" => &[(2, "spec", Shape::Message(ACCESS_SPEC))],
        "SelfSubjectRulesReview" => &[(2, "spec", Shape::Message(RULES_SPEC))],
        "TokenRequest" => &[(2, "spec", Shape::Message(TOKEN_SPEC))],
        "SelfSubjectReview" => &[],
        _ => return None,
    })
}

/// Decodes the fields of `schema` from `bytes` into `out`.
fn decode_fields(
    bytes: &[u8],
    schema: Schema,
    out: &mut Map<String, Value>,
) -> Result<(), ProtobufError> {
    for (n, f) in fields(bytes)? {
        let Some((_, name, shape)) = schema.iter().find(|(m, _, _)| *m == n) else {
            continue;
        };
        match (*shape, f) {
            (Shape::Text, Field::Bytes(b)) => set_text(out, name, b)?,
            (Shape::Texts, Field::Bytes(b)) => push(out, name, text(b)?.into()),
            // Two's complement, as protobuf writes a negative int64.
            (Shape::Int, Field::Varint(v)) => drop(out.insert((*name).into(), (v as i64).into())),
            (Shape::Message(inner), Field::Bytes(b)) => {
                let mut nested = Map::new();
                decode_fields(b, inner, &mut nested)?;
                out.insert((*name).into(), Value::Object(nested));
            }
            (Shape::Messages(inner), Field::Bytes(b)) => {
                let mut nested = Map::new();
                decode_fields(b, inner, &mut nested)?;
                push(out, name, Value::Object(nested));
            }
            _ => return Err(ProtobufError::Malformed("a field of the wrong wire type")),
        }
    }
    Ok(())
}

/// Decodes a protobuf body into a JSON object.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, f) in fields(envelope)? {
        match (n, f) {
            (1, Field::Bytes(type_meta)) => {
                for (m, g) in fields(type_meta)? {
                    match (m, g) {
                        (1, Field::Bytes(b)) => api_version = text(b)?,
                        (2, Field::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let mut out = Map::new();
    out.insert("apiVersion".into(), api_version.clone().into());
    out.insert("kind".into(), kind.clone().into());
    if let Some(schema) = schema_of(&kind) {
        for (n, f) in fields(raw)? {
            if let (1, Field::Bytes(b)) = (n, f) {
                out.insert("metadata".into(), object_meta(b)?);
            }
        }
        decode_fields(raw, schema, &mut out)?;
        return Ok(Value::Object(out));
    }
    for (n, f) in fields(raw)? {
        match (kind.as_str(), n, f) {
            (_, 1, Field::Bytes(b)) => drop(out.insert("metadata".into(), object_meta(b)?)),
            ("ConfigMap", 2, Field::Bytes(b)) => insert_entry(&mut out, "data", b, false)?,
            ("ConfigMap", 3, Field::Bytes(b)) => insert_entry(&mut out, "binaryData", b, true)?,
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                drop(out.insert("immutable".into(), (v != 0).into()))
            }
            ("Secret", 2, Field::Bytes(b)) => insert_entry(&mut out, "data", b, true)?,
            ("Secret", 3, Field::Bytes(b)) => drop(out.insert("type".into(), text(b)?.into())),
            ("Secret", 4, Field::Bytes(b)) => insert_entry(&mut out, "stringData", b, false)?,
            ("Namespace", 2, Field::Bytes(spec)) => {
                let mut s = Map::new();
                for (m, g) in fields(spec)? {
                    if let (1, Field::Bytes(b)) = (m, g) {
                        push(&mut s, "finalizers", text(b)?.into());
                    }
                }
                out.insert("spec".into(), Value::Object(s));
            }
            ("ServiceAccount", 2, Field::Bytes(b)) => push(&mut out, "secrets", name_only(b, 3)?),
            ("ServiceAccount", 3, Field::Bytes(b)) => {
                push(&mut out, "imagePullSecrets", name_only(b, 1)?)
            }
            ("ServiceAccount", 4, Field::Varint(v)) => {
                drop(out.insert("automountServiceAccountToken".into(), (v != 0).into()))
            }
            ("ConfigMap" | "Secret" | "Namespace" | "ServiceAccount", _, _) => {}
            (other, _, _) => return Err(ProtobufError::Unsupported(other.into())),
        }
    }
    if !matches!(
        kind.as_str(),
        "ConfigMap" | "Secret" | "Namespace" | "ServiceAccount"
    ) {
        return Err(ProtobufError::Unsupported(kind));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(n: u64, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(n << 3 | 2, &mut out);
        varint(data.len() as u64, &mut out);
        out.extend_from_slice(data);
        out
    }

    fn map_entry(n: u64, k: &str, v: &[u8]) -> Vec<u8> {
        bytes_field(
            n,
            &[bytes_field(1, k.as_bytes()), bytes_field(2, v)].concat(),
        )
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [
            bytes_field(1, api_version.as_bytes()),
            bytes_field(2, kind.as_bytes()),
        ]
        .concat();
        [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, raw),
            bytes_field(4, b"application/vnd.kubernetes.protobuf"),
        ]
        .concat()
    }

    #[test]
    fn decodes_a_config_map() {
        let meta = [
            bytes_field(1, b"made"),
            bytes_field(2, b""),
            map_entry(11, "app", b"x"),
        ]
        .concat();
        let raw = [
            bytes_field(1, &meta),
            map_entry(2, "a", b"b"),
            map_entry(3, "bin", b"hi"),
        ]
        .concat();
        let obj = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made", "labels": {"app": "x"}}, "data": {"a": "b"}, "binaryData": {"bin": "aGk="}})
        );
    }

    #[test]
    fn decodes_a_secret_with_binary_data() {
        let raw = [
            bytes_field(1, &bytes_field(1, b"s")),
            map_entry(2, "k", b"v"),
            bytes_field(3, b"Opaque"),
        ]
        .concat();
        let obj = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(obj["data"]["k"], "dg==");
        assert_eq!(obj["type"], "Opaque");
    }

    #[test]
    fn decodes_a_role_binding_and_a_token_request() {
        let subject = [
            bytes_field(1, b"ServiceAccount"),
            bytes_field(3, b"op"),
            bytes_field(4, b"default"),
        ]
        .concat();
        let role_ref = [
            bytes_field(1, b"rbac.authorization.k8s.io"),
            bytes_field(2, b"Role"),
            bytes_field(3, b"r"),
        ]
        .concat();
        let raw = [
            bytes_field(1, &bytes_field(1, b"b")),
            bytes_field(2, &subject),
            bytes_field(3, &role_ref),
        ]
        .concat();
        let obj = decode(&envelope(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            &raw,
        ))
        .unwrap();
        assert_eq!(
            obj,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "b"},
                "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "default"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            })
        );
        let mut spec = bytes_field(1, b"api");
        varint(4 << 3, &mut spec);
        varint(600, &mut spec);
        let raw = [bytes_field(1, &[]), bytes_field(2, &spec)].concat();
        let obj = decode(&envelope("authentication.k8s.io/v1", "TokenRequest", &raw)).unwrap();
        assert_eq!(
            obj["spec"],
            json!({"audiences": ["api"], "expirationSeconds": 600})
        );
    }

    #[test]
    fn refuses_other_kinds_and_garbage() {
        assert!(matches!(
            decode(&envelope("apps/v1", "Deployment", &[])),
            Err(ProtobufError::Unsupported(_))
        ));
        assert_eq!(decode(b"{}"), Err(ProtobufError::NoMagic));
        assert!(decode(b"k8s\0\x0a\xff").is_err());
    }
}
