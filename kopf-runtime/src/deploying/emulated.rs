//! `--emulator --emulator-rbac`: the embedded emulator enforces RBAC, and
//! the operator runs as its own ServiceAccount, granted exactly the rules
//! that `manifests` prints for the same flags ([`grant`]).

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;

use crate::deploying::Permission;
use crate::deploying::manifests::rbac;

/// Why [`Operator::grant_on_emulator`](crate::Operator::grant_on_emulator)
/// failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot grant the operator its permissions on the emulator: {0}")]
pub struct GrantError(pub(crate) String);

/// Where the ServiceAccount lives: the emulator's default namespace, as
/// the operator's client has it.
pub(crate) const NAMESPACE: &str = "default";

/// Creates the ServiceAccount `NAMESPACE/name` in `emulator` and the RBAC
/// objects that grant it `permissions`, as an administrator.
pub(crate) async fn grant(
    emulator: &kopf_testing::Emulator,
    name: &str,
    permissions: &[Permission],
) -> Result<(), String> {
    let admin = emulator.client();
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .map_err(|error| error.to_string())?;
    Api::<ServiceAccount>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &account)
        .await
        .map_err(|error| format!("cannot create the ServiceAccount {NAMESPACE}/{name}: {error}"))?;
    let objects =
        rbac::granting(name, NAMESPACE, permissions).map_err(|error| error.to_string())?;
    create_all(&admin, objects).await
}

