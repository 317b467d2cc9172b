//! A measurement, not a replacement: the per-record work of the proxy-JSONL read (analyzer/ingest/jsonl.py,
//! schemas/proxy-jsonl.schema.json) in Rust, to put a figure on what a compiled reader would gain
//! (bench/SCALE.md, 2026-12-06, "a compiled reader, measured"; README.md here says what it covers and skips).
//!
//!     compiled_reader FILE [--threads N] [--no-digests]    # one JSON line: counts, wall, CPU, peak, the split
//!
//! Per line: parse (serde_json, typed, borrowing the line; a line the typed parse refuses is parsed again as a
//! `serde_json::Value` and checked field by field, as `_Reader.line` does), validate kind and fields (types,
//! ranges), parse `ts`, lower-case the header names and keep the ones the exchange table needs, and take the
//! JSON-RPC fields of each sse event's `data` and each request/response body (method, id text, kind,
//! error code/message, protocol version, progress token, progress, params.name).  Then, in line order, the
//! connection state machine (a request opens an exchange on its conn and ends the previous one, keep-alive;
//! response/sse/body/close attach to the conn's current exchange; orphans counted) and the columns: Vecs of the
//! events, exchanges and messages tables (strings as one byte buffer + offsets, as Arrow holds them).
//! With `--threads N > 1` the line-local part (everything but the state machine and the columns) runs over
//! N blocks at a time on a rayon pool.
use rayon::prelude::*;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::time::Instant;

static DIGESTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
const BLOCK: usize = 16 << 20; // bytes per read, cut at the last newline (jsonl.BATCH_BYTES)

// ---------------------------------------------------------------- loose field types

/// Any JSON value; Some(text) when it is a string.
#[derive(Default)]
struct AnyStr<'a>(Option<Cow<'a, str>>);
/// Any JSON value; Some when it is a number.
#[derive(Default)]
struct AnyNum(Option<f64>);
/// Any JSON value; Some when it is an integer that fits i64.
#[derive(Default)]
struct AnyInt(Option<i64>);
/// A field's raw JSON text when present (null included): presence, as Python's `"key" in obj`.
#[derive(Default)]
struct Present<'a>(Option<&'a RawValue>);

struct StrOrSkip<'a>(Option<Cow<'a, str>>);
impl<'de: 'a, 'a> Deserialize<'de> for AnyStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrOrSkip<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result { f.write_str("any") }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> { Ok(StrOrSkip(Some(Cow::Borrowed(v)))) }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> { Ok(StrOrSkip(Some(Cow::Owned(v.to_owned())))) }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> { Ok(StrOrSkip(Some(Cow::Owned(v)))) }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> { Ok(StrOrSkip(None)) }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> { Ok(StrOrSkip(None)) }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> { Ok(StrOrSkip(None)) }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> { Ok(StrOrSkip(None)) }
            fn visit_unit<E>(self) -> Result<Self::Value, E> { Ok(StrOrSkip(None)) }
            fn visit_none<E>(self) -> Result<Self::Value, E> { Ok(StrOrSkip(None)) }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(StrOrSkip(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(StrOrSkip(None))
            }
        }
        Ok(AnyStr(d.deserialize_any(V)?.0))
    }
}
impl<'de> Deserialize<'de> for AnyNum {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?; // (rare field: params.progress)
        Ok(AnyNum(v.as_f64()))
    }
}
impl<'de> Deserialize<'de> for AnyInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?; // (rare field: error.code)
        Ok(AnyInt(v.as_i64()))
    }
}
impl<'de: 'a, 'a> Deserialize<'de> for Present<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Present(Some(<&'a RawValue>::deserialize(d)?)))
    }
}

/// A value that is an object of T's fields, or anything else (then None).
struct Loose<T>(Option<T>);
impl<T> Default for Loose<T> {
    fn default() -> Self { Loose(None) }
}
impl<'de, T: Deserialize<'de>> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Option<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result { f.write_str("any") }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(m)).map(Some)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(None)
            }
            fn visit_borrowed_str<E>(self, _: &'de str) -> Result<Self::Value, E> { Ok(None) }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> { Ok(None) }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> { Ok(None) }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> { Ok(None) }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> { Ok(None) }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> { Ok(None) }
            fn visit_unit<E>(self) -> Result<Self::Value, E> { Ok(None) }
        }
        Ok(Loose(d.deserialize_any(V(std::marker::PhantomData))?))
    }
}

// ---------------------------------------------------------------- JSON-RPC (analyzer/decode/jsonrpc.py)

#[derive(Deserialize, Default)]
struct Meta<'a> {
    #[serde(default, borrow, rename = "progressToken")]
    progress_token: Present<'a>,
    #[serde(default, borrow, rename = "io.modelcontextprotocol/protocolVersion")]
    version: AnyStr<'a>,
}
#[derive(Deserialize, Default)]
struct Params<'a> {
    #[serde(default, borrow, rename = "protocolVersion")]
    protocol_version: AnyStr<'a>,
    #[serde(default, borrow, rename = "_meta")]
    meta: Loose<Meta<'a>>,
    #[serde(default, borrow, rename = "progressToken")]
    progress_token: Present<'a>,
    #[serde(default)]
    progress: AnyNum,
    #[serde(default, borrow)]
    name: AnyStr<'a>,
}
#[derive(Deserialize, Default)]
struct RpcResult<'a> {
    #[serde(default, borrow, rename = "protocolVersion")]
    protocol_version: AnyStr<'a>,
}
#[derive(Deserialize, Default)]
struct RpcError<'a> {
    #[serde(default)]
    code: AnyInt,
    #[serde(default, borrow)]
    message: AnyStr<'a>,
}
#[derive(Deserialize)]
struct RpcObj<'a> {
    #[serde(default, borrow)]
    id: Present<'a>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Loose<Params<'a>>,
    #[serde(default, borrow)]
    result: Present<'a>,
    #[serde(default, borrow)]
    error: Present<'a>,
}

