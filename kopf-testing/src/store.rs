//! The object store: every object of every resource, the cluster-wide
//! resourceVersion counter, per-resource watch history and fan-out channels.
//!
//! All methods are synchronous and run under one lock held by the caller;
//! watch events are serialized once here and fanned out to watchers.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::admission;
use crate::conversion;
use crate::events::{EventType, WatchEvent};
use crate::failures::ApiError;
use crate::fanout::{self, Fanout};
use crate::history::{DEFAULT_HISTORY_AGE, DEFAULT_HISTORY_BYTES, History};
use crate::listing::{ContinueAt, ListSnapshot, decode_continue, encode_continue};
use crate::names;
use crate::objects::{self, meta_mut};
#[cfg(test)]
use crate::patching::{self, PatchKind};
use crate::resources::{self, Generation, ResourceDef, StoreKey};
use crate::updates;
use crate::validation::{self, FieldError};

/// The namespaces every emulator starts with.
pub(crate) const INITIAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// Which part of an object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The main resource (status ignored if it is a subresource).
    Main,
    /// The `/status` subresource.
    Status,
}

/// Where a watch starts.
#[derive(Debug)]
pub(crate) enum WatchStart {
    /// Synthetic ADDED events for the current objects.
    Snapshot(Vec<Arc<Value>>),
    /// Recorded events after the requested resourceVersion.
    History(Vec<Arc<WatchEvent>>),
}

/// A new watcher's starting point and live channel.
#[derive(Debug)]
pub(crate) struct Subscription {
    /// What to send first.
    pub start: WatchStart,
    /// Live events after the start.
    pub rx: fanout::Receiver,
    /// The resourceVersion the start is consistent with.
    pub rv: u64,
}

/// The objects, history and watchers of one resource.
#[derive(Debug)]
pub(crate) struct Resource {
    objects: BTreeMap<(String, String), Arc<Value>>,
    history: History,
    floor: u64,
    watchers: Fanout,
}

impl Resource {
    /// An empty resource; it allocates nothing until it holds objects,
    /// events or watchers.
    fn new(floor: u64) -> Self {
        Self {
            objects: BTreeMap::new(),
            history: History::default(),
            floor,
            watchers: Fanout::default(),
        }
    }
}

/// What the store let go of under its lock: large objects and events are
/// freed once the lock is released ([`Store::take_released`]), so that
/// freeing them holds up no other client.
#[derive(Debug)]
#[expect(
    dead_code,
    reason = "held only to be dropped once the lock is released"
)]
pub(crate) enum Released {
    /// An event dropped from the history.
    Event(Arc<WatchEvent>),
    /// An object removed from the store.
    Object(Arc<Value>),
    /// A whole history (compacted).
    History(History),
    /// A whole resource (its CRD deleted, or the store reset).
    Resource(Resource),
}

/// What a deletion did to an object.
#[derive(Debug)]
pub(crate) enum Deletion {
    /// Marked for deletion (it has finalizers), or already marked: as it is
    /// stored now.
    Kept(Arc<Value>),
    /// Removed: its last state, and the resourceVersion of its removal.
    Removed {
        /// The object as it was stored before.
        last: Arc<Value>,
        /// The removal's resourceVersion.
        rv: u64,
    },
}

impl Deletion {
    /// The object as the API answers a deletion with it (a removed one
    /// stamped with the removal's resourceVersion; a copy, best made
    /// outside the store's lock).
    pub(crate) fn into_object(self) -> Arc<Value> {
        match self {
            Self::Kept(obj) => obj,
            Self::Removed { last, rv } => Arc::new(with_rv(&last, rv)),
        }
    }
}

/// All state of one emulated cluster.
#[derive(Debug)]
pub(crate) struct Store {
    rv: u64,
    base_floor: u64,
    history_limit: usize,
    /// The most bytes of history kept over every resource.
    history_bytes: usize,
    /// The longest time an event is kept in the history.
    history_age: Duration,
    /// The bytes of history kept now, over every resource.
    history_used: usize,
    /// The most bytes of events a watcher may fall behind by.
    watch_bytes: usize,
    defs: Vec<Arc<ResourceDef>>,
    resources: HashMap<StoreKey, Resource>,
    /// Counts the webhook configurations for the admission chain.
    admission: Arc<admission::Tracker>,
    /// What to free once the lock is released.
    released: Vec<Released>,
}

fn key_of(ns: &str, name: &str) -> (String, String) {
    (ns.to_string(), name.to_string())
}

impl Store {
    /// A fresh cluster with the built-in resources and initial namespaces.
    pub(crate) fn new(history_limit: usize) -> Self {
        let mut store = Self {
            rv: 0,
            base_floor: 0,
            history_limit: history_limit.max(1),
            history_bytes: DEFAULT_HISTORY_BYTES,
            history_age: DEFAULT_HISTORY_AGE,
            history_used: 0,
            watch_bytes: DEFAULT_HISTORY_BYTES.min(fanout::WATCH_QUEUE_BYTES),
            defs: Vec::new(),
            resources: HashMap::new(),
            admission: Arc::default(),
            released: Vec::new(),
        };
        store.reset();
        store
    }

    /// Wipes every object, CRD and all history; the resourceVersion keeps growing.
    pub(crate) fn reset(&mut self) {
        // Their watches end now; their objects are freed after the lock.
        for (_, mut res) in self.resources.drain() {
            res.watchers.close();
            self.released.push(Released::Resource(res));
        }
        self.admission.changed(0);
        self.history_used = 0;
        self.defs = resources::builtins().into_iter().map(Arc::new).collect();
        // A fresh revision: every earlier resourceVersion is now too old.
        self.rv += 1;
        self.base_floor = self.rv;
        let ns_def = self.defs[0].clone();
        for ns in INITIAL_NAMESPACES {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let _ = self.create(&ns_def, None, body, false);
        }
    }

    /// Bounds the watch history by bytes (over every resource) and by age,
    /// besides the count per resource given to [`new`](Self::new); no
    /// watcher may fall behind by more bytes than the history keeps.
    pub(crate) fn set_history_bounds(&mut self, bytes: usize, age: Duration) {
        self.history_bytes = bytes;
        self.watch_bytes = bytes.min(fanout::WATCH_QUEUE_BYTES);
        self.history_age = age;
        self.trim_history();
    }

    /// Drops the oldest events, whatever their resource, until the history
    /// is within its byte bound, and every event older than the age bound.
    fn trim_history(&mut self) {
        let cutoff = tokio::time::Instant::now().checked_sub(self.history_age);
        if let Some(cutoff) = cutoff {
            for res in self.resources.values_mut() {
                while res.history.front().is_some_and(|(_, at)| at < cutoff) {
                    if let Some((event, weight)) = res.history.pop_front() {
                        res.floor = event.rv;
                        self.history_used -= weight;
                        self.released.push(Released::Event(event));
                    }
                }
            }
        }
        while self.history_used > self.history_bytes {
            let oldest = self
                .resources
                .values_mut()
                .filter_map(|r| r.history.front().map(|(rv, _)| (rv, r)))
                .min_by_key(|(rv, _)| *rv);
            let Some((_, res)) = oldest else {
                break;
            };
            if let Some((event, weight)) = res.history.pop_front() {
                res.floor = event.rv;
                self.history_used -= weight;
                self.released.push(Released::Event(event));
            }
        }
    }

    /// What the store let go of since last asked, to be dropped once the
    /// lock is released.
    pub(crate) fn take_released(&mut self) -> Vec<Released> {
        std::mem::take(&mut self.released)
    }

    /// What tells the admission chain that webhook configurations changed.
    pub(crate) fn admission_tracker(&self) -> Arc<admission::Tracker> {
        self.admission.clone()
    }

