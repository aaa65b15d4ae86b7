//! Hierarchies of objects: owner references, labels, names and namespaces
//! of the children an operator creates (Kopf's `kopf.adopt` and its parts).
//!
//! Each function changes the objects in place, before they are sent to
//! the API: one object, or several at once (a `Vec`, an array, or a JSON
//! array). Objects are anything that serializes as a Kubernetes object and
//! deserializes back: `serde_json::Value`, [`kube::api::DynamicObject`],
//! k8s-openapi types (`ConfigMap`, `Pod`, …) or a
//! `#[derive(CustomResource)]` type. The owner is usually the handler's
//! own object, its `body` parameter, in any of these types.
//!
//! ```
//! use kopf_runtime as kopf;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//!
//! #[kopf::on_create("kopf.dev", "v1", "kopfexamples")]
//! async fn create_child(body: &serde_json::Value, client: kube::Client) -> kopf::Result<String> {
//!     let mut child = ConfigMap::default();
//!     // Owned by the example (deleted with it), named `<its name>-<random>`,
//!     // in its namespace, with its labels.
//!     kopf::adopt(&mut child, body)?;
//!     let namespace = child.metadata.namespace.clone().unwrap_or_default();
//!     let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
//!     let created = api.create(&PostParams::default(), &child).await?;
//!     Ok(created.metadata.name.unwrap_or_default())
//! }
//! # fn main() {}
//! ```
//!
//! As in Kopf, nothing that is set already is changed, unless `forced`
//! (see [`Adoption`]); owner references are appended, never replaced.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// Why objects could not be given an owner, labels, a name or a namespace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HierarchyError {
    /// The owner lacks a field that its reference or its adoption needs.
    #[error(
        "the owner has no `{field}`; pass the handler's `body` (or an object read from the API), which has it"
    )]
    Owner {
        /// The missing field, e.g. `metadata.uid`.
        field: &'static str,
    },
    /// The objects do not serialize as JSON objects (or lists of them), or
    /// do not deserialize back once changed.
    #[error(
        "`{type_name}` cannot be adopted: {message}; pass Kubernetes objects (or a list of them)"
    )]
    NotAnObject {
        /// The Rust type of the objects.
        type_name: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// How [`adopt_with`], [`label_with`], [`harmonize_naming_with`] and
/// [`adjust_namespace_with`] treat what the objects have already (Kopf's
/// `forced`, `strict` and `nested` options).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Adoption {
    /// Overwrite labels, names and namespaces the objects have.
    pub forced: bool,
    /// Name the objects exactly as the owner (or the given name), rather
    /// than by `generateName` with a random suffix from the API server.
    pub strict: bool,
    /// Dot-separated paths of nested objects to label too, if the objects
    /// have them, e.g. `spec.template` of a Deployment or a Job.
    pub nested: Vec<String>,
}

impl Adoption {
    /// Overwrites what the objects have (Kopf's `forced=True`).
    #[must_use]
    pub fn forced(mut self) -> Self {
        self.forced = true;
        self
    }

    /// Names the objects exactly (Kopf's `strict=True`).
    #[must_use]
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    /// Labels the nested object at `path` too (Kopf's `nested=`).
    #[must_use]
    pub fn nested(mut self, path: impl Into<String>) -> Self {
        self.nested.push(path.into());
        self
    }
}

/// The owner reference's flags (Kopf's `controller` and
/// `block_owner_deletion`; both `true` by default, as in Kopf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ownership {
    /// The owner is the managing controller of the objects.
    pub controller: bool,
    /// The owner's deletion waits for the objects' (with foreground deletion).
    pub block_owner_deletion: bool,
}

impl Default for Ownership {
    fn default() -> Self {
        Self {
            controller: true,
            block_owner_deletion: true,
        }
    }
}

impl Ownership {
    /// Flags of an owner that is not the controller, nor blocks deletion.
    pub fn neither() -> Self {
        Self {
            controller: false,
            block_owner_deletion: false,
        }
    }

    /// With `controller` set as given.
    #[must_use]
    pub fn controller(mut self, controller: bool) -> Self {
        self.controller = controller;
        self
    }

    /// With `block_owner_deletion` set as given.
    #[must_use]
    pub fn block_owner_deletion(mut self, block: bool) -> Self {
        self.block_owner_deletion = block;
        self
    }
}

/// Makes `objs` the children of `owner`: owned by it (as its controller,
/// blocking its deletion), named after it (`generateName: <owner>-`), in
/// its namespace, with its labels (Kopf's `kopf.adopt`).
///
/// # Errors
/// [`HierarchyError`] if the owner lacks `apiVersion`, `kind`,
/// `metadata.name` or `metadata.uid`, or the objects are not objects.
pub fn adopt<C>(objs: &mut C, owner: &impl Serialize) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    adopt_with(objs, owner, &Adoption::default())
}

