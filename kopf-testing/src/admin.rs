//! The admin endpoints under `/_emulator/`: fault injection and request counts
//! for clients in other processes (benchmark runners, scripts), as
//! [`Faults`](crate::Faults) offers them in-process.
//!
//! ```text
//! POST   /_emulator/faults/drop-watches   end every open watch stream
//! POST   /_emulator/faults/compact        forget the watch history (410 Gone)
//! POST   /_emulator/faults/silence-watches  keep every watch stream open, sending nothing
//! POST   /_emulator/faults/resume-watches   let silenced watch streams carry on
//! POST   /_emulator/faults/fail           {"n": 5, "status": 503, "verb": "watch",
//!                                          "path_contains": "configmaps", "retry_after": 1}
//! POST   /_emulator/faults/latency        {"ms": 300}: delay every request (0: none)
//! POST   /_emulator/faults/clear          remove every failure rule and latency, resume watches
//! POST   /_emulator/restart               {"down_ms": 500}: restart keeping the state
//! GET    /_emulator/requests/counts       {"counts": [{"agent": "…", "verb": "list", "count": 3}]}
//! DELETE /_emulator/requests/counts       reset the counts
//! GET    /_emulator/rbac/usage            which rules allowed what, and what was denied
//! DELETE /_emulator/rbac/usage            forget it
//! ```
//!
//! `rbac/usage` answers [`RbacUsage`](crate::RbacUsage) as JSON:
//!
//! ```text
//! {"grants": [{"user": "system:serviceaccount:ns:op",
//!              "binding": {"kind": "RoleBinding", "namespace": "ns", "name": "op"},
//!              "role": {"kind": "ClusterRole", "namespace": "", "name": "op"},
//!              "rule": 0, "count": 3}],
//!  "denials": [{"user": "system:serviceaccount:ns:op", "groups": ["system:serviceaccounts", …],
//!               "verb": "list", "resourceRequest": true, "apiGroup": "", "resource": "secrets",
//!               "subresource": "", "namespace": "", "name": "", "path": "/api/v1/secrets",
//!               "count": 1}]}
//! ```
//!
//! `restart` answers first, then closes every connection and watch, refuses
//! new connections for `down_ms` (the port is closed), and serves the same
//! port again with the store, watch history, resourceVersions, fault rules
//! and counts kept, as an API server restarting in front of its etcd does
//! (see [`Emulator::restart_with_downtime`](crate::Emulator::restart_with_downtime)).
//!
//! No Kubernetes API path starts with `/_emulator/`. Admin requests are
//! neither recorded nor counted, and faults do not apply to them.

use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use http::{Method, Response};
use serde::Deserialize;
use serde_json::json;

use crate::failures::ApiError;
use crate::faults::{FailRule, Faults};
use crate::responses::{error_response, json_response};
use crate::shared::Shared;

/// The path prefix of the admin endpoints.
pub(crate) const PREFIX: &str = "/_emulator/";

/// The body of `POST /_emulator/faults/fail`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailBody {
    n: usize,
    status: u16,
    #[serde(default)]
    verb: Option<String>,
    #[serde(default)]
    path_contains: Option<String>,
    #[serde(default)]
    body_contains: Option<String>,
    #[serde(default)]
    retry_after: Option<u32>,
}

/// The body of `POST /_emulator/faults/latency`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LatencyBody {
    ms: u64,
}

/// The body of `POST /_emulator/restart`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartBody {
    #[serde(default)]
    down_ms: u64,
}

/// Serves one admin request (`path` starts with [`PREFIX`]).
pub(crate) fn serve(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    body: &Bytes,
) -> Response<Body> {
    let faults = Faults {
        shared: shared.clone(),
    };
    let ok = || json_response(200, &json!({}));
    match (method, &path[PREFIX.len()..]) {
        (&Method::POST, "faults/drop-watches") => {
            faults.drop_watches();
            ok()
        }
        (&Method::POST, "faults/silence-watches") => {
            faults.silence_watches();
            ok()
        }
        (&Method::POST, "faults/resume-watches") => {
            faults.resume_watches();
            ok()
        }
        (&Method::POST, "faults/compact") => {
            faults.compact();
            ok()
        }
        (&Method::POST, "faults/clear") => {
            faults.clear();
            ok()
        }
        (&Method::POST, "faults/latency") => match serde_json::from_slice::<LatencyBody>(body) {
            Ok(b) => {
                faults.set_latency(std::time::Duration::from_millis(b.ms));
                ok()
            }
            Err(e) => error_response(&ApiError::bad_request(format!(
                "expected {{\"ms\": MILLISECONDS}} (0 removes the latency): {e}"
            ))),
        },
        (&Method::POST, "restart") => {
            let parsed = if body.is_empty() {
                Ok(RestartBody { down_ms: 0 })
            } else {
                serde_json::from_slice::<RestartBody>(body)
            };
            match (parsed, &shared.restarts) {
                (Ok(b), Some(restarts)) => {
                    let _ = restarts.send(std::time::Duration::from_millis(b.down_ms));
                    ok()
                }
                (Ok(_), None) => error_response(&ApiError::new(
                    503,
                    "ServiceUnavailable",
                    "this emulator cannot restart itself (it was not started by `EmulatorBuilder::start`)",
                )),
                (Err(e), _) => error_response(&ApiError::bad_request(format!(
                    "expected {{\"down_ms\": MILLISECONDS}} or no body: {e}"
                ))),
            }
        }
        (&Method::POST, "faults/fail") => match serde_json::from_slice::<FailBody>(body) {
            Ok(b) => {
                let rule = FailRule {
                    verb: b.verb,
                    path_contains: b.path_contains,
                    body_contains: b.body_contains,
                    status: b.status,
                    retry_after: b.retry_after,
                };
                match faults.try_fail_next(b.n, rule) {
                    Ok(()) => ok(),
                    Err(why) => error_response(&ApiError::bad_request(why)),
                }
            }
            Err(e) => error_response(&ApiError::bad_request(format!(
                "expected {{\"n\": N, \"status\": CODE, \"verb\"?, \"path_contains\"?, \"body_contains\"?, \"retry_after\"?}}: {e}"
            ))),
        },
        (&Method::GET, "requests/counts") => {
            let counts: Vec<_> = shared
                .recorder
                .counts()
                .into_iter()
                .map(|((agent, verb), count)| json!({"agent": agent, "verb": verb, "count": count}))
                .collect();
            json_response(200, &json!({ "counts": counts }))
        }
        (&Method::GET, "rbac/usage") => match serde_json::to_value(shared.rbac.usage.snapshot()) {
            Ok(usage) => json_response(200, &usage),
            Err(e) => error_response(&ApiError::internal(e.to_string())),
        },
        (&Method::DELETE, "rbac/usage") => {
            shared.rbac.usage.clear();
            ok()
        }
        (&Method::DELETE, "requests/counts") => {
            shared.recorder.clear_counts();
            ok()
        }
        _ => error_response(&ApiError::no_route(path)),
    }
}