    /// Every stored webhook configuration, mutating ones first, each kind
    /// in name order; `true` marks mutating ones.
    pub(crate) fn webhook_configurations(&self) -> Vec<(Arc<Value>, bool)> {
        admission::CONFIGURATIONS
            .iter()
            .flat_map(|(plural, mutating)| {
                let key = StoreKey {
                    group: admission::GROUP.into(),
                    plural: (*plural).into(),
                };
                let objects = self.resources.get(&key).map(|r| r.objects.values());
                objects
                    .into_iter()
                    .flatten()
                    .map(|o| (o.clone(), *mutating))
            })
            .collect()
    }

    /// The current cluster-wide resourceVersion.
    pub(crate) fn current_rv(&self) -> u64 {
        self.rv
    }

    /// All served resource definitions.
    pub(crate) fn defs(&self) -> &[Arc<ResourceDef>] {
        &self.defs
    }

    /// The served resource for a group/version/plural.
    pub(crate) fn find_def(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceDef>> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
            .cloned()
    }

    /// Forgets all history: resuming from an older resourceVersion gets 410.
    pub(crate) fn compact(&mut self) {
        // A fresh revision: every earlier resourceVersion is now too old,
        // while a list made after compaction can still be watched from.
        self.rv += 1;
        self.base_floor = self.rv;
        for res in self.resources.values_mut() {
            let history = std::mem::take(&mut res.history);
            self.released.push(Released::History(history));
            res.floor = self.rv;
        }
        self.history_used = 0;
    }

    fn resource(&mut self, key: &StoreKey) -> &mut Resource {
        let floor = self.base_floor;
        self.resources
            .entry(key.clone())
            .or_insert_with(|| Resource::new(floor))
    }

    fn object(&self, key: &StoreKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.resources
            .get(key)?
            .objects
            .get(&key_of(ns, name))
            .cloned()
    }

    fn emit(
        &mut self,
        key: &StoreKey,
        kind: EventType,
        object: Arc<Value>,
        old: Option<Arc<Value>>,
    ) {
        self.emit_event(key, WatchEvent::new(self.rv, kind, object, old));
    }

    /// Emits the removal of an object whose last state was `last`, at the
    /// current resourceVersion (watchers see it stamped with it; the copy is
    /// made outside the lock).
    fn emit_removal(&mut self, key: &StoreKey, last: Arc<Value>) {
        self.emit_event(key, WatchEvent::removed(self.rv, last));
    }

