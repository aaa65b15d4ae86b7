//! kopf-testing: an in-memory Kubernetes API server over real HTTP on 127.0.0.1,
//! so that tests drive the real kube client, watch streams and JSON.
//!
//! It serves discovery, namespaces, Events, Leases, Secrets, ConfigMaps, Pods,
//! Services, ServiceAccounts and CRDs registered through the API; CRUD with
//! `resourceVersion`/`uid`/`generation`, label and field selectors, paging,
//! watches with resume, bookmarks and `410 Gone`, merge/JSON/strategic/apply
//! patches, optimistic concurrency, finalizers with `deletionTimestamp` and the
//! status subresource. Faults can be injected through [`Faults`], or from
//! other processes through the admin endpoints under `/_emulator/` (fault
//! injection and request counts per User-Agent); every request is recorded
//! ([`Emulator::requests`]). Requests the HTTP layer refuses (a URI over
//! 65,534 bytes: 414, headers too large: 431, an unparseable request: 400)
//! are answered with a `Status` body as every other failure.
//!
//! # Caveats
//! - Objects are kept as JSON without schemas: nothing is validated or pruned
//!   beyond what the API server's generic rules require (names, namespaces,
//!   resourceVersion, finalizers, CRD names).
//! - Strategic merge patches are approximated (lists merged by well-known keys,
//!   `finalizers` unioned); server-side apply is a merge patch without field
//!   ownership. Protobuf bodies are decoded only for ConfigMap, Secret,
//!   Namespace and ServiceAccount (what `kubectl create` sends).
//! - Watch history is kept per resource ([`EmulatorBuilder::history_limit`]);
//!   BOOKMARK events are sent every second to watchers that allow them.
//! - `core/v1` and `events.k8s.io/v1` Events share one store and convert
//!   their main fields; field selectors match what was stored.
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
mod conversion;
mod discovery;
mod emulator;
mod error;
mod events;
mod failures;
mod faults;
mod handlers;
mod objects;
mod patching;
mod preload;
mod protobuf;
mod recording;
mod refusals;
mod resources;
mod routing;
mod selectors;
mod server;
mod shared;
mod store;
mod watching;

pub use emulator::{DEFAULT_HISTORY_LIMIT, Emulator, EmulatorBuilder};
pub use error::EmulatorError;
pub use failures::ApiError;
pub use faults::{FailRule, Faults};
pub use recording::RecordedRequest;
