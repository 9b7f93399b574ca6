//! Request bodies in the Kubernetes protobuf encoding (F11.1), which kubectl's typed clients
//! send for built-in kinds: the magic `k8s\0`, then a `runtime.Unknown` whose `typeMeta` names
//! apiVersion and kind and whose `raw` is the object's message. The message is read with the
//! field numbers of the upstream `generated.proto` files (`table.rs`) and rendered as the JSON
//! the real server would have decoded, so the rest of the server sees JSON. A field number the
//! table does not know is refused by name rather than dropped.

mod table;

use table::{Kind, MESSAGES, Msg};

use crate::error::{ApiError, ApiResult};
use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The media type of the protobuf encoding.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8; 4] = b"k8s\0";

fn index() -> &'static HashMap<&'static str, &'static Msg> {
    static INDEX: OnceLock<HashMap<&'static str, &'static Msg>> = OnceLock::new();
    INDEX.get_or_init(|| MESSAGES.iter().map(|m| (m.name, m)).collect())
}

/// The body as JSON: protobuf bodies decoded, anything else as sent.
pub(crate) fn json_body(content_type: &str, body: Bytes) -> ApiResult<Bytes> {
    let base = content_type.split(';').next().unwrap_or("").trim();
    if base != MEDIA_TYPE {
        return Ok(body);
    }
    let v = decode(&body)?;
    Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()))
}

/// Answers are JSON: a client whose `Accept` admits JSON (as kubectl's and client-go's do,
/// listing protobuf first and JSON or `*/*` after it) gets JSON; one that accepts only
/// protobuf gets 406 rather than a body it cannot read (F11.1).
pub(crate) fn negotiate(headers: &http::HeaderMap) -> ApiResult<()> {
    if crate::response::accepts_json(headers) {
        return Ok(());
    }
    Err(ApiError::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml",
    ))
}

fn bad(msg: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "the body of the request could not be decoded as {MEDIA_TYPE}: {msg}"
    ))
}

/// The proto message of (apiVersion, kind): packages are named after the group's first label
/// (`api.apps.v1`; `api.core.v1` for the core group).
fn message_name(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let label = if group.is_empty() {
        "core"
    } else {
        group.split('.').next().unwrap_or(group)
    };
    match label {
        "apiextensions" => {
            format!("apiextensions_apiserver.pkg.apis.apiextensions.{version}.{kind}")
        }
        "meta" => format!("apimachinery.pkg.apis.meta.{version}.{kind}"),
        _ => format!("api.{label}.{version}.{kind}"),
    }
}

/// Decodes one enveloped object into its JSON form (apiVersion and kind included).
pub(crate) fn decode(body: &[u8]) -> ApiResult<Value> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("the body does not start with the k8s\\0 prefix"))?;
    // runtime.Unknown: 1 typeMeta {1 apiVersion, 2 kind}, 2 raw, 3 contentEncoding, 4 contentType.
    let (mut api_version, mut kind, mut raw, mut encoding) =
        (String::new(), String::new(), None, String::new());
    let mut r = Reader { buf: rest, pos: 0 };
    while let Some((num, v)) = r.field()? {
        match (num, v) {
            (1, Wire::Len(tm)) => {
                let mut t = Reader { buf: tm, pos: 0 };
                while let Some((n, v)) = t.field()? {
                    match (n, v) {
                        (1, Wire::Len(s)) => api_version = utf8(s)?,
                        (2, Wire::Len(s)) => kind = utf8(s)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Len(b)) => raw = Some(b),
            (3, Wire::Len(s)) => encoding = utf8(s)?,
            _ => {}
        }
    }
    if !encoding.is_empty() {
        return Err(bad(format!(
            "content encoding {encoding:?} is not supported"
        )));
    }
    let name = message_name(&api_version, &kind);
    // Options sent as bodies (DeleteOptions on a delete) are meta/v1 types that client-go
    // stamps with the resource's group version.
    let meta = format!("apimachinery.pkg.apis.meta.v1.{kind}");
    let msg = index()
        .get(name.as_str())
        .or_else(|| index().get(meta.as_str()))
        .ok_or_else(|| {
            bad(format!(
                "no protobuf message is known for {kind} in {api_version:?}"
            ))
        })?;
    let mut v = decode_message(msg, raw.unwrap_or_default())?;
    if let Value::Object(m) = &mut v {
        // TypeMeta travels in the envelope, not in the message.
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(kind));
    }
    Ok(v)
}