    fn emit_event(&mut self, key: &StoreKey, event: WatchEvent) {
        let limit = self.history_limit;
        let watch_bytes = self.watch_bytes;
        let event = Arc::new(event);
        let res = self.resource(key);
        let mut used = res.history.push(event.clone());
        res.watchers.send(&event, used, watch_bytes);
        let mut freed = 0;
        let mut dropped = Vec::new();
        while res.history.len() > limit {
            if let Some((event, weight)) = res.history.pop_front() {
                res.floor = event.rv;
                freed += weight;
                dropped.push(Released::Event(event));
            }
        }
        self.released.append(&mut dropped);
        used += self.history_used;
        self.history_used = used - freed;
        self.trim_history();
        if key.group == admission::GROUP {
            let stored = self.webhook_configurations().len();
            self.admission.changed(stored);
        }
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn scope_ns<'a>(def: &ResourceDef, ns: Option<&'a str>) -> Result<&'a str, ApiError> {
        match (def.namespaced, ns) {
            (true, Some(ns)) => Ok(ns),
            (true, None) => Err(ApiError::bad_request(format!(
                "{} is namespaced: use the path /…/namespaces/NAMESPACE/{}",
                def.plural, def.plural
            ))),
            (false, None) => Ok(""),
            (false, Some(_)) => Err(ApiError::new(
                404,
                "NotFound",
                format!(
                    "{} is cluster-scoped: use a path without /namespaces/NAMESPACE",
                    def.plural
                ),
            )),
        }
    }

    /// Reads one object as seen through `def`'s version (for writes through it).
    pub(crate) fn get_view(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let stored = self.get(def, ns, name)?;
        Ok(match conversion::present(&stored, &def.api_version()) {
            Cow::Borrowed(_) => stored,
            Cow::Owned(view) => Arc::new(view),
        })
    }

    /// Reads one object.
    pub(crate) fn get(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let ns = Self::scope_ns(def, ns)?;
        self.object(&def.store_key(), ns, name)
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    /// The objects a list (or its page after `continue_token`) may
    /// return, to be matched and paged without the lock
    /// ([`ListSnapshot::page`]). `cut` is a page's limit when there are no
    /// selectors to match: then only the page's objects are taken, and the
    /// rest counted.
    pub(crate) fn list_snapshot(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        continue_token: Option<&str>,
        exact_rv: Option<u64>,
        cut: Option<usize>,
    ) -> Result<ListSnapshot, ApiError> {
        if ns.is_some() && !def.namespaced {
            Self::scope_ns(def, ns)?;
        }
        let res = self.resources.get(&def.store_key());
        let floor = res.map_or(self.base_floor, |r| r.floor);
        if let Some(rv) = exact_rv
            && rv < floor
        {
            return Err(ApiError::expired(format!(
                "too old resource version: {rv} ({floor}); list without resourceVersion to get the current state"
            )));
        }
        let Some(res) = res else {
            if let Some(token) = continue_token {
                let (at, after) = self.check_continue(token, ns)?;
                if matches!(at, ContinueAt::Version(rv) if rv < floor) {
                    return Err(expired_continue(&after));
                }
            }
            return Ok(ListSnapshot {
                objects: Vec::new(),
                rest: cut.map(|_| 0),
                rv: self.rv,
                api_version: def.api_version(),
            });
        };
        // Every page of a list reports the version of its first page: a watch
        // from the list's version then replays every change made while the
        // pages were fetched, as with the API server's snapshot lists.
        let (snapshot, start) = match continue_token {
            Some(token) => match self.check_continue(token, ns)? {
                (ContinueAt::Version(rv), after) if rv < res.floor => {
                    return Err(expired_continue(&after));
                }
                (ContinueAt::Version(rv), after) => (rv, Some(after)),
                (ContinueAt::Latest, after) => (self.rv, Some(after)),
            },
            None => (self.rv, None),
        };
        // A namespace's keys end before `(ns + "\0", "")`: no namespace
        // holds a NUL. The token's namespace is the list's (checked).
        let lower = match (start, ns) {
            (Some(after), _) => Bound::Excluded(after),
            (None, Some(ns)) => Bound::Included((ns.to_owned(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let upper = ns.map_or(Bound::Unbounded, |ns| {
            Bound::Excluded((format!("{ns}\0"), String::new()))
        });
        let mut candidates = res.objects.range((lower, upper)).map(|(_, obj)| obj);
        // A cut page takes its own objects and only counts the rest: no
        // copy of every object after each page (and no drop of it after).
        let (objects, rest) = match cut {
            Some(limit) => (
                candidates.by_ref().take(limit).cloned().collect(),
                Some(candidates.count()),
            ),
            None => (candidates.cloned().collect(), None),
        };
        Ok(ListSnapshot {
            objects,
            rest,
            rv: snapshot,
            api_version: def.api_version(),
        })
    }

    /// Decodes a continue token, refusing one this store did not hand out
    /// for this list (undecodable, from a future version, another namespace).
    /// A negative version reads at the latest one, as the API server's
    /// storage does.
    fn check_continue(
        &self,
        token: &str,
        ns: Option<&str>,
    ) -> Result<(ContinueAt, (String, String)), ApiError> {
        let invalid = |why: &str| {
            ApiError::bad_request(format!(
                "continue key is not valid: {why}; pass the `continue` value from the previous page unchanged"
            ))
        };
        let (rv, after) = decode_continue(token).ok_or_else(|| invalid("it cannot be decoded"))?;
        let at = match u64::try_from(rv) {
            Err(_) => ContinueAt::Latest,
            Ok(rv) if rv == 0 || rv > self.rv => {
                return Err(invalid(
                    "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
                ));
            }
            Ok(rv) => ContinueAt::Version(rv),
        };
        if ns.is_some_and(|ns| ns != after.0) {
            return Err(invalid("it belongs to a list of another namespace"));
        }
        Ok((at, after))
    }

    /// Creates an object.
    pub(crate) fn create(
        &mut self,
        def: &ResourceDef,
        ns: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        self.insert_new(def, ns, body, dry_run, false)
    }

    /// Creates an object a dry-run [`Store::create`] prepared, keeping the
    /// UID and creation time it was given (which webhooks saw).
    pub(crate) fn create_prepared(
        &mut self,
        def: &ResourceDef,
        ns: Option<&str>,
        prepared: Value,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        self.insert_new(def, ns, prepared, dry_run, true)
    }

    fn insert_new(
        &mut self,
        def: &ResourceDef,
        ns: Option<&str>,
        mut body: Value,
        dry_run: bool,
        prepared: bool,
    ) -> Result<Arc<Value>, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_kind(def, &body)?;
        let path_ns = Self::scope_ns(def, ns)?;
        if def.namespaced
            && let Some(body_ns) = objects::meta_str(&body, "namespace").filter(|s| !s.is_empty())
            && body_ns != path_ns
        {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object does not match the namespace sent on the request (it is {body_ns}, the request's is {path_ns})"
            )));
        }
        let mut name = objects::name(&body).to_string();
        if name.is_empty() {
            let prefix = objects::meta_str(&body, "generateName").unwrap_or("");
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    &def.group,
                    &def.kind,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            name = names::generate(prefix);
        }
        let generate_name = objects::meta_str(&body, "generateName").unwrap_or("");
        let name_errors = names::errors(def, &name, generate_name);
        if !name_errors.is_empty() {
            return Err(crate::validation::invalid(
                &def.group,
                &def.kind,
                &name,
                &name_errors,
            ));
        }
        if def.namespaced {
            let ns_obj = self.object(
                &StoreKey {
                    group: String::new(),
                    plural: "namespaces".into(),
                },
                "",
                path_ns,
            );
            match ns_obj {
                None => return Err(ApiError::not_found("", "namespaces", path_ns)),
                Some(o) if objects::is_deleting(&o) => {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!(
                            "{} \"{name}\" is forbidden: unable to create new content in namespace {path_ns} because it is being terminated",
                            def.plural
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        // As the API server's storage (not its dry run): a version is the
        // store's to give, and the failure is no `Status` of its own.
        if !dry_run
            && objects::resource_version(&body)
                .and_then(|rv| rv.parse::<u64>().ok())
                .is_some_and(|rv| rv != 0)
        {
            return Err(ApiError::new(
                500,
                "",
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let key = def.store_key();
        if self.object(&key, path_ns, &name).is_some() {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        {
            let map = body.as_object_mut().expect("invariant: checked is_object");
            map.insert("apiVersion".into(), def.api_version().into());
            map.insert("kind".into(), def.kind.clone().into());
        }
        if def.group.is_empty() && def.plural == "secrets" {
            objects::fold_string_data(&mut body);
        }
        if def.group.is_empty() && def.plural == "namespaces" {
            body["status"] = json!({"phase": "Active"});
        }
        let mut crd_defs = None;
        if def.group == "apiextensions.k8s.io" && def.plural == "customresourcedefinitions" {
            meta_mut(&mut body).insert("name".into(), name.clone().into());
            check_crd_group(def, &name, &body)?;
            let defs = resources::defs_from_crd(&body)
                .map_err(|e| ApiError::invalid(&def.group, &def.kind, &name, e.to_string()))?;
            body["status"] = crd_status(&body);
            crd_defs = Some(defs);
        } else if def.status_subresource
            && !def.group.is_empty()
            && self.is_custom(def)
            && let Some(map) = body.as_object_mut()
        {
            map.remove("status");
        }
        // As the API server's `BeforeCreate`, dry run or not: the name
        // generated, a UID and creation time given (kept when `prepared`).
        let meta = meta_mut(&mut body);
        meta.insert("name".into(), name.clone().into());
        if def.namespaced {
            meta.insert("namespace".into(), path_ns.into());
        } else {
            meta.remove("namespace");
        }
        for (field, new) in [
            ("uid", objects::new_uid as fn() -> String),
            ("creationTimestamp", objects::now),
        ] {
            let kept = meta
                .get(field)
                .and_then(Value::as_str)
                .filter(|v| prepared && !v.is_empty());
            if kept.is_none() {
                meta.insert(field.into(), new().into());
            }
        }
        match def.generation {
            // Kept as its creator gave it, checked not to be negative.
            Generation::Untracked => match meta.get("generation").and_then(Value::as_i64) {
                Some(given) if given < 0 => {
                    return Err(validation::invalid_object(
                        def,
                        &name,
                        &[FieldError::invalid_number(
                            "metadata.generation",
                            given,
                            "must be greater than or equal to 0",
                        )],
                    ));
                }
                Some(given) if given > 0 => {}
                _ => {
                    meta.remove("generation");
                }
            },
            Generation::Spec | Generation::SpecAndAnnotations => {
                meta.insert("generation".into(), 1.into());
            }
        }
        meta.remove("resourceVersion");
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("selfLink");
        if dry_run {
            return Ok(Arc::new(body));
        }
        let rv = self.next_rv();
        meta_mut(&mut body).insert("resourceVersion".into(), rv.to_string().into());
        let obj = Arc::new(body);
        self.resource(&key)
            .objects
            .insert(key_of(path_ns, &name), obj.clone());
        self.emit(&key, EventType::Added, obj.clone(), None);
        if let Some(defs) = crd_defs {
            self.register_crd(defs);
        }
        Ok(obj)
    }

    fn is_custom(&self, def: &ResourceDef) -> bool {
        !resources::builtins()
            .iter()
            .any(|b| b.group == def.group && b.plural == def.plural)
    }

    fn register_crd(&mut self, defs: Vec<ResourceDef>) {
        let Some(first) = defs.first() else { return };
        let key = first.store_key();
        // A version no longer served ends the watches of the resource, as
        // the API server replaces a CRD's storage when its versions change:
        // watchers resume, and those of the unserved version get `404`.
        let unserved = self
            .defs
            .iter()
            .filter(|d| d.store_key() == key)
            .any(|old| !defs.iter().any(|new| new.version == old.version));
        self.defs.retain(|d| d.store_key() != key);
        self.defs.extend(defs.into_iter().map(Arc::new));
        let floor = self.rv;
        let resource = self
            .resources
            .entry(key)
            .or_insert_with(|| Resource::new(floor));
        if unserved {
            resource.watchers.close();
        }
    }

    fn unregister_crd(&mut self, crd: &Value) {
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("");
        let plural = crd
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("");
        let key = StoreKey {
            group: group.into(),
            plural: plural.into(),
        };
        if let Some(res) = self.resources.get(&key) {
            let objs: Vec<Arc<Value>> = res.objects.values().cloned().collect();
            for obj in objs {
                self.next_rv();
                self.emit_removal(&key, obj);
            }
        }
        if let Some(mut res) = self.resources.remove(&key) {
            self.history_used -= res.history.bytes();
            res.watchers.close();
            self.released.push(Released::Resource(res));
        }
        self.defs.retain(|d| d.store_key() != key);
    }

    /// Replaces an object (PUT) on the main resource or `/status`.
    pub(crate) fn update(
        &mut self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        body: Value,
        target: Target,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let body_name = objects::name(&body);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        check_kind(def, &body)?;
        let old = self.get_view(def, ns, name)?;
        if let Some(uid) = objects::meta_str(&body, "uid").filter(|u| !u.is_empty())
            && objects::meta_str(&old, "uid") != Some(uid)
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    objects::meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        self.write(def, &old, body, target, dry_run)
    }

    /// Patches an object under the lock; server-side apply of a missing
    /// object creates it. (The handlers apply patches outside the lock and
    /// write them with [`Store::commit_patch`].)
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &mut self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: &Value,
        target: Target,
        dry_run: bool,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let old = match self.get_view(def, ns, name) {
            Ok(old) => old,
            Err(e) if e.code == 404 && kind == PatchKind::Apply && target == Target::Main => {
                let mut body = patch.clone();
                meta_mut(&mut body).insert("name".into(), name.into());
                return self.create(def, ns, body, dry_run).map(|o| (o, true));
            }
            Err(e) => return Err(e),
        };
        let new = patching::apply(kind, &old, patch).map_err(|e| {
            if e.is_invalid() {
                ApiError::invalid(&def.group, &def.kind, name, e.to_string())
            } else {
                ApiError::bad_request(e.to_string())
            }
        })?;
        self.write_patched(def, &old, new, target, dry_run)
            .map(|o| (o, false))
    }

    /// Writes an object patched outside the lock from `base` (as read by
    /// [`Store::get_view`]); `None` when the object changed since, so the
    /// caller applies its patch again to the new version.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn commit_patch(
        &mut self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        base: &Arc<Value>,
        new: Value,
        target: Target,
        dry_run: bool,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let current = self.get_view(def, ns, name)?;
        if objects::resource_version(&current) != objects::resource_version(base) {
            return Ok(None);
        }
        self.write_patched(def, &current, new, target, dry_run)
            .map(Some)
    }

    fn write_patched(
        &mut self,
        def: &ResourceDef,
        old: &Arc<Value>,
        new: Value,
        target: Target,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let name = objects::name(old);
        // The patched object must still fit (a merge patch adds to the object).
        if crate::limits::value_size(&new, crate::limits::OBJECT_LIMIT).is_none() {
            return Err(crate::limits::object_too_large(None));
        }
        if crate::limits::value_depth(&new) > crate::limits::MAX_DEPTH {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                name,
                format!(
                    "the patched object nests deeper than {} levels; keep objects flatter",
                    crate::limits::MAX_DEPTH
                ),
            ));
        }
        let new_name = objects::name(&new);
        if new_name != name {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                name,
                format!("metadata.name: Invalid value: {new_name:?}: field is immutable"),
            ));
        }
        self.write(def, old, new, target, dry_run)
    }

    /// The common write path of update and patch.
    fn write(
        &mut self,
        def: &ResourceDef,
        old: &Arc<Value>,
        mut new: Value,
        target: Target,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let name = objects::name(old).to_string();
        let ns = objects::namespace(old).to_string();
        let old_rv = objects::resource_version(old).unwrap_or("").to_string();
        if !new.is_object() {
            return Err(ApiError::bad_request("the object must be a JSON object"));
        }
        match objects::resource_version(&new) {
            Some(rv) if rv != old_rv => {
                return Err(ApiError::stale(&def.group, &def.plural, &name));
            }
            None if !updates::allows_unconditional_update(def) => {
                return Err(updates::resource_version_required(def, &name));
            }
            _ => {}
        }
        // A UID in the body is a precondition (as kubelets use it in status
        // patches): the object must still be the same instance.
        if let Some(uid) = objects::meta_str(&new, "uid")
            && !uid.is_empty()
            && objects::meta_str(old, "uid") != Some(uid)
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    objects::meta_str(old, "uid").unwrap_or("")
                ),
            ));
        }
        // Which parts of the new object count.
        if target == Target::Status {
            let mut merged = (**old).clone();
            match new.get("status") {
                Some(status) => merged["status"] = status.clone(),
                None => {
                    if let Some(m) = merged.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            // A custom resource's status write keeps all of its metadata (the
            // API server's status strategy copies the stored object and sets
            // only `status`); the built-ins' take labels and annotations.
            let kept: &[&str] = if self.is_custom(def) {
                &[]
            } else {
                &["labels", "annotations"]
            };
            for field in kept {
                let value = new.get("metadata").and_then(|m| m.get(*field)).cloned();
                let meta = meta_mut(&mut merged);
                match value {
                    Some(v) => meta.insert((*field).into(), v),
                    None => meta.remove(*field),
                };
            }
            new = merged;
        } else if def.status_subresource {
            match old.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        {
            let map = new.as_object_mut().expect("invariant: checked is_object");
            map.insert(
                "apiVersion".into(),
                old.get("apiVersion")
                    .cloned()
                    .unwrap_or_else(|| def.api_version().into()),
            );
            map.insert("kind".into(), def.kind.clone().into());
        }
        if def.group.is_empty() && def.plural == "secrets" {
            objects::fold_string_data(&mut new);
        }
        if target == Target::Main {
            updates::check(def, old, &new)?;
        }
        // Immutable and server-owned metadata.
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let generation = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        {
            let meta = meta_mut(&mut new);
            for field in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(field) {
                    Some(v) => meta.insert(field.into(), v.clone()),
                    None => meta.remove(field),
                };
            }
            meta.insert("resourceVersion".into(), old_rv.clone().into());
            meta.remove("selfLink");
        }
        let deleting = objects::is_deleting(old);
        if deleting {
            let before = objects::finalizers(old);
            let added: Vec<&str> = objects::finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &def.group,
                    &def.kind,
                    &name,
                    format!(
                        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                ));
            }
        }
        let mut crd_defs = None;
        if def.group == "apiextensions.k8s.io"
            && def.plural == "customresourcedefinitions"
            && target == Target::Main
        {
            check_crd_group(def, &name, &new)?;
            let defs = resources::defs_from_crd(&new)
                .map_err(|e| ApiError::invalid(&def.group, &def.kind, &name, e.to_string()))?;
            new["status"] = crd_status(&new);
            crd_defs = Some(defs);
        }
        if def.generation.bumps(old, &new, def.status_subresource) {
            meta_mut(&mut new).insert("generation".into(), (generation + 1).into());
        }
        if new == **old {
            return Ok(old.clone());
        }
        if dry_run {
            return Ok(Arc::new(new));
        }
        let key = def.store_key();
        let rv = self.next_rv();
        meta_mut(&mut new).insert("resourceVersion".into(), rv.to_string().into());
        let obj = Arc::new(new);
        if deleting && objects::finalizers(&obj).is_empty() {
            self.remove(&key, &ns, &name, obj.clone());
        } else {
            self.resource(&key)
                .objects
                .insert(key_of(&ns, &name), obj.clone());
            self.emit(&key, EventType::Modified, obj.clone(), Some(old.clone()));
            if let Some(defs) = crd_defs {
                self.register_crd(defs);
            }
        }
        Ok(obj)
    }

    /// Finally removes an object (the resourceVersion already bumped for
    /// it; `last` is its last state, stamped with it or not) and cascades.
    fn remove(&mut self, key: &StoreKey, ns: &str, name: &str, last: Arc<Value>) {
        if let Some(gone) = self.resource(key).objects.remove(&key_of(ns, name)) {
            self.released.push(Released::Object(gone));
        }
        self.emit_removal(key, last.clone());
        if key.group == "apiextensions.k8s.io" && key.plural == "customresourcedefinitions" {
            self.unregister_crd(&last);
        }
        if key.group.is_empty() && key.plural == "namespaces" {
            self.purge_namespace(name);
        }
        if !ns.is_empty() {
            self.finish_namespace_if_empty(ns);
        }
    }

    /// Deletes an object: marks it if it has finalizers, removes it otherwise.
    pub(crate) fn delete(
        &mut self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        options: &Value,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(def, ns, name)?;
        if def.group.is_empty() && def.plural == "namespaces" && INITIAL_NAMESPACES.contains(&name)
        {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
            ));
        }
        let pre = options.get("preconditions");
        if let Some(uid) = pre.and_then(|p| p.get("uid")).and_then(Value::as_str)
            && objects::meta_str(&old, "uid") != Some(uid)
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    objects::meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = pre
            .and_then(|p| p.get("resourceVersion"))
            .and_then(Value::as_str)
            && objects::resource_version(&old) != Some(rv)
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    objects::resource_version(&old).unwrap_or("")
                ),
            ));
        }
        if dry_run {
            return Ok(old);
        }
        Ok(self.delete_object(&def.store_key(), &old).into_object())
    }

    fn delete_object(&mut self, key: &StoreKey, old: &Arc<Value>) -> Deletion {
        let name = objects::name(old).to_string();
        let ns = objects::namespace(old).to_string();
        let is_namespace = key.group.is_empty() && key.plural == "namespaces";
        if objects::is_deleting(old) {
            return Deletion::Kept(old.clone());
        }
        let mut keep = !objects::finalizers(old).is_empty();
        if is_namespace {
            // Contents go first (or get marked); the namespace waits for them.
            keep = self.terminate_namespace(&name) || keep;
        }
        let rv = self.next_rv();
        if keep {
            let mut new = (**old).clone();
            let meta = meta_mut(&mut new);
            meta.insert("deletionTimestamp".into(), objects::now().into());
            meta.insert("deletionGracePeriodSeconds".into(), 0.into());
            // As `markAsDeleting`: one more, if it has one.
            if let Some(generation) = meta
                .get("generation")
                .and_then(Value::as_i64)
                .filter(|g| *g > 0)
            {
                meta.insert("generation".into(), (generation + 1).into());
            }
            meta.insert("resourceVersion".into(), rv.to_string().into());
            if is_namespace {
                new["status"] = json!({"phase": "Terminating"});
            }
            let obj = Arc::new(new);
            self.resource(key)
                .objects
                .insert(key_of(&ns, &name), obj.clone());
            self.emit(key, EventType::Modified, obj.clone(), Some(old.clone()));
            Deletion::Kept(obj)
        } else {
            self.remove(key, &ns, &name, old.clone());
            Deletion::Removed {
                last: old.clone(),
                rv,
            }
        }
    }

    /// Deletes every object in a namespace that can go now, marks the rest;
    /// returns whether any object remains (so the namespace must wait).
    fn terminate_namespace(&mut self, ns: &str) -> bool {
        let mut remaining = false;
        let keys: Vec<StoreKey> = self.namespaced_keys();
        for key in keys {
            let objs = self.namespace_objects(&key, ns);
            for obj in objs {
                if let Deletion::Kept(_) = self.delete_object(&key, &obj) {
                    remaining = true;
                }
            }
        }
        remaining
    }

    fn namespaced_keys(&self) -> Vec<StoreKey> {
        let mut keys: Vec<StoreKey> = self
            .defs
            .iter()
            .filter(|d| d.namespaced)
            .map(|d| d.store_key())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    fn namespace_objects(&self, key: &StoreKey, ns: &str) -> Vec<Arc<Value>> {
        self.resources
            .get(key)
            .map(|r| {
                r.objects
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((o, _), _)| o == ns)
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Drops whatever is left in a removed namespace.
    fn purge_namespace(&mut self, ns: &str) {
        for key in self.namespaced_keys() {
            for obj in self.namespace_objects(&key, ns) {
                self.next_rv();
                let removed = self
                    .resource(&key)
                    .objects
                    .remove(&key_of(ns, objects::name(&obj)));
                self.released.extend(removed.map(Released::Object));
                self.emit_removal(&key, obj);
            }
        }
    }

    fn finish_namespace_if_empty(&mut self, ns: &str) {
        let ns_key = StoreKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        let Some(ns_obj) = self.object(&ns_key, "", ns) else {
            return;
        };
        if !objects::is_deleting(&ns_obj) || !objects::finalizers(&ns_obj).is_empty() {
            return;
        }
        let empty = self
            .namespaced_keys()
            .iter()
            .all(|k| self.namespace_objects(k, ns).is_empty());
        if empty {
            self.next_rv();
            self.remove(&ns_key, "", ns, ns_obj);
        }
    }

    /// Deletes each of `listed` that is still stored as listed (the same
    /// UID); returns what became of each.
    pub(crate) fn delete_listed(
        &mut self,
        def: &ResourceDef,
        listed: &[Arc<Value>],
    ) -> Vec<Deletion> {
        let key = def.store_key();
        listed
            .iter()
            .filter_map(|item| {
                let current = self.object(&key, objects::namespace(item), objects::name(item))?;
                let same = objects::meta_str(&current, "uid") == objects::meta_str(item, "uid");
                same.then(|| self.delete_object(&key, &current))
            })
            .collect()
    }

    /// Starts a watch: from the current state (`from` = None) or after a
    /// resourceVersion; `connection` is closed should the watcher fall too
    /// far behind.
    pub(crate) fn subscribe(
        &mut self,
        def: &ResourceDef,
        ns: Option<&str>,
        from: Option<u64>,
        connection: Option<crate::server::ConnectionCloser>,
    ) -> Result<Subscription, ApiError> {
        if ns.is_some() && !def.namespaced {
            Self::scope_ns(def, ns)?;
        }
        let rv = self.rv;
        self.trim_history();
        let res = self.resource(&def.store_key());
        let start = match from {
            None => WatchStart::Snapshot(match ns {
                Some(ns) => res
                    .objects
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((o, _), _)| o == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
                None => res.objects.values().cloned().collect(),
            }),
            Some(after) if after < res.floor => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {after} ({}); re-list and watch from the list's resourceVersion",
                    res.floor
                )));
            }
            Some(after) => WatchStart::History(res.history.after(after)),
        };
        let rx = res.watchers.subscribe(connection);
        Ok(Subscription { start, rx, rv })
    }
}

