//! Object names as the API server makes and checks them on create: a name
//! generated from `generateName` (the prefix cut to
//! [`MAX_GENERATED_NAME_PREFIX`] characters, then five random ones), and
//! each resource's naming rule (an RFC 1123 subdomain for most, an RFC 1123
//! label for namespaces, a DNS-1035 label for services), applied to the
//! name and to the `generateName` prefix, with the API server's messages.

use crate::resources::ResourceDef;
use crate::validation::FieldError;

/// The longest `generateName` prefix kept: a generated name is at most 63
/// characters, five of them random (`maxGeneratedNameLength = 63 - 5`).
pub(crate) const MAX_GENERATED_NAME_PREFIX: usize = 58;

/// The longest RFC 1123 or DNS-1035 label.
const MAX_LABEL: usize = 63;

/// The longest RFC 1123 subdomain.
const MAX_SUBDOMAIN: usize = 253;

/// What the API server says of a name that is not an RFC 1123 label.
pub(crate) const DNS1123_LABEL_RULE: &str = "a lowercase RFC 1123 label must consist of lower case \
     alphanumeric characters or '-', and must start and end with an alphanumeric character \
     (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// What the API server says of a name that is not an RFC 1123 subdomain.
pub(crate) const DNS1123_SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower \
     case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
     character (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// What the API server says of a name that is not a DNS-1035 label.
pub(crate) const DNS1035_LABEL_RULE: &str = "a DNS-1035 label must consist of lower case alphanumeric \
     characters or '-', start with an alphabetic character, and end with an alphanumeric \
     character (e.g. 'my-name',  or 'abc-123', regex used for validation is \
     '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// The naming rule of a resource's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Subdomain,
    Label,
    Dns1035,
    /// Any path segment (RBAC objects, whose names hold colons such as
    /// `system:discovery`): `ValidatePathSegmentName`.
    PathSegment,
}

fn rule_of(def: &ResourceDef) -> Rule {
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => Rule::Label,
        ("", "services") => Rule::Dns1035,
        ("rbac.authorization.k8s.io", _) => Rule::PathSegment,
        _ => Rule::Subdomain,
    }
}

/// A name from a `generateName` prefix, as the API server's name generator
/// makes it.
pub(crate) fn generate(prefix: &str) -> String {
    let mut end = prefix.len().min(MAX_GENERATED_NAME_PREFIX);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{}", &prefix[..end], crate::objects::random_suffix())
}

/// What is wrong with an object's `name` and `generateName`, one cause per
/// problem, as `ValidateObjectMeta` reports them.
pub(crate) fn errors(def: &ResourceDef, name: &str, generate_name: &str) -> Vec<FieldError> {
    let rule = rule_of(def);
    let mut errors = Vec::new();
    if !generate_name.is_empty() {
        for why in rule_errors(rule, &mask_trailing_dash(generate_name)) {
            errors.push(invalid("metadata.generateName", generate_name, why));
        }
    }
    for why in rule_errors(rule, name) {
        errors.push(invalid("metadata.name", name, why));
    }
    errors
}

fn invalid(field: &str, value: &str, why: String) -> FieldError {
    FieldError {
        field: field.into(),
        reason: "FieldValueInvalid",
        detail: format!("Invalid value: {value:?}: {why}"),
    }
}

/// A prefix is checked as a name, its trailing dash masked (as the API
/// server masks it: the last two characters become one `a`).
fn mask_trailing_dash(prefix: &str) -> String {
    match prefix.strip_suffix('-') {
        Some(rest) if prefix.len() > 1 => {
            let mut masked: String = rest.chars().take(rest.chars().count() - 1).collect();
            masked.push('a');
            masked
        }
        _ => prefix.to_string(),
    }
}

