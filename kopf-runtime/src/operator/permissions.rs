//! What the operator needs of the cluster's RBAC: the permissions that
//! handlers declare beside the derived ones, what to do when some are
//! missing at start-up, and granting them on an emulator.

use kube::Client;

use super::{Operator, OperatorError};
use crate::deploying::{self, MissingPermissions, Permission};
use crate::peering::Peering;
use crate::webhooks::WebhookServer;

impl Operator {
    /// Needs `permission` too, for what handlers do with their own client
    /// (as `#[kopf::rbac]` declares): the start-up check asks for it.
    pub fn rbac(mut self, permission: Permission) -> Self {
        self.permissions.push(permission);
        self
    }

    /// What to do when the API server says, at start-up, that the operator
    /// lacks permissions it needs: fail with
    /// [`OperatorError::MissingPermissions`] (the default), or warn and
    /// serve anyway.
    pub fn missing_permissions(mut self, on_missing: MissingPermissions) -> Self {
        self.on_missing = on_missing;
        self
    }

    /// What of its configuration decides the permissions it needs, for
    /// a client whose default namespace is `home`.
    pub(super) fn plan(&self, home: &str) -> deploying::Plan {
        let mut plan = deploying::Plan::new(self.namespaces.clone(), home);
        plan.peering = self.peering.as_ref().map(Peering::coordinates);
        plan.webhooks = self.webhooks.is_some();
        plan.webhooks_managed = self
            .webhooks
            .as_ref()
            .and_then(WebhookServer::managed)
            .map(|managed| managed.name.clone());
        plan.events = self.settings.posting.enabled;
        plan.declared = deploying::declared();
        plan.declared.extend(self.permissions.iter().cloned());
        plan
    }

    /// With the `emulator` feature: grants this operator, on `emulator`
    /// (one that enforces RBAC, `EmulatorBuilder::rbac`), exactly the
    /// rules that `manifests` prints for it, as the ServiceAccount
    /// `default/name`, which it creates; then run it with
    /// `emulator.client_as_service_account("default", name)` (what
    /// `--emulator --emulator-rbac` does for [`run`](crate::run)).
    ///
    /// # Errors
    /// [`GrantError`](crate::GrantError) when the permissions cannot be
    /// derived or the objects cannot be created.
    #[cfg(feature = "emulator")]
    pub async fn grant_on_emulator(
        &self,
        emulator: &kopf_testing::Emulator,
        name: &str,
    ) -> Result<(), deploying::GrantError> {
        let permissions = self
            .permissions_needed(deploying::emulated::NAMESPACE)
            .map_err(|error| deploying::GrantError(error.to_string()))?;
        deploying::emulated::grant(emulator, name, &permissions)
            .await
            .map_err(deploying::GrantError)
    }

    /// Every permission it needs, with a client whose default namespace
    /// is `home`: what the start-up check asks for.
    #[cfg(feature = "emulator")]
    fn permissions_needed(
        &self,
        home: &str,
    ) -> Result<Vec<Permission>, deploying::PermissionError> {
        deploying::required(&self.registry, &self.plan(home), &deploying::Named::offline)
    }

    /// The start-up check of its permissions, for `client`: an error
    /// naming every missing one unless they only warrant a warning.
    pub(super) async fn check_permissions(&self, client: &Client) -> Result<(), OperatorError> {
        let start_up = deploying::StartUp {
            registry: &self.registry,
            plan: self.plan(client.default_namespace()),
            on_missing: self.on_missing,
        };
        deploying::at_start_up(client, start_up)
            .await
            .map_err(|(missing, report)| OperatorError::MissingPermissions { missing, report })
    }
}