/// Rejects a CRD in a group served built-in (it would replace the built-in
/// API) or in a protected group without approval, as the API server does.
fn check_crd_group(def: &ResourceDef, name: &str, crd: &Value) -> Result<(), ApiError> {
    let builtins = resources::builtins();
    let groups: Vec<&str> = builtins.iter().map(|d| d.group.as_str()).collect();
    crate::limits::check_crd_group(crd, &groups)
        .map_err(|e| ApiError::invalid(&def.group, &def.kind, name, e))
}

/// Rejects a body whose `kind` is not the resource's kind.
fn check_kind(def: &ResourceDef, body: &Value) -> Result<(), ApiError> {
    match body.get("kind").and_then(Value::as_str) {
        Some(kind) if !kind.is_empty() && kind != def.kind => Err(ApiError::bad_request(format!(
            "the kind of the object ({kind}) does not match the resource {} ({}); send it to the {kind} resource instead",
            def.plural, def.kind
        ))),
        _ => Ok(()),
    }
}

fn with_rv(obj: &Value, rv: u64) -> Value {
    let mut new = obj.clone();
    meta_mut(&mut new).insert("resourceVersion".into(), rv.to_string().into());
    new
}

fn crd_status(crd: &Value) -> Value {
    let now = objects::now();
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool).unwrap_or(false))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({})),
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    })
}