const REQUEST: u8 = 0;
const NOTIFICATION: u8 = 1;
const RESPONSE: u8 = 2;
const ERROR: u8 = 3;

/// One JSON-RPC message's fields, borrowing the text where it can (an sse event's go straight into the block's
/// columns; a body's are made owned, as the body's record is handed to the state machine).
struct Msg<'a> {
    kind: u8,
    rpc_id: Option<Cow<'a, str>>,
    method: Option<Cow<'a, str>>,
    error_code: Option<i64>,
    error_message: Option<Cow<'a, str>>,
    protocol_version: Option<Cow<'a, str>>,
    progress_token: Option<Cow<'a, str>>,
    progress: Option<f64>,
    params_name: Option<Cow<'a, str>>,
    has_params: bool, // a request with params: Python hashes their canonical JSON (params_digest): not done here
}
fn owned(c: Option<Cow<str>>) -> Option<Cow<'static, str>> { c.map(|c| Cow::Owned(c.into_owned())) }
impl Msg<'_> {
    fn into_owned(self) -> Msg<'static> {
        Msg { kind: self.kind, rpc_id: owned(self.rpc_id), method: owned(self.method), error_code: self.error_code,
              error_message: owned(self.error_message), protocol_version: owned(self.protocol_version),
              progress_token: owned(self.progress_token), progress: self.progress, params_name: owned(self.params_name),
              has_params: self.has_params }
    }
}

fn id_text(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
    let raw = raw?.get();
    if raw == "null" {
        return None;
    }
    if raw.starts_with('"') && raw.contains('\\') {
        // jsonrpc.id_text: the decoded string quoted with only \ and " escaped
        let s: String = serde_json::from_str(raw).ok()?;
        return Some(Cow::Owned(format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))));
    }
    Some(Cow::Borrowed(raw))
}

fn one(o: RpcObj<'_>) -> Option<Msg<'_>> {
    let (mut version, mut token, mut progress, mut name, has_params) = (None, None, None, None, o.params.0.is_some());
    if let Some(p) = o.params.0 {
        version = p.protocol_version.0;
        progress = p.progress.0;
        name = p.name.0;
        token = p.progress_token.0.map(|r| Cow::Borrowed(r.get()));
        if let Some(m) = p.meta.0 {
            if token.is_none() {
                token = m.progress_token.0.map(|r| Cow::Borrowed(r.get()));
            }
            if version.is_none() {
                version = m.version.0;
            }
        }
    }
    let rpc_id = id_text(o.id.0);
    let mut m = Msg { kind: REQUEST, rpc_id, method: None, error_code: None, error_message: None, protocol_version: None,
                      progress_token: token, progress, params_name: name, has_params };
    if let Some(method) = o.method {
        m.kind = if m.rpc_id.is_some() { REQUEST } else { NOTIFICATION };
        m.method = Some(method);
        m.protocol_version = version;
        return Some(m);
    }
    if let Some(err) = o.error.0 {
        m.kind = ERROR;
        if let Ok(e) = serde_json::from_str::<Loose<RpcError>>(err.get()) {
            if let Some(e) = e.0 {
                m.error_code = e.code.0;
                m.error_message = e.message.0;
            }
        }
        return Some(m);
    }
    if let Some(res) = o.result.0 {
        m.kind = RESPONSE;
        if version.is_none() && res.get().contains("protocolVersion") {
            if let Ok(Loose(Some(r))) = serde_json::from_str::<Loose<RpcResult>>(res.get()) {
                version = r.protocol_version.0;
            }
        }
        m.protocol_version = version;
        return Some(m);
    }
    None // neither method, result nor error: not JSON-RPC
}

/// All JSON-RPC messages of a text (jsonrpc.extract): Err when it is not JSON-RPC (jsonrpc_invalid).
fn extract(text: &str) -> Result<Vec<Msg<'_>>, ()> {
    if text.chars().all(char::is_whitespace) {
        return Ok(Vec::new());
    }
    let t = text.trim_start();
    if t.starts_with('[') {
        let objs: Vec<RpcObj> = serde_json::from_str(text).map_err(|_| ())?;
        return objs.into_iter().map(|o| one(o).ok_or(())).collect();
    }
    let o: RpcObj = serde_json::from_str(text).map_err(|_| ())?;
    one(o).map(|m| vec![m]).ok_or(())
}

/// extract, owned (a body's messages travel with its record to the state machine).
fn extract_owned(text: &str) -> Result<Vec<Msg<'static>>, ()> {
    extract(text).map(|v| v.into_iter().map(Msg::into_owned).collect())
}

/// An sse event's messages straight into the block's columns (their `xid` holds the event's row in the block until
/// the state machine has given the event its exchange); false: not JSON-RPC.
fn push_rpc(ms: &mut Messages, text: &str, ev_row: u32) -> bool {
    if text.chars().all(char::is_whitespace) {
        return true;
    }
    if text.trim_start().starts_with('[') {
        let Ok(v) = extract(text) else { return false };
        v.iter().for_each(|m| ms.push(ev_row as i64, 2, None, m));
        return true;
    }
    let Ok(o) = serde_json::from_str::<RpcObj>(text) else { return false };
    let Some(m) = one(o) else { return false };
    ms.push(ev_row as i64, 2, None, &m);
    true
}

// ---------------------------------------------------------------- the record (schemas/proxy-jsonl.schema.json)

/// `conn`: a string or an integer (made a string).
struct Conn<'a>(Cow<'a, str>);
impl<'de: 'a, 'a> Deserialize<'de> for Conn<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Conn<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result { f.write_str("a string or an integer") }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> { Ok(Conn(Cow::Borrowed(v))) }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> { Ok(Conn(Cow::Owned(v.to_owned()))) }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> { Ok(Conn(Cow::Owned(v.to_string()))) }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> { Ok(Conn(Cow::Owned(v.to_string()))) }
        }
        d.deserialize_any(V)
    }
}

