//! The objects that run the operator: its ServiceAccount, its Deployment,
//! the Service of its webhook server, and a PodDisruptionBudget when it
//! has several replicas.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::layout::{self, Layout};
use crate::operations::endpoints::READINESS_PATH;

/// The user and group the container runs as: not root, and the `nonroot`
/// user of distroless images.
const RUN_AS: i64 = 65532;

/// The probes' period: the liveness endpoint runs the `on_probe`
/// handlers at most this often anyway.
const PROBE_PERIOD_SECONDS: i32 = 10;

/// The liveness probe's time limit: above the 5 s a probe handler gets
/// without a `timeout` of its own.
const PROBE_TIMEOUT_SECONDS: i32 = 10;

/// The port names of the container.
const HTTP_PORT: &str = "http";
const METRICS_PORT: &str = "metrics";
const WEBHOOKS_PORT: &str = "webhooks";

fn meta(layout: &Layout) -> ObjectMeta {
    ObjectMeta {
        name: Some(layout.name.clone()),
        namespace: Some(layout.namespace.clone()),
        labels: Some(layout::labels(&layout.name)),
        ..ObjectMeta::default()
    }
}

/// The pods' selector: the name label alone, which no other object of
/// another name has.
fn selector(layout: &Layout) -> BTreeMap<String, String> {
    layout::labels(&layout.name)
}

/// The ServiceAccount the operator runs as.
pub(crate) fn service_account(layout: &Layout) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(layout),
        ..ServiceAccount::default()
    }
}

/// The Deployment of the operator's pods.
pub(crate) fn deployment(layout: &Layout) -> Deployment {
    let mut annotations = BTreeMap::new();
    if let Some(metrics) = &layout.metrics {
        annotations.insert("prometheus.io/scrape".to_owned(), "true".to_owned());
        annotations.insert("prometheus.io/port".to_owned(), metrics.port.to_string());
        annotations.insert("prometheus.io/path".to_owned(), metrics.path.clone());
    }
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(selector(layout)),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            service_account_name: Some(layout.name.clone()),
            automount_service_account_token: Some(true),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(RUN_AS),
                run_as_group: Some(RUN_AS),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_owned(),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![container(layout)],
            ..PodSpec::default()
        }),
    };
    // Without a Lease to elect on, a rolling update would run the old pod
    // and the new one at once, both acting on every object.
    let strategy = (!layout.peering).then(|| DeploymentStrategy {
        type_: Some("Recreate".to_owned()),
        ..DeploymentStrategy::default()
    });
    #[allow(
        clippy::useless_conversion,
        reason = "`spec` is required from Kubernetes 1.37's schema on, optional before: `into` fits either"
    )]
    let deployment = Deployment {
        metadata: meta(layout),
        spec: DeploymentSpec {
            replicas: Some(i32::try_from(layout.replicas).unwrap_or(i32::MAX)),
            selector: LabelSelector {
                match_labels: Some(selector(layout)),
                ..LabelSelector::default()
            },
            strategy,
            template,
            ..DeploymentSpec::default()
        }
        .into(),
        ..Deployment::default()
    };
    deployment
}

/// The operator's container.
fn container(layout: &Layout) -> Container {
    let field = |path: &str| EnvVarSource {
        field_ref: Some(ObjectFieldSelector {
            field_path: path.to_owned(),
            ..ObjectFieldSelector::default()
        }),
        ..EnvVarSource::default()
    };
    let env = vec![
        EnvVar {
            name: "POD_NAME".to_owned(),
            value_from: Some(field("metadata.name")),
            ..EnvVar::default()
        },
        EnvVar {
            name: "POD_NAMESPACE".to_owned(),
            value_from: Some(field("metadata.namespace")),
            ..EnvVar::default()
        },
    ];
    let port = |name: &str, port: u16| ContainerPort {
        name: Some(name.to_owned()),
        container_port: i32::from(port),
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    };
    let mut ports = vec![port(HTTP_PORT, layout.liveness.port)];
    if let Some(metrics) = &layout.metrics
        && metrics.port != layout.liveness.port
    {
        ports.push(port(METRICS_PORT, metrics.port));
    }
    if let Some(webhooks) = &layout.webhooks {
        ports.push(port(WEBHOOKS_PORT, webhooks.port));
    }
    let probe = |path: &str, timeout: Option<i32>| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(HTTP_PORT.to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(PROBE_PERIOD_SECONDS),
        timeout_seconds: timeout,
        ..Probe::default()
    };
    let quantity = |q: &str| Quantity(q.to_owned());
    Container {
        name: "operator".to_owned(),
        image: Some(layout.image.clone()),
        args: Some(layout.args.clone()),
        env: Some(env),
        ports: Some(ports),
        liveness_probe: Some(probe(&layout.liveness.path, Some(PROBE_TIMEOUT_SECONDS))),
        readiness_probe: Some(probe(READINESS_PATH, None)),
        resources: Some(ResourceRequirements {
            requests: Some(
                [
                    ("cpu".to_owned(), quantity("50m")),
                    ("memory".to_owned(), quantity("64Mi")),
                ]
                .into(),
            ),
            limits: Some([("memory".to_owned(), quantity("256Mi"))].into()),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

/// The Service the API server calls the webhooks through, when they are
/// served.
pub(crate) fn service(layout: &Layout) -> Option<Service> {
    let webhooks = layout.webhooks.as_ref()?;
    Some(Service {
        metadata: ObjectMeta {
            name: Some(webhooks.service.clone()),
            ..meta(layout)
        },
        spec: Some(ServiceSpec {
            selector: Some(selector(layout)),
            ports: Some(vec![ServicePort {
                name: Some(WEBHOOKS_PORT.to_owned()),
                port: i32::from(webhooks.service_port),
                target_port: Some(IntOrString::String(WEBHOOKS_PORT.to_owned())),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

/// With several replicas, a PodDisruptionBudget of `maxUnavailable: 1`:
/// a drain takes one replica at a time, so a standby (or another shard
/// holder) is there to take over the Lease and the webhooks stay served;
/// unlike `minAvailable: 1`, it keeps its meaning when the replicas are
/// scaled.
pub(crate) fn disruption_budget(layout: &Layout) -> Option<PodDisruptionBudget> {
    if layout.replicas <= 1 {
        return None;
    }
    Some(PodDisruptionBudget {
        metadata: meta(layout),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(layout)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}
