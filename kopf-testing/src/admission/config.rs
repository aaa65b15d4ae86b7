//! Webhook configurations as stored: each `ValidatingWebhookConfiguration`
//! and `MutatingWebhookConfiguration` read into the [`Webhook`]s the chain
//! matches and calls.
//!
//! The emulator stores configurations without validating them; a webhook
//! it cannot read (a rule, selector or `caBundle` of the wrong shape) is
//! skipped with a logged warning, where the API server would have refused
//! the configuration.

use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use super::matching::Rule;
use crate::selectors::LabelSelector;

/// `timeoutSeconds` when unset, as the API server.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most `timeoutSeconds` may be (the API server refuses more).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// What a call that fails (unreachable, timed out, garbage) means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailurePolicy {
    /// The request is refused (the default).
    Fail,
    /// The request goes on as if the webhook had allowed it.
    Ignore,
}

/// Whether other versions of a matched resource count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MatchPolicy {
    /// Only the group/version/resource the rules name.
    Exact,
    /// Also another served version of the same group and resource (the
    /// default): the webhook sees the object in the version its rule names.
    Equivalent,
}

/// A webhook's `sideEffects`: whether it may be called for dry runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SideEffects {
    /// `None`: called for dry runs.
    None,
    /// `NoneOnDryRun`: called for dry runs.
    NoneOnDryRun,
    /// `Some` or `Unknown` (the v1beta1 values): dry runs are refused.
    Some,
    /// Unset: dry runs fail as a failed call.
    Missing,
}

/// Where a webhook is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `clientConfig.url`.
    Url(String),
    /// `clientConfig.service`: reached through the address mapped to it.
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The path on the server (`/` when unset).
        path: String,
        /// The Service's port (443 when unset).
        port: u16,
    },
}

/// One webhook of a stored configuration.
#[derive(Debug, Clone)]
pub(crate) struct Webhook {
    /// The webhook's name (in messages).
    pub(crate) name: String,
    /// Its configuration's name.
    pub(crate) configuration: String,
    /// Whether it is a mutating webhook.
    pub(crate) mutating: bool,
    /// Where it is served.
    pub(crate) endpoint: Endpoint,
    /// The PEM certificates its server certificate is verified against.
    pub(crate) ca_bundle: Vec<u8>,
    /// Which requests it is called for.
    pub(crate) rules: Vec<Rule>,
    /// What a failed call means.
    pub(crate) failure_policy: FailurePolicy,
    /// Whether other versions of a resource match.
    pub(crate) match_policy: MatchPolicy,
    /// Labels the request's namespace must have.
    pub(crate) namespace_selector: LabelSelector,
    /// Labels the object (old or new) must have.
    pub(crate) object_selector: LabelSelector,
    /// Whether it may be called for dry runs.
    pub(crate) side_effects: SideEffects,
    /// How long a call may take.
    pub(crate) timeout: Duration,
}

/// The webhooks of one stored configuration, in their listed order (the
/// order the API server calls them in); unreadable ones are skipped.
pub(crate) fn read(config: &Value, mutating: bool) -> Vec<Webhook> {
    let configuration = crate::objects::name(config).to_string();
    let hooks = config.get("webhooks").and_then(Value::as_array);
    hooks
        .into_iter()
        .flatten()
        .filter_map(|hook| match read_webhook(hook, &configuration, mutating) {
            Ok(webhook) => Some(webhook),
            Err(why) => {
                let webhook = hook.get("name").and_then(Value::as_str).unwrap_or("");
                tracing::warn!(
                    configuration,
                    webhook,
                    "emulator: skipping a webhook it cannot read: {why}"
                );
                None
            }
        })
        .collect()
}