/// The headers the exchange table keeps, from an object with names in any case (lower-cased here, every one);
/// a list value is joined with ", ".
#[derive(Default)]
struct Headers {
    session_id: Option<String>,
    last_event_id: Option<String>,
    protocol_version: Option<String>,
    user_agent: Option<String>,
    content_type: Option<String>,
    replay_epoch: Option<String>,
    content_encoding: Option<String>,
    names: u32,
}
impl Headers {
    fn put(&mut self, name: &str, value: String) {
        self.names += 1;
        let mut low = [0u8; 32];
        if name.len() > low.len() {
            let _ = name.to_ascii_lowercase(); // (a long name: lowered all the same, and none of ours)
            return;
        }
        let low = &mut low[..name.len()];
        low.copy_from_slice(name.as_bytes());
        low.make_ascii_lowercase();
        let slot = match &*low {
            b"mcp-session-id" => &mut self.session_id,
            b"last-event-id" => &mut self.last_event_id,
            b"mcp-protocol-version" => &mut self.protocol_version,
            b"user-agent" => &mut self.user_agent,
            b"content-type" => &mut self.content_type,
            b"x-mcp-replay-epoch" => &mut self.replay_epoch,
            b"content-encoding" => &mut self.content_encoding,
            _ => return,
        };
        match slot {
            Some(old) => { old.push_str(", "); old.push_str(&value); }
            None => *slot = Some(value),
        }
    }
}
enum HVal<'a> { One(Cow<'a, str>), Many(Vec<Cow<'a, str>>) }
impl<'de: 'a, 'a> Deserialize<'de> for HVal<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HVal<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result { f.write_str("a string or a list of strings") }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> { Ok(HVal::One(Cow::Borrowed(v))) }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> { Ok(HVal::One(Cow::Owned(v.to_owned()))) }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = s.next_element::<Cow<'de, str>>()? {
                    out.push(x);
                }
                Ok(HVal::Many(out))
            }
        }
        d.deserialize_any(V)
    }
}
impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Headers;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result { f.write_str("an object of headers") }
            fn visit_unit<E>(self) -> Result<Self::Value, E> { Ok(Headers::default()) }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut h = Headers::default();
                while let Some((k, v)) = m.next_entry::<Cow<'de, str>, HVal<'de>>()? {
                    let v = match v { HVal::One(s) => s.into_owned(), HVal::Many(l) => l.join(", ") };
                    h.put(&k, v);
                }
                Ok(h)
            }
        }
        d.deserialize_any(V)
    }
}

/// A line as the typed parse reads it: every field of every kind, each of its documented type (a line with a field
/// of another type is refused here and read by `from_value`, field by field).
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    ts: Option<Cow<'a, str>>,
    #[serde(borrow)]
    conn: Option<Conn<'a>>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    url: Option<Cow<'a, str>>,
    headers: Option<Headers>,
    #[serde(borrow)]
    body: Option<Cow<'a, str>>,
    status: Option<i64>,
    #[serde(default, borrow)]
    decoded: Present<'a>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    event: Option<Cow<'a, str>>,
    #[serde(borrow)]
    data: Option<Cow<'a, str>>,
    retry: Option<u64>,
    dispatched: Option<bool>,
    truncated: Option<bool>,
    base64: Option<bool>,
    #[serde(borrow)]
    reason: Option<Cow<'a, str>>,
    #[serde(borrow)]
    by: Option<Cow<'a, str>>,
    #[serde(borrow)]
    decoding: Option<Cow<'a, str>>,
}

const K_REQUEST: u8 = 0;
const K_RESPONSE: u8 = 1;
const K_SSE: u8 = 2;
const K_BODY: u8 = 3;
const K_CLOSE: u8 = 4;

const DISPATCHED: u8 = 0;
const NO_DATA: u8 = 1;
const CUT_OFF: u8 = 2;

enum What<'a> {
    Request { method: String, url: Option<Cow<'a, str>>, headers: Headers, body: Option<Cow<'a, str>>, msgs: Result<Vec<Msg<'static>>, ()> },
    Response { status: i32, headers: Headers, decoded: bool },
    /// its values are in the block's columns, at `row`
    Sse { row: u32, fate: u8, nul_id: bool, has_id: bool, bad_rpc: bool },
    #[allow(dead_code)] // (the text is read for its JSON-RPC only; kept for a base64 body, whose decoding is skipped)
    Body { data: Cow<'a, str>, base64: bool, msgs: Result<Vec<Msg<'static>>, ()> },
    Close { reason: u8, by: u8, decoding: bool },
}

/// What a line is, from the line alone (the parallel part).
enum Parsed<'a> {
    Blank,
    /// a line rejected whole (anomaly code), still a record
    Bad(&'static str),
    Rec { kind: Option<u8>, conn: Cow<'a, str>, ts: Option<i64>, bad_ts: bool, what: Option<What<'a>>, bad: Option<&'static str>, slow: bool },
}

const REASONS: [&str; 4] = ["eof", "reset", "error", "capture_end"];

/// RFC 3339 to microseconds since the epoch, UTC (timestamps.parse_ts: the recorder's forms; None for the rest).
fn parse_ts(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b't' || b[10] == b' ') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let mut v = 0i64;
        for &c in &b[r] {
            if !c.is_ascii_digit() { return None; }
            v = v * 10 + (c - b'0') as i64;
        }
        Some(v)
    };
    let (y, mo, d, h, mi) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?);
    let mut sec = num(17..19)?;
    let mut i = 19;
    let mut micros = 0i64;
    if sec == 60 { sec = 59; micros = 999_999; } // a leap second
    if i < b.len() && (b[i] == b'.' || b[i] == b',') {
        i += 1;
        let start = i;
        let mut scale = 100_000i64;
        let mut frac = 0i64;
        while i < b.len() && b[i].is_ascii_digit() {
            if scale > 0 { frac += (b[i] - b'0') as i64 * scale; scale /= 10; }
            i += 1;
        }
        if i == start { return None; }
        if micros == 0 { micros = frac; }
    }
    let mut off = 0i64;
    if i < b.len() {
        match b[i] {
            b'Z' | b'z' if i + 1 == b.len() => {}
            b'+' | b'-' if i + 6 == b.len() && b[i + 3] == b':' => {
                let o = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
                off = if b[i] == b'+' { o } else { -o };
            }
            _ => return None,
        }
    }
    if !(1..=12).contains(&mo) || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 59 { return None; }
    // days from civil (Howard Hinnant)
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = if yy >= 0 { yy } else { yy - 399 } / 400;
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec - off * 60) * 1_000_000) + micros)
}

