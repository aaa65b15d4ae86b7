//! kopf-runtime: Kubernetes operators as plain `async fn`s, in the spirit of
//! [Kopf](https://kopf.readthedocs.io).
//!
//! Operator authors annotate functions with attribute macros; each attribute
//! registers the function as a handler of one kind, for one resource, with
//! Kopf's options. Parameters are injected by name, like Kopf's kwargs.
//!
//! ```
//! use kopf_runtime as kopf;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! #[kopf::on_create(ConfigMap, retries = 3, backoff = 10)]
//! async fn created(name: &str, logger: &kopf::Logger) -> kopf::Result<serde_json::Value> {
//!     logger.info(format!("created {name}"));
//!     Ok(serde_json::json!({"seen": true})) // stored in status.created
//! }
//! # fn main() {}
//! ```
//!
//! Users depend on `kopf-runtime` alone (write `use kopf_runtime as kopf;`);
//! it re-exports the macros. Generated code names this crate as
//! `::kopf_runtime`, so do not rename the dependency in `Cargo.toml`.
//!
//! # Running
//!
//! [`run()`] is the whole `main` of an operator: it parses a command line
//! like `kopf run` (`-n/--namespace` with globs and `!` excludes, `-A`,
//! `--kubeconfig`, `--context`, `-v`, `-q`, `--log-format`, `-L/--liveness`
//! and `--metrics` (see below), and `--emulator` to run against an
//! in-process Kubernetes API emulator), collects the handlers declared with
//! the macros, and runs until SIGINT or SIGTERM.
//! `--emulator` needs the `emulator` feature, which is off by default so
//! that production builds do not carry the emulator:
//! `kopf-runtime = { version = "0.1", features = ["emulator"] }`.
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> Result<(), kopf_runtime::RunError> {
//!     kopf_runtime::run().await
//! }
//! ```
//!
//! The runtime works on either tokio scheduler. A current-thread runtime,
//! `#[tokio::main(flavor = "current_thread")]`, is the cheaper choice for
//! an operator on a small pod: in the benchmarks, 10,000 timers took about
//! 40 % less CPU per tick on it than on the multi-threaded one, a burst of
//! creations about 20 % less, and idle memory was lower, with no waking of
//! threads and one malloc arena. Handlers that block belong in
//! `tokio::task::spawn_blocking` on either.
//!
//! [`Runner`] does the same with options (settings, a registry built without
//! macros, demo objects for `--emulator`), and [`Operator`] runs a
//! [`Registry`] with a given client until a future completes, for embedding
//! and tests. What the runtime promises about handlers is listed under
//! [What the runtime guarantees](#what-the-runtime-guarantees); how the
//! engine keeps those promises, module by module, is in the repository's
//! `ARCHITECTURE.md`.
//!
//! # Probes and metrics
//!
//! `--liveness http://0.0.0.0:8080/healthz` serves the liveness probe: 200
//! with the results of the `on_probe` handlers, 500 naming a probe handler
//! that failed or a watch that went silent (nothing received for
//! [`settings.watching.silence_limit`](settings::WatchingSettings::silence_limit)).
//! `/readyz` beside it answers 200 once every served resource has finished
//! its first listing (a resource the cluster starts serving later is waited
//! for likewise, one no longer served is not). Both answer from the
//! operator's start, during the login; the `on_probe` handlers run once the
//! login has given a client. `--metrics http://0.0.0.0:9090/metrics` serves
//! Prometheus metrics in the OpenMetrics text format: handler calls by
//! outcome and their duration, handlers in flight, queue depth and latency,
//! watch events and restarts, objects tracked, daemons and timers, API
//! requests; labels never name objects. With `--emulator`, both are served
//! on a free loopback port, logged at start. [`Endpoints`] binds the same
//! listeners for [`Operator::endpoints`].
//!
//! # Resources
//!
//! The first argument of every resource handler names the resource, in
//! Kopf's forms (the builder's are [`ResourceRef`]'s constructors):
//!
//! * a Rust type implementing [`kube::Resource`] — k8s-openapi types (`Pod`,
//!   `Secret`, …) or a `#[derive(CustomResource)]` type: `#[kopf::on_create(KopfExample)]`;
//! * a name: `#[kopf::on_create("kopfexamples")]`, which matches the plural,
//!   the singular, the kind or a short name (`"KopfExample"`, `"kex"`) in any
//!   group; `"deployments.apps"` names the group too, and
//!   `"kopfexamples.v1.kopf.dev"` the version as well;
//! * a group and a name: `#[kopf::on_create("apps", "deployment")]`, where the
//!   group may carry the version (`"apps/v1"`) or be `"v1"` (the core group's);
//! * a group, a version and a name: `#[kopf::timer("", "v1", "secrets", …)]`
//!   (`""` is the core group);
//! * keywords among the options: `#[kopf::daemon(kind = "Deployment", group = "apps")]`,
//!   one of `kind`, `plural`, `singular`, `shortcut` (a short name) or
//!   `category`, optionally with `group` and `version`.
//!
//! A wrong form is a compile error that lists these. The operator resolves
//! the names through the cluster's discovery when it starts:
//!
//! * Without a version, the group's preferred version is served.
//! * Without a group, any group matches, but the core group wins (`"pods"`
//!   is `pods.v1`). A name matching resources of two other groups is
//!   ambiguous: the operator does not start, and its error
//!   ([`OperatorError::AmbiguousResource`]) names the candidates.
//! * A category serves every resource in it.
//! * A name that matches nothing is a warning; the resource is served once
//!   its CRD appears.
//! * Without a group, every API group is read, and one that does not
//!   answer (an aggregated API that is down) holds the start-up back until
//!   it does: name the group where you can, as Kopf advises.
//! * Several names of one resource serve it with one watch; a fn reached
//!   through several of them runs once per change.
//!
//! The operator follows the cluster while it runs: it watches the custom
//! resource definitions (or, without permission to, scans every 10
//! seconds), so that a CRD created or deleted, or a version added, removed
//! or made preferred, is noticed. A resource that is no longer served stops
//! being served, with a warning saying why: its daemons and timers are
//! stopped as on the operator's exit, no `on_delete` handler runs, and
//! serving resumes once it is back.
//!
//! Activities (`on_startup`, `on_cleanup`, `on_probe`, `on_login`) take no resource.
//!
//! # Parameters
//!
//! A handler takes any subset of the parameters available to its kind, in any
//! order, by name. A leading `_` is ignored (`_name` is `name`); `type` is
//! written `r#type`. A parameter written as a reference (`&T`, `Option<&T>`)
//! borrows, others are owned. Unknown names, names not available to the kind,
//! and types not accepted for a name are compile errors pointing at the
//! parameter and saying what the name accepts (see [`params`]).
//! `T: DeserializeOwned` below is any type that deserializes from the JSON
//! value (`serde_json::Value`, the resource type, its spec, …); where it is
//! `Option<T>` or `Option<&T>`, a `null` or absent value is `None`.
//!
//! | name | accepted types | kinds |
//! |------|----------------|-------|
//! | `body`, `spec`, `status`, `meta`, `labels`, `annotations` | `&T`, `T`, `Option<T>`, `Option<&T>` for any `T: DeserializeOwned` (the resource type, the CRD's spec, `ObjectMeta`, `BTreeMap<String, String>`, `serde_json::Value`, …) | resource kinds |
//! | `uid`, `name`, `namespace` | `&str`, `String`, `Option<&str>`, `Option<String>` | resource kinds |
//! | `logger` | `&Logger`, `Logger` | all |
//! | `memo` | `&Memo`, `Memo`: the object's, or the operator's for activities (see [`Memo`]) | all |
//! | `param` | `&T`, `T`, `Option<T>`, `Option<&T>`, `T: DeserializeOwned` (the `param` option; `None` when unset) | all |
//! | `client` | `&kube::Client`, `kube::Client` | all but `on_login` |
//! | `patch` | `&Patch`, `Patch` | change, event, timer, daemon, webhook kinds (a mutating webhook's patch is its answer) |
//! | `retry` | `u32`, `u64`, `usize` | change kinds, timers, daemons, activities |
//! | `started` | `kopf::Timestamp`, `Option<kopf::Timestamp>`, `SystemTime` | as `retry` |
//! | `runtime` | `Duration` | as `retry` |
//! | `reason` | `Reason`, `Option<Reason>` | change kinds |
//! | `diff` | `&Diff`, `Diff` | change kinds, webhooks |
//! | `old`, `new` | `&T`, `T`, `Option<T>`, `Option<&T>`, `T: DeserializeOwned` (take an `Option`: no `old` on creation, no `new` on deletion) | change kinds, webhooks |
//! | `event` | `&T`, `T`, `Option<T>`, `Option<&T>`, `T: DeserializeOwned` | `on_event` |
//! | `r#type` | `Option<EventType>`, `Option<&str>`, `Option<String>` | `on_event` |
//! | `stopped` | `&Stopped`, `Stopped` | `timer`, `daemon` |
//! | `live` | `&LiveBody`, `LiveBody` (`mut live: LiveBody` to await changes) | `timer`, `daemon` |
//! | `subhandlers` | `&Subhandlers`, `Subhandlers` | change kinds |
//! | `operation` | `Operation`, `&str`, `String` | webhooks |
//! | `dryrun` | `bool` | webhooks |
//! | `warnings` | `&Warnings`, `Warnings` | webhooks |
//! | `userinfo` | `&T`, `T`, `Option<T>`, `Option<&T>`, `T: DeserializeOwned` | webhooks |
//! | `subresource` | as `name` | webhooks |
//! | `headers` | `&BTreeMap<String, String>`, `BTreeMap<String, String>` (names in lowercase) | webhooks |
//! | `sslpeer` | `&T`, `T`, `Option<T>`, `Option<&T>`, `T: DeserializeOwned` (an empty object: clients give no certificate) | webhooks |
//! | `settings` | `&mut OperatorSettings` (to change them), `&OperatorSettings` (see [`settings::StartupSettings`]) | `on_startup` |
//! | *index id* | `&Index<T>`, `Index<T>` (`T` is `serde_json::Value` unless given) | all but `index`, `on_startup`, `on_cleanup`, `on_login` |
//!
//! The object parameters (`body`, `spec`, `status`, …) are the object as it
//! was when the call began: for a daemon, when it started; for a timer,
//! at its tick. `live` ([`LiveBody`]) is the object as it is now, updated
//! as the operator processes its events, as Kopf's live `body` is.
//!
//! What a handler writes into `patch` goes to its object in one merge patch
//! with the handler's outcome. The `on_event` handlers of one event share
//! one `patch`, applied after the last of them with the step's own changes
//! (not after a deletion event: the object is gone).
//!
//! "Change kinds" are `on_create`, `on_update`, `on_delete`, `on_resume`, `on_field`;
//! "webhooks" are `on_validate`, `on_mutate`. A parameter named like no kwarg
//! and typed `&kopf::Index` (or `&kopf::Index<T>`) is the index whose
//! `#[index]` handler has that id; the registry checks at start-up that it
//! exists.
//!
//! A body that does not deserialize into the requested type does not panic:
//! the invocation yields [`HandlerError::Kwarg`], which the engine reports
//! and retries like a regular error.
//!
//! # Return values and errors
//!
//! Handlers return `kopf::Result<T>` with `T: Serialize` (Kopf stores the value
//! in `status.<handler id>`; `()` and `null` store nothing), or `()`. Errors
//! are [`Error::Temporary`] (retry after a delay), [`Error::Permanent`] (give
//! up), [`Error::Regular`] (from `?` on any `std::error::Error`; handled per
//! `errors`) and, for webhooks, [`Error::Admission`].
//!
//! Handlers are `async fn`; a plain `fn` is accepted too, for every kind,
//! and runs on tokio's blocking threads, from where `posting::info` and its
//! siblings post Events as from async handlers. A plain-`fn` daemon
//! runs on such a thread for as long as it wants and polls its `stopped`
//! flag ([`Stopped::is_set`], [`Stopped::wait_blocking`]). A thread cannot
//! be cancelled: once asked to stop, a daemon that does not return within
//! its `cancellation_backoff` and `cancellation_timeout` (else the
//! `background` settings' limits) is abandoned and reported (a warning, an
//! `Abandoned` Event, a counter), as an async one is.
//!
//! # Options
//!
//! | option | value | default (Kopf's) | kinds |
//! |--------|-------|------------------|-------|
//! | `id` | string | the fn name, plus `/field` when `field` is set (not for `index`) | all |
//! | `param` | literal or `json!(…)` | none | all |
//! | `retries` | integer | none: retry forever | all but `on_event` and webhooks |
//! | `backoff` | seconds (int or float) | `settings.execution.default_backoff` (60) | as `retries` |
//! | `timeout` | seconds | none | as `retries` |
//! | `errors` | `kopf::ErrorsMode::{Temporary, Permanent, Ignored}` | `Temporary` (`Ignored` for `index`) | as `retries` |
//! | `labels(…)`, `annotations(…)` | `"key" = "value" \| kopf::PRESENT \| kopf::ABSENT \| fn path` | none | resource kinds |
//! | `when` | path of `fn(&Kwargs) -> bool` | none | resource kinds |
//! | `field` | `"dot.separated.path"`: the handler runs only while the field is present (in the old or the new essence for change kinds, in the body for others), and the field is kept in the resource's essence, `status.*` too | none (required for `on_field`) | resource kinds |
//! | `value` | literal, `json!(…)` (`json!(null)`: a present `null`), `kopf::PRESENT`, `kopf::ABSENT`, path of `fn(Option<&Value>, &Kwargs) -> bool` (`None`: absent): matched against the old or the new value for change kinds (the old one is absent on creation), the body's value for others | none | resource kinds (needs `field`) |
//! | `old`, `new` | as `value` (not together with `value`): the field's old and new value, which must also differ (absent and `null` differ) | none | `on_update`, `on_field` |
//! | `deleted` | flag | false | `on_resume` |
//! | `optional` | flag | false (a finalizer is added) | `on_delete` |
//! | `interval`, `idle` | seconds | none: without `interval`, a timer runs once each time the object has been unchanged for `idle`, or just once without `idle` either | `timer` |
//! | `sharp` | flag | false | `timer` |
//! | `initial_delay` | seconds | none | `timer`, `daemon` |
//! | `cancellation_backoff`, `cancellation_timeout`, `cancellation_polling` | seconds | none (operator settings) | `daemon` |
//! | `no_finalizers` | flag | false (a finalizer is kept) | `timer`, `daemon` |
//! | `operations("CREATE", …)` | `CREATE`, `UPDATE`, `DELETE`, `CONNECT` | all | webhooks |
//! | `subresource` | string (`"*"`: every subresource) | none: the object itself | webhooks |
//! | `persistent`, `side_effects`, `ignore_failures` | flags | false | webhooks |
//!
//! A field is absent when a key on its path is missing; a field holding
//! `null` is present. `on_update` and `on_field` handlers with a `field`
//! run only when its value changed; `value = "on"` on them runs when the
//! value turns `on` and when it turns from `on` to another, as in Kopf. See
//! [`Filters`] for every rule.
//!
//! Flags are written bare (`sharp`) or as `sharp = true`. Unknown or
//! duplicate options, wrong value types, options of other kinds and
//! incompatible combinations are compile errors that say how to fix them;
//! the function itself is always emitted unchanged.
//!
//! # One example per handler kind
//!
//! ## `on_create`, `on_update`, `on_delete`, `on_resume`
//!
//! ```
//! use kopf_runtime as kopf;
//! use kube::CustomResource;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(CustomResource, Deserialize, Serialize, Clone, Debug)]
//! #[kube(group = "kopf.dev", version = "v1", kind = "KopfExample", namespaced, schema = "disabled")]
//! pub struct KopfExampleSpec { size: u32 }
//!
//! #[kopf::on_create(KopfExample)]
//! #[kopf::on_resume(KopfExample)]
//! async fn created(spec: &KopfExampleSpec, name: &str, logger: &kopf::Logger) -> kopf::Result<serde_json::Value> {
//!     logger.info(format!("{name} has size {}", spec.size));
//!     Ok(serde_json::json!({"size": spec.size}))
//! }
//!
//! #[kopf::on_update(KopfExample, field = "spec.size", old = kopf::PRESENT)]
//! async fn resized(old: Option<u32>, new: Option<u32>, patch: &kopf::Patch) -> kopf::Result<()> {
//!     patch.set("status.resized", serde_json::json!([old, new]));
//!     Ok(())
//! }
//!
//! #[kopf::on_delete(KopfExample, optional)]
//! async fn deleted(name: &str, retry: u32) -> kopf::Result<()> {
//!     if retry < 3 {
//!         return Err(kopf::Error::temporary(format!("{name}: children remain"), std::time::Duration::from_secs(5)));
//!     }
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! ## `on_field` and `on_event`
//!
//! ```
//! use std::collections::BTreeMap;
//! use kopf_runtime as kopf;
//! use k8s_openapi::api::core::v1::Pod;
//!
//! #[kopf::on_field(Pod, field = "metadata.labels")]
//! async fn relabelled(old: Option<BTreeMap<String, String>>, new: Option<BTreeMap<String, String>>, reason: kopf::Reason) {
//!     let _ = (old, new, reason);
//! }
//!
//! #[kopf::on_event("", "v1", "pods", labels("app" = kopf::PRESENT))]
//! async fn seen(r#type: Option<kopf::EventType>, name: Option<&str>, logger: &kopf::Logger) {
//!     logger.debug(format!("{type:?} {name:?}", type = r#type));
//! }
//! # fn main() {}
//! ```
//!
//! ## `timer` and `daemon`
//!
//! ```
//! use std::time::Duration;
//! use kopf_runtime as kopf;
//! use k8s_openapi::api::core::v1::Pod;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//!
//! #[kopf::timer("", "v1", "secrets", interval = 10, no_finalizers,
//!               annotations("example.com/ttl" = kopf::PRESENT))]
//! async fn expire(meta: &ObjectMeta, client: kube::Client) -> kopf::Result<()> {
//!     let _ = (meta.annotations.as_ref(), client);
//!     Ok(())
//! }
//!
//! // No interval: once each time the object has been unchanged for 10 s.
//! #[kopf::timer(Pod, idle = 10)]
//! async fn settled(name: &str, logger: &kopf::Logger) {
//!     logger.info(format!("{name} has settled"));
//! }
//!
//! // A plain fn runs on a blocking thread, polling its stop flag.
//! #[kopf::daemon(Pod, cancellation_timeout = 5)]
//! fn poll(name: &str, stopped: &kopf::Stopped) {
//!     while !stopped.wait_blocking(Duration::from_secs(10)) {
//!         let _ = name; // blocking work
//!     }
//! }
//!
//! #[kopf::daemon(Pod, cancellation_timeout = 5)]
//! async fn monitor(name: &str, stopped: kopf::Stopped) -> kopf::Result<()> {
//!     while !stopped.is_set() {
//!         let _ = name;
//!         stopped.wait(Duration::from_secs(10)).await;
//!     }
//!     Ok(())
//! }
//!
//! // `live` is the pod as it is now; `changed` awaits its next change.
//! #[kopf::daemon(Pod)]
//! async fn follow(mut live: kopf::LiveBody, stopped: kopf::Stopped, logger: &kopf::Logger) {
//!     while !stopped.is_set() {
//!         logger.info(format!("phase: {}", live.get()["status"]["phase"]));
//!         tokio::select! {
//!             () = live.changed() => {}
//!             () = stopped.cancelled() => {}
//!         }
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! ## `index`
//!
//! An index handler's result for each object goes into the index named by
//! the handler's id, which every other handler (of any resource) takes as a
//! parameter of that name, as in Kopf. A JSON object result puts each of
//! its values under its key; any other result goes under the `None` key;
//! `null` (or `()`) leaves the object's values as they were. The index
//! follows the objects: a change replaces their values, and a deletion (or
//! an object no longer matching the handler's filters) removes them, also
//! when it is found after a watch gap. [`Index`] reads it (lookup by key,
//! keys, iteration, length) and [`Store`] the values under one key (length,
//! iteration, `contains`), as `serde_json::Value` or as any type `T` the
//! results deserialize into (`Index<T>`).
//!
//! Handlers that take an index do not run before it is filled: at start-up
//! the processing of their resource waits until the resources of the index
//! are listed and every object in them indexed (with namespace globs, once
//! the first matching namespace is listed). Errors of index handlers
//! are not retried: by default (`errors = Ignored`) the values stay as they
//! were; a temporary error removes them until its delay has passed and the
//! object changes again; a permanent one removes them until the object is
//! deleted. Index handlers are not given the object's memo but one of
//! their own.
//!
//! ```
//! use kopf_runtime as kopf;
//! use k8s_openapi::api::core::v1::Pod;
//!
//! // The index `pods_by_node`: node name → pod names.
//! #[kopf::index(Pod, field = "spec.nodeName", value = kopf::PRESENT)]
//! async fn pods_by_node(spec: &serde_json::Value, name: &str) -> kopf::Result<serde_json::Value> {
//!     Ok(serde_json::json!({ spec["nodeName"].as_str().unwrap_or_default(): name }))
//! }
//!
//! // Other handlers take the index by its id, here with its values as `String`s.
//! #[kopf::timer(Pod, interval = 60)]
//! async fn crowded(pods_by_node: &kopf::Index<String>, spec: &serde_json::Value) -> kopf::Result<Vec<String>> {
//!     let Some(neighbours) = pods_by_node.get(spec["nodeName"].as_str()) else {
//!         return Ok(Vec::new());
//!     };
//!     Ok(neighbours.to_vec()?)
//! }
//! # fn main() {}
//! ```
//!
//! ## `on_startup`, `on_cleanup`, `on_probe`, `on_login`
//!
//! `on_startup` and `on_cleanup` run one after another, retried as any
//! handler is (`errors`, `retries`, `backoff`, `timeout`): the operator
//! serves nothing until every start-up handler has succeeded, and does not
//! start if one fails for good ([`OperatorError::Startup`]). `on_probe`
//! handlers run when the liveness endpoint is served (`--liveness`,
//! [`Endpoints`]): all together, at most once per 10 s however often the
//! probe comes (the last results are served in between), each under its
//! `timeout` (5 s without one) and never retried; the endpoint answers
//! `{handler id: result}`, or 500 naming the handlers that failed.
//!
//! As in Kopf, start-up handlers prepare what the rest of the operator
//! runs with. What they put in the operator's `memo` is in every object's
//! memo (the same values, shared: see [`Memo`] for what is shared and what
//! is not), and clean-up handlers find it there. What they change in
//! `settings` (`&mut OperatorSettings`) is what the watches, the
//! processing, the daemons and timers, the posting of Events and the
//! clean-up handlers run with (see [`settings::StartupSettings`] for the
//! one setting that cannot change then). Only `on_startup` handlers take
//! `settings`: the macros refuse it elsewhere.
//!
//! `on_login` handlers give the credentials of every request: they run
//! first, before the start-up handlers, and return a [`ConnectionInfo`]
//! (the server, its CA, a token, a user name and password, or a client
//! certificate) or a whole [`kube::config::Kubeconfig`]. When the API
//! server answers `401 Unauthorized` (a rotated token), the request is sent
//! once more with the next credential; once none is left, they run again
//! (requests wait meanwhile) and the request goes with what they return. With login
//! handlers, the client the operator is given (or infers from the
//! kubeconfig or the pod's service account, as without them) is not used.
//!
//! ```
//! use kopf_runtime as kopf;
//!
//! #[kopf::on_startup(retries = 3)]
//! async fn boot(
//!     logger: &kopf::Logger,
//!     memo: &kopf::Memo,
//!     settings: &mut kopf::OperatorSettings,
//! ) -> kopf::Result<()> {
//!     memo.insert(String::from("configuration"));
//!     settings.persistence.finalizer = "example.com/my-operator".into();
//!     logger.info("operator starting");
//!     Ok(())
//! }
//!
//! #[kopf::on_cleanup]
//! fn bye(logger: kopf::Logger) {
//!     logger.info("operator stopping");
//! }
//!
//! #[kopf::on_probe(id = "now")]
//! async fn now() -> kopf::Result<String> {
//!     Ok(kopf::Timestamp::now().to_string())
//! }
//!
//! #[kopf::on_login]
//! async fn login(logger: &kopf::Logger) -> kopf::Result<kopf::ConnectionInfo> {
//!     logger.debug("logging in");
//!     let token = std::fs::read_to_string("/var/run/secrets/my-cluster/token")?;
//!     Ok(kopf::ConnectionInfo {
//!         token: Some(token.trim().to_owned()),
//!         ..kopf::ConnectionInfo::new("https://127.0.0.1:6443")
//!     })
//! }
//! # fn main() {}
//! ```
//!
//! ## `on_validate` and `on_mutate`
//!
//! Admission webhooks, served by the operator's HTTPS server
//! (`--webhook-server URL`, or a [`WebhookServer`] given to
//! [`Operator::webhooks`]; under `--emulator`, one on the loopback without
//! a flag), each handler at its id beneath the server's path, as in Kopf.
//! Every handler that a review concerns runs once (no retries); the request
//! is denied if one fails, with the message and code of
//! [`Error::Admission`] (or `500` for any other error or a panic), and the
//! handlers' `warnings` reach the client. What a mutating handler writes into
//! `patch` is answered as a JSON Patch. `--webhook-managed NAME` makes the
//! operator keep the ValidatingWebhookConfiguration and
//! MutatingWebhookConfiguration `NAME` up to date, one webhook per handler
//! (rules from the resource, `operations` and `subresource`, an object
//! selector from the label filters, `side_effects`, `ignore_failures`),
//! and remove the webhooks of handlers that are not `persistent` on exit.
//! An operator with such handlers and no webhook server refuses to start
//! ([`OperatorError::NoWebhookServer`]), as Kopf does.
//!
//! ```
//! use kopf_runtime as kopf;
//!
//! #[kopf::on_validate("kopf.dev", "v1", "kopfexamples", operations("CREATE", "UPDATE"))]
//! async fn check(spec: &serde_json::Value, warnings: &kopf::Warnings, dryrun: bool) -> kopf::Result<()> {
//!     if spec["size"].as_u64() == Some(0) {
//!         return Err(kopf::Error::admission("size must be positive", 422));
//!     }
//!     if dryrun {
//!         warnings.push("dry run: nothing will be created");
//!     }
//!     Ok(())
//! }
//!
//! #[kopf::on_mutate("kopf.dev", "v1", "kopfexamples")]
//! async fn defaults(patch: &kopf::Patch, operation: kopf::Operation) {
//!     if operation == kopf::Operation::Create {
//!         patch.set("spec.size", serde_json::json!(1));
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! # Hierarchies
//!
//! [`adopt`] makes the objects a handler creates the children of its
//! object, as Kopf's `kopf.adopt`: owned by it (an owner reference, as its
//! controller and blocking its deletion), named after it (`generateName`),
//! in its namespace and with its labels. [`append_owner_reference`],
//! [`remove_owner_reference`], [`label`], [`harmonize_naming`] and
//! [`adjust_namespace`] do one part each; their `_with` forms take Kopf's
//! options ([`Adoption`], [`Ownership`]). They work on typed objects
//! (k8s-openapi's, custom resources, `DynamicObject`) and on
//! `serde_json::Value`, one object or a list.
//!
//! ```
//! use kopf_runtime as kopf;
//! use serde_json::json;
//!
//! # fn main() -> Result<(), kopf::HierarchyError> {
//! let owner = json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
//!                    "metadata": {"name": "kex", "namespace": "ns", "uid": "6b93…"}});
//! let mut children = vec![json!({"kind": "Job"}), json!({"kind": "Deployment"})];
//! kopf::adopt(&mut children, &owner)?;
//! assert_eq!(children[0]["metadata"]["generateName"], "kex-");
//! assert_eq!(children[1]["metadata"]["ownerReferences"][0]["uid"], "6b93…");
//! # Ok(()) }
//! ```
//!
//! # Registry
//!
//! [`Registry::from_inventory`] collects every handler declared with the
//! macros in the linked crates, sorts them (registration order is not
//! guaranteed) and validates them: duplicate ids for one resource, `on_field`
//! without `field`, `value` with `old`/`new`, unknown indexes. The errors
//! name the offending functions by path. [`Registry::builder`] registers
//! the same handlers without macros — closures over [`Kwargs`] — so that
//! tests can run several operators with different handler sets in one
//! process; it supports every kind and option (see [`RegistryBuilder`]).
//! Handlers declared in a crate the binary does not otherwise use need
//! [`link!`].
//!
//! # Permissions
//!
//! An operator knows most of what it needs from the API: it lists and
//! watches the resources its handlers serve, patches them where it keeps
//! state (progress, the last handled state, finalizers, results under
//! `status`), posts Events, elects on Leases with `--peering`, watches
//! CRDs, and writes its webhook configurations with `--webhook-managed`.
//! What handlers do with their own `client` it cannot know: declare it with
//! [`rbac`] on any item (the handler, say), as kubebuilder's RBAC markers
//! do, or with [`Operator::rbac`] and a [`Permission`].
//!
//! ```
//! use kopf_runtime as kopf;
//! use k8s_openapi::api::core::v1::Pod;
//!
//! #[kopf::rbac(groups = "", resources = "pods", verbs = "delete",
//!              why = "evicted pods are deleted")]
//! #[kopf::timer(Pod, interval = 60, no_finalizers)]
//! async fn evict(client: kube::Client) -> kopf::Result<()> {
//!     # let _ = client;
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! `groups` (`""` or `core` for the core group), `resources` (plural
//! names, `pods/status` for a subresource) and `verbs` are
//! comma-separated lists; `resource_names = "…"` narrows it to some
//! objects, `namespace = "…"` or `cluster` sets where it applies (by
//! default, where the operator serves objects). Before it serves
//! anything, the operator asks the API server whether it has every one of
//! these permissions (one `SelfSubjectAccessReview` each) and, if some are
//! missing, names them all and exits ([`OperatorError::MissingPermissions`]),
//! or only warns with `--missing-permissions=warn`.
//!
//! # What the runtime guarantees
//!
//! - **One object, one handling at a time.** The events of an object are
//!   handled in order, one at a time; a busy object's events coalesce into
//!   the newest, and a handler never sees a body older than the operator's
//!   own last patch of it (unless `persistence.consistency_timeout` passes).
//!   Daemons and timers run beside this, one task per object and handler.
//! - **Change handlers resume from the object.** Their progress is kept on
//!   the object in Kopf's annotations (`kopf.zalando.org/<id>`), and the
//!   last handled state in `kopf.zalando.org/last-handled-configuration`: a
//!   restarted operator, or one taking over from Kopf, picks up a half-done
//!   cause. A handler whose success was recorded never runs again for the
//!   same cause; one whose success was not, runs again. One handler runs
//!   per step, the due one with the fewest attempts.
//! - **Failures stay with their handler.** `retries = 3` makes the third
//!   failure final; a handler that outlives what is left of its `timeout`
//!   fails for good; a panic is an error of the handler, not of the
//!   operator. `on_event` handlers are not retried, as in Kopf.
//! - **Finalizers only where needed.** The finalizer
//!   (`persistence.finalizer`) is added before any handler runs when a
//!   matching handler needs it (`on_delete` without `optional`, daemons and
//!   timers without `no_finalizers`), and released once none does, or once
//!   the deletion's handlers are done and the finalizer-keeping daemons and
//!   timers have stopped. Objects that no handler matches are never
//!   touched; others' finalizers are never clobbered.
//! - **Daemons and timers stop with their object.** A `DELETED` event, an
//!   object gone from a re-list, or a `deletionTimestamp` sets their
//!   [`Stopped`] flag; a task still running after `cancellation_backoff`
//!   is cancelled, and one still running `cancellation_timeout` after that
//!   is abandoned with a warning and an `Abandoned` Event. Timers, and
//!   daemons without these options, get `background.graceful_exit_limit`
//!   and `background.default_cancellation_timeout` instead; a daemon with
//!   only `cancellation_timeout` is cancelled at once, as in Kopf. Their
//!   patches carry the object's UID, so they never land on a re-created
//!   namesake.
//! - **Cluster data never stops the operator.** An object that does not
//!   decode is reported once (a warning, and an Event when posting is on)
//!   and skipped; a parameter that does not deserialize is an error of the
//!   call ([`HandlerError::Kwarg`]).
//! - **Every handler runs or is refused at start-up** with
//!   [`OperatorError::Unsupported`] naming it.
//! - **Stopping is bounded.** On SIGINT or SIGTERM (or when the future given
//!   to [`Operator::run_until`] completes), watching ends first; handlers in
//!   flight get `queueing.exit_timeout`, then are cancelled; then the
//!   `on_cleanup` handlers run. Once `run_until` returns, nothing acts on
//!   objects.
//!
//! # Calling handlers in tests
//!
//! Each [`Handler`] carries its kind, resource, options, filters and a
//! [`HandlerFn`]. The runtime fills a [`Kwargs`] for each call and awaits
//! [`Handler::call`], which yields an [`Outcome`]: `Ok(Some(value))` to
//! store in `status.<id>`, `Ok(None)`, or a [`HandlerError`] to retry or
//! fail per [`Options`]. A test can do the same without a cluster:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kopf_runtime::{HandlerKind, Kwargs, Reason, Registry, ResourceRef};
//! use serde_json::json;
//!
//! let registry = Registry::builder()
//!     .on_create(ResourceRef::dynamic("", "v1", "configmaps"), "created", |kw: Kwargs| async move {
//!         kw.patch.set("metadata.labels.seen", json!("yes"));
//!         Ok::<_, kopf_runtime::Error>(json!({"name": kw.name()}))
//!     })
//!     .build()?;
//!
//! let body = json!({"metadata": {"name": "cm", "namespace": "default"}});
//! for handler in registry.of_kind(HandlerKind::OnCreate) {
//!     let mut kwargs = Kwargs::new(body.clone());
//!     kwargs.reason = Some(Reason::Create);
//!     if !handler.filters().matches_object(&kwargs) {
//!         continue;
//!     }
//!     let patch = kwargs.patch.clone();
//!     let outcome = handler.call(kwargs).await;
//!     assert_eq!(outcome, Ok(Some(json!({"name": "cm"}))));
//!     assert_eq!(patch.take(), json!({"metadata": {"labels": {"seen": "yes"}}}));
//! }
//! # Ok(()) }
//! ```
//!
//! To test the whole operator instead, as Kopf's `KopfRunner` does, run it
//! in-process against an emulator with `kopf_testing::KopfRunner` (the
//! `runner` feature of kopf-testing): it starts
//! `Operator::new(registry).client(client).run_until(stop)` with a client
//! of a fresh emulator, lets the test create objects and wait for what the
//! handlers did and logged, and reports how the operator ended and its
//! output. The repository's `examples/tests/testing.rs` (Kopf's
//! `09-testing`) shows it.
//!
//! # Differences from Kopf
//!
//! Handlers fire in the same situations as Kopf 1.45's, and the state on
//! the objects (progress, diff-base, finalizer) is Kopf's, byte for byte.
//! What differs, and why:
//!
//! - **Daemons and timers may go without a finalizer** (`no_finalizers`),
//!   so that `kubectl delete` does not hang while the operator is down;
//!   their tasks are still stopped on a `DELETED` event, on a re-list that
//!   misses the object, and on a `deletionTimestamp`.
//! - **No wait is unbounded.** Where Kopf waits for a task for ever, the
//!   wait ends at `background.graceful_exit_limit` or
//!   `background.default_cancellation_timeout`, and a task that outlives it
//!   is abandoned and reported: a stuck task must not hold a deletion or
//!   the operator's exit.
//! - **An `-n` pattern made only of exclusions** (`!kube-*`) excludes from
//!   every other pattern instead of being ORed with them, which would
//!   serve nearly everything.
//! - **Resources by Rust type.** Besides Kopf's selectors, a handler may
//!   name a `kube::Resource` type. Kopf's `EVERYTHING` marker and callable
//!   selectors are not supported.
//! - **The diff-base of a built-in kind** lists its top-level fields sorted,
//!   where Kopf follows the kind's schema. Both compare essences decoded, so
//!   neither sees a change in the other's.
//! - **Sub-handlers are registered on a parameter** ([`Subhandlers`]), not
//!   through a context variable: `subhandlers.register(id, fn)` is
//!   `@kopf.subhandler(id=…)`, and `subhandlers.execute_with(lifecycle)` is
//!   `kopf.execute(lifecycle=…)`. Top-level change handlers always run
//!   [`Lifecycle::Asap`], Kopf's default; there is no
//!   `set_default_lifecycle`.
//! - **Metrics of our own.** `--metrics` serves Prometheus metrics, which
//!   Kopf leaves to the operator's code; `/readyz` beside the liveness
//!   endpoint is ours too.
//! - **One setting is fixed before the start-up handlers:**
//!   `networking.connect_timeout` (the client is connected before they run);
//!   a start-up handler that changes it fails.
//! - **Peering on Leases, not on Kopf's peering objects.** `--peering NAME`
//!   elects the one serving replica on the `coordination.k8s.io/v1` Lease
//!   `NAME`, with client-go's semantics ([`Peering`]): followers wait,
//!   replicas of equal priority elect normally (Kopf freezes them all),
//!   and `--shards S` spreads the objects over the replicas, which Kopf
//!   cannot. Kopf's `KopfPeering` objects are neither read nor written.
//! - **Webhooks take their server from the command line**
//!   (`--webhook-server`, `--webhook-cert`, …), not from
//!   `settings.admission`; there are no tunnels (ngrok) and no plain-HTTP
//!   server. The `memo` of a webhook call is a copy of the operator's, not
//!   the object's; `sslpeer` is empty (clients give no certificate). A
//!   handler with `operations` runs only for those, even when the server
//!   is called without a webhook id.
//!
//! # What is public
//!
//! Everything an operator author uses, and nothing of the engine:
//!
//! | item | what it is for |
//! |------|----------------|
//! | [`on_create`], [`on_update`], [`on_delete`], [`on_resume`], [`on_field`], [`on_event`], [`timer`], [`daemon`], [`index`], [`on_startup`], [`on_cleanup`], [`on_probe`], [`on_login`], [`on_validate`], [`on_mutate`] | declaring handlers (see [Options](#options) and [Parameters](#parameters)) |
//! | [`link!`], [`handlers_crate!`] | keeping the handlers of a crate that the binary does not otherwise use |
//! | [`run()`], [`Runner`] | the whole `main` of an operator: the command line, logging, the handlers, until a signal |
//! | [`Args`], [`LogFormat`] | the command line, as `kopf run`'s (for [`Runner::args`]) |
//! | [`Operator`] | a registry, a client and settings, run until a future completes: for embedding and tests |
//! | [`Endpoints`], [`EndpointError`], [`READINESS_PATH`] | the liveness, readiness and metrics listeners ([`Operator::endpoints`]), bound before the operator starts |
//! | [`WebhookServer`], [`WebhookArgs`], [`WebhookError`] | the admission webhook server ([`Operator::webhooks`]) and its flags, bound before the operator starts |
//! | [`TaskCounters`], [`TaskCounts`] | how many daemons and timers an operator has spawned and how they ended ([`Operator::task_counters`]), for metrics and tests |
//! | [`NamespaceSelector`] | the namespaces to serve, from `-n` patterns and `-A` ([`Operator::namespaces`]) |
//! | [`Peering`] | the Lease replicas elect a leader on, or shard the objects by, from `--peering`, `--priority`, `--dev` and `--shards` ([`Operator::peering`]) |
//! | [`OperatorSettings`] and the [`settings`] module | Kopf's settings, grouped and defaulted as in Kopf; [`settings::StartupSettings`], the settings that start-up handlers change |
//! | [`rbac`], [`Permission`], [`PermissionScope`], [`PermissionError`] | the RBAC permissions an operator needs beyond what it derives from its handlers ([`Operator::rbac`]) |
//! | [`MissingPermissions`], [`Missing`] | what the start-up check does when permissions are missing, and each one it found ([`Operator::missing_permissions`]) |
//! | [`RunError`], [`OperatorError`], [`CliError`], [`SelectorError`], [`RegistryError`] | why an operator does not start |
//! | [`Registry`], [`RegistryBuilder`] | an operator's handlers: from the macros, or built without them |
//! | [`Handler`], [`HandlerFn`], [`HandlerKind`] | one registered handler, the function behind it, and its kind |
//! | [`Options`], [`ErrorsMode`], [`DEFAULT_BACKOFF`], [`KindOptions`], [`TimerOptions`], [`DaemonOptions`], [`WebhookOptions`] | a handler's options, with Kopf's defaults |
//! | [`Filters`], [`MetaFilter`], [`MetaValue`], [`ValueFilter`], [`FieldPath`], [`Marker`], [`PRESENT`], [`ABSENT`] | which objects and changes a handler applies to |
//! | [`ResourceRef`] | a resource by group, version and plural, or by its Rust type |
//! | [`Kwargs`] | everything a call receives; what handlers built without macros take |
//! | [`Logger`], [`Level`] | the `logger` parameter: log lines about the object |
//! | [`Memo`] | the `memo` parameter: what handlers keep in memory, per object and operator-wide ([`Operator::memo`]) |
//! | [`Patch`] | the `patch` parameter: changes to the object, sent with the handler's outcome |
//! | [`Diff`], [`DiffItem`], [`DiffOp`] | the `diff` parameter: what changed, as Kopf's diffs |
//! | [`Reason`] | the `reason` parameter: the cause of a change handler's call |
//! | [`EventType`] | the `type` parameter of `on_event` handlers |
//! | [`Stopped`], [`StopReason`] | the `stopped` parameter of daemons and timers, and why it is set |
//! | [`LiveBody`] | the `live` parameter of daemons and timers: their object as it is now |
//! | [`Subhandlers`], [`Lifecycle`] | the `subhandlers` parameter of change handlers: children with progress of their own (Kopf's sub-handlers), and which of them run in one step |
//! | [`Index`], [`Indexes`] | the parameters named by `index` handlers' ids |
//! | [`Operation`], [`Warnings`], [`Admission`] | the parameters of `on_validate` and `on_mutate` handlers |
//! | [`Timestamp`] | the `started` parameter |
//! | [`Result`], [`Error`] | what handlers return, and how they fail (temporarily, permanently, regularly) |
//! | [`Outcome`], [`HandlerError`], [`KwargError`], [`IntoOutcome`] | what a call yields ([`Handler::call`]), and how return types become it |
//! | the [`params`] module: [`params::OldArg`], [`params::SpecArg`], … | the traits that inject each parameter, which the compiler names when a type is not accepted |
//! | the [`posting`] module: [`posting::info`], [`posting::warn`], [`posting::exception`], [`posting::event`], with [`posting::EventType`] and [`posting::ObjectReference`] | Kubernetes Events about objects, from handlers |

mod admission;
mod causes;
mod cli;
mod decoding;
mod deploying;
mod diffbase;
mod echoes;
mod endpoints;
mod errors;
mod execution;
mod fencing;
mod fields;
mod filters;
mod finalizers;
mod handlers;
mod health;
mod hierarchies;
mod indexing;
mod injection;
mod kwargs;
mod leadership;
mod listening;
mod logbuffer;
mod login;
mod memories;
mod metrics;
#[cfg(test)]
mod mock_api;
mod namespaces;
mod operator;
pub mod params;
mod patching;
mod peering;
pub mod posting;
mod probing;
mod processing;
mod progress;
#[cfg(test)]
mod proptests;
mod queueing;
mod records;
mod registry;
mod resources;
mod retrying;
mod running;
mod scanning;
mod scraping;
pub mod settings;
mod sharding;
mod spawning;
mod stopping;
mod watching;
mod webhooks;

pub use kopf_macros::{
    daemon, index, on_cleanup, on_create, on_delete, on_event, on_field, on_login, on_mutate,
    on_probe, on_resume, on_startup, on_update, on_validate, rbac, timer,
};

pub use cli::{Args, CliError, LogFormat};
#[cfg(feature = "emulator")]
pub use deploying::GrantError;
pub use deploying::{
    ManifestsArgs, Missing, MissingPermissions, Permission, PermissionError, PermissionScope,
};
pub use endpoints::{EndpointError, Endpoints, READINESS_PATH};
pub use errors::{Error, HandlerError, IntoOutcome, KwargError, Outcome, Result};
pub use execution::{Lifecycle, Subhandlers};
pub use filters::{
    ABSENT, FieldPath, Filters, Marker, MetaFilter, MetaValue, PRESENT, ValueFilter,
};
pub use handlers::{
    DEFAULT_BACKOFF, DaemonOptions, ErrorsMode, Handler, HandlerFn, HandlerKind, KindOptions,
    Options, TimerOptions, WebhookOptions,
};
pub use hierarchies::{
    Adoption, HierarchyError, Ownership, adjust_namespace, adjust_namespace_with, adopt,
    adopt_with, append_owner_reference, append_owner_reference_with, harmonize_naming,
    harmonize_naming_with, label, label_with, remove_owner_reference,
};
pub use kwargs::{
    Admission, Diff, DiffItem, DiffOp, EventType, Index, IndexError, IndexKey, Indexes, Kwargs,
    Level, LiveBody, Logger, Memo, Operation, Patch, Reason, Stopped, Store, Warnings,
};
pub use login::{ConnectionInfo, LoginError};
pub use namespaces::{NamespaceSelector, SelectorError};
pub use operator::{Operator, OperatorError};
pub use peering::Peering;
pub use registry::{Registry, RegistryBuilder, RegistryError};
pub use resources::{ResourceName, ResourceRef};
pub use running::{RunError, Runner, run};
pub use settings::OperatorSettings;
pub use spawning::{TaskCounters, TaskCounts};
pub use stopping::StopReason;
pub use webhooks::{WebhookArgs, WebhookError, WebhookServer};

/// The timestamp type of the `started` parameter (re-exported from `jiff`).
pub use jiff::Timestamp;

/// Keeps the handlers of crates that the binary does not otherwise reference.
///
/// `inventory` collects records through link-time constructors, so the linker
/// drops the records of a dependency from which nothing is used: a binary that
/// depends on a handlers-only crate would silently run without its handlers.
/// The remedy has two halves:
///
/// * the handlers crate declares `kopf_runtime::handlers_crate!();` once, at its root;
/// * the binary (or test) writes `kopf_runtime::link!(that_crate);` anywhere.
///
/// `link!` references an anchor in each crate from a `#[used]` static, so the
/// crate — and every record in it — is linked. Crates that the binary already
/// uses (e.g. by calling their fns) need nothing. See `examples/handlers-lib`
/// and its `linked`/`unlinked` tests.
///
/// # Caveats
/// The anchor keeps the whole crate's records, submodules included (tested in
/// debug builds by `examples/handlers-lib`). A handlers crate that is not a
/// dependency of the binary at all cannot be linked by any means.
///
/// ```text
/// // in my_handlers/src/lib.rs
/// kopf_runtime::handlers_crate!();
/// // in the binary
/// kopf_runtime::link!(my_handlers, other_handlers);
/// ```
#[macro_export]
macro_rules! link {
    ($($krate:ident),+ $(,)?) => {
        $(
            const _: () = {
                #[used]
                static __KOPF_LINK: fn() = $krate::__kopf_link;
            };
        )+
    };
}

/// Declares the current crate as a handlers crate that binaries can [`link!`].
///
/// Expands to a hidden `pub fn __kopf_link()` at the crate root.
#[macro_export]
macro_rules! handlers_crate {
    () => {
        #[doc(hidden)]
        #[inline(never)]
        pub fn __kopf_link() {}
    };
}

/// Not public API: what the macro-generated code uses. May change without notice.
#[doc(hidden)]
pub mod __private {
    pub use ::futures::future::BoxFuture;
    pub use ::inventory;
    pub use ::serde_json;
    pub use ::std::boxed::Box;
    pub use ::std::option::Option::{self, None, Some};
    pub use ::std::result::Result::{Err, Ok};
    pub use ::std::time::Duration;

    pub use crate::deploying::{RbacRecord, RbacScope};
    pub use crate::errors::{HandlerError, IntoOutcome, Outcome};
    pub use crate::handlers::{ErrorsMode, HandlerKind};
    pub use crate::injection::*;
    pub use crate::kwargs::{Kwargs, Operation};
    pub use crate::records::{
        ChangeRecord, FilterRecord, FunctionRecord, HandlerRecord, MetaRecord, RetryRecord,
        TaskRecord, ValueRecord, WebhookRecord,
    };
    pub use crate::resources::ResourceRef;
    pub use crate::spawning::run_blocking;
}

#[cfg(test)]
mod tests {
    //! Tests of the engine across its modules.

    #[cfg(feature = "emulator")]
    mod emulated;
}
