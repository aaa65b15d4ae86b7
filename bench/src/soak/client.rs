//! The soak's own client of the emulator: every call retried through the
//! faults the soak injects (429, 5xx, a restarting server), since they hit
//! the runner's requests as much as the operator's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use serde_json::{Map, Value, json};

/// The User-Agent of the soak runner's requests.
pub const AGENT: &str = "kopf-soak-driver";

/// How long one call is retried before the soak gives up on it.
const GIVE_UP: Duration = Duration::from_secs(60);

/// The runner's client.
#[derive(Clone)]
pub struct Soaker {
    client: Client,
    /// The ConfigMaps of `default`.
    pub api: Api<ConfigMap>,
    untyped: Api<DynamicObject>,
}

/// Whether a failure is one the soak's faults cause, to be retried.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::SerdeError(_) => false,
        _ => true,
    }
}

/// What a deletion found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    /// Gone at once (or already gone).
    Gone,
    /// Marked for deletion, held by these finalizers.
    Held(Vec<String>),
}

impl Soaker {
    /// A client for the emulator at `url`.
    ///
    /// # Errors
    /// If the client cannot be built.
    pub fn new(url: &str) -> anyhow::Result<Soaker> {
        let mut config = kube::Config::new(url.parse()?);
        config.default_retry = false;
        config.read_timeout = Some(Duration::from_secs(20));
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(AGENT),
        ));
        let client = Client::try_from(config)?;
        let api = Api::namespaced(client.clone(), "default");
        let untyped = Api::namespaced_with(
            client.clone(),
            "default",
            &ApiResource::erase::<ConfigMap>(&()),
        );
        Ok(Soaker {
            client,
            api,
            untyped,
        })
    }

    async fn retried<T, F, Fut>(&self, what: &str, f: F) -> anyhow::Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let deadline = Instant::now() + GIVE_UP;
        loop {
            match f().await {
                Ok(t) => return Ok(t),
                Err(e) if transient(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(anyhow!("{what}: {e}")),
            }
        }
    }

    /// Calls an admin endpoint, retried while the server is down.
    ///
    /// # Errors
    /// If it keeps failing.
    pub async fn admin(&self, path: &str, body: Value) -> anyhow::Result<()> {
        self.retried(path, || {
            let request = http::Request::builder()
                .method(http::Method::POST)
                .uri(format!("/_emulator/{path}"))
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(&body).unwrap_or_default())
                .expect("invariant: a request of a fixed path and body builds");
            let client = self.client.clone();
            async move { client.request_text(request).await.map(drop) }
        })
        .await
    }

    /// Restarts the emulator keeping its state, with the port closed for
    /// `down`; returns once it serves again. Not retried: the answer may be
    /// cut by the restart itself.
    ///
    /// # Errors
    /// If the server does not come back.
    pub async fn restart_emulator(&self, down: Duration) -> anyhow::Result<()> {
        let request = http::Request::builder()
            .method(http::Method::POST)
            .uri("/_emulator/restart")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&json!({"down_ms": down.as_millis()}))?)?;
        let _ = self.client.request_text(request).await;
        self.list().await.map(drop)
    }

    /// How many `watch` requests clients other than this one made.
    ///
    /// # Errors
    /// If the counts cannot be read.
    pub async fn operator_watches(&self) -> anyhow::Result<u64> {
        let doc: Value = self
            .retried("request counts", || {
                let request = http::Request::builder()
                    .uri("/_emulator/requests/counts")
                    .body(Vec::new())
                    .expect("invariant: a fixed request builds");
                let client = self.client.clone();
                async move { client.request::<Value>(request).await }
            })
            .await?;
        Ok(doc["counts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["agent"] != AGENT && c["verb"] == "watch")
            .filter_map(|c| c["count"].as_u64())
            .sum())
    }

    /// Creates `name` with its labels, `data.v = data.f = 0`, these
    /// annotations and these other top-level fields; its UID.
    ///
    /// # Errors
    /// If it keeps failing (a conflict after a lost answer finds the object).
    pub async fn create(
        &self,
        name: &str,
        fin: bool,
        annotations: BTreeMap<String, String>,
        fields: Map<String, Value>,
    ) -> anyhow::Result<String> {
        let mut body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": {"soak": "yes", "soak-fin": if fin { "yes" } else { "no" }},
            },
            "data": {"v": "0", "f": "0"},
        });
        if !annotations.is_empty() {
            body["metadata"]["annotations"] = json!(annotations);
        }
        if let Some(map) = body.as_object_mut() {
            map.extend(fields);
        }
        // Untyped: a ConfigMap has no room for the fields a poisoned one
        // carries.
        let cm: DynamicObject = serde_json::from_value(body)?;
        let created = self
            .retried(&format!("creating {name}"), || async {
                match self.untyped.create(&PostParams::default(), &cm).await {
                    // An earlier attempt got through, its answer lost.
                    Err(kube::Error::Api(s)) if s.code == 409 => self.untyped.get(name).await,
                    other => other,
                }
            })
            .await?;
        created
            .metadata
            .uid
            .context("the created object has no UID")
    }

    /// Sets `data.<key>` of `name`; false if the object is gone.
    ///
    /// # Errors
    /// If it keeps failing.
    pub async fn set(&self, name: &str, key: &str, value: u64) -> anyhow::Result<bool> {
        self.merge(name, &json!({"data": {key: value.to_string()}}))
            .await
    }

    /// Merge-patches `name`; false if the object is gone.
    ///
    /// # Errors
    /// If it keeps failing.
    pub async fn merge(&self, name: &str, patch: &Value) -> anyhow::Result<bool> {
        self.retried(&format!("patching {name}"), || async {
            match self
                .api
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Deletes `name`.
    ///
    /// # Errors
    /// If it keeps failing.
    pub async fn delete(&self, name: &str) -> anyhow::Result<Deleted> {
        self.retried(&format!("deleting {name}"), || async {
            match self.api.delete(name, &DeleteParams::default()).await {
                Ok(either) => Ok(match either.left() {
                    Some(cm) if cm.metadata.deletion_timestamp.is_some() => {
                        Deleted::Held(cm.metadata.finalizers.unwrap_or_default())
                    }
                    _ => Deleted::Gone,
                }),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deleted::Gone),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Every soak object as stored now.
    ///
    /// # Errors
    /// If it keeps failing.
    pub async fn list(&self) -> anyhow::Result<Vec<ConfigMap>> {
        let params = ListParams::default().labels("soak");
        let list = self.retried("listing", || self.api.list(&params)).await?;
        Ok(list.items)
    }
}