fn read_webhook(hook: &Value, configuration: &str, mutating: bool) -> Result<Webhook, String> {
    let name = hook
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("`name` is missing")?
        .to_string();
    let client = hook
        .get("clientConfig")
        .ok_or("`clientConfig` is missing")?;
    let endpoint = match (client.get("url"), client.get("service")) {
        (Some(Value::String(url)), None) => Endpoint::Url(url.clone()),
        (None, Some(service)) => {
            let field = |key: &str| {
                service
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| format!("`clientConfig.service.{key}` is missing"))
            };
            let port = match service.get("port") {
                None | Some(Value::Null) => 443,
                Some(port) => port
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .filter(|p| *p > 0)
                    .ok_or("`clientConfig.service.port` is not a port number")?,
            };
            Endpoint::Service {
                namespace: field("namespace")?,
                name: field("name")?,
                path: service
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or("/")
                    .to_string(),
                port,
            }
        }
        _ => return Err("`clientConfig` needs exactly one of `url` and `service`".into()),
    };
    let ca_bundle = match client.get("caBundle").and_then(Value::as_str) {
        None => Vec::new(),
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("`clientConfig.caBundle` is not base64: {e}"))?,
    };
    let rules = hook
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(Rule::read)
        .collect::<Result<Vec<_>, _>>()?;
    let word = |key: &str| hook.get(key).and_then(Value::as_str);
    let failure_policy = match word("failurePolicy") {
        None | Some("Fail") => FailurePolicy::Fail,
        Some("Ignore") => FailurePolicy::Ignore,
        Some(other) => return Err(format!("`failurePolicy` {other:?} is not Fail or Ignore")),
    };
    let match_policy = match word("matchPolicy") {
        None | Some("Equivalent") => MatchPolicy::Equivalent,
        Some("Exact") => MatchPolicy::Exact,
        Some(other) => {
            return Err(format!(
                "`matchPolicy` {other:?} is not Exact or Equivalent"
            ));
        }
    };
    let side_effects = match word("sideEffects") {
        None => SideEffects::Missing,
        Some("None") => SideEffects::None,
        Some("NoneOnDryRun") => SideEffects::NoneOnDryRun,
        Some("Some" | "Unknown") => SideEffects::Some,
        Some(other) => {
            return Err(format!(
                "`sideEffects` {other:?} is not None or NoneOnDryRun"
            ));
        }
    };
    let selector =
        |key: &str| LabelSelector::from_spec(hook.get(key)).map_err(|e| format!("`{key}`: {e}"));
    let timeout = match hook.get("timeoutSeconds").and_then(Value::as_u64) {
        None => DEFAULT_TIMEOUT,
        Some(secs) => Duration::from_secs(secs.max(1)).min(MAX_TIMEOUT),
    };
    Ok(Webhook {
        name,
        configuration: configuration.to_string(),
        mutating,
        endpoint,
        ca_bundle,
        rules,
        failure_policy,
        match_policy,
        namespace_selector: selector("namespaceSelector")?,
        object_selector: selector("objectSelector")?,
        side_effects,
        timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_the_api_servers() {
        let config = json!({"metadata": {"name": "c"}, "webhooks": [{
            "name": "w.example.com",
            "clientConfig": {"service": {"namespace": "ns", "name": "svc"}},
        }]});
        let hooks = read(&config, false);
        let hook = &hooks[0];
        assert_eq!(hook.configuration, "c");
        assert_eq!(hook.failure_policy, FailurePolicy::Fail);
        assert_eq!(hook.match_policy, MatchPolicy::Equivalent);
        assert_eq!(hook.side_effects, SideEffects::Missing);
        assert_eq!(hook.timeout, DEFAULT_TIMEOUT);
        assert_eq!(
            hook.endpoint,
            Endpoint::Service {
                namespace: "ns".into(),
                name: "svc".into(),
                path: "/".into(),
                port: 443
            }
        );
        assert!(hook.namespace_selector.is_empty() && hook.object_selector.is_empty());
    }

    #[test]
    fn timeouts_are_bounded_and_unreadable_webhooks_skipped() {
        let config = json!({"metadata": {"name": "c"}, "webhooks": [
            {"name": "slow", "clientConfig": {"url": "https://x"}, "timeoutSeconds": 300},
            {"name": "bad-policy", "clientConfig": {"url": "https://x"}, "failurePolicy": "Maybe"},
            {"name": "bad-ca", "clientConfig": {"url": "https://x", "caBundle": "!!"}},
            {"name": "both", "clientConfig": {"url": "https://x", "service": {"namespace": "a", "name": "b"}}},
        ]});
        let hooks = read(&config, true);
        assert_eq!(hooks.len(), 1);
        assert_eq!(hooks[0].timeout, MAX_TIMEOUT);
        assert!(hooks[0].mutating);
    }
}
