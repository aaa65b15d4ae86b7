//! An operator binary run as a subprocess, as a user runs it: its
//! output, a client of the emulator it runs against, and its exit. The
//! examples' tests run each example with `--emulator`; the replica suite
//! runs the `peering` example as several processes.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::Api;
use serde_json::Value;

/// How long anything a process does may take before the test fails
/// (longer than [`crate::PATIENCE`]: a process starts, and may start an
/// emulator of its own, before it does anything).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Fails the test if a rule of `unused` is not one that `allowed` names:
/// each a part of the rule's text (`"resources":["events"]`) and why it
/// must stay.
pub fn assert_explained(name: &str, unused: &[String], allowed: &[(&str, &str)]) {
    let unexplained: Vec<&String> = unused
        .iter()
        .filter(|rule| !allowed.iter().any(|(part, _)| rule.contains(part)))
        .collect();
    assert!(
        unexplained.is_empty(),
        "{name}: generated rules that nothing used: {unexplained:#?}"
    );
}

/// A running example binary and what it has written so far.
pub struct Example {
    name: String,
    child: Child,
    output: Arc<Mutex<String>>,
    /// Whether its emulator enforces RBAC (`--emulator-rbac`).
    rbac: bool,
}

impl Example {
    /// Starts the example binary at `path` with `--emulator` and `args`,
    /// its emulator enforcing RBAC (`--emulator-rbac`): the example runs
    /// as its own ServiceAccount with the rules `manifests` generates, and
    /// [`Example::terminate`] checks that none of its requests was denied.
    pub fn start(path: &str, args: &[&str]) -> Self {
        let args: Vec<&str> = ["--emulator", "--emulator-rbac"]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        let mut example = Self::spawn(path, &args, &[]);
        example.rbac = true;
        example
    }

    /// Starts the example binary at `path` with `args` (against a cluster
    /// that they name) and the environment variables `env`.
    pub fn spawn(path: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(path)
            .args(args)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {path}: {e}"));
        let output = Arc::new(Mutex::new(String::new()));
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        collect(stdout, output.clone());
        collect(stderr, output.clone());
        Self {
            name: path.rsplit('/').next().unwrap_or(path).to_owned(),
            child,
            output,
            rbac: false,
        }
    }

    /// Everything the example has written, stdout and stderr.
    pub fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many lines of the output contain `text`.
    pub fn count(&self, text: &str) -> usize {
        self.output().lines().filter(|l| l.contains(text)).count()
    }