fn utf8(b: &[u8]) -> ApiResult<String> {
    String::from_utf8(b.to_vec()).map_err(|e| bad(format!("invalid UTF-8 in a string: {e}")))
}

/// A field's value on the wire (no Kubernetes type has fixed-width fields; they are skipped).
enum Wire<'a> {
    Varint(u64),
    Fixed64,
    Fixed32,
    Len(&'a [u8]),
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> ApiResult<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| bad("truncated varint"))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(bad("varint longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> ApiResult<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| bad("truncated field"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next (field number, value), or None at the end.
    fn field(&mut self) -> ApiResult<Option<(u64, Wire<'a>)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let v = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed64
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| bad("length too large"))?;
                Wire::Len(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed32
            }
            t => return Err(bad(format!("unsupported wire type {t}"))),
        };
        Ok(Some((key >> 3, v)))
    }
}

/// One value of `kind` from the wire.
fn scalar(kind: Kind, v: &Wire) -> ApiResult<Value> {
    Ok(match (kind, v) {
        (Kind::Str, Wire::Len(b)) => json!(utf8(b)?),
        (Kind::Bytes, Wire::Len(b)) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        (Kind::Bool, Wire::Varint(x)) => json!(*x != 0),
        (Kind::I32, Wire::Varint(x)) => json!(*x as i32),
        (Kind::I64, Wire::Varint(x)) => json!(*x as i64),
        (Kind::Msg(name), Wire::Len(b)) => {
            let msg = index()
                .get(name)
                .ok_or_else(|| bad(format!("no protobuf message is known as {name}")))?;
            decode_message(msg, b)?
        }
        _ => return Err(bad("a field's wire type does not match its declared type")),
    })
}

/// Whether a packed run of varints may stand for a repeated scalar field.
fn packable(kind: Kind) -> bool {
    matches!(kind, Kind::Bool | Kind::I32 | Kind::I64)
}

fn decode_message(msg: &Msg, buf: &[u8]) -> ApiResult<Value> {
    let mut out = Map::new();
    let mut r = Reader { buf, pos: 0 };
    while let Some((num, v)) = r.field()? {
        let f = msg.fields.iter().find(|f| f.num == num).ok_or_else(|| {
            bad(format!(
                "field {num} of {} is not known to this server",
                msg.name
            ))
        })?;
        if f.map {
            // A map entry: 1 key (string), 2 value.
            let Wire::Len(entry) = v else {
                return Err(bad(format!("{}.{} is not a map entry", msg.name, f.name)));
            };
            let (mut key, mut value) = (String::new(), None);
            let mut e = Reader { buf: entry, pos: 0 };
            while let Some((n, ev)) = e.field()? {
                match (n, &ev) {
                    (1, Wire::Len(k)) => key = utf8(k)?,
                    (2, _) => value = Some(scalar(f.kind, &ev)?),
                    _ => {}
                }
            }
            let value = value.unwrap_or_else(|| match f.kind {
                Kind::Str | Kind::Bytes => json!(""),
                _ => Value::Null,
            });
            if let Value::Object(m) = out.entry(f.name).or_insert_with(|| json!({})) {
                m.insert(key, value);
            }
        } else if f.repeated {
            let items: Vec<Value> = match (&v, packable(f.kind)) {
                (Wire::Len(packed), true) => {
                    let mut p = Reader {
                        buf: packed,
                        pos: 0,
                    };
                    let mut xs = vec![];
                    while p.pos < packed.len() {
                        xs.push(scalar(f.kind, &Wire::Varint(p.varint()?))?);
                    }
                    xs
                }
                _ => vec![scalar(f.kind, &v)?],
            };
            if let Value::Array(a) = out.entry(f.name).or_insert_with(|| json!([])) {
                a.extend(items);
            }
        } else {
            match scalar(f.kind, &v)? {
                // Go writes every non-pointer string, even empty, and a zero Time; its JSON
                // leaves both out.
                Value::Null => {}
                Value::String(s) if s.is_empty() => {}
                x => {
                    out.insert(f.name.to_string(), x);
                }
            }
        }
    }
    Ok(special(msg.name, out))
}