/// [`adopt`], overwriting names, namespaces and labels if `forced`, naming
/// the objects exactly as the owner if `strict`, and labelling `nested`
/// objects too.
///
/// # Errors
/// As [`adopt`].
pub fn adopt_with<C>(
    objs: &mut C,
    owner: &impl Serialize,
    how: &Adoption,
) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    let owner = Owner::of(owner)?;
    let reference = owner.reference(Ownership::default())?;
    let name = owner.name.clone().ok_or(HierarchyError::Owner {
        field: "metadata.name",
    })?;
    each(objs, |obj| {
        append_reference(obj, &reference);
        name_object(obj, &name, how);
        place(obj, owner.namespace.as_deref(), how.forced);
        label_object(obj, &owner.labels, how);
    })
}

/// Appends a reference to `owner` to the objects' `ownerReferences`, as
/// their controller and blocking the owner's deletion, unless one to the
/// same owner (by UID) is there (Kopf's `kopf.append_owner_reference`).
///
/// # Errors
/// [`HierarchyError`] if the owner lacks `apiVersion`, `kind`,
/// `metadata.name` or `metadata.uid`, or the objects are not objects.
pub fn append_owner_reference<C>(objs: &mut C, owner: &impl Serialize) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    append_owner_reference_with(objs, owner, Ownership::default())
}

/// [`append_owner_reference`] with the reference's flags as given.
///
/// # Errors
/// As [`append_owner_reference`].
pub fn append_owner_reference_with<C>(
    objs: &mut C,
    owner: &impl Serialize,
    ownership: Ownership,
) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    let reference = Owner::of(owner)?.reference(ownership)?;
    each(objs, |obj| append_reference(obj, &reference))
}

/// Removes the references to `owner` (by UID) from the objects'
/// `ownerReferences` (Kopf's `kopf.remove_owner_reference`).
///
/// # Errors
/// [`HierarchyError`] if the owner lacks `metadata.uid`, or the objects are
/// not objects.
pub fn remove_owner_reference<C>(objs: &mut C, owner: &impl Serialize) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    let uid = Owner::of(owner)?.uid.ok_or(HierarchyError::Owner {
        field: "metadata.uid",
    })?;
    each(objs, |obj| {
        if let Some(Value::Array(references)) = metadata(obj).get_mut("ownerReferences") {
            references.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
        }
    })
}

/// Labels the objects, keeping the labels they have (Kopf's `kopf.label`).
///
/// # Errors
/// [`HierarchyError::NotAnObject`] if the objects are not objects.
pub fn label<C, I, K, V>(objs: &mut C, labels: I) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    label_with(objs, labels, &Adoption::default())
}

/// [`label`], overwriting labels if `forced`, and labelling `nested`
/// objects too.
///
/// # Errors
/// As [`label`].
pub fn label_with<C, I, K, V>(objs: &mut C, labels: I, how: &Adoption) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    let labels: Map<String, Value> = labels
        .into_iter()
        .map(|(k, v)| (k.into(), Value::String(v.into())))
        .collect();
    each(objs, |obj| label_object(obj, &labels, how))
}

/// Names the objects that have neither a name nor a `generateName`:
/// `generateName: <name>-`, for the API server to add a random suffix
/// (Kopf's `kopf.harmonize_naming`).
///
/// # Errors
/// [`HierarchyError::NotAnObject`] if the objects are not objects.
pub fn harmonize_naming<C>(objs: &mut C, name: &str) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    harmonize_naming_with(objs, name, &Adoption::default())
}

/// [`harmonize_naming`], naming the objects `name` exactly if `strict`, and
/// renaming named ones too if `forced`.
///
/// # Errors
/// As [`harmonize_naming`].
pub fn harmonize_naming_with<C>(
    objs: &mut C,
    name: &str,
    how: &Adoption,
) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    each(objs, |obj| name_object(obj, name, how))
}

/// Puts the objects without a namespace in `namespace` (Kopf's
/// `kopf.adjust_namespace`); `None`, for a cluster-scoped owner, changes
/// nothing.
///
/// # Errors
/// [`HierarchyError::NotAnObject`] if the objects are not objects.
pub fn adjust_namespace<C>(objs: &mut C, namespace: Option<&str>) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    adjust_namespace_with(objs, namespace, &Adoption::default())
}

/// [`adjust_namespace`], moving objects that have a namespace too if
/// `forced` (with `None`: taking their namespace away).
///
/// # Errors
/// As [`adjust_namespace`].
pub fn adjust_namespace_with<C>(
    objs: &mut C,
    namespace: Option<&str>,
    how: &Adoption,
) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    each(objs, |obj| place(obj, namespace, how.forced))
}

/// What the helpers read of an owner.
struct Owner {
    api_version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    namespace: Option<String>,
    labels: Map<String, Value>,
}

