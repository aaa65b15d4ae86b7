//! Request paths and query strings: what a request asks for.

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/G`.
    Group(String),
    /// `/api/v1` or `/apis/G/V`.
    Resources {
        /// API group, empty for core.
        group: String,
        /// API version.
        version: String,
    },
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3` and below.
    OpenApiV3(String),
    /// A resource, collection or subresource.
    Object(ObjectPath),
}

/// The parts of a resource path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ObjectPath {
    /// API group, empty for core.
    pub group: String,
    /// API version.
    pub version: String,
    /// Namespace from the path, if any.
    pub namespace: Option<String>,
    /// Resource plural.
    pub plural: String,
    /// Object name, if addressed.
    pub name: Option<String>,
    /// Subresource (`status`, ...), if addressed.
    pub subresource: Option<String>,
}

/// Parses a request path (without the query).
pub(crate) fn parse_path(path: &str) -> Option<Route> {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    match segs.as_slice() {
        ["version"] => Some(Route::Version),
        ["healthz" | "readyz" | "livez", ..] => Some(Route::Health),
        ["api"] => Some(Route::CoreVersions),
        ["apis"] => Some(Route::Groups),
        ["apis", g] => Some(Route::Group((*g).into())),
        ["api", v] => Some(Route::Resources {
            group: String::new(),
            version: (*v).into(),
        }),
        ["apis", g, v] => Some(Route::Resources {
            group: (*g).into(),
            version: (*v).into(),
        }),
        ["openapi", "v2"] | ["swagger.json"] => Some(Route::OpenApiV2),
        ["openapi", "v3", rest @ ..] => Some(Route::OpenApiV3(rest.join("/"))),
        ["api", v, rest @ ..] => object_path("", v, rest).map(Route::Object),
        ["apis", g, v, rest @ ..] => object_path(g, v, rest).map(Route::Object),
        _ => None,
    }
}

fn object_path(group: &str, version: &str, rest: &[&str]) -> Option<ObjectPath> {
    let mut path = ObjectPath {
        group: group.into(),
        version: version.into(),
        ..Default::default()
    };
    // namespaces/NS/PLURAL[/NAME[/SUB]] unless it is namespaces/NAME/{status,finalize}
    let rest = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !(tail.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            path.namespace = Some((*ns).into());
            let mut v = vec![*plural];
            v.extend_from_slice(tail);
            v
        }
        other => other.to_vec(),
    };
    match rest.as_slice() {
        [plural] => path.plural = (*plural).into(),
        [plural, name] => {
            path.plural = (*plural).into();
            path.name = Some((*name).into());
        }
        [plural, name, sub] => {
            path.plural = (*plural).into();
            path.name = Some((*name).into());
            path.subresource = Some((*sub).into());
        }
        _ => return None,
    }
    Some(path)
}

/// Decodes `%XX` escapes and `+` (in queries) leniently.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(h) = hex {
                out.push(h);
                i += 3;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query parameters the emulator understands.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Query {
    /// `watch=true|1`.
    pub watch: bool,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u64>,
    /// `sendInitialEvents`.
    pub send_initial_events: bool,
    /// `labelSelector`.
    pub label_selector: String,
    /// `fieldSelector`.
    pub field_selector: String,
    /// `limit`.
    pub limit: Option<usize>,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// Every `dryRun` value sent (only `All` is valid).
    pub dry_run_values: Vec<String>,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// Numeric parameters whose values are not numbers: (name, value).
    pub malformed: Vec<(&'static str, String)>,
}

fn truthy(v: &str) -> bool {
    matches!(v, "true" | "1" | "True" | "TRUE")
}

/// Parses a query string (without `?`); unknown parameters are ignored.
pub(crate) fn parse_query(query: &str) -> Query {
    let mut q = Query::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(&v.replace('+', " "));
        match k {
            "watch" => q.watch = truthy(&v),
            "resourceVersion" => q.resource_version = Some(v).filter(|v| !v.is_empty()),
            "resourceVersionMatch" => q.resource_version_match = Some(v).filter(|v| !v.is_empty()),
            "allowWatchBookmarks" => q.bookmarks = truthy(&v),
            // As the API server: 0 means unset (the default timeout).
            "timeoutSeconds" => match v.parse::<u64>() {
                Ok(n) => q.timeout_seconds = Some(n).filter(|n| *n > 0),
                Err(_) => q.malformed.push(("timeoutSeconds", v)),
            },
            "sendInitialEvents" => q.send_initial_events = truthy(&v),
            "labelSelector" => q.label_selector = v,
            "fieldSelector" => q.field_selector = v,
            "limit" => match v.parse::<i64>() {
                Ok(n) => q.limit = usize::try_from(n).ok().filter(|n| *n > 0),
                Err(_) => q.malformed.push(("limit", v)),
            },
            "continue" => q.continue_token = Some(v).filter(|v| !v.is_empty()),
            "dryRun" => {
                q.dry_run = q.dry_run || v == "All";
                if !v.is_empty() {
                    q.dry_run_values.push(v);
                }
            }
            "fieldManager" => q.field_manager = Some(v).filter(|v| !v.is_empty()),
            _ => {}
        }
    }
    q
}

