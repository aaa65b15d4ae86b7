//! kopf-testing: an in-memory Kubernetes API server over real HTTP on 127.0.0.1,
//! so that tests drive the real kube client, watch streams and JSON.
//!
//! It serves discovery, namespaces, Events, Leases, Secrets, ConfigMaps, Pods,
//! Services, ServiceAccounts, Roles, ClusterRoles and their bindings,
//! Deployments and PodDisruptionBudgets (stored, without controllers), the
//! access reviews, TokenRequests and CRDs registered through the API; CRUD with
//! `resourceVersion`/`uid`, `generation` where the API server keeps one
//! (Pods, Deployments, PodDisruptionBudgets, CRDs, webhook configurations
//! and custom resources; ConfigMaps and the rest keep what their creator
//! gave), label and field selectors, paging,
//! watches with resume, bookmarks and `410 Gone`, merge/JSON/strategic/apply
//! patches, optimistic concurrency, finalizers with `deletionTimestamp` and the
//! status subresource. Faults can be injected through [`Faults`] (failures,
//! latency, requests held until released, dropped watches, compaction), or
//! from other processes through the admin endpoints under `/_emulator/`
//! (fault injection, request counts per User-Agent, and a restart that keeps
//! the state: [`Emulator::restart_with_downtime`]). A bearer token can
//! be required ([`EmulatorBuilder::require_token`], `401` without it, but
//! for `/version`, `/healthz`, `/livez` and `/readyz`, open to anonymous
//! requests) and rotated ([`Emulator::set_token`]); every request is recorded
//! ([`Emulator::requests`]). Stored webhook configurations are called on
//! every write, as the API server calls them (see Admission webhooks
//! below). Requests the HTTP layer refuses (a URI over
//! 65,534 bytes: 414, headers too large: 431, an unparseable request: 400)
//! are answered with a `Status` body as every other failure.
//!
//! # What is validated
//! Requests are checked as the API server checks them, before anything is
//! stored, and refused with its codes and `Status` bodies:
//! - object metadata: names (each resource's rule: RFC 1123 subdomains,
//!   labels for namespaces, DNS-1035 labels for services; `generateName`
//!   prefixes cut to 58 characters) and CRD names and groups, `metadata`
//!   fields of the right JSON types (400),
//!   label keys and values, annotation keys and their 256 KiB total, finalizer
//!   names (qualified names) and owner references (`apiVersion`, `kind`,
//!   `name`, `uid`, one controller) (422 `Invalid`, a cause per field);
//! - ConfigMap `data` of strings and `binaryData` in base64, Secret `data` in
//!   base64 and `stringData` of strings (400), their keys (422);
//! - bodies against the URL: `apiVersion`, `kind`, `metadata.namespace` and,
//!   for server-side apply, `metadata.name` (400); a patch may not change the
//!   kind, apiVersion, name or namespace (400);
//! - preconditions: `metadata.resourceVersion` (a string or a number) and
//!   `metadata.uid` in an update or patch (409); a `resourceVersion` is
//!   required to update custom resources, CRDs, Leases and webhook
//!   configurations, and refused on create (500, as the API server's
//!   storage refuses it);
//! - updates against the stored object: the data of `immutable` ConfigMaps
//!   and Secrets, a Secret's `type`, a CRD's `scope`, and deletion metadata
//!   an update may not set (422);
//! - patches: at most 10,000 JSON patch operations (413), only `replace`,
//!   `merge` and `delete` as `$patch` directives (400), server-side apply
//!   with a `fieldManager` (422);
//! - options: `DeleteOptions` bodies as the API server's decoder reads them
//!   and `propagationPolicy` (422), `resourceVersionMatch` (422), a
//!   `fieldManager` of at most 128 bytes (422);
//! - query parameters: `limit` and `timeoutSeconds` integers (400; a watch's
//!   `timeoutSeconds=0` means no timeout, as when unset), `dryRun` only `All`
//!   (422), continue tokens only as handed out (400), resourceVersions not
//!   beyond the current one (504 `Timeout` with `retryAfterSeconds`);
//! - fault rules: statuses 400-599 only ([`Faults::try_fail_next`], and 400
//!   from the admin endpoint).
//!
//! # Admission webhooks
//! `ValidatingWebhookConfiguration`s and `MutatingWebhookConfiguration`s
//! are stored as objects and their webhooks called over HTTPS (HTTP/1.1,
//! a JSON `admission.k8s.io/v1` AdmissionReview POSTed with
//! `?timeout=Ns`), as the API server calls them:
//! - on creates, updates, patches of every type (operation `UPDATE`,
//!   `CREATE` for server-side apply of a missing object), deletes and each
//!   object of a deletecollection, and on the `status` subresource
//!   (`subResource: status`); never on the configurations themselves;
//! - matched by `rules` (operations and `*`, groups, versions, resources
//!   with `*`, `pods/status`, `*/status`, `pods/*`, `*/*`, scope),
//!   `namespaceSelector` (the namespace's labels, a namespace's own for
//!   namespaces; cluster-scoped objects always match; a missing namespace
//!   is `404`), `objectSelector` (the old or the new object) and
//!   `matchPolicy` (`Equivalent`, the default, also matches another served
//!   version of the same resource: a CRD's other versions, Events in
//!   either group, sent in the rule's version);
//! - mutating webhooks first, one at a time (configurations in name order,
//!   webhooks as listed), their `JSONPatch`es applied within the limits
//!   of a client's JSON patch (a patch that does not apply or goes over a
//!   limit answers `500`, whatever the failure policy, as one changing
//!   `kind` or `apiVersion` does; on an update, one changing the namespace
//!   answers `400`, the name or a `deletionTimestamp` `422`); then the
//!   emulator's validation; then the validating webhooks, concurrently,
//!   on the object
//!   as it would be stored; an update or patch whose object changed
//!   meanwhile goes through them again;
//! - the server certificate verified against `clientConfig.caBundle` for
//!   the URL's host, or for `NAME.NAMESPACE.svc` with
//!   `clientConfig.service`, which the emulator reaches at the address
//!   given by [`EmulatorBuilder::webhook_service`] (`kube-emulator
//!   --webhook-service`); each call bounded by `timeoutSeconds` (10,
//!   at most 30) and by what is left of the request's one deadline
//!   ([`EmulatorBuilder::request_timeout`], 60 s), past which the request
//!   is answered `504 Timeout`;
//! - a denial answers the webhook's `status.code` (400 when none is 400 or
//!   more) and `admission webhook "NAME" denied the request: MESSAGE`; a
//!   call that fails (unreachable, TLS, timeout, an HTTP error, an answer
//!   over 6 MiB or that is not a valid review) answers `500` `Internal error occurred:
//!   failed calling webhook "NAME": ...` under `failurePolicy: Fail` (the
//!   default) and is passed over under `Ignore`; every webhook's
//!   `warnings` go out as `Warning: 299 - "TEXT"` headers, denials
//!   included, as the API server caps them (each text once; past 4,096
//!   characters in all, each cut to 256 and those past 4,096 more
//!   dropped; texts with control characters never sent);
//! - `?dryRun=All` is sent as `dryRun: true`, and refused with `400`
//!   before the call by a webhook whose `sideEffects` is `Some` or
//!   `Unknown`.
//!
//! Each call is recorded in [`Emulator::requests`] with the verb
//! `admission`. [`call_webhook`] sends one review to a webhook directly.
//!
//! What the emulator does not do: evaluate `matchConditions` (CEL; the
//! webhook is called as if they held), reinvoke mutating webhooks
//! (`reinvocationPolicy: IfNeeded` calls once), serve `CONNECT` or the
//! `scale` subresource (nothing to review), validate stored
//! configurations (a webhook it cannot read is skipped with a logged
//! warning), trust system roots (a webhook without `caBundle` fails TLS),
//! or review the objects a namespace's deletion removes. Every review
//! names the user `kubernetes-admin` in `system:masters`, or with RBAC
//! (below) the request's user.
//!
//! # RBAC
//! Off by default (everyone may do everything). With
//! [`EmulatorBuilder::rbac`] (`kube-emulator --rbac`) every request is
//! authenticated and authorized as the API server does it: the emulator's
//! token (or no token, when none is required) is `system:admin` in
//! `system:masters`; a token the TokenRequest API minted
//! (`serviceaccounts/NAME/token`, `kubectl create token`,
//! [`Emulator::service_account_token`],
//! [`Emulator::client_as_service_account`]) is its ServiceAccount, while
//! that ServiceAccount exists; everyone else gets what the stored Roles,
//! ClusterRoles and bindings grant (the bootstrap `system:discovery`,
//! `system:basic-user` and `system:public-info-viewer` included), and
//! `403 Forbidden` with the API server's `Status` otherwise.
//! `SelfSubjectAccessReview`, `SubjectAccessReview`,
//! `SelfSubjectRulesReview` and `SelfSubjectReview` are answered (so
//! `kubectl auth can-i [--list]` and `kubectl auth whoami` work).
//! [`Emulator::rbac_usage`] (and `GET /_emulator/rbac/usage`) records which
//! rule of which binding allowed each user's requests, and every denial: a
//! test can prove an operator's rules are exactly enough.
//! Impersonation is granted as the API server grants it
//! ([`Emulator::client_as`] acts as any user), and writing Roles and
//! bindings is checked for escalation (`escalate`, `bind`). Not done:
//! aggregated ClusterRoles, `LocalSubjectAccessReview`, `TokenReview`,
//! `Impersonate-Extra-*`; tokens are opaque, not JWTs.
//!
//! # Caveats
//! - Objects are kept as JSON without schemas: beyond the rules above,
//!   nothing of a kind's own fields is validated or pruned (CRD schemas are
//!   not applied).
//! - Strategic merge patches are approximated (lists merged by well-known keys,
//!   `finalizers` unioned); server-side apply is a merge patch without field
//!   ownership. Protobuf bodies are decoded only for ConfigMap, Secret,
//!   Namespace, ServiceAccount, the RBAC objects, the reviews and
//!   TokenRequest (what `kubectl create` and `kubectl auth` send).
//! - Watch history is bounded (see Limits below);
//!   BOOKMARK events are sent every second to watchers that allow them.
//! - `core/v1` and `events.k8s.io/v1` Events share one store and convert
//!   their main fields; field selectors match what was stored.
//!
//! # Limits
//! The emulator survives any client, as the API server does, by refusing
//! what is too big before anything is stored (every refusal a `Status`):
//! - Bodies: at most 3 MiB (413), nested at most 512 levels of objects and
//!   arrays (400; the API server allows 10,000, but the emulator clones,
//!   compares, serializes and drops objects recursively, at about 1.5 KiB
//!   of stack per level in debug builds, on 2 MiB thread stacks); YAML
//!   bodies at most as large as a JSON body once aliases are expanded, and
//!   preload files at most about twice their own size.
//! - JSON patches: at most 10,000 operations (413); their `copy` operations
//!   add at most 3 MiB together, and none may nest the object past the depth
//!   limit (422); a patched object must still fit in 3 MiB (413).
//! - CRDs cannot claim a group the emulator serves built-in (core,
//!   `events.k8s.io`, `coordination.k8s.io`, `admissionregistration.k8s.io`,
//!   `apiextensions.k8s.io`, `rbac.authorization.k8s.io`,
//!   `authorization.k8s.io`, `authentication.k8s.io`, `apps`, `policy`), nor
//!   a `*.k8s.io` / `*.kubernetes.io` group without the
//!   `api-approved.kubernetes.io` annotation (422). Namespaces have no
//!   deletecollection (405).
//! - Memory: the watch history is bounded by events per resource
//!   ([`EmulatorBuilder::history_limit`]), by bytes over every resource
//!   ([`EmulatorBuilder::history_bytes`], 128 MiB) and by age
//!   ([`EmulatorBuilder::history_age`], 5 minutes); resuming a watch from
//!   before the oldest kept event is `410 Gone`, and so is a list's continue
//!   token from before it: that `410` carries a token that goes on at the
//!   latest version (an inconsistent list), as the API server's does. A
//!   watcher may fall behind by at most 16,384 events and by at most the history's byte bound (or
//!   64 MiB, if less): further behind, its stream ends (or, if its client
//!   does not read the end within a second, its connection is closed), as
//!   the API server closes watchers that cannot keep up; its client resumes. The request log keeps at
//!   most 100,000 requests and 32 MiB, paths and queries cut at 1 KiB; the
//!   counts per User-Agent keep at most 1,000 (agent, verb) pairs, agents cut
//!   at 1 KiB, later agents counted together as `(other agents)`.
//! - Fault rules: at most 1,000 set at once ([`MAX_FAULT_RULES`]), their
//!   path and body fragments at most 16 KiB each ([`MAX_FRAGMENT_BYTES`]);
//!   more is refused (`400` on the admin endpoint, an error from
//!   [`Faults::try_fail_next`]). Bodies are searched in linear time.
//! - Connections: once a request's first byte arrives, its headers must
//!   follow within 30 s ([`EmulatorBuilder::header_read_timeout`]) and its
//!   body within 60 s (408); a connection with no request in flight is
//!   closed after 120 s ([`EmulatorBuilder::idle_timeout`]; a streaming
//!   watch is in flight),
//!   and at most 1,024 connections are served
//!   ([`EmulatorBuilder::max_connections`]): at the cap the one idle the
//!   longest is closed to make room, and when all are busy a newcomer gets
//!   `503`. Requests that cannot be parsed get `Status` answers too: 400,
//!   414 (a URI over 64 KiB) and 431 (headers over about 400 KiB).
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kopf_testing::Emulator;
//! use kube::api::{Api, PostParams};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let emulator = Emulator::builder().crd("example.com", "v1", "widgets", "Widget", true).start().await?;
//! let cms: Api<ConfigMap> = Api::default_namespaced(emulator.client());
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("demo".into());
//! cms.create(&PostParams::default(), &cm).await?;
//! emulator.faults().drop_watches();
//! # Ok(()) }
//! ```

