//! The request bodies of API v1 that are plain records (move, renew, share) and the one
//! reader the endpoint takes them with. The client writes them with serde; the endpoint
//! reads them with [`read_body`], which refuses whatever the type does not say, unknown
//! fields included, as a [`RequestError`] naming the field at fault and what it takes.
//!
//! A claim is the other body: [`crate::request::ClaimRequest`], written by
//! [`super::claim_body`] and read by `ClaimRequest::from_json`, its own reader because a claim may be spelt in several
//! vocabularies (Ray, Koordinator, vendor) that one serde record cannot say.
//!
//! Why a reader of our own rather than `serde_json::from_value`: its errors say
//! what went wrong in words only (`invalid type: string "x", expected u64`), without the
//! field a wrong type was in. This reader takes serde's structured callbacks (unknown
//! field with the allowed list, missing field, invalid type, invalid value) into a typed
//! fault and the field it happened in, so nothing here matches on message text.

use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer, Unexpected, Visitor};
use serde::forward_to_deserialize_any;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fairshare::Share;
use crate::placement::MoveTarget;
use crate::request::{MAX_DEVICES, MAX_SECONDS, RequestError, Rule};

/// A request body both sides use: the client serializes it, the endpoint reads it with
/// [`read_body`].
pub trait RequestBody: Serialize + DeserializeOwned {
    /// What `field` takes, in words, for an error that names it.
    fn takes(field: &str) -> String;
}

/// `POST /v1/claims/{id}/move`: where to. At least one of the two is given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveBody {
    /// Another node, or `None` to stay on the claim's node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Device indexes to move to, or `None` to let placement pick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<u32>>,
}

impl RequestBody for MoveBody {
    fn takes(field: &str) -> String {
        match field {
            "node" => "a node name".to_string(),
            "devices" => format!("a non-empty list of device indexes (at most {MAX_DEVICES})"),
            _ => "a JSON object with fields node, devices".to_string(),
        }
    }
}

impl MoveBody {
    /// The move's target, when the body names one: a non-empty node, a non-empty list of at
    /// most `MAX_DEVICES` indexes, or both.
    pub fn target(self) -> Result<MoveTarget, RequestError> {
        let refuse = |rule, field: &str| RequestError {
            rule,
            field: Some(field.to_string()),
            message: format!("`{field}` must be {}", MoveBody::takes(field)),
        };
        if self.node.as_ref().is_some_and(String::is_empty) {
            return Err(refuse(Rule::WrongType, "node"));
        }
        let too_many = |d: &Vec<u32>| d.len() > MAX_DEVICES as usize;
        if self
            .devices
            .as_ref()
            .is_some_and(|d| d.is_empty() || too_many(d))
        {
            return Err(refuse(Rule::WrongType, "devices"));
        }
        if self.node.is_none() && self.devices.is_none() {
            return Err(RequestError {
                rule: Rule::OutOfRange,
                field: None,
                message: "a move needs a target: `node`, `devices`, or both".to_string(),
            });
        }
        Ok(MoveTarget {
            node: self.node,
            devices: self.devices,
        })
    }
}

/// `POST /v1/claims/{id}/renew`: a new lease length, or the claim's own when `None`. An
/// empty body is this with `ttl: None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewBody {
    /// Seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
}

impl RequestBody for RenewBody {
    fn takes(_field: &str) -> String {
        format!("whole seconds from 1 to {MAX_SECONDS}")
    }
}

impl RenewBody {
    /// The lease asked for (1 s to `MAX_SECONDS`), or `None` for the claim's own.
    pub fn lease(self) -> Result<Option<u64>, RequestError> {
        match self.ttl {
            Some(t) if !(1..=MAX_SECONDS).contains(&t) => Err(RequestError {
                rule: Rule::OutOfRange,
                field: Some("ttl".to_string()),
                message: format!("`ttl` must be {}; got {t}", RenewBody::takes("ttl")),
            }),
            ttl => Ok(ttl),
        }
    }
}

/// `PUT /v1/projects/{name}`: the project's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareBody {
    /// Relative weight (default 100).
    pub share: u32,
}

impl RequestBody for ShareBody {
    fn takes(_field: &str) -> String {
        format!(
            "a whole number from 0 to {} (default 100; 0 gets no work)",
            Share::MAX
        )
    }
}

impl ShareBody {
    /// The share, when it is one (0 to `Share::MAX`).
    pub fn share(self) -> Result<Share, RequestError> {
        Share::new(self.share).map_err(|_| RequestError {
            rule: Rule::OutOfRange,
            field: Some("share".to_string()),
            message: format!(
                "`share` must be {}; got {}",
                ShareBody::takes("share"),
                self.share
            ),
        })
    }
}

/// Reads `value` (a parsed request body) as a `T`, or says which field is wrong and what it
/// takes: an unknown field (rule 8, with the allowed ones), a value of the wrong JSON type
/// (rule 0), one out of the type's range or a required field missing (rule 7), a body that
/// is not an object (rule 0, with the fields it may have).
pub fn read_body<T: RequestBody>(value: Value) -> Result<T, RequestError> {
    T::deserialize(Reader { value, field: None }).map_err(BodyError::explain::<T>)
}

