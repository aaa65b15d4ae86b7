//! HTTP request handling: routing a request to discovery, the store or a
//! watch, with faults, latency and recording around it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use serde_json::{Value, json};

use crate::admin;
use crate::admission;
use crate::discovery;
use crate::failures::ApiError;
use crate::limits;
use crate::options;
use crate::patching::{self, PatchKind};
use crate::rbac;
use crate::recording::RecordedRequest;

use crate::resources::ResourceDef;
use crate::responses::{
    bytes_response, error_response, json_response, list_response, object_response,
};
use crate::routing::{self, ObjectPath, Query, Route};
use crate::selectors::{FieldSelector, LabelSelector, Selectors};
use crate::server::ConnectionCloser;
use crate::shared::Shared;
use crate::store::{Deletion, Target};
use crate::validation;
use crate::watching::{self, Filter, WatchOptions};

/// The largest request body accepted (as the API server's 3 MiB limit).
pub(crate) use crate::limits::BODY_LIMIT;

/// Serves one request; never fails (errors become `Status` responses).
pub(crate) async fn handle<B>(shared: Arc<Shared>, req: Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let deadline = tokio::time::Instant::now() + shared.admission.request_timeout;
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    if path.starts_with(admin::PREFIX) {
        return match read_body(req).await {
            Ok((_, body)) => admin::serve(&shared, &method, &path, &body),
            Err(err) => error_response(&err),
        };
    }
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let raw_query = req.uri().query().unwrap_or("").to_string();
    let route = routing::parse_path(&path);
    let query = routing::parse_query(&raw_query);
    let verb = routing::classify(method.as_str(), route.as_ref(), &query);
    let access = rbac::access(&shared, &method, &path, &query, req.headers());
    let user = access.as_ref().ok().cloned().flatten();

    let latency = shared.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    shared.faults.held(verb, &path).await;
    // Admission webhooks' warnings, sent as `Warning` headers whatever the outcome.
    let mut warnings = Vec::new();
    let mut response = if let Err(err) = &access {
        error_response(err)
    } else if shared.faults.inspects_bodies() {
        // A fault rule looks into bodies: read this one first, then serve
        // the request from what was read.
        let (parts, body) = req.into_parts();
        match collect_body(&parts.headers, body).await {
            Err(err) => error_response(&err),
            Ok(bytes) => match shared.faults.take(verb, &path, Some(&bytes)) {
                Some(err) => error_response(&err),
                None => {
                    let req = Request::from_parts(parts, Full::new(bytes));
                    match admission::deadline::scope(
                        deadline,
                        rbac::serve_as(
                            user.clone(),
                            serve(&shared, &method, route, &query, req, &mut warnings),
                        ),
                    )
                    .await
                    {
                        Ok(resp) => resp,
                        Err(err) => error_response(&err),
                    }
                }
            },
        }
    } else {
        match shared.faults.take(verb, &path, None) {
            Some(err) => error_response(&err),
            None => match admission::deadline::scope(
                deadline,
                rbac::serve_as(
                    user.clone(),
                    serve(&shared, &method, route, &query, req, &mut warnings),
                ),
            )
            .await
            {
                Ok(resp) => resp,
                Err(err) => error_response(&err),
            },
        }
    };
    for warning in admission::warning_headers(&warnings) {
        if let Ok(value) = HeaderValue::from_bytes(warning.as_bytes()) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    shared.recorder.count(&agent, verb);
    shared.recorder.record(RecordedRequest {
        method: method.to_string(),
        path,
        query: raw_query,
        verb: verb.to_string(),
        status: response.status().as_u16(),
    });
    response
}

pub(crate) async fn read_body<B>(req: Request<B>) -> Result<(Option<String>, Bytes), ApiError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (parts, body) = req.into_parts();
    Ok((content_type, collect_body(&parts.headers, body).await?))
}

/// Reads a whole request body, within [`BODY_LIMIT`] and
/// [`limits::BODY_READ_TIMEOUT`].
async fn collect_body<B>(headers: &http::HeaderMap, body: B) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > BODY_LIMIT
    {
        return Err(ApiError::too_large(BODY_LIMIT));
    }
    let collect = Limited::new(body, BODY_LIMIT).collect();
    let collected = tokio::time::timeout(limits::BODY_READ_TIMEOUT, collect)
        .await
        .map_err(|_| limits::body_timeout())?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::too_large(BODY_LIMIT))
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "could not read the request body: {e}"
        ))),
    }
}

