//! Response helpers shared by the API's handlers: JSON bodies and what a client's `Accept`
//! takes.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use serde::Serialize;

/// A JSON body with its content type.
pub(crate) fn json_response(code: StatusCode, v: &(impl Serialize + ?Sized)) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Whether the client's `Accept` takes JSON (absent, `*/*`, `application/*` or a JSON type).
pub(crate) fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    accept.split(',').any(|t| {
        let base = t.split(';').next().unwrap_or("").trim();
        base.is_empty() || base == "*/*" || base == "application/*" || base.ends_with("json")
    })
}