fn rule_errors(rule: Rule, name: &str) -> Vec<String> {
    let too_long = |max: usize| format!("must be no more than {max} characters");
    let mut errors = Vec::new();
    match rule {
        Rule::Subdomain => {
            if name.len() > MAX_SUBDOMAIN {
                errors.push(too_long(MAX_SUBDOMAIN));
            }
            if !is_subdomain(name) {
                errors.push(DNS1123_SUBDOMAIN_RULE.to_string());
            }
        }
        Rule::Label => {
            if name.len() > MAX_LABEL {
                errors.push(too_long(MAX_LABEL));
            }
            if !is_label(name) {
                errors.push(if is_subdomain(name) {
                    "must not contain dots".to_string()
                } else {
                    DNS1123_LABEL_RULE.to_string()
                });
            }
        }
        Rule::Dns1035 => {
            if name.len() > MAX_LABEL {
                errors.push(too_long(MAX_LABEL));
            }
            if !is_dns1035(name) {
                errors.push(DNS1035_LABEL_RULE.to_string());
            }
        }
        Rule::PathSegment => errors.extend(path_segment_errors(name)),
    }
    errors
}

/// What is wrong with a name used as a path segment
/// (`path.IsValidPathSegmentName`).
pub(crate) fn path_segment_errors(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name == "." || name == ".." {
        errors.push(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errors.push(format!("may not contain '{bad}'"));
        }
    }
    errors
}

/// What is wrong with a ServiceAccount's name (an RFC 1123 subdomain).
pub(crate) fn subdomain_errors(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > MAX_SUBDOMAIN {
        errors.push(format!("must be no more than {MAX_SUBDOMAIN} characters"));
    }
    if !is_subdomain(name) {
        errors.push(DNS1123_SUBDOMAIN_RULE.to_string());
    }
    errors
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, of any length.
fn is_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.chars().all(|c| alnum(c) || c == '-')
        && s.chars().next().is_some_and(alnum)
        && s.chars().last().is_some_and(alnum)
}

/// Labels joined by dots, of any length.
fn is_subdomain(s: &str) -> bool {
    s.split('.').all(is_label)
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, of any length.
fn is_dns1035(s: &str) -> bool {
    is_label(s) && s.chars().next().is_some_and(|c| c.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(plural: &str) -> ResourceDef {
        crate::resources::builtins()
            .into_iter()
            .find(|d| d.group.is_empty() && d.plural == plural)
            .expect("a built-in resource")
    }

    #[test]
    fn generated_names_cut_the_prefix() {
        let name = generate(&"x".repeat(100));
        assert_eq!(name.len(), 63);
        assert!(name.starts_with(&"x".repeat(58)));
        assert_eq!(generate("web-").len(), 9);
        assert_eq!(generate(&"é".repeat(40)).chars().count(), 29 + 5);
    }

    #[test]
    fn services_are_dns_1035_labels() {
        let svc = def("services");
        assert!(errors(&svc, "web-1", "").is_empty());
        let err = errors(&svc, "1web", "");
        assert_eq!(
            err[0].to_string(),
            format!("metadata.name: Invalid value: \"1web\": {DNS1035_LABEL_RULE}")
        );
        assert_eq!(errors(&svc, "a.b", "").len(), 1);
        assert!(errors(&def("configmaps"), "1web.example", "").is_empty());
    }

    #[test]
    fn names_and_prefixes_follow_the_rule() {
        let ns = def("namespaces");
        assert_eq!(
            errors(&ns, "a.b", "")[0].detail,
            "Invalid value: \"a.b\": must not contain dots"
        );
        assert!(errors(&ns, "team-abcde", "team-").is_empty());
        let cm = def("configmaps");
        let long = "x".repeat(254);
        let err = errors(&cm, "xxxxx", &long);
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].field, "metadata.generateName");
        assert!(
            err[0]
                .detail
                .ends_with("must be no more than 253 characters")
        );
        assert_eq!(mask_trailing_dash("ab-"), "aa");
        assert_eq!(mask_trailing_dash("-"), "-");
    }
}
