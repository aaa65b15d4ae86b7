//! The `admission.k8s.io/v1` AdmissionReview: the request the API server
//! sends, and how it reads (and refuses) a webhook's response.

use std::borrow::Cow;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::failures::ApiError;

/// The user every review names: the emulator has no authentication beyond
/// an optional bearer token, and serves every client as a cluster admin.
pub(crate) const USERNAME: &str = "kubernetes-admin";

/// `{group, version, kind}`.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Gvk<'a> {
    pub(crate) group: &'a str,
    pub(crate) version: &'a str,
    pub(crate) kind: &'a str,
}

/// `{group, version, resource}`.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Gvr<'a> {
    pub(crate) group: &'a str,
    pub(crate) version: &'a str,
    pub(crate) resource: &'a str,
}

#[derive(Debug, Serialize)]
struct UserInfo {
    username: &'static str,
    groups: [&'static str; 2],
}

/// The `request` of an AdmissionReview (objects by reference: the review
/// is serialized once, nothing is cloned).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReviewRequest<'a> {
    pub(crate) uid: &'a str,
    pub(crate) kind: Gvk<'a>,
    pub(crate) resource: Gvr<'a>,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) sub_resource: &'a str,
    pub(crate) request_kind: Gvk<'a>,
    pub(crate) request_resource: Gvr<'a>,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) request_sub_resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) namespace: &'a str,
    pub(crate) operation: &'static str,
    #[serde(serialize_with = "user_info")]
    pub(crate) user_info: (),
    pub(crate) object: Option<&'a Value>,
    pub(crate) old_object: Option<&'a Value>,
    pub(crate) dry_run: bool,
    pub(crate) options: &'a Value,
}

/// Who sends the request: with RBAC, its user; without, the administrator
/// a cluster's kubeconfig names.
fn user_info<S: serde::Serializer>(_: &(), s: S) -> Result<S::Ok, S::Error> {
    let Some(user) = crate::rbac::current_user() else {
        return UserInfo {
            username: USERNAME,
            groups: ["system:masters", "system:authenticated"],
        }
        .serialize(s);
    };
    let mut info = serde_json::json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = user.uid.into();
    }
    info.serialize(s)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: &'static str,
    kind: &'static str,
    request: &'a ReviewRequest<'a>,
}

impl ReviewRequest<'_> {
    /// The whole AdmissionReview as JSON.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let review = Review {
            api_version: "admission.k8s.io/v1",
            kind: "AdmissionReview",
            request: self,
        };
        serde_json::to_vec(&review).unwrap_or_default()
    }
}

/// What a webhook answered, once checked.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Verdict {
    /// Whether the request is allowed.
    pub(crate) allowed: bool,
    /// `response.status`, for a denial.
    pub(crate) status: Option<Status>,
    /// A JSON Patch (mutating webhooks), decoded.
    pub(crate) patch: Option<json_patch::Patch>,
    /// `response.warnings`.
    pub(crate) warnings: Vec<String>,
}

/// An AdmissionReview as a webhook answers it: only the fields the API
/// server reads, strings borrowed from the answer where they can be, and
/// everything else skipped unread (never held as a whole JSON value).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer<'a> {
    #[serde(default, borrow)]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    response: Option<Response<'a>>,
}

/// An AdmissionResponse.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    #[serde(default, borrow)]
    uid: Option<Cow<'a, str>>,
    #[serde(default)]
    allowed: Option<bool>,
    #[serde(default)]
    status: Option<Status>,
    #[serde(default, borrow)]
    patch: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    patch_type: Option<Cow<'a, str>>,
    #[serde(default)]
    warnings: Option<Vec<Option<String>>>,
}

/// The `metav1.Status` of a denial, as the API server reads it.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
pub(crate) struct Status {
    #[serde(default)]
    code: Option<i32>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    details: Option<StatusDetails>,
}

/// `metav1.StatusDetails`: what a denial's `details` may carry through.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    causes: Option<Vec<StatusCause>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_after_seconds: Option<i32>,
}

/// `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
struct StatusCause {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

/// Reads a webhook's answer as the API server's `VerifyAdmissionResponse`
/// does; the error is the reason of a failed call (which `failurePolicy`
/// decides about), worded as the API server's.
pub(crate) fn verify(uid: &str, mutating: bool, body: &[u8]) -> Result<Verdict, String> {
    let review: Answer<'_> = serde_json::from_slice(body).map_err(|e| {
        format!("failed to call webhook: the response is not an AdmissionReview in JSON: {e}")
    })?;
    let invalid = |why: String| format!("received invalid webhook response: {why}");
    let api_version = review.api_version.as_deref().unwrap_or("");
    let kind = review.kind.as_deref().unwrap_or("");
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        return Err(invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{version}, Kind={kind}"
        )));
    }
    let Some(response) = review.response else {
        return Err(invalid("webhook response was absent".into()));
    };
    let got = response.uid.as_deref().unwrap_or("");
    if got != uid {
        return Err(invalid(format!(
            "expected response.uid={uid:?}, got {got:?}"
        )));
    }
    let patch_b64 = response.patch.as_deref().unwrap_or("");
    let patch_type = response.patch_type.as_deref();
    let mut patch = None;
    if !patch_b64.is_empty() || patch_type.is_some() {
        match patch_type {
            None => {
                return Err(invalid(
                    "webhook returned response.patch but not response.patchType".into(),
                ));
            }
            Some("JSONPatch") => {}
            Some(other) => {
                return Err(invalid(format!(
                    "webhook returned invalid response.patchType of {other:?}"
                )));
            }
        }
        if !mutating {
            return Err(invalid(
                "validating webhook may not return response.patch".into(),
            ));
        }
        if !patch_b64.is_empty() {
            let undecodable =
                |e: String| format!("received undecodable patch in webhook response: {e}");
            let raw = base64::engine::general_purpose::STANDARD
                .decode(patch_b64)
                .map_err(|e| undecodable(e.to_string()))?;
            let decoded: json_patch::Patch =
                serde_json::from_slice(&raw).map_err(|e| undecodable(e.to_string()))?;
            patch = Some(decoded).filter(|p| !p.0.is_empty());
        }
    }
    Ok(Verdict {
        allowed: response.allowed.unwrap_or(false),
        status: response.status,
        patch,
        warnings: response
            .warnings
            .into_iter()
            .flatten()
            .map(Option::unwrap_or_default)
            .collect(),
    })
}

