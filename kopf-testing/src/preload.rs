//! Preloading objects (and CRDs) from YAML before the server starts listening.

use serde_json::{Value, json};

use crate::error::EmulatorError;
use crate::objects;
use crate::store::Store;

/// Parses multi-document YAML into objects; `List` documents are expanded.
///
/// The file is the test author's own, so the parser's fixed limits against
/// hostile input (1,024 documents, 250,000 nodes) are lifted: a benchmark
/// preloads tens of thousands of objects. They grow with the file instead, so
/// aliases ("billion laughs") cannot expand a file much beyond its own size;
/// nesting depth stays limited.
pub(crate) fn parse(yaml: &str) -> Result<Vec<Value>, EmulatorError> {
    let len = yaml.len();
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_documents: usize::MAX,
            max_nodes: len.saturating_add(250_000),
            max_events: len.saturating_mul(2).saturating_add(1_000_000),
            max_total_scalar_bytes: len.saturating_mul(2).saturating_add(64 * 1024 * 1024),
        },
    };
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(yaml, options)
        .map_err(|e| EmulatorError::PreloadYaml(e.to_string()))?;
    let mut objects = Vec::new();
    for doc in docs {
        match doc {
            Value::Null => {}
            Value::Object(_)
                if doc
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List"))
                    && doc.get("items").is_some() =>
            {
                objects.extend(
                    doc.get("items")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
            }
            Value::Object(_) => objects.push(doc),
            other => {
                return Err(EmulatorError::PreloadYaml(format!(
                    "a document is not a mapping: {other}"
                )));
            }
        }
    }
    Ok(objects)
}

/// Creates objects in the store: namespaces and CRDs first, then the rest;
/// missing namespaces are created.
pub(crate) fn apply(store: &mut Store, objects: &[Value]) -> Result<(), EmulatorError> {
    let rank = |o: &Value| match o.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    };
    let mut ordered: Vec<&Value> = objects.iter().collect();
    ordered.sort_by_key(|o| rank(o));
    for obj in ordered {
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = objects::name(obj).to_string();
        let def = store
            .defs()
            .iter()
            .find(|d| d.api_version() == api_version && d.kind == kind)
            .cloned()
            .ok_or_else(|| EmulatorError::UnknownKind {
                api_version: api_version.clone(),
                kind: kind.clone(),
                name: name.clone(),
            })?;
        let ns = if def.namespaced {
            let ns = objects::namespace(obj);
            let ns = if ns.is_empty() { "default" } else { ns }.to_string();
            ensure_namespace(store, &ns)?;
            Some(ns)
        } else {
            None
        };
        let mut obj = obj.clone();
        crate::rbac::validation::default_subjects(&def, &mut obj);
        crate::validation::object(&def, &obj)
            .and_then(|()| store.create(&def, ns.as_deref(), obj, false))
            .map_err(|source| EmulatorError::Rejected {
                kind: kind.clone(),
                name: name.clone(),
                source: Box::new(source),
            })?;
    }
    Ok(())
}

fn ensure_namespace(store: &mut Store, ns: &str) -> Result<(), EmulatorError> {
    let Some(def) = store.find_def("", "v1", "namespaces") else {
        return Ok(());
    };
    if store.get(&def, None, ns).is_ok() {
        return Ok(());
    }
    store
        .create(&def, None, json!({"metadata": {"name": ns}}), false)
        .map(|_| ())
        .map_err(|source| EmulatorError::Rejected {
            kind: "Namespace".into(),
            name: ns.into(),
            source: Box::new(source),
        })
}

#[cfg(test)]
mod tests {

    #[test]
    fn thousands_of_documents_load() {
        let yaml: String = (0..5_000)
            .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n"))
            .collect();
        let objects = parse(&yaml).expect("parses");
        assert_eq!(objects.len(), 5_000);
        assert_eq!(objects[4_999]["metadata"]["name"], "cm-4999");
    }
    use super::*;

    const YAML: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm
  namespace: other
data:
  a: "1"
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
spec: {}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
"#;

    #[test]
    fn crds_first_and_namespaces_created() {
        let mut store = Store::new(100);
        apply(&mut store, &parse(YAML).unwrap()).unwrap();
        let def = store.find_def("example.com", "v1", "widgets").unwrap();
        assert!(store.get(&def, Some("default"), "w").is_ok());
        let cm = store.find_def("", "v1", "configmaps").unwrap();
        assert!(store.get(&cm, Some("other"), "cm").is_ok());
    }

    #[test]
    fn unknown_kinds_are_reported() {
        let mut store = Store::new(100);
        let err = apply(
            &mut store,
            &parse("apiVersion: x/v1\nkind: Nope\nmetadata: {name: n}\n").unwrap(),
        )
        .unwrap_err();
        assert!(matches!(err, EmulatorError::UnknownKind { .. }));
        assert!(parse("a: [").is_err());
    }

    #[test]
    fn invalid_objects_are_rejected_as_over_the_api() {
        let mut store = Store::new(100);
        let yaml =
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, labels: {\"bad key\": x}}\n";
        let err = apply(&mut store, &parse(yaml).unwrap()).unwrap_err();
        assert!(
            matches!(&err, EmulatorError::Rejected { source, .. } if source.code == 422),
            "{err}"
        );
    }
}