/// Parses a create/update body (JSON, or YAML when so declared).
pub(crate) fn parse_object(content_type: Option<&str>, body: &[u8]) -> Result<Value, ApiError> {
    let media = content_type
        .map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let value = match media.as_str() {
        "" | "application/json" | "*/*" | "text/json" => decode_json(body, "the request body")?,
        "application/vnd.kubernetes.protobuf" => {
            let value = crate::protobuf::decode(body)
                .map_err(|e| ApiError::unsupported_media_type_because(&media, &e.to_string()))?;
            limits::check_object(&value, "the request body")?;
            value
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let text = std::str::from_utf8(body).map_err(|e| {
                ApiError::bad_request(format!("the request body is not UTF-8: {e}"))
            })?;
            let value = serde_saphyr::from_str_with_options::<Value>(
                text,
                limits::yaml_options(body.len()),
            )
            .map_err(|e| {
                ApiError::bad_request(format!("the request body is not valid YAML: {e}"))
            })?;
            // Aliases may have expanded it: the object must still fit.
            limits::check_object(&value, "the request body")?;
            value
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object (a Kubernetes object)",
        ));
    }
    Ok(value)
}

/// Decodes a JSON body within [`limits::MAX_DEPTH`].
fn decode_json(body: &[u8], what: &str) -> Result<Value, ApiError> {
    limits::decode_json(body).map_err(|e| match e {
        limits::DecodeError::TooDeep => limits::too_deep(what),
        limits::DecodeError::Syntax(e) => {
            ApiError::bad_request(format!("{what} is not valid JSON: {e}"))
        }
    })
}