/// The reasons a denial's status may carry through (the API server keeps
/// any; the emulator's `Status` holds known ones, others become empty).
const REASONS: [&str; 12] = [
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "TooManyRequests",
    "Timeout",
    "ServiceUnavailable",
    "InternalError",
];

/// The failure a denial answers, as the API server's `ToStatusErr`: the
/// webhook's code (400 if it gives none below 400) and message.
pub(crate) fn denial(webhook: &str, status: Option<&Status>) -> ApiError {
    let status = status.cloned().unwrap_or_default();
    let code = status
        .code
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    let (message, reason) = (
        status.message.as_deref().unwrap_or(""),
        status.reason.as_deref().unwrap_or(""),
    );
    let denied = format!("admission webhook {webhook:?} denied the request");
    let text = match (message, reason) {
        ("", "") => format!("{denied} without explanation"),
        ("", reason) => format!("{denied}: {reason}"),
        (message, _) => format!("{denied}: {message}"),
    };
    let reason = REASONS
        .iter()
        .find(|r| **r == reason)
        .copied()
        .unwrap_or("");
    let mut err = ApiError::new(code, reason, text);
    err.details = status.details.and_then(|d| serde_json::to_value(d).ok());
    err
}

/// The failure of a failed call under `failurePolicy: Fail`.
pub(crate) fn call_failed(webhook: &str, reason: &str) -> ApiError {
    let err = format!("failed calling webhook {webhook:?}: {reason}");
    let mut failure = ApiError::internal(format!("Internal error occurred: {err}"));
    failure.details = Some(serde_json::json!({"causes": [{"message": err}]}));
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(response: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }))
        .unwrap()
    }

    #[test]
    fn a_denial_reads_as_the_api_servers() {
        let status = |v: Value| serde_json::from_value::<Status>(v).unwrap();
        let e = denial(
            "w.example.com",
            Some(&status(json!({"code": 403, "message": "no thanks"}))),
        );
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "admission webhook \"w.example.com\" denied the request: no thanks"
        );
        let e = denial("w", Some(&status(json!({"code": 200}))));
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "admission webhook \"w\" denied the request without explanation"
        );
        let e = denial("w", Some(&status(json!({"reason": "Forbidden"}))));
        assert_eq!((e.code, e.reason), (400, "Forbidden"));
        assert_eq!(
            e.message,
            "admission webhook \"w\" denied the request: Forbidden"
        );
        assert_eq!(denial("w", None).code, 400);
    }

    #[test]
    fn responses_are_checked_as_the_api_server_checks_them() {
        let ok = verify(
            "u1",
            false,
            &answer(json!({"uid": "u1", "allowed": true, "warnings": ["careful"]})),
        )
        .unwrap();
        assert!(ok.allowed);
        assert_eq!(ok.warnings, ["careful"]);
        let wrong_uid = verify("u1", false, &answer(json!({"uid": "u2", "allowed": true})));
        assert_eq!(
            wrong_uid.unwrap_err(),
            "received invalid webhook response: expected response.uid=\"u1\", got \"u2\""
        );
        assert!(
            verify("u1", false, b"<html>")
                .unwrap_err()
                .starts_with("failed to call webhook")
        );
        let v1beta1 = br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"uid":"u1","allowed":true}}"#;
        assert!(
            verify("u1", false, v1beta1)
                .unwrap_err()
                .contains("expected webhook response of admission.k8s.io/v1")
        );
        let absent = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#;
        assert!(
            verify("u1", false, absent)
                .unwrap_err()
                .ends_with("webhook response was absent")
        );
    }

    #[test]
    fn patches_are_json_patches_from_mutating_webhooks_only() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/data","value":{}}]"#);
        let with = |patch_type: Value| {
            answer(json!({"uid": "u", "allowed": true, "patch": patch, "patchType": patch_type}))
        };
        let v = verify("u", true, &with(json!("JSONPatch"))).unwrap();
        assert_eq!(v.patch.unwrap().0.len(), 1);
        assert!(
            verify("u", false, &with(json!("JSONPatch")))
                .unwrap_err()
                .contains("validating webhook may not")
        );
        assert!(
            verify("u", true, &with(Value::Null))
                .unwrap_err()
                .contains("not response.patchType")
        );
        assert!(
            verify("u", true, &with(json!("MergePatch")))
                .unwrap_err()
                .contains("invalid response.patchType")
        );
        let garbage = answer(
            json!({"uid": "u", "allowed": true, "patch": "bm9wZQ==", "patchType": "JSONPatch"}),
        );
        assert!(
            verify("u", true, &garbage)
                .unwrap_err()
                .starts_with("received undecodable patch")
        );
    }
}
