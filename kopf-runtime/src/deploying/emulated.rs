//! `--emulator --emulator-rbac`: the embedded emulator enforces RBAC, and
//! the operator runs as its own ServiceAccount, granted exactly the rules
//! that `manifests` prints for the same flags ([`grant`]).

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;

use crate::deploying::Permission;
use crate::deploying::manifests::rbac;

/// Where the ServiceAccount lives: the emulator's default namespace, as
/// the operator's client has it.
pub(crate) const NAMESPACE: &str = "default";

/// Creates the ServiceAccount `NAMESPACE/name` in `emulator` and the RBAC
/// objects that grant it `permissions`, as an administrator; a token of
/// the ServiceAccount.
pub(crate) async fn grant(
    emulator: &kopf_testing::Emulator,
    name: &str,
    permissions: &[Permission],
) -> Result<String, String> {
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
    for object in objects {
        let object: DynamicObject =
            serde_json::from_value(object).map_err(|error| error.to_string())?;
        let kind = object.types.as_ref().map_or("", |t| t.kind.as_str());
        let resource = match kind {
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
        api.create(&PostParams::default(), &object)
            .await
            .map_err(|error| format!("cannot create the {kind} {name}: {error}"))?;
    }
    emulator
        .service_account_token(NAMESPACE, name)
        .map_err(|error| format!("cannot mint a token of {NAMESPACE}/{name}: {error}"))
}