impl Owner {
    fn of(owner: &impl Serialize) -> Result<Self, HierarchyError> {
        let body = serde_json::to_value(owner).map_err(|e| HierarchyError::NotAnObject {
            type_name: std::any::type_name_of_val(owner),
            message: e.to_string(),
        })?;
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let meta = body.get("metadata");
        Ok(Self {
            api_version: text(body.get("apiVersion")),
            kind: text(body.get("kind")),
            name: text(meta.and_then(|m| m.get("name"))),
            uid: text(meta.and_then(|m| m.get("uid"))),
            namespace: text(meta.and_then(|m| m.get("namespace"))),
            labels: meta
                .and_then(|m| m.get("labels"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        })
    }

    /// The owner reference to this owner, as Kopf builds it.
    fn reference(&self, ownership: Ownership) -> Result<Value, HierarchyError> {
        let required =
            |value: &Option<String>, field| value.clone().ok_or(HierarchyError::Owner { field });
        Ok(json!({
            "controller": ownership.controller,
            "blockOwnerDeletion": ownership.block_owner_deletion,
            "apiVersion": required(&self.api_version, "apiVersion")?,
            "kind": required(&self.kind, "kind")?,
            "name": required(&self.name, "metadata.name")?,
            "uid": required(&self.uid, "metadata.uid")?,
        }))
    }
}

/// Applies `f` to each object of `objs` (one, or each of a list), through
/// their JSON form.
fn each<C>(objs: &mut C, mut f: impl FnMut(&mut Map<String, Value>)) -> Result<(), HierarchyError>
where
    C: Serialize + DeserializeOwned,
{
    let not_an_object = |message: String| HierarchyError::NotAnObject {
        type_name: std::any::type_name::<C>(),
        message,
    };
    let mut value = serde_json::to_value(&*objs).map_err(|e| not_an_object(e.to_string()))?;
    match &mut value {
        Value::Object(obj) => f(obj),
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::Object(obj) => f(obj),
                    other => {
                        return Err(not_an_object(format!("an item is not an object: {other}")));
                    }
                }
            }
        }
        other => return Err(not_an_object(format!("not an object: {other}"))),
    }
    *objs = serde_json::from_value(value).map_err(|e| not_an_object(e.to_string()))?;
    Ok(())
}

/// The object's `metadata`, made an object if it is not one.
fn metadata(obj: &mut Map<String, Value>) -> &mut Map<String, Value> {
    object_at(obj, "metadata")
}

/// The object under `key`, made one if it is not.
fn object_at<'a>(obj: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = obj.entry(key).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot.as_object_mut()
        .expect("invariant: the slot was made an object above")
}

fn append_reference(obj: &mut Map<String, Value>, reference: &Value) {
    let meta = metadata(obj);
    let references = meta.entry("ownerReferences").or_insert_with(|| json!([]));
    if !references.is_array() {
        *references = json!([]);
    }
    if let Value::Array(references) = references {
        let uid = reference.get("uid");
        if !references.iter().any(|r| r.get("uid") == uid) {
            references.push(reference.clone());
        }
    }
}

fn name_object(obj: &mut Map<String, Value>, name: &str, how: &Adoption) {
    let meta = metadata(obj);
    let named = meta.contains_key("name") || meta.contains_key("generateName");
    if named && !how.forced {
        return;
    }
    if how.strict {
        meta.insert("name".into(), json!(name));
        meta.remove("generateName");
    } else {
        meta.insert("generateName".into(), json!(format!("{name}-")));
        meta.remove("name");
    }
}

fn place(obj: &mut Map<String, Value>, namespace: Option<&str>, forced: bool) {
    let meta = metadata(obj);
    let placed = meta.get("namespace").is_some_and(|ns| !ns.is_null());
    if placed && !forced {
        return;
    }
    match namespace {
        Some(namespace) => {
            meta.insert("namespace".into(), json!(namespace));
        }
        None if forced => {
            meta.remove("namespace");
        }
        None => {}
    }
}

fn label_object(obj: &mut Map<String, Value>, labels: &Map<String, Value>, how: &Adoption) {
    set_labels(obj, labels, how.forced);
    for path in &how.nested {
        let mut nested: Option<&mut Value> = None;
        for part in path.split('.') {
            nested = match nested {
                None => obj.get_mut(part),
                Some(value) => value.get_mut(part),
            };
            if nested.is_none() {
                break;
            }
        }
        if let Some(Value::Object(nested)) = nested {
            set_labels(nested, labels, how.forced);
        }
    }
}

