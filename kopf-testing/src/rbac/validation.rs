//! The API server's validation of Roles, ClusterRoles and their bindings
//! (`pkg/apis/rbac/validation`), and the defaults it gives subjects.

use serde_json::{Map, Value};

use crate::names;
use crate::resources::{RBAC_GROUP, ResourceDef};
use crate::validation::FieldError;

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

fn required(field: String, why: &str) -> FieldError {
    FieldError {
        field,
        reason: "FieldValueRequired",
        detail: if why.is_empty() {
            "Required value".into()
        } else {
            format!("Required value: {why}")
        },
    }
}

fn invalid(field: String, value: String, why: &str) -> FieldError {
    FieldError {
        field,
        reason: "FieldValueInvalid",
        detail: format!("Invalid value: {value}: {why}"),
    }
}

fn not_supported(field: String, value: &str, supported: &[&str]) -> FieldError {
    let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    FieldError {
        field,
        reason: "FieldValueNotSupported",
        detail: format!(
            "Unsupported value: {value:?}: supported values: {}",
            supported.join(", ")
        ),
    }
}

/// A list of strings as Go's `%#v` prints it.
fn go_strings(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// What is wrong with an RBAC object, one cause per problem, as the API
/// server reports it; nothing for other resources.
pub(crate) fn errors(def: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    if def.group != RBAC_GROUP {
        return Vec::new();
    }
    match def.plural.as_str() {
        "roles" | "clusterroles" => rules(obj, def.namespaced),
        "rolebindings" | "clusterrolebindings" => binding(obj, def.namespaced),
        _ => Vec::new(),
    }
}

fn rules(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let rules = obj.get("rules").and_then(Value::as_array);
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        let at = |field: &str| format!("rules[{i}].{field}");
        if strings(rule, "verbs").is_empty() {
            errors.push(required(
                at("verbs"),
                "verbs must contain at least one value",
            ));
        }
        let urls = strings(rule, "nonResourceURLs");
        let (groups, resources, names) = (
            strings(rule, "apiGroups"),
            strings(rule, "resources"),
            strings(rule, "resourceNames"),
        );
        if !urls.is_empty() {
            if namespaced {
                errors.push(invalid(
                    at("nonResourceURLs"),
                    go_strings(&urls),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !groups.is_empty() || !resources.is_empty() || !names.is_empty() {
                errors.push(invalid(
                    at("nonResourceURLs"),
                    go_strings(&urls),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if groups.is_empty() {
            errors.push(required(
                at("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if resources.is_empty() {
            errors.push(required(
                at("resources"),
                "resource rules must supply at least one resource",
            ));
        }
        if !names.is_empty() && resources.len() > 1 {
            errors.push(required(
                at("resourceNames"),
                "resource names cannot apply to multiple resources",
            ));
        }
    }
    errors
}

fn binding(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let role_ref = obj.get("roleRef").cloned().unwrap_or(Value::Null);
    let group = text(&role_ref, "apiGroup");
    if group != RBAC_GROUP {
        errors.push(not_supported(
            "roleRef.apiGroup".into(),
            group,
            &[RBAC_GROUP],
        ));
    }
    let kind = text(&role_ref, "kind");
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&kind) {
        errors.push(not_supported("roleRef.kind".into(), kind, kinds));
    }
    let name = text(&role_ref, "name");
    if name.is_empty() {
        errors.push(required("roleRef.name".into(), ""));
    }
    for why in names::path_segment_errors(name) {
        errors.push(invalid("roleRef.name".into(), format!("{name:?}"), &why));
    }
    let subjects = obj.get("subjects").and_then(Value::as_array);
    for (i, subject) in subjects.into_iter().flatten().enumerate() {
        errors.extend(subject_errors(
            subject,
            namespaced,
            &format!("subjects[{i}]"),
        ));
    }
    errors
}

fn subject_errors(subject: &Value, namespaced: bool, at: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let field = |f: &str| format!("{at}.{f}");
    let name = text(subject, "name");
    let group = text(subject, "apiGroup");
    if name.is_empty() {
        errors.push(required(field("name"), ""));
    }
    match text(subject, "kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                for why in names::subdomain_errors(name) {
                    errors.push(invalid(field("name"), format!("{name:?}"), &why));
                }
            }
            if !group.is_empty() {
                errors.push(not_supported(field("apiGroup"), group, &[""]));
            }
            if !namespaced && text(subject, "namespace").is_empty() {
                errors.push(required(field("namespace"), ""));
            }
        }
        kind @ ("User" | "Group") => {
            if name.is_empty() {
                let what = if kind == "User" { "user" } else { "group" };
                errors.push(invalid(
                    field("name"),
                    "\"\"".into(),
                    &format!("{what} name cannot be empty"),
                ));
            }
            // None is defaulted to the RBAC group (on writes that patch
            // a subject in, too late for the defaults).
            if !group.is_empty() && group != RBAC_GROUP {
                errors.push(not_supported(field("apiGroup"), group, &[RBAC_GROUP]));
            }
        }
        other => errors.push(not_supported(
            field("kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
    errors
}

/// Gives each User and Group subject the RBAC group, and each
/// ServiceAccount subject the core group, when they name none, as the
/// API server's `SetDefaults_Subject` does.
pub(crate) fn default_subjects(def: &ResourceDef, obj: &mut Value) {
    if def.group != RBAC_GROUP || !def.plural.ends_with("bindings") {
        return;
    }
    let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut) else {
        return;
    };
    for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
        default_subject(subject);
    }
}

fn default_subject(subject: &mut Map<String, Value>) {
    if subject
        .get("apiGroup")
        .and_then(Value::as_str)
        .is_some_and(|g| !g.is_empty())
    {
        return;
    }
    // A ServiceAccount's group is the core group, written as none.
    if matches!(
        subject.get("kind").and_then(Value::as_str),
        Some("User" | "Group")
    ) {
        subject.insert("apiGroup".into(), RBAC_GROUP.into());
    }
}

/// What an update may not change: a binding's `roleRef`.
pub(crate) fn update_errors(def: &ResourceDef, old: &Value, new: &Value) -> Vec<FieldError> {
    if def.group != RBAC_GROUP || !def.plural.ends_with("bindings") {
        return Vec::new();
    }
    let (was, is) = (old.get("roleRef"), new.get("roleRef"));
    if was == is {
        return Vec::new();
    }
    let role_ref = is.cloned().unwrap_or(Value::Null);
    let shown = format!(
        "rbac.RoleRef{{APIGroup:{:?}, Kind:{:?}, Name:{:?}}}",
        text(&role_ref, "apiGroup"),
        text(&role_ref, "kind"),
        text(&role_ref, "name")
    );
    vec![invalid("roleRef".into(), shown, "cannot change roleRef")]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn def(plural: &str) -> ResourceDef {
        crate::resources::builtins()
            .into_iter()
            .find(|d| d.plural == plural)
            .expect("served")
    }

    fn shown(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn rules_are_checked_as_the_api_server_checks_them() {
        let role = json!({"rules": [
            {"apiGroups": [""], "resources": ["pods"]},
            {"verbs": ["get"], "nonResourceURLs": ["/metrics"]},
            {"verbs": ["get"], "resources": ["a", "b"], "resourceNames": ["x"]},
        ]});
        assert_eq!(
            shown(&errors(&def("roles"), &role)),
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[1].nonResourceURLs: Invalid value: []string{\"/metrics\"}: namespaced rules cannot apply to non-resource URLs",
                "rules[2].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[2].resourceNames: Required value: resource names cannot apply to multiple resources",
            ]
        );
        let cluster_role = json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]});
        assert!(errors(&def("clusterroles"), &cluster_role).is_empty());
    }

    #[test]
    fn bindings_name_a_role_and_valid_subjects() {
        let binding = json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "op"}, {"kind": "Robot", "name": "x"}],
        });
        assert_eq!(
            shown(&errors(&def("clusterrolebindings"), &binding)),
            [
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].namespace: Required value",
                "subjects[1].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
            ]
        );
        let mut defaulted = json!({"subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "op"}]});
        default_subjects(&def("rolebindings"), &mut defaulted);
        assert_eq!(defaulted["subjects"][0]["apiGroup"], RBAC_GROUP);
        assert_eq!(defaulted["subjects"][1].get("apiGroup"), None);
    }
}
