//! API failures answered as Kubernetes `Status` objects.
//!
//! Every error the emulator returns to a client is an [`ApiError`]: it carries the
//! HTTP code, the `reason` the real API server uses and a message, and renders
//! itself as a `{"kind":"Status",...}` document.

use serde_json::{Value, json};

/// A failure answered to a client as a `Status` object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// The machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: &'static str,
    /// The human-readable message.
    pub message: String,
    /// The `details` stanza (name, group, kind, retryAfterSeconds, causes).
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (429 and similar).
    pub retry_after: Option<u32>,
    /// The `Status`'s `metadata.continue`: a `410` for a compacted continue
    /// token carries one that goes on at the latest version.
    pub continue_token: Option<String>,
}

impl ApiError {
    /// A failure with a code, reason and message but no details.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
            continue_token: None,
        }
    }

    /// Adds a `metadata.continue` token to the `Status`.
    pub fn with_continue(mut self, token: String) -> Self {
        self.continue_token = Some(token);
        self
    }

    /// Adds `details` with the object's name, group and kind (resource plural).
    pub fn with_object(mut self, group: &str, plural: &str, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": group, "kind": plural}));
        self
    }

    /// 404 for a named object of a resource.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(404, "NotFound", format!("{what} \"{name}\" not found"))
            .with_object(group, plural, name)
    }

    /// 404 for a path the emulator does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({path}); \
                 register the CRD first or check the group/version/plural"
            ),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(
            409,
            "AlreadyExists",
            format!("{what} \"{name}\" already exists"),
        )
        .with_object(group, plural, name)
    }

    /// 409 Conflict on a stale resourceVersion or failed precondition.
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {what} \"{name}\": {why}"),
        )
        .with_object(group, plural, name)
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn stale(group: &str, plural: &str, name: &str) -> Self {
        Self::conflict(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid.
    pub fn invalid(group: &str, kind: &str, name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let mut err = Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {message}"),
        );
        // `metadata.name: Invalid value: ...` names its field before the first colon.
        let (field, detail) = match message.split_once(": ") {
            Some((field, rest)) if !field.is_empty() && !field.contains(' ') => {
                (field.to_string(), rest.to_string())
            }
            _ => (String::new(), message.clone()),
        };
        err.details = Some(json!({
            "name": name, "group": group, "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}],
        }));
        err
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 410 Expired (history no longer kept).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type:?}); accepted media types \
                 include: application/json-patch+json, application/merge-patch+json, \
                 application/strategic-merge-patch+json, application/apply-patch+yaml, application/json"
            ),
        )
    }

    /// 415 UnsupportedMediaType with a specific reason.
    pub fn unsupported_media_type_because(content_type: &str, why: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("cannot decode the {content_type} body: {why}"),
        )
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("the request body exceeds the limit of {limit} bytes; send a smaller object"),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// An injected failure with a chosen code.
    pub fn injected(code: u16, retry_after: Option<u32>) -> Self {
        let reason = reason_for(code);
        let mut err = Self::new(
            code,
            reason,
            format!("injected failure ({code} {reason}) by the emulator's fault rules"),
        );
        if let Some(secs) = retry_after {
            err.details = Some(json!({"retryAfterSeconds": secs}));
            err.retry_after = Some(secs);
        }
        err
    }

    /// 401 for a request without the bearer token the emulator requires.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// The `Status` document.
    pub fn to_status(&self) -> Value {
        let metadata = match &self.continue_token {
            Some(token) => json!({"continue": token}),
            None => json!({}),
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": metadata,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // An error the API server did not classify has no reason (as Go
        // omits an empty one).
        if self.reason.is_empty()
            && let Some(map) = status.as_object_mut()
        {
            map.remove("reason");
        }
        if let (Some(details), Some(map)) = (&self.details, status.as_object_mut()) {
            map.insert("details".into(), details.clone());
        }
        status
    }
}

/// The `reason` the API server uses for an HTTP code.
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The causes of a `422`, each as `field: message`: what the other
    /// modules' tests compare.
    pub(crate) fn causes(err: &ApiError) -> Vec<String> {
        err.details.as_ref().map_or_else(Vec::new, |d| {
            d["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{}: {}",
                        c["field"].as_str().unwrap_or(""),
                        c["message"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
    }

    #[test]
    fn not_found_renders_as_status() {
        let status = ApiError::not_found("example.com", "widgets", "w1").to_status();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["message"], "widgets.example.com \"w1\" not found");
        assert_eq!(status["details"]["name"], "w1");
    }

    #[test]
    fn invalid_names_the_field() {
        let status = ApiError::invalid("", "ConfigMap", "a", "metadata.name: Invalid value: \"A\"")
            .to_status();
        assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
        assert_eq!(
            status["message"],
            "ConfigMap \"a\" is invalid: metadata.name: Invalid value: \"A\""
        );
    }

    #[test]
    fn injected_429_carries_retry_after() {
        let err = ApiError::injected(429, Some(3));
        assert_eq!(err.reason, "TooManyRequests");
        assert_eq!(err.retry_after, Some(3));
        assert_eq!(err.to_status()["details"]["retryAfterSeconds"], 3);
    }
}