/// The `410` for a continue token whose version was compacted, with a token
/// that goes on from the same key at the latest version (the API server's
/// words and token).
fn expired_continue(after: &(String, String)) -> ApiError {
    ApiError::expired(
        "The provided continue parameter is too old to display a consistent list result. \
         You can start a new list without the continue parameter, or use the continue token \
         in this response to retrieve the remainder of the results. Continuing with the \
         provided token results in an inconsistent list - objects that were created, \
         modified, or deleted between the time the first chunk was returned and now may \
         show up in the list.",
    )
    .with_continue(encode_continue(ContinueAt::Latest, after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selectors::{LabelSelector, Selectors};

    fn list(
        store: &Store,
        def: &ResourceDef,
        ns: Option<&str>,
        selectors: &Selectors,
        limit: Option<usize>,
        continue_token: Option<&str>,
        exact_rv: Option<u64>,
    ) -> Result<crate::listing::ListPage, ApiError> {
        let cut = limit.filter(|_| selectors.is_empty());
        let snapshot = store.list_snapshot(def, ns, continue_token, exact_rv, cut)?;
        Ok(snapshot.page(selectors, limit))
    }

    fn cm_def(store: &Store) -> Arc<ResourceDef> {
        store.find_def("", "v1", "configmaps").unwrap()
    }

    /// A store of `history` events with ConfigMaps `names` in `default`.
    fn with_configmaps(history: usize, names: &[&str]) -> (Store, Arc<ResourceDef>) {
        let mut store = Store::new(history);
        let def = cm_def(&store);
        for n in names {
            store.create(&def, Some("default"), cm(n), false).unwrap();
        }
        (store, def)
    }

    fn cm(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"app": name}}, "data": {"k": "v"}})
    }

    #[test]
    fn starts_with_initial_namespaces() {
        let store = Store::new(100);
        let ns = store.find_def("", "v1", "namespaces").unwrap();
        let page = list(&store, &ns, None, &Selectors::default(), None, None, None).unwrap();
        assert_eq!(page.items.len(), 3);
        assert_eq!(store.current_rv(), 4);
    }

    #[test]
    fn create_sets_server_fields_and_rejects_duplicates() {
        let mut store = Store::new(100);
        let def = cm_def(&store);
        let obj = store.create(&def, Some("default"), cm("a"), false).unwrap();
        assert_eq!(obj["kind"], "ConfigMap");
        assert_eq!(obj["apiVersion"], "v1");
        assert!(
            obj["metadata"].get("generation").is_none(),
            "ConfigMaps have none"
        );
        assert_eq!(obj["metadata"]["resourceVersion"], "5");
        assert_eq!(obj["metadata"]["uid"].as_str().unwrap().len(), 36);
        assert_eq!(
            store
                .create(&def, Some("default"), cm("a"), false)
                .unwrap_err()
                .code,
            409
        );
        assert_eq!(
            store
                .create(&def, Some("nope"), cm("a"), false)
                .unwrap_err()
                .code,
            404
        );
        let wrong = json!({"kind": "Secret", "metadata": {"name": "b"}});
        assert_eq!(
            store
                .create(&def, Some("default"), wrong, false)
                .unwrap_err()
                .code,
            400
        );
        let mut other_uid = (*store.get(&def, Some("default"), "a").unwrap()).clone();
        other_uid["metadata"]["uid"] = "x".into();
        let err = store
            .update(&def, Some("default"), "a", other_uid, Target::Main, false)
            .unwrap_err();
        assert_eq!(err.code, 409);
    }

    #[test]
    fn generate_name_appends_a_suffix() {
        let mut store = Store::new(100);
        let def = cm_def(&store);
        let obj = store
            .create(
                &def,
                Some("default"),
                json!({"metadata": {"generateName": "x-"}}),
                false,
            )
            .unwrap();
        assert!(objects::name(&obj).starts_with("x-"));
        assert_eq!(objects::name(&obj).len(), 7);
    }

    #[test]
    fn update_checks_resource_version() {
        let mut store = Store::new(100);
        let def = cm_def(&store);
        let obj = store.create(&def, Some("default"), cm("a"), false).unwrap();
        let mut stale = (*obj).clone();
        stale["metadata"]["resourceVersion"] = "1".into();
        assert_eq!(
            store
                .update(&def, Some("default"), "a", stale, Target::Main, false)
                .unwrap_err()
                .code,
            409
        );
        let mut next = (*obj).clone();
        next["data"]["k"] = "w".into();
        let updated = store
            .update(&def, Some("default"), "a", next, Target::Main, false)
            .unwrap();
        assert_eq!(updated["data"]["k"], "w");
        let relabel = json!({"metadata": {"labels": {"x": "y"}}});
        let (patched, _) = store
            .patch(
                &def,
                Some("default"),
                "a",
                PatchKind::Merge,
                &relabel,
                Target::Main,
                false,
            )
            .unwrap();
        assert_eq!(patched["metadata"]["labels"]["x"], "y");
        let rv = store.current_rv();
        let (same, _) = store
            .patch(
                &def,
                Some("default"),
                "a",
                PatchKind::Merge,
                &relabel,
                Target::Main,
                false,
            )
            .unwrap();
        assert_eq!(
            store.current_rv(),
            rv,
            "a no-op patch does not bump the resourceVersion"
        );
        assert_eq!(same, patched);
    }

    /// Writes `patch` to `name` as a merge patch on the main resource.
    fn merge(store: &mut Store, def: &ResourceDef, name: &str, patch: Value) -> Arc<Value> {
        let target = Target::Main;
        let (obj, _) = store
            .patch(
                def,
                Some("default"),
                name,
                PatchKind::Merge,
                &patch,
                target,
                false,
            )
            .unwrap();
        obj
    }

    #[test]
    fn a_deployment_has_a_generation_bumped_by_its_spec_and_annotations() {
        let mut store = Store::new(100);
        let def = store.find_def("apps", "v1", "deployments").unwrap();
        let body = json!({"metadata": {"name": "d", "generation": 7}, "spec": {"replicas": 1}});
        let obj = store.create(&def, Some("default"), body, false).unwrap();
        assert_eq!(obj["metadata"]["generation"], 1, "set on create");
        for (patch, expected, why) in [
            (json!({"spec": {"replicas": 2}}), 2, "its spec bumps it"),
            (
                json!({"metadata": {"labels": {"a": "b"}}}),
                2,
                "labels do not",
            ),
            (
                json!({"metadata": {"annotations": {"a": "b"}}}),
                3,
                "annotations do",
            ),
            (
                json!({"metadata": {"generation": 40}}),
                3,
                "a write cannot set it",
            ),
            (
                json!({"status": {"replicas": 2}}),
                3,
                "status is a subresource",
            ),
        ] {
            let obj = merge(&mut store, &def, "d", patch);
            assert_eq!(obj["metadata"]["generation"], expected, "{why}");
        }
    }

    #[test]
    fn a_configmap_keeps_the_generation_its_creator_gave_and_no_write_bumps_it() {
        let mut store = Store::new(100);
        let def = cm_def(&store);
        let mut given = cm("g");
        given["metadata"]["generation"] = 5.into();
        given["metadata"]["finalizers"] = json!(["x/y"]);
        let obj = store.create(&def, Some("default"), given, false).unwrap();
        assert_eq!(obj["metadata"]["generation"], 5, "kept as given");
        let obj = merge(&mut store, &def, "g", json!({"data": {"k": "w"}}));
        assert_eq!(obj["metadata"]["generation"], 5, "not bumped");
        let none = json!({});
        let obj = store
            .delete(&def, Some("default"), "g", &none, false)
            .unwrap();
        assert_eq!(
            obj["metadata"]["generation"], 6,
            "marking it as being deleted adds one"
        );
        let mut held = cm("n");
        held["metadata"]["finalizers"] = json!(["x/y"]);
        store.create(&def, Some("default"), held, false).unwrap();
        let obj = store
            .delete(&def, Some("default"), "n", &none, false)
            .unwrap();
        assert!(objects::is_deleting(&obj));
        assert!(
            obj["metadata"].get("generation").is_none(),
            "none to add to"
        );
        let mut negative = cm("m");
        negative["metadata"]["generation"] = (-1).into();
        let err = store
            .create(&def, Some("default"), negative, false)
            .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "ConfigMap \"m\" is invalid: metadata.generation: Invalid value: -1: must be greater than or equal to 0"
        );
        let mut text = cm("t");
        text["metadata"]["generation"] = "1".into();
        let err = validation::object(&def, &text).unwrap_err();
        assert_eq!(err.code, 400, "{}", err.message);
    }

    #[test]
    fn a_uid_in_a_patch_or_update_is_a_precondition() {
        let mut store = Store::new(100);
        let def = cm_def(&store);
        let obj = store.create(&def, Some("default"), cm("a"), false).unwrap();
        let uid = objects::meta_str(&obj, "uid").unwrap().to_owned();
        let mut patch = |uid: &str| {
            store.patch(
                &def,
                Some("default"),
                "a",
                PatchKind::Merge,
                &json!({"metadata": {"uid": uid}, "data": {"k": uid}}),
                Target::Main,
                false,
            )
        };
        let err = patch("another-instance").unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("Precondition failed: UID"),
            "{}",
            err.message
        );
        let (patched, _) = patch(&uid).expect("the same instance");
        assert_eq!(patched["data"]["k"], uid.as_str());
        let mut replaced = (*patched).clone();
        replaced["metadata"]["uid"] = "another-instance".into();
        let err = store
            .update(&def, Some("default"), "a", replaced, Target::Main, false)
            .unwrap_err();
        assert_eq!(err.code, 409);
    }

    #[test]
    fn finalizers_delay_deletion() {
        let mut store = Store::new(100);
        let def = cm_def(&store);
        let mut body = cm("a");
        body["metadata"]["finalizers"] = json!(["f1"]);
        store.create(&def, Some("default"), body, false).unwrap();
        let marked = store
            .delete(&def, Some("default"), "a", &json!({}), false)
            .unwrap();
        assert!(objects::is_deleting(&marked));
        let again = store
            .delete(&def, Some("default"), "a", &json!({}), false)
            .unwrap();
        assert_eq!(again, marked);
        let add = json!({"metadata": {"finalizers": ["f1", "f2"]}});
        assert_eq!(
            store
                .patch(
                    &def,
                    Some("default"),
                    "a",
                    PatchKind::Merge,
                    &add,
                    Target::Main,
                    false
                )
                .unwrap_err()
                .code,
            422
        );
        let clear = json!({"metadata": {"finalizers": null}});
        store
            .patch(
                &def,
                Some("default"),
                "a",
                PatchKind::Merge,
                &clear,
                Target::Main,
                false,
            )
            .unwrap();
        assert_eq!(store.get(&def, Some("default"), "a").unwrap_err().code, 404);
    }

    #[test]
    fn status_subresource_separates_writes() {
        let mut store = Store::new(100);
        let crd_def = store
            .find_def("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .unwrap();
        store
            .create(
                &crd_def,
                None,
                resources::crd_object("example.com", "v1", "widgets", "Widget", true),
                false,
            )
            .unwrap();
        let def = store.find_def("example.com", "v1", "widgets").unwrap();
        store
            .create(
                &def,
                Some("default"),
                json!({"metadata": {"name": "w"}, "spec": {"a": 1}, "status": {"s": 1}}),
                false,
            )
            .unwrap();
        let obj = store.get(&def, Some("default"), "w").unwrap();
        assert!(obj.get("status").is_none(), "status is dropped on create");
        let main = json!({"spec": {"a": 2}, "status": {"s": 2}});
        let (obj, _) = store
            .patch(
                &def,
                Some("default"),
                "w",
                PatchKind::Merge,
                &main,
                Target::Main,
                false,
            )
            .unwrap();
        assert!(obj.get("status").is_none());
        assert_eq!(obj["metadata"]["generation"], 2);
        let status = json!({"spec": {"a": 3}, "status": {"s": 3}});
        let (obj, _) = store
            .patch(
                &def,
                Some("default"),
                "w",
                PatchKind::Merge,
                &status,
                Target::Status,
                false,
            )
            .unwrap();
        assert_eq!(obj["status"]["s"], 3);
        assert_eq!(obj["spec"]["a"], 2);
        assert_eq!(obj["metadata"]["generation"], 2);
    }

    #[test]
    fn crd_deletion_removes_its_resource() {
        let mut store = Store::new(100);
        let crd_def = store
            .find_def("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .unwrap();
        store
            .create(
                &crd_def,
                None,
                resources::crd_object("example.com", "v1", "widgets", "Widget", false),
                false,
            )
            .unwrap();
        assert!(store.find_def("example.com", "v1", "widgets").is_some());
        store
            .delete(&crd_def, None, "widgets.example.com", &json!({}), false)
            .unwrap();
        assert!(store.find_def("example.com", "v1", "widgets").is_none());
    }

    #[test]
    fn a_version_no_longer_served_leaves_discovery_and_ends_the_watches() {
        let mut store = Store::new(100);
        let crd_def = store
            .find_def("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .unwrap();
        let mut crd = resources::crd_object("example.com", "v1", "widgets", "Widget", true);
        let mut v2 = crd["spec"]["versions"][0].clone();
        v2["name"] = "v2".into();
        v2["storage"] = false.into();
        crd["spec"]["versions"] = json!([crd["spec"]["versions"][0].clone(), v2]);
        store.create(&crd_def, None, crd.clone(), false).unwrap();
        let v1 = store.find_def("example.com", "v1", "widgets").unwrap();
        let mut watch = store.subscribe(&v1, None, None, None).unwrap();
        let both = crd["spec"]["versions"].clone();
        crd["spec"]["versions"][1]["served"] = true.into();
        crd["spec"]["versions"][0]["served"] = false.into();
        store
            .patch(
                &crd_def,
                None,
                "widgets.example.com",
                PatchKind::Merge,
                &json!({"spec": {"versions": crd["spec"]["versions"]}}),
                Target::Main,
                false,
            )
            .unwrap();
        assert!(store.find_def("example.com", "v1", "widgets").is_none());
        assert!(store.find_def("example.com", "v2", "widgets").is_some());
        assert_eq!(
            watch.rx.try_recv().map(|e| e.is_some()),
            Err(fanout::Ended::Closed)
        );
        // Serving it again is no removal: watches go on.
        let v2 = store.find_def("example.com", "v2", "widgets").unwrap();
        let mut watch = store.subscribe(&v2, None, None, None).unwrap();
        store
            .patch(
                &crd_def,
                None,
                "widgets.example.com",
                PatchKind::Merge,
                &json!({"spec": {"versions": both}}),
                Target::Main,
                false,
            )
            .unwrap();
        assert!(store.find_def("example.com", "v1", "widgets").is_some());
        assert!(watch.rx.try_recv().is_ok());
    }

    #[test]
    fn every_page_of_a_list_reports_the_version_of_its_first_page() {
        // A watch from the list's version must replay what changed while the
        // pages were fetched; otherwise a list+watch client misses it.
        let (mut store, def) = with_configmaps(100, &["a", "b", "c"]);
        let all = Selectors::default();
        let p1 = list(&store, &def, Some("default"), &all, Some(2), None, None).unwrap();
        store.create(&def, Some("default"), cm("d"), false).unwrap();
        let token = p1.continue_token.unwrap();
        let p2 = list(
            &store,
            &def,
            Some("default"),
            &all,
            Some(2),
            Some(&token),
            None,
        )
        .unwrap();
        assert_eq!(p2.rv, p1.rv);
        assert!(store.current_rv() > p1.rv);
    }

    #[test]
    fn paging_and_selectors() {
        let (mut store, def) = with_configmaps(100, &["a", "b", "c"]);
        let all = Selectors::default();
        let p1 = list(&store, &def, Some("default"), &all, Some(2), None, None).unwrap();
        assert_eq!(p1.items.len(), 2);
        assert_eq!(p1.remaining, Some(1));
        let token = p1.continue_token.unwrap();
        let p2 = list(
            &store,
            &def,
            Some("default"),
            &all,
            Some(2),
            Some(&token),
            None,
        )
        .unwrap();
        assert_eq!(p2.items.len(), 1);
        assert!(p2.continue_token.is_none());
        store.compact();
        assert_eq!(
            list(
                &store,
                &def,
                Some("default"),
                &all,
                Some(2),
                Some(&token),
                None
            )
            .unwrap_err()
            .code,
            410
        );
        let sel = Selectors {
            labels: LabelSelector::parse("app in (a,c)").unwrap(),
            ..Default::default()
        };
        assert_eq!(
            list(&store, &def, None, &sel, None, None, None)
                .unwrap()
                .items
                .len(),
            2
        );
    }

    #[test]
    fn a_page_without_selectors_takes_only_its_objects() {
        let (mut store, def) = with_configmaps(100, &["a", "b", "c", "d", "e"]);
        let other = store.find_def("", "v1", "namespaces").unwrap();
        // Its keys come right after those of `default`.
        let ns = json!({"metadata": {"name": "default-b"}});
        store.create(&other, None, ns, false).unwrap();
        store
            .create(&def, Some("default-b"), cm("a"), false)
            .unwrap();
        let snapshot = store
            .list_snapshot(&def, Some("default"), None, None, Some(2))
            .unwrap();
        assert_eq!((snapshot.objects.len(), snapshot.rest), (2, Some(3)));
        // Page by page, the same as a full snapshot paged: every object of
        // the namespace once, in key order, with what is left after each.
        let all = Selectors::default();
        let (mut names, mut left, mut token) = (Vec::new(), Vec::new(), None);
        loop {
            let page = list(
                &store,
                &def,
                Some("default"),
                &all,
                Some(2),
                token.as_deref(),
                None,
            )
            .unwrap();
            names.extend(page.items.iter().map(|o| objects::name(o).to_owned()));
            left.push(page.remaining);
            token = page.continue_token;
            if token.is_none() {
                break;
            }
        }
        assert_eq!(names, ["a", "b", "c", "d", "e"]);
        assert_eq!(left, [Some(3), Some(1), None]);
    }

    #[test]
    fn a_page_with_selectors_counts_nothing_left() {
        let (store, def) = with_configmaps(100, &["a", "b", "c"]);
        // The API server's `remainingItemCount` counts every object after
        // the page, matching or not: with selectors it gives none.
        let sel = Selectors {
            labels: LabelSelector::parse("app in (a,b,c)").unwrap(),
            ..Default::default()
        };
        let page = list(&store, &def, None, &sel, Some(1), None, None).unwrap();
        assert_eq!(page.items.len(), 1);
        assert!(page.continue_token.is_some());
        assert_eq!(page.remaining, None);
    }

    #[test]
    fn history_resume_and_expiry() {
        let (mut store, def) = with_configmaps(2, &["a", "b", "c", "d"]);
        let rv = store.current_rv();
        let sub = store.subscribe(&def, None, Some(rv - 1), None).unwrap();
        match sub.start {
            WatchStart::History(evs) => assert_eq!(evs.len(), 1),
            WatchStart::Snapshot(_) => panic!("expected history"),
        }
        assert_eq!(
            store
                .subscribe(&def, None, Some(rv - 3), None)
                .unwrap_err()
                .code,
            410
        );
        store.compact();
        assert_eq!(
            store
                .subscribe(&def, None, Some(rv), None)
                .unwrap_err()
                .code,
            410
        );
        assert!(
            store
                .subscribe(&def, None, Some(store.current_rv()), None)
                .is_ok()
        );
    }

    #[test]
    fn namespace_deletion_removes_contents() {
        let mut store = Store::new(100);
        let def = cm_def(&store);
        let ns_def = store.find_def("", "v1", "namespaces").unwrap();
        store
            .create(&ns_def, None, json!({"metadata": {"name": "n1"}}), false)
            .unwrap();
        store.create(&def, Some("n1"), cm("a"), false).unwrap();
        let mut held = cm("b");
        held["metadata"]["finalizers"] = json!(["f"]);
        store.create(&def, Some("n1"), held, false).unwrap();
        store
            .delete(&ns_def, None, "n1", &json!({}), false)
            .unwrap();
        assert!(objects::is_deleting(
            &store.get(&ns_def, None, "n1").unwrap()
        ));
        assert_eq!(store.get(&def, Some("n1"), "a").unwrap_err().code, 404);
        let clear = json!({"metadata": {"finalizers": null}});
        store
            .patch(
                &def,
                Some("n1"),
                "b",
                PatchKind::Merge,
                &clear,
                Target::Main,
                false,
            )
            .unwrap();
        assert_eq!(store.get(&ns_def, None, "n1").unwrap_err().code, 404);
    }

    #[test]
    fn events_are_shared_between_core_and_events_k8s_io() {
        let mut store = Store::new(100);
        let new = store.find_def("events.k8s.io", "v1", "events").unwrap();
        let core = store.find_def("", "v1", "events").unwrap();
        let body = json!({"metadata": {"name": "e"}, "note": "hi", "regarding": {"name": "p"}, "eventTime": "2026-01-01T00:00:00.000000Z"});
        store.create(&new, Some("default"), body, false).unwrap();
        let stored = store.get(&core, Some("default"), "e").unwrap();
        assert_eq!(conversion::present(&stored, "v1")["message"], "hi");
        let sel = Selectors {
            fields: crate::selectors::FieldSelector::parse("involvedObject.name=p").unwrap(),
            ..Default::default()
        };
        assert_eq!(
            list(&store, &core, Some("default"), &sel, None, None, None)
                .unwrap()
                .items
                .len(),
            1
        );
        let patch = json!({"message": "bye"});
        let (patched, _) = store
            .patch(
                &core,
                Some("default"),
                "e",
                PatchKind::Merge,
                &patch,
                Target::Main,
                false,
            )
            .unwrap();
        assert_eq!(patched["apiVersion"], "v1");
        assert_eq!(
            conversion::present(&patched, "events.k8s.io/v1")["note"],
            "bye"
        );
    }

    #[test]
    fn secrets_fold_string_data() {
        let mut store = Store::new(100);
        let def = store.find_def("", "v1", "secrets").unwrap();
        let obj = store
            .create(
                &def,
                Some("default"),
                json!({"metadata": {"name": "s"}, "stringData": {"a": "hi"}}),
                false,
            )
            .unwrap();
        assert_eq!(obj["data"]["a"], "aGk=");
        assert!(obj.get("stringData").is_none());
    }

    fn big_cm(name: &str, bytes: usize) -> Value {
        json!({"metadata": {"name": name}, "data": {"k": "x".repeat(bytes)}})
    }

    #[test]
    fn history_is_bounded_by_bytes_over_every_resource() {
        let mut store = Store::new(100_000);
        store.set_history_bounds(2 * 1024 * 1024, Duration::from_secs(3600));
        let def = cm_def(&store);
        let first = store.current_rv();
        for i in 0..30 {
            let name = format!("c{i}");
            store
                .create(&def, Some("default"), big_cm(&name, 256 * 1024), false)
                .unwrap();
            store
                .delete(&def, Some("default"), &name, &json!({}), false)
                .unwrap();
            assert!(store.history_used <= 2 * 1024 * 1024);
        }
        let kept: usize = store.resources.values().map(|r| r.history.bytes()).sum();
        assert_eq!(kept, store.history_used);
        assert!(kept > 0, "the newest events stay");
        // Resuming from before the dropped events is 410 Gone; from now is fine.
        assert_eq!(
            store
                .subscribe(&def, None, Some(first), None)
                .unwrap_err()
                .code,
            410
        );
        assert!(
            store
                .subscribe(&def, None, Some(store.current_rv()), None)
                .is_ok()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn history_is_bounded_by_age() {
        let mut store = Store::new(100_000);
        store.set_history_bounds(usize::MAX, Duration::from_secs(60));
        let def = cm_def(&store);
        store
            .create(&def, Some("default"), cm("old"), false)
            .unwrap();
        let old = store.current_rv();
        tokio::time::advance(Duration::from_secs(61)).await;
        store
            .create(&def, Some("default"), cm("new"), false)
            .unwrap();
        assert_eq!(
            store
                .subscribe(&def, None, Some(old - 1), None)
                .unwrap_err()
                .code,
            410
        );
        let sub = store.subscribe(&def, None, Some(old), None).unwrap();
        match sub.start {
            WatchStart::History(evs) => assert_eq!(evs.len(), 1),
            WatchStart::Snapshot(_) => panic!("expected history"),
        }
        // With no writes, ageing alone empties the history on the next watch;
        // a watcher that saw the last event still resumes.
        tokio::time::advance(Duration::from_secs(61)).await;
        let now = store.current_rv();
        assert!(store.subscribe(&def, None, Some(now), None).is_ok());
        assert_eq!(
            store
                .subscribe(&def, None, Some(old), None)
                .unwrap_err()
                .code,
            410
        );
        assert_eq!(store.history_used, 0);
    }
}