async fn serve<B>(
    shared: &Arc<Shared>,
    method: &Method,
    route: Option<Route>,
    query: &Query,
    req: Request<B>,
    warnings: &mut Vec<String>,
) -> Result<Response<Body>, ApiError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let path = req.uri().path().to_string();
    let Some(route) = route else {
        return Err(ApiError::no_route(&path));
    };
    let route = match route {
        Route::Object(o) => o,
        other => {
            if method != Method::GET && method != Method::HEAD {
                return Err(ApiError::method_not_allowed());
            }
            let accept = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            return discover(shared, other, &path, accept);
        }
    };
    let def = shared
        .store()
        .find_def(&route.group, &route.version, &route.plural)
        .ok_or_else(|| ApiError::no_route(&path))?;
    let token_request = route.subresource.as_deref() == Some("token")
        && def.extra_subresources().iter().any(|s| s.name == "token");
    if def.is_review() || token_request {
        return rbac::reviews::serve(shared, method, &def, &route, req).await;
    }
    let target = match route.subresource.as_deref() {
        None => Target::Main,
        Some("status") if def.status_subresource => Target::Status,
        Some(_) => return Err(ApiError::no_route(&path)),
    };
    let ns = route.namespace.as_deref();
    let name = route.name.as_deref();
    let dry = query.dry_run;
    validation::query(query, options_kind(method))?;
    match (method.clone(), name) {
        (Method::GET, Some(name)) => {
            let obj = {
                let store = shared.store();
                if let Some(rv) = query.resource_version.as_deref() {
                    not_in_future(parse_rv(rv)?, store.current_rv())?;
                }
                store.get(&def, ns, name)?
            };
            Ok(object_response(200, &def, &obj))
        }
        (Method::GET, None) if query.watch => {
            let connection = req.extensions().get::<ConnectionCloser>().cloned();
            watch(shared, def, &route, query, connection)
        }
        (Method::GET, None) => list(shared, &def, ns, query).await,
        (Method::POST, None) => {
            let (ct, body) = read_body(req).await?;
            let mut obj = parse_object(ct.as_deref(), &body)?;
            validation::body_matches_request(&def, ns, &obj)?;
            rbac::validation::default_subjects(&def, &mut obj);
            if admission::applies(shared, &def) {
                let options = admission::options("CreateOptions", query, None);
                let created =
                    admission::create(shared, &def, ns, obj, options, dry, warnings).await?;
                return Ok(object_response(201, &def, &created));
            }
            validation::object(&def, &obj)?;
            rbac::escalation::check(shared, &def, ns, &obj)?;
            let created = shared.store().create(&def, ns, obj, dry)?;
            Ok(object_response(201, &def, &created))
        }
        (Method::PUT, Some(name)) => {
            let (ct, body) = read_body(req).await?;
            let mut obj = parse_object(ct.as_deref(), &body)?;
            validation::body_matches_request(&def, ns, &obj)?;
            validation::resource_version_precondition(&def, &mut obj)?;
            rbac::validation::default_subjects(&def, &mut obj);
            if admission::applies(shared, &def) {
                let write = Write {
                    def: &def,
                    ns,
                    name,
                    target,
                    dry,
                    query,
                };
                let updated = admitted_update(shared, &write, obj, warnings).await?;
                return Ok(object_response(200, &def, &updated));
            }
            validation::object(&def, &obj)?;
            rbac::escalation::check(shared, &def, ns, &obj)?;
            let updated = shared.store().update(&def, ns, name, obj, target, dry)?;
            Ok(object_response(200, &def, &updated))
        }
        (Method::PATCH, Some(name)) => {
            let (ct, body) = read_body(req).await?;
            let ct = ct.unwrap_or_default();
            let kind = PatchKind::from_content_type(&ct)
                .ok_or_else(|| ApiError::unsupported_media_type(&ct))?;
            let patch = patching::parse_body(kind, &body)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            validation::patch_body(kind, &patch, query.field_manager.as_deref(), name)?;
            let write = Write {
                def: &def,
                ns,
                name,
                target,
                dry,
                query,
            };
            let (obj, created) = patch_object(shared, &write, kind, &patch, warnings).await?;
            Ok(object_response(if created { 201 } else { 200 }, &def, &obj))
        }
        (Method::DELETE, Some(name)) => {
            let (_, body) = read_body(req).await?;
            let options = options::delete_options(&body)?;
            if admission::applies(shared, &def) {
                // Existence and preconditions first, as the API server.
                let old = shared.store().delete(&def, ns, name, &options, true)?;
                let review_options = admission::options("DeleteOptions", query, Some(&options));
                admission::admit_delete(shared, &def, &old, review_options, dry, warnings).await?;
            }
            let obj = shared.store().delete(&def, ns, name, &options, dry)?;
            // As the API server: objects kept for their finalizers come back as
            // they are; pods, services, service accounts and namespaces come
            // back when removed; everything else answers a `Status` Success.
            let returns_object = def.group.is_empty()
                && matches!(
                    def.plural.as_str(),
                    "pods" | "services" | "serviceaccounts" | "namespaces"
                );
            if crate::objects::is_deleting(&obj) || returns_object {
                Ok(object_response(200, &def, &obj))
            } else {
                Ok(json_response(200, &deleted_status(&def, &obj)))
            }
        }
        // As the API server: namespaces have no deletecollection (else
        // `default`, `kube-system` and `kube-public` would go too).
        (Method::DELETE, None) if def.group.is_empty() && def.plural == "namespaces" => {
            Err(ApiError::method_not_allowed())
        }
        (Method::DELETE, None) => {
            options::list_options(query)?;
            let (_, body) = read_body(req).await?;
            let options = options::delete_options(&body)?;
            let selectors = selectors(&def, query)?;
            if admission::applies(shared, &def) {
                let deleted = admitted_delete_collection(
                    shared, &def, ns, &selectors, &options, query, warnings,
                )
                .await?;
                let rv = shared.store().current_rv();
                return Ok(list_response(&def, deleted, rv, None, None));
            }
            let matched = list_matching(shared, &def, ns, &selectors).await?;
            if dry {
                let rv = shared.store().current_rv();
                return Ok(list_response(&def, matched, rv, None, None));
            }
            // In chunks, each under the lock alone, as the API server
            // deletes a collection one object at a time.
            let mut deleted = Vec::with_capacity(matched.len());
            for chunk in matched.chunks(DELETE_CHUNK) {
                let done = shared.store().delete_listed(&def, chunk);
                deleted.extend(done.into_iter().map(Deletion::into_object));
            }
            let rv = shared.store().current_rv();
            Ok(list_response(&def, deleted, rv, None, None))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// Where a write goes.
struct Write<'a> {
    def: &'a ResourceDef,
    ns: Option<&'a str>,
    name: &'a str,
    target: Target,
    dry: bool,
    query: &'a Query,
}

/// Applies a patch outside the store lock, validates the result, and commits
/// it if the object did not change meanwhile (else applies it again, as the
/// API server's optimistic update loop does). Returns the object and whether
/// it was created (server-side apply of a missing object).
async fn patch_object(
    shared: &Arc<Shared>,
    w: &Write<'_>,
    kind: PatchKind,
    patch: &Value,
    warnings: &mut Vec<String>,
) -> Result<(Arc<Value>, bool), ApiError> {
    let admitted = admission::applies(shared, w.def);
    loop {
        let base = shared.store().get_view(w.def, w.ns, w.name);
        let base = match base {
            Ok(base) => base,
            Err(e) if e.code == 404 && kind == PatchKind::Apply && w.target == Target::Main => {
                let mut body = patch.clone();
                let meta = crate::objects::meta_mut(&mut body);
                meta.insert("name".into(), w.name.into());
                // Applied to an object that is not there: no version to match.
                meta.remove("resourceVersion");
                validation::body_matches_request(w.def, w.ns, &body)?;
                if admitted {
                    let options = admission::options("CreateOptions", w.query, None);
                    let created =
                        admission::create(shared, w.def, w.ns, body, options, w.dry, warnings)
                            .await?;
                    return Ok((created, true));
                }
                validation::object(w.def, &body)?;
                rbac::escalation::check(shared, w.def, w.ns, &body)?;
                let created = shared.store().create(w.def, w.ns, body, w.dry)?;
                return Ok((created, true));
            }
            Err(e) => return Err(e),
        };
        let mut new = patching::apply(kind, &base, patch).map_err(|e| {
            if e.is_invalid() {
                ApiError::invalid(&w.def.group, &w.def.kind, w.name, e.to_string())
            } else {
                ApiError::bad_request(e.to_string())
            }
        })?;
        validation::patched(w.def, &base, &new)?;
        validation::resource_version_precondition(w.def, &mut new)?;
        if admitted {
            if let Some(obj) = admit_and_commit(shared, w, &base, new, warnings).await? {
                return Ok((obj, false));
            }
            continue;
        }
        validation::object(w.def, &new)?;
        rbac::escalation::check(shared, w.def, w.ns, &new)?;
        let committed = shared
            .store()
            .commit_patch(w.def, w.ns, w.name, &base, new, w.target, w.dry)?;
        if let Some(obj) = committed {
            return Ok((obj, false));
        }
    }
}

/// An update (PUT) through the admission chain, retried as a patch is when
/// the object changed while the webhooks ran.
async fn admitted_update(
    shared: &Arc<Shared>,
    w: &Write<'_>,
    mut obj: Value,
    warnings: &mut Vec<String>,
) -> Result<Arc<Value>, ApiError> {
    if crate::objects::name(&obj).is_empty() {
        crate::objects::meta_mut(&mut obj).insert("name".into(), w.name.into());
    }
    loop {
        let base = shared.store().get_view(w.def, w.ns, w.name)?;
        // The store's own checks of an update (name, UID, kind) come first.
        shared
            .store()
            .update(w.def, w.ns, w.name, obj.clone(), w.target, true)?;
        if let Some(updated) = admit_and_commit(shared, w, &base, obj.clone(), warnings).await? {
            return Ok(updated);
        }
    }
}

/// Runs the admission chain for an update of `base` to `new` (mutating
/// webhooks, the emulator's validation, validating webhooks on the object
/// as it would be stored) and commits it; `None` when the object changed
/// meanwhile (the caller starts over).
async fn admit_and_commit(
    shared: &Arc<Shared>,
    w: &Write<'_>,
    base: &Arc<Value>,
    new: Value,
    warnings: &mut Vec<String>,
) -> Result<Option<Arc<Value>>, ApiError> {
    let request = admission::Request {
        def: w.def,
        subresource: admission::subresource(w.target),
        operation: admission::Operation::Update,
        namespace: w.ns,
        name: w.name,
        dry_run: w.dry,
        options: admission::options("UpdateOptions", w.query, None),
    };
    let new = admission::mutate(shared, &request, Some(new), Some(base), warnings)
        .await?
        .ok_or_else(|| ApiError::internal("invariant: an update has an object"))?;
    validation::object(w.def, &new)?;
    rbac::escalation::check(shared, w.def, w.ns, &new)?;
    let prepared =
        shared
            .store()
            .commit_patch(w.def, w.ns, w.name, base, new.clone(), w.target, true)?;
    let Some(prepared) = prepared else {
        return Ok(None);
    };
    admission::validate(shared, &request, Some(&prepared), Some(base), warnings).await?;
    shared
        .store()
        .commit_patch(w.def, w.ns, w.name, base, new, w.target, w.dry)
}

/// A deletecollection through the admission chain: each object is deleted
/// once its webhooks admit it; the first refusal ends the request (what was
/// deleted before it stays deleted, as on the API server).
async fn admitted_delete_collection(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    selectors: &Selectors,
    options: &Value,
    query: &Query,
    warnings: &mut Vec<String>,
) -> Result<Vec<Arc<Value>>, ApiError> {
    let items = list_matching(shared, def, ns, selectors).await?;
    let mut deleted = Vec::with_capacity(items.len());
    for item in items {
        let review_options = admission::options("DeleteOptions", query, Some(options));
        admission::admit_delete(shared, def, &item, review_options, query.dry_run, warnings)
            .await?;
        // Only the very object admitted: a replacement is left alone.
        let uid = crate::objects::meta_str(&item, "uid").unwrap_or("");
        let only_it = json!({"preconditions": {"uid": uid}});
        let item_ns = Some(crate::objects::namespace(&item)).filter(|_| def.namespaced);
        let name = crate::objects::name(&item);
        match shared
            .store()
            .delete(def, item_ns, name, &only_it, query.dry_run)
        {
            Ok(obj) => deleted.push(obj),
            Err(e) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// How many objects a deletecollection deletes per hold of the store's lock.
const DELETE_CHUNK: usize = 64;

/// Every object of a collection matching `selectors` (matched without the
/// store's lock).
async fn list_matching(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    selectors: &Selectors,
) -> Result<Vec<Arc<Value>>, ApiError> {
    let snapshot = shared.store().list_snapshot(def, ns, None, None, None)?;
    Ok(snapshot.page_apart(selectors, None).await?.items)
}

/// The options kind the API server validates a verb's query parameters as.
fn options_kind(method: &Method) -> Option<&'static str> {
    match *method {
        Method::POST => Some("CreateOptions"),
        Method::PUT => Some("UpdateOptions"),
        Method::PATCH => Some("PatchOptions"),
        Method::DELETE => Some("DeleteOptions"),
        _ => None,
    }
}

/// 504 for a resourceVersion the store has not reached.
fn not_in_future(requested: u64, current: u64) -> Result<(), ApiError> {
    if requested > current {
        return Err(validation::too_large_resource_version(requested, current));
    }
    Ok(())
}

/// The `Status` answered for an object removed at once.
fn deleted_status(def: &ResourceDef, obj: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": crate::objects::name(obj),
            "group": def.group,
            "kind": def.plural,
            "uid": crate::objects::meta_str(obj, "uid").unwrap_or(""),
        },
    })
}

