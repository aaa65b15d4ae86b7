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
//! injection and request counts per User-Agent; see the `kube-emulator` binary).
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
mod discovery;
mod emulator;
mod error;
mod events;
mod failures;
mod faults;
mod handlers;
mod objects;
mod patching;
mod perf_probe;
mod preload;
mod recording;
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
