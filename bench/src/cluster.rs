//! The emulator as a separate process, its admin endpoints (`/_emulator/…`),
//! and the runner's own client (the "driver"), which identifies itself with
//! the User-Agent [`DRIVER_AGENT`] so that the emulator's request counts tell
//! the operator's requests from the runner's.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The User-Agent of the runner's own requests.
pub const DRIVER_AGENT: &str = "kopf-bench-driver";

/// How many requests the driver keeps in flight ("8 concurrent clients").
pub const CONCURRENCY: usize = 8;

/// The namespace all scenarios use.
pub const NAMESPACE: &str = "default";

/// A child process that is stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct Process {
    /// What it is, for messages.
    pub label: String,
    child: Child,
}

impl Process {
    /// Wraps a spawned child.
    pub fn new(label: impl Into<String>, child: Child) -> Process {
        Process {
            label: label.into(),
            child,
        }
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends the signal `name` (`TERM`, `KILL`, …) and returns at once.
    pub fn signal(&self, name: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status();
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// A running `kube-emulator` process.
#[derive(Debug)]
pub struct Emulator {
    /// The process.
    pub process: Process,
    /// Its kubeconfig.
    pub kubeconfig: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Emulator {
    /// Starts `bin` on a free port of 127.0.0.1, logging to `dir/emulator.log`.
    ///
    /// # Errors
    /// If it does not start or does not say where it listens within 30 s.
    pub fn start(bin: &Path, dir: &Path) -> anyhow::Result<Emulator> {
        let kubeconfig = dir.join("kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let log = std::fs::File::create(dir.join("emulator.log"))?;
        let child = Command::new(bin)
            .args(["--port", "0", "--kubeconfig"])
            .arg(&kubeconfig)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut process = Process::new("kube-emulator", child);
        let stdout = process
            .child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow!("kube-emulator said {line:?}, not `listening on URL`"))?
            .to_string();
        if !url.starts_with("http://127.0.0.1:") {
            bail!("kube-emulator listens on {url}, not on 127.0.0.1");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !kubeconfig.exists() {
            if Instant::now() > deadline || process.exited().is_some() {
                bail!("kube-emulator wrote no kubeconfig");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Emulator {
            process,
            kubeconfig,
            url,
        })
    }
}

/// The runner's client: creates and deletes objects, drives the admin endpoints.
#[derive(Clone)]
pub struct Driver {
    client: Client,
    /// The ConfigMaps of [`NAMESPACE`].
    pub api: Api<ConfigMap>,
}

impl Driver {
    /// A client for the emulator at `url`, without retries, with [`DRIVER_AGENT`].
    ///
    /// # Errors
    /// If the client cannot be built.
    pub fn new(url: &str) -> anyhow::Result<Driver> {
        let mut config = kube::Config::new(url.parse()?);
        config.default_retry = false;
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(DRIVER_AGENT),
        ));
        let client = Client::try_from(config)?;
        let api = Api::namespaced(client.clone(), NAMESPACE);
        Ok(Driver { client, api })
    }

    async fn admin(&self, method: http::Method, path: &str, body: Value) -> anyhow::Result<Value> {
        let request = http::Request::builder()
            .method(method)
            .uri(format!("/_emulator/{path}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body)?)?;
        let text = self
            .client
            .request_text(request)
            .await
            .with_context(|| format!("emulator admin endpoint /_emulator/{path}"))?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Ends every open watch stream.
    pub async fn drop_watches(&self) -> anyhow::Result<()> {
        self.admin(http::Method::POST, "faults/drop-watches", json!({}))
            .await
            .map(drop)
    }

    /// Forgets the watch history (old resourceVersions get 410 Gone).
    pub async fn compact(&self) -> anyhow::Result<()> {
        self.admin(http::Method::POST, "faults/compact", json!({}))
            .await
            .map(drop)
    }

    /// Fails the next `n` requests of `verb` with `status`.
    pub async fn fail(&self, verb: &str, n: usize, status: u16) -> anyhow::Result<()> {
        self.admin(
            http::Method::POST,
            "faults/fail",
            json!({"n": n, "status": status, "verb": verb}),
        )
        .await
        .map(drop)
    }

    /// Removes every failure rule.
    pub async fn clear_faults(&self) -> anyhow::Result<()> {
        self.admin(http::Method::POST, "faults/clear", json!({}))
            .await
            .map(drop)
    }

    /// Resets the request counts.
    pub async fn reset_counts(&self) -> anyhow::Result<()> {
        self.admin(http::Method::DELETE, "requests/counts", json!({}))
            .await
            .map(drop)
    }

    /// Requests by verb of every client but the driver, since the last reset.
    pub async fn operator_requests(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let doc = self
            .admin(http::Method::GET, "requests/counts", json!({}))
            .await?;
        let mut by_verb = BTreeMap::new();
        for c in doc["counts"].as_array().into_iter().flatten() {
            if c["agent"] == DRIVER_AGENT {
                continue;
            }
            let verb = c["verb"].as_str().unwrap_or("?").to_string();
            *by_verb.entry(verb).or_insert(0) += c["count"].as_u64().unwrap_or(0);
        }
        Ok(by_verb)
    }

    /// Who holds the Lease `name` of [`NAMESPACE`], if anyone.
    pub async fn lease_holder(&self, name: &str) -> anyhow::Result<Option<String>> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NAMESPACE);
        let lease = leases.get_opt(name).await?;
        Ok(lease.and_then(|l| l.spec?.holder_identity))
    }

    /// Creates one ConfigMap.
    pub async fn create(&self, name: &str) -> anyhow::Result<()> {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.data = Some([("bench".to_string(), "x".to_string())].into());
        self.api
            .create(&PostParams::default(), &cm)
            .await
            .with_context(|| format!("creating {name}"))?;
        Ok(())
    }

    /// Creates all `names`, [`CONCURRENCY`] at a time.
    ///
    /// # Errors
    /// The first failure.
    pub async fn create_all(&self, names: &[String]) -> anyhow::Result<()> {
        futures::stream::iter(names.iter().map(|n| self.create(n)))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    }

    /// Deletes all `names`, [`CONCURRENCY`] at a time; with `force`, removes
    /// their finalizers first, so that they vanish at once.
    ///
    /// # Errors
    /// The first failure other than 404.
    pub async fn delete_all(&self, names: &[String], force: bool) -> anyhow::Result<()> {
        let one = |name: String| async move {
            if force {
                let patch = json!({"metadata": {"finalizers": null}});
                match self
                    .api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(anyhow!("unfinalizing {name}: {e}")),
                }
            }
            match self.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(anyhow!("deleting {name}: {e}")),
            }
        };
        futures::stream::iter(names.iter().cloned().map(one))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    }

    /// How many of the namespace's ConfigMaps have names starting with `prefix`.
    pub async fn count(&self, prefix: &str) -> anyhow::Result<usize> {
        let list = self.api.list_metadata(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .filter(|o| {
                o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .count())
    }
}