fn selectors(def: &ResourceDef, query: &Query) -> Result<Selectors, ApiError> {
    let selectors = Selectors {
        labels: LabelSelector::parse(&query.label_selector)
            .map_err(|e| ApiError::bad_request(format!("invalid labelSelector: {e}")))?,
        fields: FieldSelector::parse(&query.field_selector)
            .map_err(|e| ApiError::bad_request(format!("invalid fieldSelector: {e}")))?,
    };
    selectors
        .fields
        .check_fields(&def.field_selectors())
        .map_err(|e| ApiError::bad_request(format!("invalid fieldSelector: {e}")))?;
    Ok(selectors)
}

fn discover(
    shared: &Arc<Shared>,
    route: Route,
    path: &str,
    accept: &str,
) -> Result<Response<Body>, ApiError> {
    let store = shared.store();
    if matches!(route, Route::CoreVersions | Route::Groups) && discovery::wants_aggregated(accept) {
        let doc = discovery::aggregated(store.defs(), route == Route::CoreVersions);
        let mut resp = json_response(200, &doc);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
        );
        return Ok(resp);
    }
    let doc = match route {
        Route::Version => discovery::version(),
        Route::Health => return Ok(bytes_response(200, Bytes::from_static(b"ok"))),
        Route::CoreVersions => discovery::core_versions(shared.port),
        Route::Groups => discovery::groups(store.defs()),
        Route::Group(g) => {
            discovery::group(store.defs(), &g).ok_or_else(|| ApiError::no_route(path))?
        }
        Route::Resources { group, version } => discovery::resources(store.defs(), &group, &version)
            .ok_or_else(|| ApiError::no_route(path))?,
        Route::OpenApiV2 => return Err(ApiError::no_route(path)),
        Route::OpenApiV3(rest) if rest.is_empty() => discovery::openapi_v3_index(store.defs()),
        Route::OpenApiV3(rest) => discovery::openapi_v3_document(store.defs(), &rest)
            .ok_or_else(|| ApiError::no_route(path))?,
        Route::Object(_) => return Err(ApiError::no_route(path)),
    };
    Ok(json_response(200, &doc))
}

