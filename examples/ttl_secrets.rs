//! Deletes Secrets once they are older than their TTL annotation.
//!
//! A Secret annotated with `example.com/ttl: "30s"` (any duration such as
//! `90s`, `5m`, `1h 30m`) is deleted by this operator once it is that old. The
//! timer uses `no_finalizers`: the operator never blocks a Secret's deletion,
//! so `kubectl delete secret` works at once even while the operator is down.
//!
//! ```sh
//! # against the cluster in your kubeconfig
//! cargo run -p kopf-examples --bin ttl_secrets
//! # against an embedded Kubernetes API emulator, with a few demo Secrets
//! cargo run -p kopf-examples --bin ttl_secrets -- --emulator
//! ```

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopf_runtime as kopf;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

/// The annotation holding a Secret's time to live.
const TTL: &str = "example.com/ttl";

#[kopf::rbac(
    groups = "",
    resources = "secrets",
    verbs = "delete",
    why = "expired Secrets are deleted"
)]
#[kopf::timer(Secret, interval = 1, no_finalizers, annotations("example.com/ttl" = kopf::PRESENT))]
async fn expire(
    meta: &ObjectMeta,
    client: kube::Client,
    logger: &kopf::Logger,
) -> kopf::Result<()> {
    let Some(ttl) = meta.annotations.as_ref().and_then(|a| a.get(TTL)) else {
        return Ok(());
    };
    let ttl: jiff::SignedDuration = match ttl.parse() {
        Ok(ttl) => ttl,
        Err(error) => {
            return Err(kopf::Error::permanent(format!(
                "{TTL} {ttl:?} is not a duration like \"30s\": {error}"
            )));
        }
    };
    let Some(created) = &meta.creation_timestamp else {
        return Ok(());
    };
    let age = jiff::Timestamp::now().duration_since(created.0);
    if age < ttl {
        return Ok(());
    }
    let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
        return Ok(());
    };
    logger.info(format!("expired after {ttl:#}; deleting"));
    let secrets: Api<Secret> = Api::namespaced(client, namespace);
    match secrets.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        // Someone else deleted it first: nothing left to do.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Demo Secrets for `--emulator`: three that expire, one that stays.
async fn create_demo_secrets(client: kube::Client) {
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    for (name, ttl) in [
        ("short-lived", Some("3s")),
        ("medium", Some("6s")),
        ("long", Some("10s")),
        ("forever", None),
    ] {
        let mut secret = Secret::default();
        secret.metadata.name = Some(format!("demo-{name}"));
        if let Some(ttl) = ttl {
            secret.metadata.annotations = Some([(TTL.to_owned(), ttl.to_owned())].into());
        }
        secret.string_data = Some([("token".to_owned(), "s3cr3t".to_owned())].into());
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(name = %format!("demo-{name}"), ttl = ttl.unwrap_or("none"), "created a demo Secret")
            }
            Err(error) => tracing::warn!(%error, "cannot create a demo Secret"),
        }
    }
    // Show what is left now and then, so the expiry can be seen in the log.
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Ok(list) = secrets.list(&Default::default()).await {
            let names: Vec<String> = list
                .items
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .collect();
            tracing::info!(secrets = ?names, "secrets in the default namespace");
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kopf::Runner::new()
        .on_emulator(create_demo_secrets)
        .run()
        .await?;
    Ok(())
}