/// Classifies a request into a Kubernetes verb (`get`, `list`, `watch`, ...).
pub(crate) fn classify(method: &str, route: Option<&Route>, query: &Query) -> &'static str {
    let object = match route {
        Some(Route::Object(o)) => o,
        _ => return if method == "GET" { "get" } else { "unknown" },
    };
    match (method, object.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if query.watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(path: &str) -> ObjectPath {
        match parse_path(path) {
            Some(Route::Object(o)) => o,
            other => panic!("not an object path: {other:?}"),
        }
    }

    #[test]
    fn discovery_paths() {
        assert_eq!(parse_path("/version"), Some(Route::Version));
        assert_eq!(parse_path("/api"), Some(Route::CoreVersions));
        assert_eq!(
            parse_path("/api/v1"),
            Some(Route::Resources {
                group: String::new(),
                version: "v1".into()
            })
        );
        assert_eq!(
            parse_path("/apis/example.com"),
            Some(Route::Group("example.com".into()))
        );
        assert_eq!(
            parse_path("/openapi/v3/apis/x/v1"),
            Some(Route::OpenApiV3("apis/x/v1".into()))
        );
        assert_eq!(parse_path("/nope"), None);
    }

    #[test]
    fn namespaced_and_cluster_paths() {
        let o = obj("/api/v1/namespaces/ns1/configmaps/cm1");
        assert_eq!(
            (o.namespace.as_deref(), o.plural.as_str(), o.name.as_deref()),
            (Some("ns1"), "configmaps", Some("cm1"))
        );
        let o = obj("/apis/example.com/v1/namespaces/ns1/widgets/w/status");
        assert_eq!(o.subresource.as_deref(), Some("status"));
        assert_eq!(o.group, "example.com");
        let o = obj("/api/v1/namespaces/ns1");
        assert_eq!(
            (o.namespace, o.plural.as_str(), o.name.as_deref()),
            (None, "namespaces", Some("ns1"))
        );
        let o = obj("/api/v1/namespaces/ns1/status");
        assert_eq!(
            (
                o.plural.as_str(),
                o.name.as_deref(),
                o.subresource.as_deref()
            ),
            ("namespaces", Some("ns1"), Some("status"))
        );
        let o = obj("/api/v1/namespaces");
        assert_eq!((o.plural.as_str(), o.name), ("namespaces", None));
        let o = obj("/api/v1/pods");
        assert_eq!((o.plural.as_str(), o.namespace), ("pods", None));
        assert_eq!(parse_path("/api/v1/a/b/c/d"), None);
    }

    #[test]
    fn query_parsing() {
        let q = parse_query(
            "watch=1&resourceVersion=12&labelSelector=a%3Db%2Cc+in+%28x%29&limit=0&timeoutSeconds=5",
        );
        assert!(q.watch);
        assert_eq!(q.resource_version.as_deref(), Some("12"));
        assert_eq!(q.label_selector, "a=b,c in (x)");
        assert_eq!(q.limit, None);
        assert_eq!(q.timeout_seconds, Some(5));
        assert!(q.malformed.is_empty());
    }

    #[test]
    fn malformed_numbers_and_dry_runs_are_kept_for_validation() {
        let q = parse_query("limit=abc&timeoutSeconds=-1&dryRun=Bogus&fieldManager=me");
        assert_eq!(
            q.malformed,
            [
                ("limit", "abc".to_string()),
                ("timeoutSeconds", "-1".to_string())
            ]
        );
        assert!(!q.dry_run);
        assert_eq!(q.dry_run_values, ["Bogus"]);
        assert_eq!(q.field_manager.as_deref(), Some("me"));
        let q = parse_query("timeoutSeconds=0&dryRun=All&limit=-3");
        assert_eq!((q.timeout_seconds, q.dry_run, q.limit), (None, true, None));
    }

    #[test]
    fn verbs() {
        let q = Query::default();
        let w = Query {
            watch: true,
            ..Query::default()
        };
        let coll = parse_path("/api/v1/namespaces/a/pods");
        let one = parse_path("/api/v1/namespaces/a/pods/p");
        assert_eq!(classify("GET", coll.as_ref(), &q), "list");
        assert_eq!(classify("GET", coll.as_ref(), &w), "watch");
        assert_eq!(classify("GET", one.as_ref(), &q), "get");
        assert_eq!(classify("DELETE", coll.as_ref(), &q), "deletecollection");
        assert_eq!(classify("PATCH", one.as_ref(), &q), "patch");
        assert_eq!(classify("GET", parse_path("/api").as_ref(), &q), "get");
    }

    #[test]
    fn percent_decoding_is_lenient() {
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