fn set_labels(obj: &mut Map<String, Value>, labels: &Map<String, Value>, forced: bool) {
    if labels.is_empty() {
        return;
    }
    let existing = object_at(metadata(obj), "labels");
    for (key, value) in labels {
        if forced || !existing.contains_key(key) {
            existing.insert(key.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn owner() -> Value {
        json!({
            "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "kex", "namespace": "ns", "uid": "u-1", "labels": {"app": "a"}},
        })
    }

    #[test]
    fn adoption_owns_names_places_and_labels_a_typed_object() {
        let mut child = ConfigMap::default();
        adopt(&mut child, &owner()).expect("adopted");
        let meta = &child.metadata;
        assert_eq!(meta.generate_name.as_deref(), Some("kex-"));
        assert_eq!(meta.name, None);
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        assert_eq!(meta.labels.as_ref().map(|l| l["app"].as_str()), Some("a"));
        let references = meta.owner_references.clone().unwrap_or_default();
        assert_eq!(references.len(), 1);
        let reference = &references[0];
        assert_eq!(
            (
                reference.api_version.as_str(),
                reference.kind.as_str(),
                reference.name.as_str(),
                reference.uid.as_str()
            ),
            ("kopf.dev/v1", "KopfExample", "kex", "u-1")
        );
        assert_eq!(reference.controller, Some(true));
        assert_eq!(reference.block_owner_deletion, Some(true));

        adopt(&mut child, &owner()).expect("adopted again");
        assert_eq!(
            child.metadata.owner_references.map(|r| r.len()),
            Some(1),
            "one reference per owner"
        );
    }

    #[test]
    fn what_is_set_stays_unless_forced() {
        let child =
            json!({"metadata": {"name": "mine", "namespace": "other", "labels": {"app": "b"}}});
        let mut kept = child.clone();
        adopt(&mut kept, &owner()).expect("adopted");
        assert_eq!(kept["metadata"]["name"], "mine");
        assert_eq!(kept["metadata"]["namespace"], "other");
        assert_eq!(kept["metadata"]["labels"]["app"], "b");

        let mut forced = child;
        adopt_with(
            &mut forced,
            &owner(),
            &Adoption::default().forced().strict(),
        )
        .expect("adopted");
        assert_eq!(forced["metadata"]["name"], "kex");
        assert!(forced["metadata"].get("generateName").is_none());
        assert_eq!(forced["metadata"]["namespace"], "ns");
        assert_eq!(forced["metadata"]["labels"]["app"], "a");
    }

    #[test]
    fn lists_are_handled_item_by_item_and_nested_objects_labelled() {
        let mut children = vec![
            json!({"kind": "Job"}),
            json!({"kind": "Deployment", "spec": {"template": {}}}),
        ];
        label_with(
            &mut children,
            [("tier", "web")],
            &Adoption::default().nested("spec.template"),
        )
        .expect("labelled");
        assert_eq!(children[0]["metadata"]["labels"]["tier"], "web");
        assert!(
            children[0].get("spec").is_none(),
            "absent nested objects are skipped"
        );
        assert_eq!(
            children[1]["spec"]["template"]["metadata"]["labels"]["tier"],
            "web"
        );
    }

    #[test]
    fn references_are_appended_with_flags_and_removed_by_uid() {
        let mut child = json!({"metadata": {"ownerReferences": [{"uid": "other"}]}});
        append_owner_reference_with(&mut child, &owner(), Ownership::neither()).expect("appended");
        let references = &child["metadata"]["ownerReferences"];
        assert_eq!(references.as_array().map(Vec::len), Some(2));
        assert_eq!(references[1]["controller"], false);
        assert_eq!(references[1]["blockOwnerDeletion"], false);
        remove_owner_reference(&mut child, &owner()).expect("removed");
        assert_eq!(
            child["metadata"]["ownerReferences"],
            json!([{"uid": "other"}])
        );
    }

    #[test]
    fn owners_and_objects_that_cannot_be_used_say_why() {
        let mut child = json!({});
        let error = adopt(&mut child, &json!({"metadata": {"name": "x"}})).expect_err("no uid");
        assert!(error.to_string().contains("apiVersion"), "{error}");
        let error = adopt(&mut 42_u32, &owner()).expect_err("not an object");
        assert!(error.to_string().contains("u32"), "{error}");
        let error = harmonize_naming(&mut vec![json!("x")], "n").expect_err("not objects");
        assert!(error.to_string().contains("item"), "{error}");
    }

    #[test]
    fn naming_and_placing_alone() {
        let mut child = json!({});
        harmonize_naming(&mut child, "parent").expect("named");
        assert_eq!(child["metadata"]["generateName"], "parent-");
        adjust_namespace(&mut child, Some("ns")).expect("placed");
        adjust_namespace(&mut child, Some("elsewhere")).expect("kept");
        assert_eq!(child["metadata"]["namespace"], "ns");
        adjust_namespace(&mut child, None).expect("nothing to do");
        assert_eq!(child["metadata"]["namespace"], "ns");
    }
}
