//! Request bodies: read within a size and a time limit, and parsed as strict JSON (a key
//! given twice in one object is refused rather than the last one winning).

use std::fmt;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::StatusCode;
use futures::StreamExt;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::time::Duration;

use crate::endpoint::api_error::ApiError;
use crate::wire::{RequestBody, read_body};

/// The largest request body accepted, in bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// How long a request body may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

fn too_large() -> ApiError {
    ApiError::closing(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the request body is larger than {MAX_BODY} bytes"),
    )
}

/// The body, at most `MAX_BODY` bytes, read within `BODY_TIMEOUT` (a client that trickles
/// its body does not hold a request open for ever). A body declared larger is refused
/// before any of it is read; one whose framing is broken (a bad chunk size, cut short) is
/// a bad request.
pub(crate) async fn body_bytes(body: Body) -> Result<Bytes, ApiError> {
    let declared = body.size_hint().lower();
    if usize::try_from(declared).map_or(true, |n| n > MAX_BODY) {
        return Err(too_large());
    }
    let read = async {
        let mut stream = body.into_data_stream();
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::closing(
                    StatusCode::BAD_REQUEST,
                    "malformed_body",
                    format!("the request body could not be read: {e}"),
                )
            })?;
            if out.len() + chunk.len() > MAX_BODY {
                return Err(too_large());
            }
            out.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(out))
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::closing(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            ))
        })
}

/// The body as JSON; an empty body is `{}` where `empty_ok`.
pub(crate) async fn body_json(body: Body, empty_ok: bool) -> Result<Value, ApiError> {
    let bytes = body_bytes(body).await?;
    if empty_ok && bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Map::new()));
    }
    strict_json(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            format!("the request body is not valid JSON: {e}"),
        )
    })
}

/// The body as the request body `T`: 400 when it is not JSON, 422 naming the field when
/// it is not a `T` (`wire::read_body`). An empty body is `{}` where `empty_ok`.
pub(crate) async fn body_as<T: RequestBody>(body: Body, empty_ok: bool) -> Result<T, ApiError> {
    let v = body_json(body, empty_ok).await?;
    Ok(read_body(v)?)
}

/// A route that takes no body (release, cordon, uncordon, reset): nothing, whitespace or
/// `{}` is accepted; anything else is refused rather than ignored, so a client that sends
/// a field (a `reason`, say) expecting it to count learns that it does not.
pub(crate) async fn no_body(body: Body, route: &str) -> Result<(), ApiError> {
    let v = body_json(body, true).await?;
    match v {
        Value::Object(fields) => match fields.keys().next() {
            None => Ok(()),
            Some(first) => Err(ApiError::invalid(
                crate::request::Rule::UnknownField,
                Some(first),
                format!("`{route}` takes no body; unknown field `{first}` (fields allowed: none)"),
            )),
        },
        other => Err(ApiError::invalid(
            crate::request::Rule::WrongType,
            None,
            format!(
                "`{route}` takes no body; got {} (send none, or {{}})",
                crate::wire::json_kind(&other)
            ),
        )),
    }
}

/// Parses JSON like `serde_json::from_slice`, but refuses an object with a key twice.
pub fn strict_json(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|s| s.0)
}

/// A JSON value whose objects have unique keys.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "field `{key}` is given twice"
                )));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_given_twice_are_refused_at_any_depth() {
        let e = strict_json(br#"{"ttl": 5, "ttl": 6}"#).unwrap_err();
        assert!(e.to_string().contains("field `ttl` is given twice"), "{e}");
        let e = strict_json(br#"{"a": [{"b": 1, "b": 1}]}"#).unwrap_err();
        assert!(e.to_string().contains("`b`"), "{e}");
        let v = strict_json(br#"{"a": [1, -2, 2.5, "x", null, true, {"b": {}}]}"#).unwrap();
        assert_eq!(v, json!({"a": [1, -2, 2.5, "x", null, true, {"b": {}}]}));
        assert!(strict_json(b"{").is_err());
    }
}