fn kind_code(k: &str) -> Option<u8> {
    Some(match k { "request" => K_REQUEST, "response" => K_RESPONSE, "sse" => K_SSE, "body" => K_BODY, "close" => K_CLOSE, _ => return None })
}

fn fate_of(truncated: bool, dispatched_false: bool, data_none: bool) -> u8 {
    if truncated { CUT_OFF } else if dispatched_false || data_none { NO_DATA } else { DISPATCHED }
}

/// The kind's fields, checked as `_Reader.line` checks them; Err(anomaly) when the record is rejected.
fn build<'a>(kind: u8, l: Line<'a>, ts: Option<i64>, chunk: &mut Chunk) -> Result<What<'a>, &'static str> {
    Ok(match kind {
        K_REQUEST => {
            let method = l.method.ok_or("jsonl_bad_record")?;
            let headers = l.headers.ok_or("jsonl_bad_record")?;
            let msgs = match &l.body { Some(b) if !b.is_empty() => extract_owned(b), _ => Ok(Vec::new()) };
            What::Request { method: method.to_uppercase(), url: l.url, headers, body: l.body, msgs }
        }
        K_RESPONSE => {
            let status = l.status.filter(|s| (0..1i64 << 31).contains(s)).ok_or("jsonl_bad_record")?;
            What::Response { status: status as i32, headers: l.headers.ok_or("jsonl_bad_record")?, decoded: l.decoded.0.is_some() }
        }
        K_SSE => {
            let retry = match l.retry { Some(r) if r >= 1 << 63 => return Err("jsonl_bad_record"), r => r.map(|r| r as i64) };
            let fate = fate_of(l.truncated == Some(true), l.dispatched == Some(false), l.data.is_none());
            let data = l.data.as_deref().unwrap_or("");
            let nul_id = l.id.as_deref().map_or(false, |i| i.contains('\0'));
            let id = if nul_id { None } else { l.id.as_deref() };
            let row = chunk.keep.len() as u32;
            let ev = &mut chunk.ev;
            ev.xid.push(-1); // (the state machine's, with ordinal, cursor, line)
            ev.ordinal.push(0);
            ev.line.push(0);
            ev.cursor_row.push(u32::MAX);
            ev.ts.push(ts);
            ev.id.push(id);
            ev.event.push(l.event.as_deref());
            ev.data.push(Some(data));
            ev.retry.push(retry);
            ev.fate.push(fate);
            if DIGESTS.load(std::sync::atomic::Ordering::Relaxed) {
                use sha2::Digest;
                let mut h = sha2::Sha256::new();
                h.update(id.unwrap_or("").as_bytes());
                h.update(b":");
                h.update(data.as_bytes());
                ev.digest.push(u64::from_be_bytes(h.finalize()[..8].try_into().unwrap()));
            }
            chunk.keep.push(false);
            let bad_rpc = fate == DISPATCHED && !push_rpc(&mut chunk.msg, data, row);
            What::Sse { row, fate, nul_id, has_id: id.is_some(), bad_rpc }
        }
        K_BODY => {
            let data = l.data.ok_or("jsonl_bad_record")?;
            let base64 = l.base64 == Some(true);
            let msgs = if base64 { Ok(Vec::new()) } else { extract_owned(&data) };
            What::Body { data, base64, msgs }
        }
        _ => {
            let r = l.reason.as_deref().and_then(|r| REASONS.iter().position(|x| *x == r));
            let by = match l.by.as_deref() { Some("client") => 1, Some("server") => 2, _ => 0 };
            // an unknown reason: anomaly, read as "error" (index 2)
            What::Close { reason: r.map_or(2 | 0x80, |r| r as u8), by, decoding: l.decoding.is_some() }
        }
    })
}

/// The slow path: a line the typed parse refused, read as a Value and checked field by field (jsonl._Reader.line).
fn from_value(text: &str, chunk: &mut Chunk) -> Parsed<'static> {
    let v: Value = match serde_json::from_str(text) { Ok(v) => v, Err(_) => return Parsed::Bad("jsonl_bad_line") };
    let Value::Object(o) = v else { return Parsed::Bad("jsonl_bad_line") };
    let kind = o.get("kind").and_then(Value::as_str);
    let conn = match o.get("conn") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
        _ => return Parsed::Bad("jsonl_bad_record"),
    };
    let Some(kind) = kind else { return Parsed::Bad("jsonl_bad_record") };
    let ts_v = o.get("ts");
    let ts = ts_v.and_then(Value::as_str).and_then(parse_ts);
    let bad_ts = ts.is_none() && !matches!(ts_v, None | Some(Value::Null));
    let Some(k) = kind_code(kind) else {
        return Parsed::Rec { kind: None, conn: Cow::Owned(conn), ts, bad_ts, what: None, bad: None, slow: true };
    };
    let s = |key: &str| -> Result<Option<Cow<'static, str>>, ()> {
        match o.get(key) { None | Some(Value::Null) => Ok(None), Some(Value::String(s)) => Ok(Some(Cow::Owned(s.clone()))), _ => Err(()) }
    };
    let headers = |key: &str| -> Result<Option<Headers>, ()> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(Some(Headers::default())),
            Some(Value::Object(m)) => {
                let mut h = Headers::default();
                for (k, v) in m {
                    match v {
                        Value::String(s) => h.put(k, s.clone()),
                        Value::Array(l) => h.put(k, l.iter().map(|x| x.as_str().map(str::to_owned).unwrap_or_else(|| x.to_string())).collect::<Vec<_>>().join(", ")),
                        other => h.put(k, other.to_string()),
                    }
                }
                Ok(Some(h))
            }
            _ => Ok(None),
        }
    };
    let flag = |key: &str| o.get(key).and_then(Value::as_bool);
    let line = (|| -> Result<Line<'static>, ()> {
        Ok(Line {
            kind: None, ts: None, conn: None,
            method: if k == K_REQUEST { s("method")? } else { None },
            url: s("url").unwrap_or(None),
            headers: if k == K_REQUEST || k == K_RESPONSE { headers("headers")? } else { None },
            body: if k == K_REQUEST { s("body").unwrap_or(None) } else { None },
            status: o.get("status").and_then(Value::as_i64),
            decoded: Present(None),
            id: if k == K_SSE { s("id")? } else { None },
            event: if k == K_SSE { s("event")? } else { None },
            data: if k == K_SSE || k == K_BODY { s("data")? } else { None },
            retry: match o.get("retry") { None | Some(Value::Null) => None, Some(r) => Some(r.as_u64().ok_or(())?) },
            dispatched: flag("dispatched"), truncated: flag("truncated"), base64: flag("base64"),
            reason: s("reason").unwrap_or(None), by: s("by").unwrap_or(None), decoding: s("decoding").unwrap_or(None),
        })
    })();
    let (what, bad) = match line.map_err(|_| "jsonl_bad_record").and_then(|l| build(k, l, ts, chunk)) {
        Ok(w) => (Some(w), None),
        Err(code) => (None, Some(code)),
    };
    Parsed::Rec { kind: Some(k), conn: Cow::Owned(conn), ts, bad_ts, what, bad, slow: true }
}