/// What was wrong, as serde reported it.
#[derive(Debug)]
enum Fault {
    NotAnObject(&'static [&'static str]),
    Unknown(&'static [&'static str]),
    Missing,
    WrongType(String),
    OutOfRange(String),
    Other(String),
}

/// A fault and the field it was in (`None`: the body as a whole).
#[derive(Debug)]
struct BodyError {
    fault: Fault,
    field: Option<String>,
}

impl BodyError {
    fn of(fault: Fault) -> BodyError {
        BodyError { fault, field: None }
    }

    /// The same, in `field` unless it already names one.
    fn within(mut self, field: Option<&String>) -> BodyError {
        if self.field.is_none() {
            self.field = field.cloned();
        }
        self
    }

    fn explain<T: RequestBody>(self) -> RequestError {
        let field = self.field;
        let name = field.as_deref().unwrap_or("");
        let subject = field
            .as_ref()
            .map_or_else(|| "the body".to_string(), |f| format!("`{f}`"));
        let takes = || T::takes(name);
        let (rule, message) = match self.fault {
            Fault::NotAnObject(fields) => (
                Rule::WrongType,
                format!(
                    "the body must be a JSON object with fields {}",
                    fields.join(", ")
                ),
            ),
            Fault::Unknown(allowed) => (
                Rule::UnknownField,
                format!(
                    "unknown field `{name}`; allowed fields: {}",
                    allowed.join(", ")
                ),
            ),
            Fault::Missing => (
                Rule::OutOfRange,
                format!("{subject} is required: {}", takes()),
            ),
            Fault::WrongType(got) => (
                Rule::WrongType,
                format!("{subject} must be {}; got {got}", takes()),
            ),
            Fault::OutOfRange(got) => (
                Rule::OutOfRange,
                format!("{subject} must be {}; got {got}", takes()),
            ),
            Fault::Other(why) => (Rule::WrongType, format!("{subject}: {why}")),
        };
        RequestError {
            rule,
            field,
            message,
        }
    }
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} in {:?}", self.fault, self.field)
    }
}

impl std::error::Error for BodyError {}

/// A value as a person would name it in an error (`null`, `a list`, `the text "x"`).
fn described(u: &Unexpected<'_>) -> String {
    match *u {
        Unexpected::Unit => "null".to_string(),
        Unexpected::Seq => "a list".to_string(),
        Unexpected::Map => "an object".to_string(),
        Unexpected::Str(s) => format!("the text {:?}", s.chars().take(40).collect::<String>()),
        Unexpected::Bool(b) => b.to_string(),
        Unexpected::Unsigned(n) => n.to_string(),
        Unexpected::Signed(n) => n.to_string(),
        Unexpected::Float(x) => x.to_string(),
        ref other => other.to_string(),
    }
}

impl de::Error for BodyError {
    fn custom<M: fmt::Display>(msg: M) -> BodyError {
        BodyError::of(Fault::Other(msg.to_string()))
    }

    fn invalid_type(unexp: Unexpected<'_>, _exp: &dyn de::Expected) -> BodyError {
        BodyError::of(Fault::WrongType(described(&unexp)))
    }

    fn invalid_value(unexp: Unexpected<'_>, _exp: &dyn de::Expected) -> BodyError {
        BodyError::of(Fault::OutOfRange(described(&unexp)))
    }

    fn invalid_length(len: usize, _exp: &dyn de::Expected) -> BodyError {
        BodyError::of(Fault::WrongType(format!("{len} items")))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> BodyError {
        BodyError {
            fault: Fault::Unknown(expected),
            field: Some(field.to_string()),
        }
    }

    fn missing_field(field: &'static str) -> BodyError {
        BodyError {
            fault: Fault::Missing,
            field: Some(field.to_string()),
        }
    }
}

/// A JSON value being read, and the body's field it came from. Like `serde_json::Value`'s
/// own deserializer, but with [`BodyError`] as its error.
struct Reader {
    value: Value,
    field: Option<String>,
}

impl IntoDeserializer<'_, BodyError> for Reader {
    type Deserializer = Reader;

    fn into_deserializer(self) -> Reader {
        self
    }
}