mod admin;
mod admission;
mod conversion;
mod discovery;
mod emulator;
mod endpoints;
mod error;
mod events;
mod failures;
mod fanout;
mod faults;
mod handlers;
mod history;
mod kubectl;
mod limits;
mod listing;
mod names;
mod objects;
mod options;
mod patching;
mod preload;
mod protobuf;
mod rbac;
mod recording;
mod refusals;
mod resources;
mod responses;
mod routing;
#[cfg(feature = "runner")]
pub mod runner;
mod selectors;

#[cfg(test)]
mod proptests;
mod server;
mod shared;
mod store;
mod updates;
mod validation;
mod watching;

pub use admission::{WebhookCallError, call_webhook};
pub use emulator::{DEFAULT_HISTORY_LIMIT, Emulator, EmulatorBuilder};
pub use endpoints::http_get;
pub use error::EmulatorError;
pub use failures::ApiError;
pub use faults::{FailRule, Faults, HeldRequests, MAX_FAULT_RULES, MAX_FRAGMENT_BYTES};
pub use kubectl::kubectl;
pub use rbac::authorizer::{Grant, ObjectRef};
pub use rbac::usage::{GrantUse, RbacDenial, RbacUsage};
pub use recording::RecordedRequest;
#[cfg(feature = "runner")]
pub use runner::{Finished, KopfRunner, KopfRunnerBuilder, RunnerError, Stop};