fn parse_line<'a>(raw: &'a [u8], first: bool, chunk: &mut Chunk) -> Parsed<'a> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Parsed::Blank;
    }
    let raw = if first && raw.starts_with(b"\xef\xbb\xbf") { &raw[3..] } else { raw };
    let text = match std::str::from_utf8(raw) {
        Ok(t) => t,
        Err(_) => return from_value(&String::from_utf8_lossy(raw), chunk), // (jsonl_invalid_utf8: not counted apart)
    };
    match serde_json::from_str::<Line>(text) {
        Ok(mut l) => {
            let conn = match l.conn.take() { Some(c) => c.0, None => return from_value(text, chunk) };
            let Some(kind) = l.kind.take() else { return from_value(text, chunk) };
            let ts_s = l.ts.take();
            let ts = ts_s.as_deref().and_then(parse_ts);
            let bad_ts = ts.is_none() && ts_s.is_some();
            let Some(k) = kind_code(&kind) else {
                return Parsed::Rec { kind: None, conn, ts, bad_ts, what: None, bad: None, slow: false };
            };
            let (what, bad) = match build(k, l, ts, chunk) { Ok(w) => (Some(w), None), Err(c) => (None, Some(c)) };
            Parsed::Rec { kind: Some(k), conn, ts, bad_ts, what, bad, slow: false }
        }
        Err(_) => from_value(text, chunk),
    }
}

// ---------------------------------------------------------------- columns

#[derive(Default)]
struct StrCol { bytes: Vec<u8>, offs: Vec<u64>, valid: Vec<bool> }
impl StrCol {
    fn push(&mut self, v: Option<&str>) {
        if let Some(s) = v { self.bytes.extend_from_slice(s.as_bytes()); }
        self.offs.push(self.bytes.len() as u64);
        self.valid.push(v.is_some());
    }
    fn size(&self) -> usize { self.bytes.len() + self.offs.len() * 9 }
}

#[derive(Default)]
struct Events {
    digest: Vec<u64>, // the compact digest: the first 64 bits of sha256("<id>:" + data) (tables.digest_expr), unless --no-digests
    xid: Vec<i64>, ordinal: Vec<i32>, line: Vec<u64>, ts: Vec<Option<i64>>, id: StrCol, cursor_row: Vec<u32>,
    event: StrCol, data: StrCol, retry: Vec<Option<i64>>, fate: Vec<u8>,
}
/// A block's events and their messages, as the parallel part makes them (an Arrow chunk each, in a real reader).
#[derive(Default)]
struct Chunk {
    ev: Events,
    keep: Vec<bool>, // false: an orphan (or rejected) record's row, left out of the table
    msg: Messages,
    base: u32, // the row of its first event among all events
}

#[derive(Default)]
struct Messages {
    xid: Vec<i64>, origin: Vec<u8>, ordinal: Vec<Option<i32>>, kind: Vec<u8>, rpc_id: StrCol, method: StrCol,
    error_code: Vec<Option<i64>>, error_message: StrCol, protocol_version: StrCol, progress_token: StrCol,
    progress: Vec<Option<f64>>, params_name: StrCol,
}
impl Messages {
    fn push(&mut self, xid: i64, origin: u8, ordinal: Option<i32>, m: &Msg) {
        self.xid.push(xid);
        self.origin.push(origin);
        self.ordinal.push(ordinal);
        self.kind.push(m.kind);
        self.rpc_id.push(m.rpc_id.as_deref());
        self.method.push(m.method.as_deref());
        self.error_code.push(m.error_code);
        self.error_message.push(m.error_message.as_deref());
        self.protocol_version.push(m.protocol_version.as_deref());
        self.progress_token.push(m.progress_token.as_deref());
        self.progress.push(m.progress);
        self.params_name.push(m.params_name.as_deref());
    }
}

/// An exchange row (mutable while its connection is open), as tables.Builder.exchange/response make it.
struct Exchange {
    conn: String, line: u64, started: Option<i64>, ended: Option<i64>, method: String, url: Option<String>,
    status: Option<i32>, req_session_id: Option<String>, resp_session_id: Option<String>, last_event_id: Option<String>,
    protocol_version: Option<String>, content_type: Option<String>, replay_epoch: Option<String>, end_reason: u8,
    end_by: u8, body_recorded: bool, request_body: Option<String>, user_agent: Option<String>,
    // stream state: the next ordinal, the row of the last event with an id (the cursor), a coded stream
    next_ordinal: i32, cursor_row: u32, coded: bool,
}
const OPEN: u8 = 10;
const COMPLETE: u8 = 11;