impl<'de> de::Deserializer<'de> for Reader {
    type Error = BodyError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, BodyError> {
        let field = self.field;
        let out = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => {
                let mut seq =
                    de::value::SeqDeserializer::new(items.into_iter().map(|value| Reader {
                        value,
                        field: field.clone(),
                    }));
                visitor
                    .visit_seq(&mut seq)
                    .and_then(|v| seq.end().map(|()| v))
            }
            Value::Object(map) => {
                let mut entries =
                    de::value::MapDeserializer::new(map.into_iter().map(|(k, value)| {
                        let field = Some(k.clone());
                        (k, Reader { value, field })
                    }));
                visitor
                    .visit_map(&mut entries)
                    .and_then(|v| entries.end().map(|()| v))
            }
        };
        out.map_err(|e| e.within(field.as_ref()))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, BodyError> {
        if self.value.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, BodyError> {
        if self.value.is_object() {
            self.deserialize_any(visitor)
        } else {
            Err(BodyError::of(Fault::NotAnObject(fields)).within(self.field.as_ref()))
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// A JSON value's kind in words (`an array`, `null`), for errors that say what was found.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused<T: RequestBody + fmt::Debug>(v: Value) -> RequestError {
        read_body::<T>(v).unwrap_err()
    }

    #[test]
    fn what_the_client_writes_reads_back() {
        for body in [
            MoveBody::default(),
            MoveBody {
                node: Some("n".into()),
                devices: Some(vec![0, 3]),
            },
        ] {
            let v = serde_json::to_value(&body).unwrap();
            assert_eq!(read_body::<MoveBody>(v).unwrap(), body);
        }
        for ttl in [None, Some(600)] {
            let v = serde_json::to_value(RenewBody { ttl }).unwrap();
            assert_eq!(read_body::<RenewBody>(v).unwrap().ttl, ttl);
        }
        let v = serde_json::to_value(ShareBody { share: 0 }).unwrap();
        assert_eq!(read_body::<ShareBody>(v).unwrap().share, 0);
        // Null is "not given", as for claims.
        let back: MoveBody = read_body(json!({"node": null, "devices": [1]})).unwrap();
        assert_eq!(back.node, None);
    }

    #[test]
    fn each_fault_names_its_field_and_what_it_takes() {
        let e = refused::<MoveBody>(json!({"devices": [1], "rack": 2}));
        assert_eq!(
            (e.rule, e.field.as_deref()),
            (Rule::UnknownField, Some("rack"))
        );
        assert_eq!(
            e.message,
            "unknown field `rack`; allowed fields: node, devices"
        );

        let e = refused::<MoveBody>(json!({"devices": [1, "x"]}));
        assert_eq!(
            (e.rule, e.field.as_deref()),
            (Rule::WrongType, Some("devices"))
        );
        assert!(
            e.message.contains("list of device indexes"),
            "{}",
            e.message
        );
        assert!(e.message.ends_with("got the text \"x\""), "{}", e.message);

        let e = refused::<MoveBody>(json!({"node": 3}));
        assert_eq!(
            (e.rule, e.field.as_deref()),
            (Rule::WrongType, Some("node"))
        );
        assert_eq!(e.message, "`node` must be a node name; got 3");

        let e = refused::<MoveBody>(json!({"devices": [-1]}));
        assert_eq!(
            (e.rule, e.field.as_deref()),
            (Rule::OutOfRange, Some("devices"))
        );

        let e = refused::<RenewBody>(json!({"ttl": "600"}));
        assert_eq!((e.rule, e.field.as_deref()), (Rule::WrongType, Some("ttl")));
        assert!(
            e.message.starts_with("`ttl` must be whole seconds"),
            "{}",
            e.message
        );
        let e = refused::<RenewBody>(json!({"ttl": 1.5}));
        assert_eq!(e.rule, Rule::WrongType);

        let e = refused::<ShareBody>(json!({}));
        assert_eq!(
            (e.rule, e.field.as_deref()),
            (Rule::OutOfRange, Some("share"))
        );
        assert!(
            e.message.starts_with("`share` is required: a whole number"),
            "{}",
            e.message
        );
        let e = refused::<ShareBody>(json!({"share": 5_000_000_000_u64}));
        assert_eq!(
            (e.rule, e.field.as_deref()),
            (Rule::OutOfRange, Some("share"))
        );
        let e = refused::<ShareBody>(json!({"share": null}));
        assert_eq!(
            (e.rule, e.field.as_deref()),
            (Rule::WrongType, Some("share"))
        );
        assert!(e.message.ends_with("got null"), "{}", e.message);

        for not_an_object in [json!([1]), json!("x"), json!(null), json!(7)] {
            let e = refused::<MoveBody>(not_an_object);
            assert_eq!((e.rule, e.field), (Rule::WrongType, None));
            assert_eq!(
                e.message,
                "the body must be a JSON object with fields node, devices"
            );
        }
    }

    #[test]
    fn values_the_type_takes_can_still_be_refused_by_their_range() {
        let e = MoveBody::default().target().unwrap_err();
        assert_eq!((e.rule, e.field), (Rule::OutOfRange, None));
        let empty = MoveBody {
            node: Some(String::new()),
            devices: None,
        };
        assert_eq!(empty.target().unwrap_err().field.as_deref(), Some("node"));
        let none = MoveBody {
            node: None,
            devices: Some(vec![]),
        };
        assert_eq!(none.target().unwrap_err().field.as_deref(), Some("devices"));
        assert_eq!(
            RenewBody { ttl: Some(0) }.lease().unwrap_err().rule,
            Rule::OutOfRange
        );
        assert_eq!(RenewBody { ttl: None }.lease().unwrap(), None);
        let over = ShareBody {
            share: Share::MAX + 1,
        };
        assert_eq!(over.share().unwrap_err().field.as_deref(), Some("share"));
        assert_eq!(
            ShareBody { share: Share::MAX }.share().unwrap().get(),
            Share::MAX
        );
    }
}