/// Creates the RBAC `objects` (roles and bindings, as JSON) with `admin`.
async fn create_all(admin: &kube::Client, objects: Vec<serde_json::Value>) -> Result<(), String> {
    for object in objects {
        let object: DynamicObject =
            serde_json::from_value(object).map_err(|error| error.to_string())?;
        let kind = object
            .types
            .as_ref()
            .map_or("", |t| t.kind.as_str())
            .to_owned();
        let resource = match kind.as_str() {
            "Role" => ApiResource::erase::<Role>(&()),
            "RoleBinding" => ApiResource::erase::<RoleBinding>(&()),
            "ClusterRole" => ApiResource::erase::<ClusterRole>(&()),
            "ClusterRoleBinding" => ApiResource::erase::<ClusterRoleBinding>(&()),
            other => return Err(format!("an unexpected RBAC object of kind {other:?}")),
        };
        let api: Api<DynamicObject> = match &object.metadata.namespace {
            Some(namespace) => Api::namespaced_with(admin.clone(), namespace, &resource),
            None => Api::all_with(admin.clone(), &resource),
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &object)
            .await
            .map_err(|error| format!("cannot create the {kind} {name}: {error}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
    use serde_json::Value;

    use super::*;
    use crate::deploying::{MissingPermissions, Named, Plan, StartUp, at_start_up, required};
    use crate::model::kwargs::Kwargs;
    use crate::model::registry::Registry;
    use crate::model::resources::ResourceRef;
    use crate::operator::namespaces::NamespaceSelector;

    async fn noop(_: Kwargs) {}

    /// A review the check asks: `(verb, group, resource, name, namespace)`.
    type Review = (String, String, String, Option<String>, Option<String>);

    /// An operator with a bit of everything: change handlers and a timer
    /// in two namespaces, a cluster-scoped resource, sharded peering,
    /// managed webhooks and a declared permission.
    fn operator() -> (Registry, Plan) {
        let registry = Registry::builder()
            .on_create(ResourceRef::of::<ConfigMap>(), "create", noop)
            .timer(ResourceRef::of::<Secret>(), "tick", noop)
            .interval(Duration::from_secs(1))
            .no_finalizers()
            .on_event(ResourceRef::of::<Namespace>(), "spy", noop)
            .on_validate(ResourceRef::of::<ConfigMap>(), "check", noop)
            .build()
            .expect("a registry");
        let selector = NamespaceSelector::new(["a", "b"], false).expect("a selector");
        let mut plan = Plan::new(selector, NAMESPACE);
        plan.peering = Some(("ops".into(), "op".into(), 4));
        plan.webhooks = true;
        plan.webhooks_managed = Some("op.example.com".into());
        plan.declared = vec![
            Permission::new("apps", "deployments")
                .verbs(["get"])
                .names(["web"])
                .why("the handler reads a Deployment"),
        ];
        (registry, plan)
    }

    /// What one rule of a role grants, as the reviews the check asks:
    /// `(verb, group, resource, name, namespace)`.
    fn granted(rule: &Value, namespace: Option<&str>) -> BTreeSet<Review> {
        let list = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let names = list("resourceNames");
        let mut asked = BTreeSet::new();
        for verb in list("verbs") {
            for group in list("apiGroups") {
                for resource in list("resources") {
                    let names: Vec<Option<String>> = if names.is_empty() || verb == "create" {
                        vec![None]
                    } else {
                        names.iter().cloned().map(Some).collect()
                    };
                    for name in names {
                        asked.insert((
                            verb.clone(),
                            group.clone(),
                            resource.clone(),
                            name,
                            namespace.map(str::to_owned),
                        ));
                    }
                }
            }
        }
        asked
    }

    #[tokio::test]
    async fn without_any_one_generated_rule_the_check_names_exactly_what_it_granted() {
        let (registry, plan) = operator();
        let permissions = required(&registry, &plan, &Named::offline).expect("the permissions");
        let objects = rbac::granting("op", NAMESPACE, &permissions).expect("the RBAC objects");
        let roles: Vec<usize> = (0..objects.len())
            .filter(|&i| objects[i]["rules"].is_array())
            .collect();
        let mut cases = 0;
        for &role in &roles {
            let count = objects[role]["rules"].as_array().map_or(0, Vec::len);
            for rule in 0..count {
                let mut without = objects.clone();
                let removed = without[role]["rules"]
                    .as_array_mut()
                    .expect("rules")
                    .remove(rule);
                let namespace = objects[role]["metadata"]["namespace"].as_str();
                let expected = granted(&removed, namespace);

                let emulator = kopf_testing::Emulator::builder()
                    .rbac()
                    .start()
                    .await
                    .expect("the emulator starts");
                grant_objects(&emulator, "op", without).await;
                let client = emulator
                    .client_as_service_account(NAMESPACE, "op")
                    .expect("a client of the ServiceAccount");
                let start_up = StartUp {
                    registry: &registry,
                    plan: plan.clone(),
                    on_missing: MissingPermissions::Fail,
                };
                let (missing, report) = at_start_up(&client, start_up)
                    .await
                    .expect_err("a rule is missing");
                let named: BTreeSet<Review> = missing
                    .iter()
                    .map(|m| {
                        (
                            m.verb.clone(),
                            m.group.clone(),
                            m.resource.clone(),
                            m.name.clone(),
                            m.namespace.clone(),
                        )
                    })
                    .collect();
                assert_eq!(
                    named, expected,
                    "without {removed} of role #{role}:\n{report}"
                );
                emulator.shutdown().await;
                cases += 1;
            }
        }
        assert!(cases >= 10, "only {cases} rules");

        // With every rule, nothing is missing.
        let emulator = kopf_testing::Emulator::builder()
            .rbac()
            .start()
            .await
            .expect("the emulator starts");
        grant_objects(&emulator, "op", objects).await;
        let client = emulator
            .client_as_service_account(NAMESPACE, "op")
            .expect("a client of the ServiceAccount");
        let start_up = StartUp {
            registry: &registry,
            plan,
            on_missing: MissingPermissions::Fail,
        };
        assert!(at_start_up(&client, start_up).await.is_ok());
        emulator.shutdown().await;
    }

    /// The ServiceAccount `NAMESPACE/name` and `objects`, created as an
    /// administrator.
    async fn grant_objects(emulator: &kopf_testing::Emulator, name: &str, objects: Vec<Value>) {
        let admin = emulator.client();
        for namespace in ["a", "b", "ops"] {
            let namespace: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))
                    .expect("a namespace");
            Api::<Namespace>::all(admin.clone())
                .create(&PostParams::default(), &namespace)
                .await
                .expect("the namespace is created");
        }
        let account: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                .expect("an account");
        Api::<ServiceAccount>::namespaced(admin.clone(), NAMESPACE)
            .create(&PostParams::default(), &account)
            .await
            .expect("the ServiceAccount is created");
        create_all(&admin, objects)
            .await
            .expect("the RBAC objects are created");
    }
}