fn parse_rv(rv: &str) -> Result<u64, ApiError> {
    rv.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resourceVersion {rv:?}: pass a value from a previous response"
        ))
    })
}

async fn list(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    options::list_options(query)?;
    let selectors = selectors(def, query)?;
    let exact = match (
        query.resource_version_match.as_deref(),
        query.resource_version.as_deref(),
    ) {
        (Some("Exact"), Some(rv)) => Some(parse_rv(rv)?),
        _ => None,
    };
    let snapshot = {
        let store = shared.store();
        if let Some(rv) = query.resource_version.as_deref() {
            not_in_future(parse_rv(rv)?, store.current_rv())?;
        }
        let cut = query.limit.filter(|_| selectors.is_empty());
        store.list_snapshot(def, ns, query.continue_token.as_deref(), exact, cut)?
    };
    let page = snapshot.page_apart(&selectors, query.limit).await?;
    Ok(list_response(
        def,
        page.items,
        page.rv,
        page.continue_token,
        page.remaining,
    ))
}

fn watch(
    shared: &Arc<Shared>,
    def: Arc<ResourceDef>,
    route: &ObjectPath,
    query: &Query,
    connection: Option<ConnectionCloser>,
) -> Result<Response<Body>, ApiError> {
    options::watch_options(query)?;
    let selectors = selectors(&def, query)?;
    let from = match query.resource_version.as_deref() {
        _ if query.send_initial_events => None,
        None | Some("0") => None,
        Some(rv) => Some(parse_rv(rv)?),
    };
    let filter = Filter {
        namespace: route.namespace.clone(),
        selectors,
        api_version: def.api_version(),
    };
    let opts = WatchOptions {
        bookmarks: query.bookmarks,
        timeout: query.timeout_seconds.map(Duration::from_secs),
        send_initial_events: query.send_initial_events,
    };
    let subscribed = {
        let mut store = shared.store();
        if let Some(from) = from {
            not_in_future(from, store.current_rv())?;
        }
        store.subscribe(&def, route.namespace.as_deref(), from, connection)
    };
    let body = match subscribed {
        Ok(sub) => watching::stream(shared.clone(), def, filter, sub, opts),
        Err(err) if err.code == 410 => watching::error_stream(&err),
        Err(err) => return Err(err),
    };
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use http_body_util::Full;

    fn shared() -> Arc<Shared> {
        Arc::new(Shared::new(Store::new(1000), 0))
    }

    async fn call(
        shared: &Arc<Shared>,
        method: &str,
        uri: &str,
        content_type: &str,
        body: &str,
    ) -> (u16, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        if !content_type.is_empty() {
            req = req.header(header::CONTENT_TYPE, content_type);
        }
        let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        let resp = handle(shared.clone(), req).await;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    const CMS: &str = "/api/v1/namespaces/default/configmaps";

    #[tokio::test]
    async fn bad_input_gets_status_answers() {
        let s = shared();
        let (code, body) = call(&s, "POST", CMS, "application/json", "{nope").await;
        assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
        assert_eq!(body["kind"], "Status");
        assert_eq!(
            call(&s, "POST", CMS, "application/json", "[1]").await.0,
            400
        );
        assert_eq!(
            call(&s, "POST", CMS, "application/vnd.kubernetes.protobuf", "x")
                .await
                .0,
            415
        );
        assert_eq!(
            call(&s, "GET", "/apis/nope.io/v1/things", "", "").await.0,
            404
        );
        assert_eq!(call(&s, "GET", "/definitely/not", "", "").await.0, 404);
        assert_eq!(
            call(
                &s,
                "PATCH",
                &format!("{CMS}/missing"),
                "application/merge-patch+json",
                "{}"
            )
            .await
            .0,
            404
        );
        let big = format!(
            "{{\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"a\":\"{}\"}}}}",
            "x".repeat(BODY_LIMIT)
        );
        assert_eq!(call(&s, "POST", CMS, "application/json", &big).await.0, 413);
        call(
            &s,
            "POST",
            CMS,
            "application/json",
            r#"{"metadata":{"name":"a"}}"#,
        )
        .await;
        assert_eq!(
            call(&s, "PATCH", &format!("{CMS}/a"), "text/plain", "{}")
                .await
                .0,
            415
        );
        assert_eq!(
            call(
                &s,
                "PATCH",
                &format!("{CMS}/a"),
                "application/merge-patch+json",
                "{bad"
            )
            .await
            .0,
            400
        );
        assert_eq!(
            call(
                &s,
                "GET",
                &format!("{CMS}?labelSelector=a%20in%20b"),
                "",
                ""
            )
            .await
            .0,
            400
        );
        assert_eq!(
            call(&s, "GET", &format!("{CMS}/a/status"), "", "").await.0,
            404
        );
        assert_eq!(call(&s, "POST", "/api", "", "").await.0, 405);
    }

    #[tokio::test]
    async fn patch_with_stale_resource_version_conflicts() {
        let s = shared();
        let (_, created) = call(
            &s,
            "POST",
            CMS,
            "application/json",
            r#"{"metadata":{"name":"a"}}"#,
        )
        .await;
        let rv = created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let stale = r#"{"metadata":{"resourceVersion":"1"},"data":{"x":"y"}}"#;
        assert_eq!(
            call(
                &s,
                "PATCH",
                &format!("{CMS}/a"),
                "application/merge-patch+json",
                stale
            )
            .await
            .0,
            409
        );
        let fresh = format!(r#"{{"metadata":{{"resourceVersion":"{rv}"}},"data":{{"x":"y"}}}}"#);
        assert_eq!(
            call(
                &s,
                "PATCH",
                &format!("{CMS}/a"),
                "application/merge-patch+json",
                &fresh
            )
            .await
            .0,
            200
        );
        let (code, body) = call(
            &s,
            "PATCH",
            &format!("{CMS}/a"),
            "application/json-patch+json",
            r#"[{"op":"test","path":"/data/x","value":"z"}]"#,
        )
        .await;
        assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));
        let apply = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  k: v\n";
        assert_eq!(
            call(
                &s,
                "PATCH",
                &format!("{CMS}/b?fieldManager=me"),
                "application/apply-patch+yaml",
                apply
            )
            .await
            .0,
            201
        );
    }

    #[tokio::test]
    async fn delete_preconditions_and_collections() {
        let s = shared();
        call(
            &s,
            "POST",
            CMS,
            "application/json",
            r#"{"metadata":{"name":"a","labels":{"x":"1"}}}"#,
        )
        .await;
        call(
            &s,
            "POST",
            CMS,
            "application/json",
            r#"{"metadata":{"name":"b","labels":{"x":"2"}}}"#,
        )
        .await;
        let pre = r#"{"preconditions":{"uid":"nope"}}"#;
        let (code, status) = call(&s, "DELETE", &format!("{CMS}/b"), "", "").await;
        assert_eq!(
            (
                code,
                status["status"].as_str(),
                status["details"]["name"].as_str()
            ),
            (200, Some("Success"), Some("b"))
        );
        call(
            &s,
            "POST",
            CMS,
            "application/json",
            r#"{"metadata":{"name":"b","labels":{"x":"2"}}}"#,
        )
        .await;
        assert_eq!(
            call(&s, "DELETE", &format!("{CMS}/a"), "application/json", pre)
                .await
                .0,
            409
        );
        let (code, list) = call(&s, "DELETE", &format!("{CMS}?labelSelector=x%3D1"), "", "").await;
        assert_eq!(code, 200);
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
        let (_, list) = call(&s, "GET", CMS, "", "").await;
        assert_eq!(list["kind"], "ConfigMapList");
        assert_eq!(list["items"][0]["metadata"]["name"], "b");
        let (_, list) = call(
            &s,
            "GET",
            "/api/v1/configmaps?fieldSelector=metadata.name%3Db",
            "",
            "",
        )
        .await;
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn list_exact_old_version_is_gone() {
        let s = shared();
        s.store().compact();
        let (code, body) = call(
            &s,
            "GET",
            &format!("{CMS}?resourceVersion=1&resourceVersionMatch=Exact"),
            "",
            "",
        )
        .await;
        assert_eq!((code, body["code"].as_u64()), (410, Some(410)));
    }

    #[tokio::test]
    async fn injected_429_has_retry_after_header() {
        let s = shared();
        s.faults.take("none", "none", None);
        let faults = crate::Faults { shared: s.clone() };
        faults.fail_next(
            1,
            crate::FailRule {
                retry_after: Some(7),
                ..crate::FailRule::status(429)
            },
        );
        let req = Request::builder()
            .uri(CMS)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = handle(s.clone(), req).await;
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "7");
        assert_eq!(s.recorder.snapshot()[0].verb, "list");
    }

    async fn lines(shared: &Arc<Shared>, uri: &str) -> Vec<Value> {
        let req = Request::builder()
            .uri(uri)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = handle(shared.clone(), req).await;
        assert_eq!(resp.status(), 200);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn watch_sends_state_bookmarks_and_ends_at_the_timeout() {
        let s = shared();
        call(
            &s,
            "POST",
            CMS,
            "application/json",
            r#"{"metadata":{"name":"a"}}"#,
        )
        .await;
        let events = lines(
            &s,
            &format!("{CMS}?watch=1&allowWatchBookmarks=true&timeoutSeconds=3"),
        )
        .await;
        assert_eq!(events[0]["type"], "ADDED");
        assert!(
            events[1..].iter().all(|e| e["type"] == "BOOKMARK"),
            "{events:?}"
        );
        assert!(events.len() >= 2, "{events:?}");
        assert_eq!(events[1]["object"]["kind"], "ConfigMap");
    }

    #[tokio::test(start_paused = true)]
    async fn watch_resumes_after_a_version_and_reports_410_when_too_old() {
        let s = shared();
        let (_, a) = call(
            &s,
            "POST",
            CMS,
            "application/json",
            r#"{"metadata":{"name":"a"}}"#,
        )
        .await;
        call(
            &s,
            "POST",
            CMS,
            "application/json",
            r#"{"metadata":{"name":"b"}}"#,
        )
        .await;
        let rv = a["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let events = lines(
            &s,
            &format!("{CMS}?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
        )
        .await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["object"]["metadata"]["name"], "b");
        s.store().compact();
        let events = lines(&s, &format!("{CMS}?watch=1&resourceVersion={rv}")).await;
        assert_eq!(events[0]["type"], "ERROR");
        assert_eq!(events[0]["object"]["code"], 410);
        let events = lines(&s, &format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")).await;
        assert_eq!(events[0]["type"], "ADDED");
        assert_eq!(events[2]["type"], "BOOKMARK");
        assert_eq!(
            events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
    }

    #[tokio::test]
    async fn absurd_timeouts_do_not_panic() {
        let s = shared();
        let uri = format!("{CMS}?watch=1&timeoutSeconds=18446744073709551615");
        let req = Request::builder()
            .uri(uri)
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_eq!(handle(s.clone(), req).await.status(), 200);
    }

    #[tokio::test]
    async fn dry_run_does_not_persist() {
        let s = shared();
        let (code, _) = call(
            &s,
            "POST",
            &format!("{CMS}?dryRun=All"),
            "application/json",
            r#"{"metadata":{"name":"a"}}"#,
        )
        .await;
        assert_eq!(code, 201);
        assert_eq!(call(&s, "GET", &format!("{CMS}/a"), "", "").await.0, 404);
    }
}