#[derive(Default)]
struct Exchanges {
    conn: StrCol, line: Vec<u64>, started: Vec<Option<i64>>, ended: Vec<Option<i64>>, method: StrCol, url: StrCol,
    status: Vec<Option<i32>>, req_session_id: StrCol, resp_session_id: StrCol, last_event_id: StrCol,
    protocol_version: StrCol, content_type: StrCol, replay_epoch: StrCol, end_reason: Vec<u8>, end_by: Vec<u8>,
    body_recorded: Vec<bool>, request_body: StrCol, user_agent: StrCol,
}

fn media_type(ct: Option<&str>) -> Option<String> {
    let t = ct?.split(',').next()?.split(';').next()?.trim().to_ascii_lowercase();
    if t.is_empty() { None } else { Some(t) }
}

#[derive(Default)]
struct Reader {
    current: HashMap<String, u32>,
    rows: Vec<Exchange>,
    chunks: Vec<Chunk>,
    event_rows: u32,
    messages: Messages,
    records: u64,
    slow_lines: u64,
    anomalies: BTreeMap<&'static str, u64>,
    skipped: BTreeMap<&'static str, u64>,
}

impl Reader {
    fn note(&mut self, code: &'static str) { *self.anomalies.entry(code).or_default() += 1; }
    fn skip(&mut self, what: &'static str) { *self.skipped.entry(what).or_default() += 1; }

    fn messages(&mut self, xid: u32, origin: u8, ordinal: Option<i32>, msgs: &Result<Vec<Msg<'static>>, ()>) {
        match msgs {
            Err(()) => self.note("jsonrpc_invalid"),
            Ok(ms) => for m in ms {
                if origin == 0 && m.kind == REQUEST && m.has_params {
                    self.skip("params_digest (canonical JSON + sha256 of a request's params)");
                }
                self.messages.push(xid as i64, origin, ordinal, m);
            },
        }
    }

    /// One line, in line order: the connection state machine and the columns (jsonl._Reader.line).
    fn line(&mut self, lineno: u64, p: Parsed, chunk: &mut Chunk) {
        let (kind, conn, ts, bad_ts, what, bad, slow) = match p {
            Parsed::Blank => return,
            Parsed::Bad(code) => { self.records += 1; self.slow_lines += 1; self.note(code); return; }
            Parsed::Rec { kind, conn, ts, bad_ts, what, bad, slow } => (kind, conn, ts, bad_ts, what, bad, slow),
        };
        self.records += 1;
        if slow { self.slow_lines += 1; }
        if bad_ts { self.note("jsonl_bad_timestamp"); }
        let Some(kind) = kind else { self.note("jsonl_unknown_kind"); return };
        if kind == K_REQUEST {
            let Some(What::Request { method, url, headers, body, msgs }) = what else { self.note(bad.unwrap_or("jsonl_bad_record")); return };
            let xid = self.rows.len() as u32;
            let conn = conn.into_owned();
            let prev = self.current.insert(conn.clone(), xid);
            if let Some(p) = prev {
                let p = &mut self.rows[p as usize];
                if p.end_reason == OPEN && p.status.is_some() { p.end_reason = COMPLETE; } // keep-alive
            }
            self.skip("redact.url / redact.text of the request (URL, body)");
            self.rows.push(Exchange {
                conn, line: lineno, started: ts, ended: None, method: method.clone(), url: url.map(Cow::into_owned),
                status: None, req_session_id: headers.session_id, resp_session_id: None, last_event_id: headers.last_event_id,
                protocol_version: headers.protocol_version, content_type: None, replay_epoch: None, end_reason: OPEN, end_by: 0,
                body_recorded: true, request_body: body.map(Cow::into_owned), user_agent: headers.user_agent,
                next_ordinal: 0, cursor_row: u32::MAX, coded: false,
            });
            self.messages(xid, 0, None, &msgs);
            return;
        }
        let Some(&xid) = self.current.get(&*conn) else { self.note("jsonl_orphan_record"); return };
        let Some(what) = what else { self.note(bad.unwrap_or("jsonl_bad_record")); return };
        match what {
            What::Response { status, headers, decoded } => {
                let row = &mut self.rows[xid as usize];
                row.status = Some(status);
                row.resp_session_id = headers.session_id;
                row.content_type = media_type(headers.content_type.as_deref());
                row.replay_epoch = headers.replay_epoch;
                if headers.content_encoding.is_some() && row.content_type.as_deref() == Some("text/event-stream") && !decoded {
                    row.coded = true;
                }
            }
            What::Sse { row: at, fate, nul_id, has_id, bad_rpc } => {
                if self.rows[xid as usize].coded {
                    self.skip("a coded event stream's first record checked for noise (_noise)");
                }
                if fate == CUT_OFF { self.note("sse_unterminated_event"); }
                if nul_id { self.note("sse_id_contains_nul"); }
                if bad_rpc { self.note("jsonrpc_invalid"); }
                let row = &mut self.rows[xid as usize];
                let ordinal = row.next_ordinal;
                row.next_ordinal += 1;
                if has_id { row.cursor_row = chunk.base + at; }
                let (ev, i) = (&mut chunk.ev, at as usize);
                ev.xid[i] = xid as i64;
                ev.ordinal[i] = ordinal;
                ev.line[i] = lineno;
                ev.cursor_row[i] = row.cursor_row;
                chunk.keep[i] = true;
            }
            What::Body { data: _, base64, msgs } => {
                if base64 {
                    self.skip("base64 body: Content-Encoding decoding, SSE parse of the raw body");
                    return;
                }
                let ct = self.rows[xid as usize].content_type.as_deref();
                if matches!(ct, None | Some("application/json")) || ct.map_or(false, |c| c.ends_with("+json")) {
                    self.messages(xid, 1, None, &msgs);
                }
            }
            What::Close { reason, by, decoding } => {
                if reason & 0x80 != 0 { self.note("jsonl_bad_record"); }
                if decoding { self.note("body_encoding_* (close decoding)"); }
                let row = &mut self.rows[xid as usize];
                row.end_reason = reason & 0x7f;
                row.ended = ts;
                row.end_by = by;
                self.current.remove(&*conn);
            }
            What::Request { .. } => unreachable!(),
        }
    }

    /// The exchange rows as columns (tables.Builder's Arrow chunks), after the open ones are ended.
    /// A block applied: its sse messages take their event's exchange and ordinal; the chunk is kept.
    fn seal(&mut self, mut chunk: Chunk) {
        let m = &mut chunk.msg;
        for i in 0..m.xid.len() {
            let e = m.xid[i] as usize;
            m.xid[i] = if chunk.keep[e] { chunk.ev.xid[e] } else { -1 }; // (-1: an orphan event's, not counted)
            m.ordinal[i] = Some(chunk.ev.ordinal[e]);
        }
        self.event_rows += chunk.keep.len() as u32;
        self.chunks.push(chunk);
    }

    fn finish(&mut self) -> Exchanges {
        let mut x = Exchanges::default();
        for r in self.rows.iter_mut() {
            if r.end_reason == OPEN && r.status.is_some() && r.content_type.as_deref() != Some("text/event-stream") && self.current.get(&r.conn) == Some(&(x.line.len() as u32)) {
                r.end_reason = COMPLETE;
            }
            x.conn.push(Some(&r.conn));
            x.line.push(r.line);
            x.started.push(r.started);
            x.ended.push(r.ended);
            x.method.push(Some(&r.method).filter(|m| !m.is_empty()).map(|s| s.as_str()));
            x.url.push(r.url.as_deref());
            x.status.push(r.status);
            x.req_session_id.push(r.req_session_id.as_deref());
            x.resp_session_id.push(r.resp_session_id.as_deref());
            x.last_event_id.push(r.last_event_id.as_deref());
            x.protocol_version.push(r.protocol_version.as_deref());
            x.content_type.push(r.content_type.as_deref());
            x.replay_epoch.push(r.replay_epoch.as_deref());
            x.end_reason.push(r.end_reason);
            x.end_by.push(r.end_by);
            x.body_recorded.push(r.body_recorded);
            x.request_body.push(r.request_body.as_deref());
            x.user_agent.push(r.user_agent.as_deref());
        }
        x
    }
}

// ---------------------------------------------------------------- clocks

fn cpu_s(who: libc::c_int) -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}
fn thread_cpu() -> f64 {
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}
fn peak_mib() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as f64 / 1024.0
}