    /// Waits until `check` returns `Some`, failing the test after
    /// [`PATIENCE`] or when the example exits first.
    pub async fn wait_until<T, F, Fut>(&mut self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // What it wrote last may still be on its way through the pipes.
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Some(value) = check().await {
                    return value;
                }
                panic!(
                    "{} exited ({status}) while waiting for {what}; its output:\n{}",
                    self.name,
                    self.output()
                );
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "{} did not show {what} within {PATIENCE:?}; its output:\n{}",
                    self.name,
                    self.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the output contains `text`.
    pub async fn wait_for(&mut self, text: &str) {
        self.wait_for_count(text, 1).await;
    }

    /// Waits until at least `n` lines of the output contain `text`.
    pub async fn wait_for_count(&mut self, text: &str, n: usize) {
        let output = self.output.clone();
        self.wait_until(&format!("{n} line(s) with {text:?}"), move || {
            let found = output
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .lines()
                .filter(|l| l.contains(text))
                .count();
            async move { (found >= n).then_some(()) }
        })
        .await;
    }

    /// The URL of the example's emulator, once it is in the output (the
    /// line that says it runs against the emulator).
    pub async fn url(&mut self) -> String {
        const MARK: &str = "url=http://";
        let output = self.output.clone();
        self.wait_until("the emulator's URL", move || {
            let found = output
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .lines()
                .find(|l| l.contains(MARK) && l.contains("emulator"))
                .map(|line| {
                    let start = line.find(MARK).unwrap_or_default() + "url=".len();
                    line[start..]
                        .chars()
                        .take_while(|c| !c.is_whitespace())
                        .collect::<String>()
                });
            async move { found }
        })
        .await
    }

    /// A client of the example's emulator (its URL is in the output).
    pub async fn client(&mut self) -> kube::Client {
        let url = self.url().await;
        let config = kube::Config::new(url.parse().expect("the emulator's URL"));
        kube::Client::try_from(config).expect("a client of the emulator")
    }

    /// Runs `kubectl` with `args` against the example's emulator, with a
    /// cache of its own, under [`PATIENCE`]; its exit status and output.
    pub async fn kubectl(&mut self, args: &[&str]) -> (ExitStatus, String) {
        let url = self.url().await;
        let cache = std::env::temp_dir().join(format!(
            "kopf-examples-kubectl-{}-{}",
            self.name,
            std::process::id()
        ));
        let mut command = Command::new(kopf_testing::kubectl());
        command
            .arg(format!("--server={url}"))
            .arg(format!("--cache-dir={}", cache.display()))
            .arg("--request-timeout=30s")
            .args(args)
            .env("KUBECONFIG", cache.join("no-kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null());
        let run = tokio::task::spawn_blocking(move || command.output());
        let output = tokio::time::timeout(PATIENCE, run)
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} took longer than {PATIENCE:?}"))
            .expect("kubectl's task")
            .expect("kubectl runs");
        let _ = std::fs::remove_dir_all(&cache);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status, text)
    }

    /// The probes' answer once the liveness endpoint (its URL in the
    /// output) answers 200 with a JSON object that satisfies `check`.
    pub async fn probes(&mut self, check: impl Fn(&Value) -> bool) -> Value {
        const MARK: &str = "serving the liveness probe";
        self.wait_for(MARK).await;
        let output = self.output();
        let line = output
            .lines()
            .find(|l| l.contains(MARK))
            .expect("the line is there");
        let start = line.find("url=").expect("the URL is logged") + "url=".len();
        let url: String = line[start..]
            .chars()
            .take_while(|c| !c.is_whitespace())
            .collect();
        let check = &check;
        self.wait_until("the probes' answer", || {
            let url = url.clone();
            async move {
                let (status, body) = kopf_testing::http_get(&url).await.ok()?;
                let answer: Value = serde_json::from_str(&body).ok()?;
                (status == 200 && check(&answer)).then_some(answer)
            }
        })
        .await
    }

    /// Waits until the object of `api` named `name` satisfies `check`
    /// (`None`: it does not exist), as JSON.
    pub async fn wait_object<K, F>(
        &mut self,
        api: &Api<K>,
        name: &str,
        what: &str,
        check: F,
    ) -> Option<Value>
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        F: Fn(Option<&Value>) -> bool,
    {
        self.wait_until(what, || async {
            let object = api.get_opt(name).await.ok()?;
            let object = object.map(|o| serde_json::to_value(o).expect("serializable"));
            check(object.as_ref()).then_some(object)
        })
        .await
    }

    /// Sends SIGTERM and waits for the exit; its status. Under RBAC,
    /// first fails the test if any request of the example was denied.
    pub async fn terminate(mut self) -> (ExitStatus, String) {
        if self.rbac {
            let denials = self.rbac_usage().await["denials"].clone();
            assert_eq!(
                denials,
                Value::Array(vec![]),
                "{}: requests denied by the generated RBAC rules; its output:\n{}",
                self.name,
                self.output()
            );
        }
        self.signal("TERM");
        self.wait_exit().await
    }

    /// What the emulator's RBAC decided so far (`GET /_emulator/rbac/usage`).
    pub async fn rbac_usage(&mut self) -> Value {
        let url = format!("{}/_emulator/rbac/usage", self.url().await);
        let (status, body) = kopf_testing::http_get(&url)
            .await
            .unwrap_or_else(|error| panic!("GET {url}: {error}"));
        assert_eq!(status, 200, "GET {url}: {body}");
        serde_json::from_str(&body).expect("the usage is JSON")
    }

    /// The generated RBAC rules that allowed none of the example's
    /// requests so far, each as `Kind/namespace/name#index: rule`.
    pub async fn unused_rules(&mut self) -> Vec<String> {
        let usage = self.rbac_usage().await;
        let used: std::collections::BTreeSet<(String, String, String, u64)> = usage["grants"]
            .as_array()
            .expect("grants")
            .iter()
            .map(|grant| {
                let role = &grant["role"];
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (
                    text(&role["kind"]),
                    text(&role["namespace"]),
                    text(&role["name"]),
                    grant["rule"].as_u64().expect("a rule index"),
                )
            })
            .collect();
        let client = self.client().await;
        let account = self.name.to_lowercase().replace('_', "-");
        let mut roles: Vec<(String, String, Value)> = Vec::new();
        let cluster: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
        if let Some(role) = cluster
            .get_opt(&account)
            .await
            .expect("the ClusterRole is read")
        {
            roles.push((
                "ClusterRole".into(),
                String::new(),
                serde_json::to_value(role).expect("JSON"),
            ));
        }
        let namespaced: Api<k8s_openapi::api::rbac::v1::Role> = Api::all(client);
        for role in namespaced
            .list(&Default::default())
            .await
            .expect("the Roles are listed")
            .items
            .into_iter()
            .filter(|r| r.metadata.name.as_deref() == Some(account.as_str()))
        {
            let namespace = role.metadata.namespace.clone().unwrap_or_default();
            roles.push((
                "Role".into(),
                namespace,
                serde_json::to_value(role).expect("JSON"),
            ));
        }
        assert!(
            !roles.is_empty(),
            "{}: no generated role named {account}",
            self.name
        );
        let mut unused = Vec::new();
        for (kind, namespace, role) in roles {
            for (index, rule) in role["rules"].as_array().into_iter().flatten().enumerate() {
                let key = (
                    kind.clone(),
                    namespace.clone(),
                    account.clone(),
                    index as u64,
                );
                if !used.contains(&key) {
                    unused.push(format!("{kind}/{namespace}/{account}#{index}: {rule}"));
                }
            }
        }
        unused
    }

    /// Fails the test unless every generated RBAC rule allowed a request
    /// of the example, but those that `allowed` names: each a part of the
    /// rule's text (`"resources":["events"]`) and why it must stay.
    pub async fn assert_every_rule_used(&mut self, allowed: &[(&str, &str)]) {
        let unused = self.unused_rules().await;
        assert_explained(&self.name, &unused, allowed);
    }

    /// Fails the test unless every generated RBAC rule was used (but those
    /// `allowed` names, as [`Self::assert_every_rule_used`]), then
    /// terminates the example and fails the test unless it exits cleanly;
    /// its output.
    pub async fn finish(mut self, allowed: &[(&str, &str)]) -> String {
        self.assert_every_rule_used(allowed).await;
        let (status, output) = self.terminate().await;
        assert!(status.success(), "{status}: {output}");
        output
    }

    /// Sends the signal `name` (`TERM`, `KILL`, …), and returns at once.
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "SIG{name} could not be sent to {pid}");
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("the child can be waited for")
    }

    /// Waits for the example to exit on its own; its status.
    pub async fn wait_exit(mut self) -> (ExitStatus, String) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("the child can be waited for") {
                // The reader threads end with the pipes.
                tokio::time::sleep(Duration::from_millis(200)).await;
                return (status, self.output());
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "{} did not exit within {PATIENCE:?}; its output:\n{}",
                    self.name,
                    self.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Appends every line of `pipe` to `output`, on a thread of its own.
fn collect(pipe: impl Read + Send + 'static, output: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            let mut output = output.lock().unwrap_or_else(PoisonError::into_inner);
            output.push_str(&line);
            output.push('\n');
        }
    });
}

/// The value at `pointer` in `object`, if any.
pub fn at<'a>(object: Option<&'a Value>, pointer: &str) -> Option<&'a Value> {
    object?.pointer(pointer)
}

/// A free port on the loopback, for a listener of the example.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