/// The apimachinery types whose JSON form is not an object of their fields.
fn special(name: &str, m: Map<String, Value>) -> Value {
    let int = |k: &str| m.get(k).and_then(Value::as_i64).unwrap_or(0);
    let string = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let raw = |k: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(string(k))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .unwrap_or(Value::Null)
    };
    match name {
        "apimachinery.pkg.apis.meta.v1.Time" => match int("seconds") {
            0 => Value::Null,
            s => json!(crate::clock::format_unix(s)),
        },
        "apimachinery.pkg.apis.meta.v1.MicroTime" => match (int("seconds"), int("nanos")) {
            (0, 0) => Value::Null,
            (s, n) => json!(crate::clock::format_nanos(
                i128::from(s) * 1_000_000_000 + i128::from(n)
            )),
        },
        "apimachinery.pkg.util.intstr.IntOrString" => {
            if int("type") == 1 {
                json!(string("strVal"))
            } else {
                json!(int("intVal"))
            }
        }
        "apimachinery.pkg.api.resource.Quantity" => json!(string("string")),
        "apimachinery.pkg.runtime.RawExtension" => raw("raw"),
        "apimachinery.pkg.apis.meta.v1.FieldsV1" => raw("Raw"),
        "apimachinery.pkg.apis.meta.v1.Duration" => json!(go_duration(int("duration"))),
        _ => Value::Object(m),
    }
}

/// A protobuf writer: fields appended in the order written.
#[derive(Default, Clone)]
pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    fn varint(mut self, mut v: u64) -> Self {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return self;
            }
            self.0.push(b | 0x80);
        }
    }
    fn key(self, num: u64, wire: u64) -> Self {
        self.varint((num << 3) | wire)
    }
    pub(crate) fn int(self, num: u64, v: u64) -> Self {
        self.key(num, 0).varint(v)
    }
    pub(crate) fn bytes(self, num: u64, b: &[u8]) -> Self {
        let mut w = self.key(num, 2).varint(b.len() as u64);
        w.0.extend_from_slice(b);
        w
    }
    pub(crate) fn str(self, num: u64, s: &str) -> Self {
        self.bytes(num, s.as_bytes())
    }
    pub(crate) fn msg(self, num: u64, m: Writer) -> Self {
        self.bytes(num, &m.0)
    }
    pub(crate) fn double(self, num: u64, v: f64) -> Self {
        let mut w = self.key(num, 1);
        w.0.extend_from_slice(&v.to_le_bytes());
        w
    }
}

/// Go's `time.Duration.String()` (`1h0m0s`, `1m30s`, `1.5s`).
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let n = nanos.unsigned_abs();
    let (h, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let secs = rest as f64 / 1e9;
    let mut s = String::new();
    if nanos < 0 {
        s.push('-');
    }
    if h > 0 {
        s.push_str(&format!("{h}h{m}m"));
    } else if m > 0 {
        s.push_str(&format!("{m}m"));
    }
    s.push_str(&format!("{secs}s"));
    s
}

#[cfg(test)]
mod tests;