// ---------------------------------------------------------------- blocks

/// The file in blocks of about BLOCK bytes, each cut after its last newline (the rest starts the next block).
struct Blocks { f: File, carry: Vec<u8>, done: bool }
impl Blocks {
    fn next(&mut self) -> Option<Vec<u8>> {
        if self.done { return None; }
        let mut buf = std::mem::take(&mut self.carry);
        let start = buf.len();
        buf.resize(start + BLOCK, 0);
        let mut got = start;
        while got < buf.len() {
            let n = self.f.read(&mut buf[got..]).expect("read");
            if n == 0 { self.done = true; break; }
            got += n;
        }
        buf.truncate(got);
        if !self.done {
            match memrchr(&buf) {
                Some(i) => { self.carry = buf[i + 1..].to_vec(); buf.truncate(i + 1); }
                None => { self.carry = buf; return self.next(); } // (a line longer than a block: read on)
            }
        }
        if buf.is_empty() { None } else { Some(buf) }
    }
}
fn memrchr(b: &[u8]) -> Option<usize> { b.iter().rposition(|&c| c == b'\n') }

fn lines(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = block.strip_suffix(b"\n").unwrap_or(block);
    body.split(|&c| c == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

fn parse_block(block: &[u8], first_line: u64) -> (Vec<Parsed<'_>>, Chunk) {
    let mut chunk = Chunk::default();
    let parsed = lines(block).enumerate().map(|(i, l)| parse_line(l, first_line == 1 && i == 0, &mut chunk)).collect();
    (parsed, chunk)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: compiled_reader FILE [--threads N] [--no-digests]").clone();
    let threads: usize = args.iter().position(|a| a == "--threads").and_then(|i| args.get(i + 1)).map_or(1, |n| n.parse().expect("--threads N"));
    if args.iter().any(|a| a == "--no-digests") {
        DIGESTS.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    let (w0, c0) = (Instant::now(), cpu_s(libc::RUSAGE_SELF));
    let mut blocks = Blocks { f: File::open(&path).expect("open"), carry: Vec::new(), done: false };
    let mut r = Reader::default();
    let (mut t_read, mut t_parse, mut t_state) = (0.0, 0.0, 0.0);
    let mut lineno = 1u64;
    let mut nblocks = 0u64;
    if threads <= 1 {
        loop {
            let t = thread_cpu();
            let Some(block) = blocks.next() else { break };
            let t1 = thread_cpu();
            let (parsed, mut chunk) = parse_block(&block, lineno);
            let t2 = thread_cpu();
            let n = parsed.len() as u64;
            chunk.base = r.event_rows;
            for (i, p) in parsed.into_iter().enumerate() {
                r.line(lineno + i as u64, p, &mut chunk);
            }
            r.seal(chunk);
            lineno += n;
            nblocks += 1;
            let t3 = thread_cpu();
            t_read += t1 - t;
            t_parse += t2 - t1;
            t_state += t3 - t2;
        }
    } else {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        loop {
            let t = thread_cpu();
            let group: Vec<Vec<u8>> = (0..threads).map_while(|_| blocks.next()).collect();
            if group.is_empty() { break; }
            let t1 = thread_cpu();
            // line numbers of each block's first line need the line counts of the blocks before it
            let counts: Vec<u64> = group.iter().map(|b| lines(b).count() as u64).collect();
            let mut firsts = Vec::with_capacity(group.len());
            let mut at = lineno;
            for c in &counts { firsts.push(at); at += c; }
            let parsed: Vec<(Vec<Parsed>, Chunk)> = pool.install(|| group.par_iter().zip(firsts.par_iter()).map(|(b, &f)| parse_block(b, f)).collect());
            let t2 = thread_cpu();
            for (f, (ps, mut chunk)) in firsts.iter().zip(parsed) {
                chunk.base = r.event_rows;
                for (i, p) in ps.into_iter().enumerate() {
                    r.line(f + i as u64, p, &mut chunk);
                }
                r.seal(chunk);
            }
            lineno = at;
            nblocks += group.len() as u64;
            let t3 = thread_cpu();
            t_read += t1 - t;
            t_parse += t2 - t1;
            t_state += t3 - t2;
        }
    }
    let t = thread_cpu();
    let x = r.finish();
    let t_finish = thread_cpu() - t;
    let wall = w0.elapsed().as_secs_f64();
    let cpu = cpu_s(libc::RUSAGE_SELF) - c0;
    let orphans = r.anomalies.get("jsonl_orphan_record").copied().unwrap_or(0);
    let ch = &r.chunks;
    let sse_msgs = || ch.iter().flat_map(|c| c.msg.xid.iter().zip(&c.msg.kind)).filter(|(x, _)| **x >= 0).map(|(_, k)| *k);
    let by_origin = |o: u8| if o == 2 { sse_msgs().count() } else { r.messages.origin.iter().filter(|&&x| x == o).count() };
    let by_kind = |k: u8| r.messages.kind.iter().filter(|&&x| x == k).count() + sse_msgs().filter(|&x| x == k).count();
    let kept = || ch.iter().flat_map(|c| c.keep.iter().enumerate().filter(|(_, k)| **k).map(move |(i, _)| (c, i)));
    let by_fate = |f: u8| kept().filter(|(c, i)| c.ev.fate[*i] == f).count();
    let names = |r: u8| match r { 0 => "eof", 1 => "reset", 2 => "error", 3 => "capture_end", OPEN => "open", _ => "complete" };
    let mut end_reasons = BTreeMap::new();
    for r in &x.end_reason { *end_reasons.entry(names(*r)).or_insert(0u64) += 1; }
    let col_mib = (ch.iter().map(|c| c.ev.data.size() + c.ev.id.size() + c.ev.event.size() + c.msg.method.size() + c.msg.rpc_id.size() + c.msg.progress_token.size()).sum::<usize>() + x.request_body.size()) as f64 / (1 << 20) as f64;
    let out = serde_json::json!({
        "what": "compiled_reader", "file": std::path::Path::new(&path).file_name().map(|f| f.to_string_lossy().into_owned()),
        "threads": threads, "digests": DIGESTS.load(std::sync::atomic::Ordering::Relaxed), "wall": wall, "cpu": cpu, "peak_mib": peak_mib(),
        "records": r.records, "lines": lineno - 1, "blocks": nblocks, "slow_lines": r.slow_lines,
        "exchanges": x.line.len(), "events": kept().count(), "event_chunks": ch.len(),
        "messages": r.messages.xid.len() + sse_msgs().count(),
        "messages_by_origin": {"request_body": by_origin(0), "response_body": by_origin(1), "sse": by_origin(2)},
        "messages_by_kind": {"request": by_kind(REQUEST), "notification": by_kind(NOTIFICATION), "response": by_kind(RESPONSE), "error": by_kind(ERROR)},
        "events_by_fate": {"dispatched": by_fate(DISPATCHED), "no_data": by_fate(NO_DATA), "cut_off": by_fate(CUT_OFF)},
        "orphans": orphans, "anomalies": r.anomalies, "skipped": r.skipped,
        "main_thread_cpu": {"read": t_read, "parse": t_parse, "state_machine_and_columns": t_state, "exchange_columns": t_finish},
        "string_columns_mib": col_mib,
        "check": {"events_with_id": kept().filter(|(c, i)| c.ev.id.valid[*i]).count(),
                  "events_with_cursor": kept().filter(|(c, i)| c.ev.cursor_row[*i] != u32::MAX).count(),
                  "messages_with_progress_token": r.messages.progress_token.valid.iter().filter(|&&v| v).count()
                      + ch.iter().map(|c| c.msg.progress_token.valid.iter().zip(&c.msg.xid).filter(|(v, x)| **v && **x >= 0).count()).sum::<usize>(),
                  "messages_with_params_name": r.messages.params_name.valid.iter().filter(|&&v| v).count()
                      + ch.iter().map(|c| c.msg.params_name.valid.iter().zip(&c.msg.xid).filter(|(v, x)| **v && **x >= 0).count()).sum::<usize>(),
                  "exchanges_with_status": x.status.iter().filter(|s| s.is_some()).count(),
                  "exchanges_by_end_reason": end_reasons,
                  "exchanges_with_end_by": x.end_by.iter().filter(|b| **b != 0).count(),
                  "exchanges_with_session_id": x.req_session_id.valid.iter().filter(|v| **v).count(),
                  "exchanges_with_last_event_id": x.last_event_id.valid.iter().filter(|v| **v).count(),
                  "exchanges_sse": (0..x.line.len()).filter(|&i| x.content_type.valid[i] && &x.content_type.bytes[if i == 0 { 0 } else { x.content_type.offs[i - 1] as usize }..x.content_type.offs[i] as usize] == b"text/event-stream").count(),
                  "digest_xor": kept().filter_map(|(c, i)| c.ev.digest.get(i)).fold(0u64, |a, d| a ^ *d),
                  "events_without_ts": kept().filter(|(c, i)| c.ev.ts[*i].is_none()).count()},
    });
    println!("{}", out);
    if let Ok(path) = std::env::var("COMPILED_READER_DUMP") {
        // (a check, not part of the read: each kept event's line and digest, to compare with the Python reader's)
        use std::io::Write;
        let mut f = std::io::BufWriter::new(File::create(path).expect("dump"));
        for (c, i) in kept() {
            writeln!(f, "{} {:016x}", c.ev.line[i], c.ev.digest.get(i).copied().unwrap_or(0)).unwrap();
        }
    }
}
