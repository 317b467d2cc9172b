//! The compiled half of the proxy-JSONL read (analyzer/native/README.md).
//!
//! `sse_lines`: of a batch of lines, the plain `sse` records (schemas/proxy-jsonl.schema.json) that
//! the per-line reader (analyzer/ingest/jsonl.py `_Reader.line`) would read without any anomaly, decoded into
//! Arrow buffers, with each event's compact digest and, for an event whose data is a JSON-RPC notification, its
//! method.  Every line it does not take goes on to the Python paths, which decide what it is: the rule here is to
//! take only what is certain, never to guess.  tests/test_native.py compares both on every kind of line.
//! `line_starts` splits the log's blocks into those lines (spans, not one bytes object each), `notification_methods`
//! reads the same methods for any events column, and `rpc_messages` one body's JSON-RPC (analyzer/decode/jsonrpc.py
//! `extract`).  `exchange_lines`: of the lines `sse_lines` did not take, the exchange records (request, response,
//! body, close) the per-line reader would read without an anomaly in the compact reading, as tuples of the values
//! its connection state machine reads (`_Reader.compiled`).

use std::borrow::Cow;
use std::fmt;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------------------------------------------
// one record, typed as the per-line reader reads an `sse` record; any other shape is an error (the line is not taken)

/// A JSON string, borrowed from the line where it has no escape.
struct Text<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// `retry`: an integer 0..2^63-1 (no float, no bool, no string).
struct Retry(i64);

impl<'de> de::Deserialize<'de> for Retry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Retry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer 0..2^63-1")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                if v >= 0 { Ok(Retry(v)) } else { Err(E::custom("negative")) }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i64::try_from(v).map(Retry).map_err(|_| E::custom("too large"))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default)]
struct Record<'a> {
    kind: Option<Text<'a>>,
    ts: Option<Option<Text<'a>>>,
    conn: Option<Text<'a>>,
    id: Option<Option<Text<'a>>>,
    event: Option<Option<Text<'a>>>,
    data: Option<Option<Text<'a>>>,
    retry: Option<Option<Retry>>,
    truncated: Option<Option<bool>>,
    dispatched: Option<Option<bool>>,
}

struct RecordVisitor;

fn once<'de, A: MapAccess<'de>, T: de::Deserialize<'de>>(slot: &mut Option<T>, m: &mut A) -> Result<(), A::Error> {
    if slot.is_some() {
        // a key twice: json.loads keeps the last, msgspec refuses; the Python paths decide
        return Err(de::Error::custom("duplicate key"));
    }
    *slot = Some(m.next_value()?);
    Ok(())
}

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = Record<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an sse record")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut r = Record::default();
        while let Some(key) = m.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "kind" => once(&mut r.kind, &mut m)?,
                "ts" => once(&mut r.ts, &mut m)?,
                "conn" => once(&mut r.conn, &mut m)?,
                "id" => once(&mut r.id, &mut m)?,
                "event" => once(&mut r.event, &mut m)?,
                "data" => once(&mut r.data, &mut m)?,
                "retry" => once(&mut r.retry, &mut m)?,
                "truncated" => once(&mut r.truncated, &mut m)?,
                "dispatched" => once(&mut r.dispatched, &mut m)?,
                // any other field: the schema's sse record has none (the Python paths read such a line)
                _ => return Err(de::Error::custom("unknown field")),
            }
        }
        Ok(r)
    }
}

fn record(line: &[u8]) -> Option<Record<'_>> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let r = de.deserialize_map(RecordVisitor).ok()?;
    de.end().ok()?; // only white space after the object
    Some(r)
}

// ---------------------------------------------------------------------------------------------------------------
// the time: RFC 3339 UTC as the recorder writes it, in the range where Python and Polars read it alike
// (analyzer/ingest/jsonl_columns.py _TS: years 1000-2099, no leap second, no hour 24, 1-6 digits of fraction)

fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0i64, |n, d| n * 10 + (d - b'0') as i64))
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    // Howard Hinnant's algorithm: days since 1970-01-01 of a proleptic Gregorian date
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn timestamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || *b.last()? != b'Z' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let (month, day) = (digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, minute, second) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    let frac = &b[19..b.len() - 1];
    let micros = if frac.is_empty() {
        0
    } else {
        if frac[0] != b'.' || frac.len() < 2 || frac.len() > 7 {
            return None;
        }
        digits(&frac[1..])? * 10i64.pow(7 - frac.len() as u32)
    };
    if !(1000..=2099).contains(&year) || hour > 23 || minute > 59 || second > 59 || !(1..=12).contains(&month) {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][(month - 1) as usize];
    if day < 1 || day > month_days {
        return None; // a date that does not exist (Feb 30): the per-line reader flags it
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(secs * 1_000_000 + micros)
}

// ---------------------------------------------------------------------------------------------------------------
// each event's JSON-RPC, where it is certain: what analyzer/decode/jsonrpc.py event_rpc's Polars plan reads from a
// JSON-RPC notification (json_path_match "$.method" and "$.id", which parse the text with serde_json into a Value,
// as here).  Anything else (an id, no string method, a protocol version, a batch, text that is not JSON) is left
// to that plan.

fn notification_method(data: &str) -> Option<String> {
    if data.contains("protocolVersion") {
        return None; // event_rpc reads the protocol version of such a text: left to it
    }
    let first = data.bytes().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))?;
    if first != b'{' {
        return None;
    }
    // read as serde_json reads the text into a Value (the same text taken, the same errors), keeping only what is
    // looked up in that Value: the last of each key, as its map keeps it.  Not the Value itself: its maps and
    // strings were a fifth of the whole pass over the 1M-event log's lines (perf), for three lookups.
    let mut de = serde_json::Deserializer::from_str(data);
    let top = de.deserialize_any(TopVisitor).ok()?;
    de.end().ok()?;
    if !top.id_null {
        return None;
    }
    // a protocol version under a key spelled with escapes ("protocolVersio\u006e"), which the text does not show
    // (protocol_version: params' or result's protocolVersion, else params._meta's)
    if top.params.version || top.result.version || top.params.meta {
        return None;
    }
    top.method
}

/// A checking visitor's answer to a number or a boolean: `$v` (serde_json has read and checked it already).
macro_rules! numbers_and_booleans {
    ($t:ty, $v:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<$t, E> {
            Ok($v)
        }
        fn visit_i64<E>(self, _: i64) -> Result<$t, E> {
            Ok($v)
        }
        fn visit_u64<E>(self, _: u64) -> Result<$t, E> {
            Ok($v)
        }
        fn visit_f64<E>(self, _: f64) -> Result<$t, E> {
            Ok($v)
        }
    };
}

/// Any JSON value, read and checked as serde_json reads one into a Value (numbers out of range, lone surrogates,
/// nesting past its limit: the same errors), without making it.
struct Checked;

impl<'de> de::Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    numbers_and_booleans!(Checked, Checked);
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Checked, A::Error> {
        while s.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Checked, A::Error> {
        while m.next_key::<Checked>()?.is_some() {
            m.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// A value checked as [`Checked`], and whether it is a string (`Text`, holding it when `keep`) or null.
enum Seen {
    Null,
    Text(Option<String>),
    Other,
}

struct SeenVisitor {
    keep: bool,
}

impl<'de> de::DeserializeSeed<'de> for SeenVisitor {
    type Value = Seen;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Seen, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SeenVisitor {
    type Value = Seen;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    numbers_and_booleans!(Seen, Seen::Other);
    fn visit_str<E>(self, v: &str) -> Result<Seen, E> {
        Ok(Seen::Text(self.keep.then(|| v.to_owned())))
    }
    fn visit_unit<E>(self) -> Result<Seen, E> {
        Ok(Seen::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Seen, A::Error> {
        CheckedVisitor.visit_seq(s).map(|_| Seen::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Seen, A::Error> {
        CheckedVisitor.visit_map(m).map(|_| Seen::Other)
    }
}

/// `params` or `result` as protocol_version looks into it: whether (the last) `protocolVersion` is a string, and
/// whether `_meta`'s (the last) META_VERSION is one; both false for a value that is no object.
#[derive(Default)]
struct Holder {
    version: bool,
    meta: bool,
}

impl<'de> de::Deserialize<'de> for Holder {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(HolderVisitor { meta_of: false })
    }
}

/// ``meta_of``: reading `_meta` (its META_VERSION is looked for), else `params`/`result`.
struct HolderVisitor {
    meta_of: bool,
}

impl<'de> de::DeserializeSeed<'de> for HolderVisitor {
    type Value = Holder;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Holder, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for HolderVisitor {
    type Value = Holder;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    numbers_and_booleans!(Holder, Holder::default());
    fn visit_str<E>(self, _: &str) -> Result<Holder, E> {
        Ok(Holder::default())
    }
    fn visit_unit<E>(self) -> Result<Holder, E> {
        Ok(Holder::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Holder, A::Error> {
        CheckedVisitor.visit_seq(s).map(|_| Holder::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Holder, A::Error> {
        let mut h = Holder::default();
        while let Some(key) = m.next_key::<Text<'de>>()? {
            match (self.meta_of, key.0.as_ref()) {
                (false, "protocolVersion") => h.version = matches!(m.next_value_seed(SeenVisitor { keep: false })?, Seen::Text(_)),
                (false, "_meta") => h.meta = m.next_value_seed(HolderVisitor { meta_of: true })?.version,
                (true, META_VERSION) => h.version = matches!(m.next_value_seed(SeenVisitor { keep: false })?, Seen::Text(_)),
                _ => {
                    m.next_value::<Checked>()?;
                }
            }
        }
        Ok(h)
    }
}

/// The top object of an event's data, as notification_method looks into it.
struct Top {
    id_null: bool, // no `id`, or (the last) null
    method: Option<String>,
    params: Holder,
    result: Holder,
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Top, A::Error> {
        let mut t = Top { id_null: true, method: None, params: Holder::default(), result: Holder::default() };
        while let Some(key) = m.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "id" => t.id_null = matches!(m.next_value_seed(SeenVisitor { keep: false })?, Seen::Null),
                "method" => {
                    t.method = match m.next_value_seed(SeenVisitor { keep: true })? {
                        Seen::Text(v) => v,
                        _ => None,
                    }
                }
                "params" => t.params = m.next_value()?,
                "result" => t.result = m.next_value()?,
                _ => {
                    m.next_value::<Checked>()?;
                }
            }
        }
        Ok(t)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// columns as Arrow holds them: a validity bitmap (bit i of byte i/8, least significant first), values, and for a
// string column i64 offsets into one byte buffer (LargeUtf8)

#[derive(Default)]
struct Strings {
    offsets: Vec<i64>,
    values: Vec<u8>,
    valid: Vec<u8>,
    nulls: usize,
}

impl Strings {
    fn new() -> Self {
        Strings { offsets: vec![0], ..Default::default() }
    }
    fn push(&mut self, v: Option<&str>) {
        let i = self.offsets.len() - 1;
        if i % 8 == 0 {
            self.valid.push(0);
        }
        match v {
            Some(s) => {
                self.values.extend_from_slice(s.as_bytes());
                self.valid[i / 8] |= 1 << (i % 8);
            }
            None => self.nulls += 1,
        }
        self.offsets.push(self.values.len() as i64);
    }
}

#[derive(Default)]
struct Ints {
    values: Vec<i64>,
    valid: Vec<u8>,
    nulls: usize,
}

impl Ints {
    fn push(&mut self, v: Option<i64>) {
        let i = self.values.len();
        if i % 8 == 0 {
            self.valid.push(0);
        }
        match v {
            Some(_) => self.valid[i / 8] |= 1 << (i % 8),
            None => self.nulls += 1,
        }
        self.values.push(v.unwrap_or(0));
    }
}

struct Batch {
    pos: Vec<u32>,
    conn: Strings,
    ts: Vec<i64>,
    id: Strings,
    event: Strings,
    data: Strings,
    retry: Ints,
    digest: Vec<u64>,
    method: Strings,
    maybe: Vec<u32>,
}

fn digest(id: Option<&str>, data: Option<&str>) -> u64 {
    let mut h = Sha256::new();
    h.update(id.unwrap_or("").as_bytes());
    h.update(b":");
    h.update(data.unwrap_or("").as_bytes());
    let out = h.finalize();
    u64::from_be_bytes(out[..8].try_into().unwrap())
}

fn opt<'s>(v: &'s Option<Option<Text<'_>>>) -> Option<&'s str> {
    v.as_ref().and_then(|t| t.as_ref()).map(|t| t.0.as_ref())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// One line: taken (its row pushed) or not.
fn take(b: &mut Batch, at: u32, line: &[u8]) -> bool {
    let Some(r) = record(line) else { return false };
    let (Some(kind), Some(conn), Some(Some(ts))) = (&r.kind, &r.conn, &r.ts) else { return false };
    if kind.0 != "sse" {
        return false;
    }
    // the per-line reader's other fates and anomalies: cut off, not dispatched, a NUL in an id
    if matches!(r.truncated, Some(Some(true))) || matches!(r.dispatched, Some(Some(false))) {
        return false;
    }
    let id = opt(&r.id);
    if id.is_some_and(|s| s.contains('\0')) {
        return false;
    }
    let Some(micros) = timestamp(&ts.0) else { return false };
    let data = opt(&r.data);
    b.pos.push(at);
    b.conn.push(Some(&conn.0));
    b.ts.push(micros);
    b.id.push(id);
    b.event.push(opt(&r.event));
    b.data.push(data);
    b.retry.push(r.retry.as_ref().and_then(|x| x.as_ref()).map(|x| x.0));
    b.digest.push(digest(id, data));
    b.method.push(data.and_then(notification_method).as_deref());
    true
}

// ---------------------------------------------------------------------------------------------------------------
// an exchange record (request, response, body, close) the per-line reader would read without an anomaly, in the
// single pass's compact reading (no header objects kept): the values its connection state machine reads
// (analyzer/ingest/jsonl.py `_Reader.compiled`).  As for `sse` lines, anything less than certain is an error here,
// and the line goes to the per-line reader, which decides.

/// Any JSON value, checked as [`Checked`]: a string kept, anything else dropped (a request's `url`, a close's `by`,
/// a close's `decoding`: the per-line reader keeps text and reads anything else as none).
struct AnyText<'a>(Option<Text<'a>>);

impl<'de> de::Deserialize<'de> for AnyText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            numbers_and_booleans!(AnyText<'de>, AnyText(None));
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(AnyText(Some(Text(Cow::Borrowed(v)))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(AnyText(Some(Text(Cow::Owned(v.to_owned())))))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(AnyText(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Self::Value, A::Error> {
                CheckedVisitor.visit_seq(s).map(|_| AnyText(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
                CheckedVisitor.visit_map(m).map(|_| AnyText(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A response's `status`: an integer 0..2^31-1 (no float, no bool).
struct Status(i64);

impl<'de> de::Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Status;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer 0..2^31-1")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                if (0..1 << 31).contains(&v) { Ok(Status(v)) } else { Err(E::custom("out of range")) }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                if v < 1 << 31 { Ok(Status(v as i64)) } else { Err(E::custom("out of range")) }
            }
        }
        d.deserialize_any(V)
    }
}

/// The header values the compact reading keeps (analyzer/tables.py `Builder.exchange`, `Builder.response`), by
/// their lower-case names; a `headers` object of string values whose names are ASCII (Python's `str.lower` and
/// this one agree) and where none of these names is there twice in any case (the per-line reader's `_headers`
/// would join or choose).  Null is no headers.
#[derive(Default)]
struct Headers<'a> {
    session: Option<Text<'a>>,
    last_event_id: Option<Text<'a>>,
    protocol: Option<Text<'a>>,
    user_agent: Option<Text<'a>>,
    content_type: Option<Text<'a>>,
    epoch: Option<Text<'a>>,
    encoding: Option<Text<'a>>,
}

impl<'de> de::Deserialize<'de> for Headers<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Headers<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of strings, or null")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Headers::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut h = Headers::default();
                while let Some(name) = m.next_key::<Text<'de>>()? {
                    let value: Text<'de> = m.next_value()?; // (a list of values, a number: the per-line reader's)
                    let name = name.0.as_ref();
                    if !name.is_ascii() {
                        return Err(de::Error::custom("a header name that is not ASCII"));
                    }
                    let slot = match name.len() {
                        10 if name.eq_ignore_ascii_case("user-agent") => &mut h.user_agent,
                        12 if name.eq_ignore_ascii_case("content-type") => &mut h.content_type,
                        13 if name.eq_ignore_ascii_case("last-event-id") => &mut h.last_event_id,
                        14 if name.eq_ignore_ascii_case("mcp-session-id") => &mut h.session,
                        16 if name.eq_ignore_ascii_case("content-encoding") => &mut h.encoding,
                        18 if name.eq_ignore_ascii_case("x-mcp-replay-epoch") => &mut h.epoch,
                        20 if name.eq_ignore_ascii_case("mcp-protocol-version") => &mut h.protocol,
                        _ => continue,
                    };
                    if slot.is_some() {
                        return Err(de::Error::custom("a header twice"));
                    }
                    *slot = Some(value);
                }
                Ok(h)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default)]
struct Exchange<'a> {
    kind: Option<Text<'a>>,
    conn: Option<Text<'a>>,
    ts: Option<Option<Text<'a>>>,
    method: Option<Text<'a>>,
    url: Option<AnyText<'a>>,
    headers: Option<Headers<'a>>,
    body: Option<Option<Text<'a>>>,
    status: Option<Status>,
    data: Option<Text<'a>>,
    base64: Option<Option<bool>>,
    reason: Option<Text<'a>>,
    by: Option<AnyText<'a>>,
    decoding: Option<AnyText<'a>>,
}

struct ExchangeVisitor;

impl<'de> Visitor<'de> for ExchangeVisitor {
    type Value = Exchange<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an exchange record")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut r = Exchange::default();
        while let Some(key) = m.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "kind" => once(&mut r.kind, &mut m)?,
                "conn" => once(&mut r.conn, &mut m)?,
                "ts" => once(&mut r.ts, &mut m)?,
                "method" => once(&mut r.method, &mut m)?,
                "url" => once(&mut r.url, &mut m)?,
                "headers" => once(&mut r.headers, &mut m)?,
                "body" => once(&mut r.body, &mut m)?,
                "status" => once(&mut r.status, &mut m)?,
                "data" => once(&mut r.data, &mut m)?,
                "base64" => once(&mut r.base64, &mut m)?,
                "reason" => once(&mut r.reason, &mut m)?,
                "by" => once(&mut r.by, &mut m)?,
                "decoding" => once(&mut r.decoding, &mut m)?,
                // a field the per-line reader does not read (the recorder's `client_addr`, a response's `decoded`
                // when no Content-Encoding makes it count): checked as JSON, dropped
                _ => {
                    m.next_value::<Checked>()?;
                }
            }
        }
        Ok(r)
    }
}

/// What the state machine reads of one exchange record (borrowed from the line where the text has no escape).
enum Taken<'a> {
    Request { conn: Text<'a>, ts: Option<Text<'a>>, method: Text<'a>, url: Option<Text<'a>>, body: Option<Text<'a>>, h: Headers<'a> },
    Response { conn: Text<'a>, status: i64, h: Headers<'a> },
    Body { conn: Text<'a>, data: Text<'a> },
    Close { conn: Text<'a>, ts: Option<Text<'a>>, reason: Text<'a>, by: Option<&'static str> },
}

/// A lone surrogate escape may be there (analyzer/ingest/jsonl.py `_SURROGATE_ESCAPE`: `\u` then d and 8-f, in
/// any case): the per-line reader replaces such a character with an anomaly, so the line is its.
fn surrogate_escape(line: &[u8]) -> bool {
    memchr::memmem::find_iter(line, b"\\u").any(|at| {
        matches!(line.get(at + 2), Some(b'd' | b'D')) && matches!(line.get(at + 3), Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F'))
    })
}

fn exchange(line: &[u8]) -> Option<Taken<'_>> {
    // not UTF-8 (a field serde_json skips is not checked), a byte order mark, a lone surrogate: the per-line reader's
    let text = std::str::from_utf8(line).ok()?;
    if surrogate_escape(line) {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let r = de.deserialize_map(ExchangeVisitor).ok()?;
    de.end().ok()?;
    let conn = r.conn?;
    let ts = match r.ts {
        Some(Some(t)) => {
            timestamp(&t.0)?; // a time in the range where the per-line reader's parse_ts reads it without a doubt
            Some(t)
        }
        _ => None,
    };
    match r.kind?.0.as_ref() {
        "request" => Some(Taken::Request {
            conn,
            ts,
            method: r.method?,
            url: r.url.and_then(|u| u.0),
            body: r.body.flatten(),
            h: r.headers.unwrap_or_default(),
        }),
        "response" => {
            let h = r.headers.unwrap_or_default();
            if h.encoding.as_ref().is_some_and(|e| !e.0.is_empty()) {
                return None; // a coded body: which records are noise is the per-line reader's to decide
            }
            Some(Taken::Response { conn, status: r.status?.0, h })
        }
        "body" => {
            if matches!(r.base64, Some(Some(true))) {
                return None; // a raw body, decoded by the per-line reader
            }
            Some(Taken::Body { conn, data: r.data? })
        }
        "close" => {
            let reason = r.reason?;
            if !matches!(reason.0.as_ref(), "eof" | "reset" | "error" | "capture_end") {
                return None;
            }
            let decoding = r.decoding.and_then(|d| d.0);
            if decoding.is_some_and(|d| matches!(d.0.as_ref(), "truncated" | "invalid" | "over_limit")) {
                return None; // the recorder's decoding ended badly: an anomaly with its detail
            }
            let by = match r.by.and_then(|b| b.0).as_ref().map(|b| b.0.as_ref()) {
                Some("client") => Some("client"),
                Some("server") => Some("server"),
                _ => None,
            };
            Some(Taken::Close { conn, ts, reason, by })
        }
        _ => None,
    }
}

/// One Python string per distinct short value of a batch (a conn, a time, a method, a URL, a header value, a reason:
/// a log repeats them on every exchange), so that the batch's tuples share them: rpc-post's 2M tiny records, every
/// batch's tuples held at once, peaked at 933 MiB against 1,232 when each tuple had its own (about 10 MiB less per
/// batch of 65,536 lines; the reader holds one batch's), in the same time.
struct Shared<'a, 'py> {
    py: Python<'py>,
    seen: std::collections::HashMap<&'a str, Bound<'py, PyString>>,
}

impl<'a, 'py> Shared<'a, 'py> {
    fn text(&mut self, v: &'a Text<'_>) -> Bound<'py, PyAny> {
        let py = self.py;
        self.seen.entry(v.0.as_ref()).or_insert_with(|| PyString::new(py, &v.0)).clone().into_any()
    }
    fn opt(&mut self, v: &'a Option<Text<'_>>) -> Bound<'py, PyAny> {
        match v {
            Some(t) => self.text(t),
            None => self.py.None().into_bound(self.py),
        }
    }
}

/// The tuple `_Reader.compiled` reads: (0, conn, ts, method, url, body, mcp-session-id, last-event-id,
/// mcp-protocol-version, user-agent, None) of a request (the last: the body as the table shows it, once
/// jsonl_native.exchange_records has redacted it; None until then); (1, conn, status, mcp-session-id, content-type,
/// x-mcp-replay-epoch) of a response; (2, conn, data) of a body; (3, conn, ts, reason, by) of a close.  ``ts`` is the
/// record's text (the per-line reader's parse_ts reads it), or None.
fn taken_tuple<'a, 'py>(s: &mut Shared<'a, 'py>, t: &'a Taken<'_>) -> PyResult<Bound<'py, PyTuple>> {
    let py = s.py;
    let code = |c: u8| c.into_pyobject(py).map(|v| v.into_any());
    let unique = |v: &Option<Text<'_>>| match v {
        Some(t) => PyString::new(py, &t.0).into_any(),
        None => py.None().into_bound(py),
    };
    match t {
        Taken::Request { conn, ts, method, url, body, h } => PyTuple::new(py, [
            code(0)?, s.text(conn), s.opt(ts), s.text(method), s.opt(url), unique(body), s.opt(&h.session),
            s.opt(&h.last_event_id), s.opt(&h.protocol), s.opt(&h.user_agent), py.None().into_bound(py),
        ]),
        Taken::Response { conn, status, h } => PyTuple::new(py, [
            code(1)?, s.text(conn), status.into_pyobject(py)?.into_any(), s.opt(&h.session), s.opt(&h.content_type),
            s.opt(&h.epoch),
        ]),
        Taken::Body { conn, data } => PyTuple::new(py, [code(2)?, s.text(conn), PyString::new(py, &data.0).into_any()]),
        Taken::Close { conn, ts, reason, by } => PyTuple::new(py, [
            code(3)?, s.text(conn), s.opt(ts), s.text(reason),
            match by { Some(b) => PyString::new(py, b).into_any(), None => py.None().into_bound(py) },
        ]),
    }
}

fn bytes<'py>(py: Python<'py>, v: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, v)
}

fn words<T: Copy>(v: &[T]) -> &[u8] {
    // (plain integers: their bytes as the machine holds them, which is what Arrow's buffers are)
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

fn strings<'py>(py: Python<'py>, s: &Strings) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, [bytes(py, words(&s.offsets)).into_any(), bytes(py, &s.values).into_any(),
                      bytes(py, &s.valid).into_any(), s.nulls.into_pyobject(py)?.into_any()])
}

/// The lines of a batch as (address, length) spans, readable without the GIL: ``lines`` a list of bytes (a line
/// without its newline; an int, a line too long to hold, is None here) or a block's `Lines` (analyzer/ingest/jsonl.py:
/// data, starts, lo, hi).  The bytes are immutable Python objects that ``lines`` holds while the caller runs.
fn line_spans(lines: &Bound<'_, PyAny>) -> PyResult<Vec<Option<(usize, usize)>>> {
    if let Ok(lines) = lines.downcast::<PyList>() {
        return Ok(lines.iter().map(|item| item.downcast::<PyBytes>().ok().map(|b| {
            let s = b.as_bytes();
            (s.as_ptr() as usize, s.len())
        })).collect());
    }
    let data = lines.getattr("data")?;
    let data = data.downcast::<PyBytes>()?.as_bytes();
    let starts = lines.getattr("starts")?;
    let starts = starts.downcast::<PyBytes>()?.as_bytes();
    let (lo, hi): (usize, usize) = (lines.getattr("lo")?.extract()?, lines.getattr("hi")?.extract()?);
    let at = |i: usize| u64::from_ne_bytes(starts[i * 8..i * 8 + 8].try_into().unwrap()) as usize;
    if hi < lo || (hi + 1) * 8 > starts.len() || at(hi) > data.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("lines out of their block"));
    }
    Ok((lo..hi).map(|i| {
        let (a, b) = (at(i), at(i + 1));
        Some((data.as_ptr() as usize + a, b - a - 1))
    }).collect())
}

/// `sse_lines(lines)`: ``lines`` a list of bytes (a line without its newline) or int (a line too long to hold).
/// Returns (n, pos, conn, ts, id, event, data, retry, digest, method, maybe): n rows; pos (u32), ts (i64, µs UTC),
/// digest (u64) as bytes; conn, id, event, data, method as (offsets i64, values, validity, null count); retry as
/// (values i64, validity, null count); maybe: the positions of the lines not taken that hold `"sse"` (the Python
/// paths read them; every other line not taken is no sse record of any shape).
#[pyfunction]
fn sse_lines<'py>(py: Python<'py>, lines: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let spans = line_spans(lines)?;
    let b = py.allow_threads(|| {
        let n = spans.len();
        let mut b = Batch {
            pos: Vec::with_capacity(n),
            conn: Strings::new(),
            ts: Vec::with_capacity(n),
            id: Strings::new(),
            event: Strings::new(),
            data: Strings::new(),
            retry: Ints::default(),
            digest: Vec::with_capacity(n),
            method: Strings::new(),
            maybe: Vec::new(),
        };
        for (i, span) in spans.iter().enumerate() {
            let Some((ptr, len)) = *span else { continue };
            let line = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            if !take(&mut b, i as u32, line) && contains(line, b"\"sse\"") {
                b.maybe.push(i as u32);
            }
        }
        b
    });
    let retry = PyTuple::new(py, [bytes(py, words(&b.retry.values)).into_any(), bytes(py, &b.retry.valid).into_any(),
                                  b.retry.nulls.into_pyobject(py)?.into_any()])?;
    let maybe: Vec<u32> = b.maybe;
    PyTuple::new(py, [
        b.pos.len().into_pyobject(py)?.into_any(),
        bytes(py, words(&b.pos)).into_any(),
        strings(py, &b.conn)?.into_any(),
        bytes(py, words(&b.ts)).into_any(),
        strings(py, &b.id)?.into_any(),
        strings(py, &b.event)?.into_any(),
        strings(py, &b.data)?.into_any(),
        retry.into_any(),
        bytes(py, words(&b.digest)).into_any(),
        strings(py, &b.method)?.into_any(),
        maybe.into_pyobject(py)?.into_any(),
    ])
}

/// `exchange_lines(lines, positions)`: of the lines at ``positions`` (a batch's lines the sse pass did not take,
/// in order), the exchange records the per-line reader would read without an anomaly in the compact reading, as a
/// dict of position to the tuple `taken_tuple` makes.  A line holding `"sse"` is not looked at (msgspec reads it).
/// The JSONL reader's main thread calls it for each batch before its state machine reads the batch: the parse runs
/// there without the GIL, while the decoder's thread has the next batch's sse lines to read.
#[pyfunction]
fn exchange_lines<'py>(py: Python<'py>, lines: &Bound<'py, PyAny>, positions: Vec<u32>) -> PyResult<Bound<'py, PyDict>> {
    let spans = line_spans(lines)?;
    if positions.iter().any(|&i| i as usize >= spans.len()) {
        return Err(pyo3::exceptions::PyValueError::new_err("a position past the batch"));
    }
    let taken: Vec<(u32, Taken<'static>)> = py.allow_threads(|| {
        positions.iter().filter_map(|&i| {
            let (ptr, len) = spans[i as usize]?;
            // (the bytes of a Python object that ``lines`` holds for the whole call: 'static means "as long as the
            // call" here; nothing read from them outlives it, the tuples are made before it returns)
            let line: &'static [u8] = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            if contains(line, b"\"sse\"") {
                return None;
            }
            exchange(line).map(|t| (i, t))
        }).collect()
    });
    let out = PyDict::new(py);
    let mut shared = Shared { py, seen: std::collections::HashMap::new() };
    for (i, t) in &taken {
        out.set_item(i, taken_tuple(&mut shared, t)?)?;
    }
    Ok(out)
}

/// The columns `exchange_columns` gives: one row per exchange record it vets, every column of every kind (null where the
/// kind has none).
#[derive(Default)]
struct ExchangeColumns {
    pos: Vec<u32>,
    kind: Vec<u8>,
    conn: Strings,
    ts: Ints,
    method: Strings,
    url: Strings,
    body: Strings,
    session: Strings,
    last_event_id: Strings,
    protocol: Strings,
    user_agent: Strings,
    status: Ints,
    content_type: Strings,
    epoch: Strings,
    data: Strings,
    reason: Strings,
    by: Strings,
}

fn text_of<'s>(v: &'s Option<Text<'_>>) -> Option<&'s str> {
    v.as_ref().map(|t| t.0.as_ref())
}

impl ExchangeColumns {
    fn new() -> Self {
        let s = Strings::new;
        ExchangeColumns {
            conn: s(), method: s(), url: s(), body: s(), session: s(), last_event_id: s(), protocol: s(), user_agent: s(),
            content_type: s(), epoch: s(), data: s(), reason: s(), by: s(), ..Default::default()
        }
    }
    fn push(&mut self, at: u32, t: &Taken<'_>) {
        self.pos.push(at);
        let none = Default::default();
        let (kind, conn, ts, h): (u8, &Text<'_>, Option<i64>, &Headers<'_>) = match t {
            Taken::Request { conn, ts, h, .. } => (0, conn, ts.as_ref().and_then(|t| timestamp(&t.0)), h),
            Taken::Response { conn, h, .. } => (1, conn, None, h),
            Taken::Body { conn, .. } => (2, conn, None, &none),
            Taken::Close { conn, ts, .. } => (3, conn, ts.as_ref().and_then(|t| timestamp(&t.0)), &none),
        };
        self.kind.push(kind);
        self.conn.push(Some(conn.0.as_ref()));
        self.ts.push(ts);
        let request = matches!(t, Taken::Request { .. });
        self.session.push(text_of(&h.session));
        self.last_event_id.push(if request { text_of(&h.last_event_id) } else { None });
        self.protocol.push(if request { text_of(&h.protocol) } else { None });
        self.user_agent.push(if request { text_of(&h.user_agent) } else { None });
        self.content_type.push(if request { None } else { text_of(&h.content_type) });
        self.epoch.push(if request { None } else { text_of(&h.epoch) });
        match t {
            Taken::Request { method, url, body, .. } => {
                self.method.push(Some(method.0.as_ref()));
                self.url.push(text_of(url));
                self.body.push(text_of(body));
            }
            _ => {
                self.method.push(None);
                self.url.push(None);
                self.body.push(None);
            }
        }
        self.status.push(match t { Taken::Response { status, .. } => Some(*status), _ => None });
        self.data.push(match t { Taken::Body { data, .. } => Some(data.0.as_ref()), _ => None });
        let (reason, by) = match t { Taken::Close { reason, by, .. } => (Some(reason.0.as_ref()), *by), _ => (None, None) };
        self.reason.push(reason);
        self.by.push(by);
    }
}

fn ints<'py>(py: Python<'py>, v: &Ints) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, [bytes(py, words(&v.values)).into_any(), bytes(py, &v.valid).into_any(), v.nulls.into_pyobject(py)?.into_any()])
}

/// `exchange_columns(lines, positions)`: the records `exchange_lines` takes, as columns (Arrow buffers) instead of a
/// tuple of Python objects each: (n, pos u32, kind u8 (0 request, 1 response, 2 body, 3 close), conn, ts (µs UTC, as
/// the per-line reader's parse_ts reads the record's text), method, url, body, mcp-session-id (a request's or a
/// response's), last-event-id, mcp-protocol-version, user-agent, status, content-type, x-mcp-replay-epoch, data (a
/// body's), reason, by (a close's)); strings as (offsets i64, values, validity, null count), ts and status as (values
/// i64, validity, null count).  The single pass's connection state machine reads a batch of them at once
/// (analyzer/ingest/jsonl_machine.py `run`): no Python object per value, and the sealed exchanges become Arrow by gathers.
#[pyfunction]
fn exchange_columns<'py>(py: Python<'py>, lines: &Bound<'py, PyAny>, positions: Vec<u32>) -> PyResult<Bound<'py, PyTuple>> {
    let spans = line_spans(lines)?;
    if positions.iter().any(|&i| i as usize >= spans.len()) {
        return Err(pyo3::exceptions::PyValueError::new_err("a position past the batch"));
    }
    let c = py.allow_threads(|| {
        let mut c = ExchangeColumns::new();
        for &i in &positions {
            let Some((ptr, len)) = spans[i as usize] else { continue };
            // (bytes ``lines`` holds for the whole call; nothing read from them outlives it)
            let line: &[u8] = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            if contains(line, b"\"sse\"") {
                continue;
            }
            if let Some(t) = exchange(line) {
                c.push(i, &t);
            }
        }
        c
    });
    PyTuple::new(py, [
        c.pos.len().into_pyobject(py)?.into_any(),
        bytes(py, words(&c.pos)).into_any(),
        bytes(py, &c.kind).into_any(),
        strings(py, &c.conn)?.into_any(),
        ints(py, &c.ts)?.into_any(),
        strings(py, &c.method)?.into_any(),
        strings(py, &c.url)?.into_any(),
        strings(py, &c.body)?.into_any(),
        strings(py, &c.session)?.into_any(),
        strings(py, &c.last_event_id)?.into_any(),
        strings(py, &c.protocol)?.into_any(),
        strings(py, &c.user_agent)?.into_any(),
        ints(py, &c.status)?.into_any(),
        strings(py, &c.content_type)?.into_any(),
        strings(py, &c.epoch)?.into_any(),
        strings(py, &c.data)?.into_any(),
        strings(py, &c.reason)?.into_any(),
        strings(py, &c.by)?.into_any(),
    ])
}

/// `line_starts(data)`: where each line of ``data`` (bytes that end with a newline) starts, and one past the last
/// newline, as u64 bytes (``n + 1`` values for ``n`` lines); and the longest line's length, its newline not counted.
/// The JSONL reader's blocks are split here (memchr, without the GIL), not into one bytes object per line.
#[pyfunction]
fn line_starts<'py>(py: Python<'py>, data: &Bound<'py, PyBytes>) -> (Bound<'py, PyBytes>, usize) {
    let s = data.as_bytes();
    let (starts, longest) = py.allow_threads(|| {
        let mut starts: Vec<u64> = Vec::with_capacity(s.len() / 128 + 2);
        starts.push(0);
        let (mut longest, mut prev) = (0usize, 0usize);
        for p in memchr::memchr_iter(b'\n', s) {
            longest = longest.max(p - prev);
            prev = p + 1;
            starts.push(prev as u64);
        }
        (starts, longest)
    });
    (bytes(py, words(&starts)), longest)
}

fn readable<'a>(buf: &'a PyBuffer<u8>) -> PyResult<&'a [u8]> {
    if !buf.is_c_contiguous() {
        return Err(pyo3::exceptions::PyValueError::new_err("a buffer that is not contiguous"));
    }
    // (a read-only view of memory the caller's Arrow array holds while this call runs)
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) })
}

/// The ``n`` texts of a LargeUtf8 Arrow array given as buffers (its ``offset``, its validity bitmap or None, its i64
/// offsets and its bytes), readable without the GIL while the caller's buffers are held (addresses, not borrows).
#[derive(Clone, Copy)]
struct TextArray {
    n: usize,
    offset: usize,
    offsets: usize,
    values: (usize, usize),
    validity: Option<(usize, usize)>,
}

impl TextArray {
    fn new(n: usize, offset: usize, validity: &Option<PyBuffer<u8>>, offsets: &PyBuffer<u8>, values: &PyBuffer<u8>) -> PyResult<Self> {
        let valid = validity.as_ref().map(readable).transpose()?;
        let (offs, vals) = (readable(offsets)?, readable(values)?);
        if offs.len() < (offset + n + 1) * 8 {
            return Err(pyo3::exceptions::PyValueError::new_err("offsets shorter than the array"));
        }
        Ok(TextArray { n, offset, offsets: offs.as_ptr() as usize, values: (vals.as_ptr() as usize, vals.len()),
                       validity: valid.map(|v| (v.as_ptr() as usize, v.len())) })
    }

    /// Text ``i``: None where it is null, Some(None) where it is not UTF-8 or out of the bytes.
    fn get(&self, i: usize) -> Option<Option<&str>> {
        let j = self.offset + i;
        let offs = unsafe { std::slice::from_raw_parts(self.offsets as *const u8, (self.offset + self.n + 1) * 8) };
        let vals = unsafe { std::slice::from_raw_parts(self.values.0 as *const u8, self.values.1) };
        if let Some((p, l)) = self.validity {
            let bits = unsafe { std::slice::from_raw_parts(p as *const u8, l) };
            if !bits.get(j / 8).is_some_and(|byte| byte >> (j % 8) & 1 == 1) {
                return None;
            }
        }
        let at = |k: usize| i64::from_le_bytes(offs[k * 8..k * 8 + 8].try_into().unwrap()) as usize;
        let (start, end) = (at(j), at(j + 1));
        Some(if start <= end && end <= vals.len() { std::str::from_utf8(&vals[start..end]).ok() } else { None })
    }
}

/// `notification_methods(n, offset, validity, offsets, values)`: of ``n`` texts of a LargeUtf8 Arrow array (its
/// ``offset``, its validity bitmap or None, its i64 offsets and its bytes, as buffers), the method of each one that
/// is a JSON-RPC notification as `sse_lines` reads it, else null: (offsets i64, values, validity, null count).
#[pyfunction]
#[pyo3(signature = (n, offset, validity, offsets, values))]
fn notification_methods<'py>(py: Python<'py>, n: usize, offset: usize, validity: Option<PyBuffer<u8>>, offsets: PyBuffer<u8>,
                             values: PyBuffer<u8>) -> PyResult<Bound<'py, PyTuple>> {
    let texts = TextArray::new(n, offset, &validity, &offsets, &values)?;
    let out = py.allow_threads(move || {
        let mut out = Strings::new();
        for i in 0..n {
            out.push(texts.get(i).flatten().and_then(notification_method).as_deref());
        }
        out
    });
    strings(py, &out)
}

// ---------------------------------------------------------------------------------------------------------------
// one JSON-RPC text (a request's body, a response body), as analyzer/decode/jsonrpc.py `extract` reads it

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// A number Python's `json.loads` would read as another value than serde_json gives, or re-write otherwise: a float
/// (Python's repr of it is not serde_json's), an integer past 64 bits (serde_json reads it as a float).
fn any_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(a) => a.iter().any(any_float),
        Value::Object(o) => o.values().any(any_float),
        _ => false,
    }
}

/// `jsonrpc.id_text` of an id that is there: None where it is one Python writes otherwise (a float, an array, an
/// object: `json.dumps` keeps their key order, serde_json's map sorts).
fn id_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))),
        Value::Bool(b) => Some(if *b { "true".into() } else { "false".into() }),
        Value::Number(n) if !n.is_f64() => Some(n.to_string()),
        _ => None,
    }
}

/// The protocol version `_one` reads: `result`'s over `params`', then `params._meta`'s.
fn protocol_version(obj: &serde_json::Map<String, Value>) -> Option<String> {
    let mut version = None;
    for holder in ["params", "result"] {
        if let Some(Value::String(v)) = obj.get(holder).and_then(|p| p.as_object()).and_then(|p| p.get("protocolVersion")) {
            version = Some(v.clone());
        }
    }
    if version.is_none() {
        if let Some(Value::String(v)) = obj.get("params").and_then(|p| p.as_object()).and_then(|p| p.get("_meta"))
            .and_then(|m| m.as_object()).and_then(|m| m.get(META_VERSION)) {
            version = Some(v.clone());
        }
    }
    version
}

type Message = (&'static str, Option<String>, Option<String>, Option<i64>, Option<String>, Option<String>, Option<String>);

/// One text's messages, or None where `extract` is to decide (the Python path): text that is not one JSON object
/// serde_json reads (a batch, broken JSON, a lone surrogate escape, NaN, nesting past serde_json's limit), an
/// object that is no JSON-RPC message (`extract` raises with its reason), and every value Python would write or
/// read otherwise (`any_float`, an id that is an array or an object).  Blank text (JSON white space alone) has
/// no message.
fn rpc_message(text: &str) -> Option<Vec<Message>> {
    if text.bytes().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        return Some(Vec::new());
    }
    let value: Value = serde_json::from_str(text).ok()?;
    let obj = value.as_object()?;
    let id = match obj.get("id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(id_text(v)?),
    };
    let version = protocol_version(obj);
    match obj.get("method") {
        Some(Value::String(method)) => {
            let mut digest = None;
            if let (Some(params), Some(_)) = (obj.get("params").filter(|p| !p.is_null()), &id) {
                if any_float(params) {
                    return None;
                }
                // params without the SDK's _meta, in canonical JSON (keys sorted: serde_json's map is ordered, as
                // Python's sort_keys; the same escapes as Python's json with ensure_ascii=False)
                let canon = match params {
                    Value::Object(o) if o.contains_key("_meta") => {
                        let mut o = o.clone();
                        o.remove("_meta");
                        serde_json::to_string(&o).ok()?
                    }
                    _ => serde_json::to_string(params).ok()?,
                };
                let out = Sha256::digest(canon.as_bytes());
                digest = Some(out.iter().map(|b| format!("{b:02x}")).collect::<String>());
            }
            let kind = if id.is_some() { "request" } else { "notification" };
            Some(vec![(kind, id, Some(method.clone()), None, None, version, digest)])
        }
        None | Some(Value::Null) => {
            if let Some(err) = obj.get("error") {
                let code = match err.get("code") {
                    Some(Value::Number(n)) if n.is_f64() || n.as_u64().is_some_and(|u| u > i64::MAX as u64) => return None,
                    Some(Value::Number(n)) => n.as_i64(),
                    _ => None,
                };
                let message = err.get("message").and_then(|m| m.as_str()).map(String::from);
                Some(vec![("error", id, None, code, message, None, None)])
            } else if obj.contains_key("result") {
                Some(vec![("response", id, None, None, None, version, None)])
            } else {
                None
            }
        }
        Some(_) => None, // a method that is no string: extract raises
    }
}

/// `rpc_messages(text)`: the messages of one JSON-RPC text as `jsonrpc.extract` gives them, each a tuple (kind,
/// rpc_id, method, error_code, error_message, protocol_version, params_digest); or None where the Python path is to
/// read it (see `rpc_message`; also a str that is not UTF-8, holding a lone surrogate).
#[pyfunction]
fn rpc_messages<'py>(text: &Bound<'py, pyo3::types::PyString>) -> Option<Vec<Message>> {
    rpc_message(text.to_str().ok()?)
}

/// `rpc_message_columns(n, offset, validity, offsets, values)`: `rpc_message` of each of ``n`` texts of a LargeUtf8
/// Arrow array (as `notification_methods` takes it), as columns: (text u32 (the text's index, a row per message, in
/// order), kind, rpc_id, method, error_code (values i64, validity, null count), error_message, protocol_version,
/// params_digest, declined: the indexes of the texts it leaves to the Python path (a null text has no message)).
/// The single pass's state machine reads a batch's bodies so (analyzer/ingest/jsonl_machine.py `run`): no tuple and
/// twelve list appends per message.
#[pyfunction]
#[pyo3(signature = (n, offset, validity, offsets, values))]
fn rpc_message_columns<'py>(py: Python<'py>, n: usize, offset: usize, validity: Option<PyBuffer<u8>>, offsets: PyBuffer<u8>,
                            values: PyBuffer<u8>) -> PyResult<Bound<'py, PyTuple>> {
    let texts = TextArray::new(n, offset, &validity, &offsets, &values)?;
    let (text, kind, rpc_id, method, code, message, version, digest, declined) = py.allow_threads(move || {
        let (mut text, mut declined) = (Vec::<u32>::new(), Vec::<u32>::new());
        let (mut kind, mut rpc_id, mut method) = (Strings::new(), Strings::new(), Strings::new());
        let (mut code, mut message, mut version, mut digest) = (Ints::default(), Strings::new(), Strings::new(), Strings::new());
        for i in 0..n {
            let Some(one) = texts.get(i) else { continue }; // (a null text: no message)
            let Some(found) = one.and_then(rpc_message) else {
                declined.push(i as u32);
                continue;
            };
            for (k, id, m, c, msg, v, d) in &found {
                text.push(i as u32);
                kind.push(Some(k));
                rpc_id.push(id.as_deref());
                method.push(m.as_deref());
                code.push(*c);
                message.push(msg.as_deref());
                version.push(v.as_deref());
                digest.push(d.as_deref());
            }
        }
        (text, kind, rpc_id, method, code, message, version, digest, declined)
    });
    PyTuple::new(py, [
        text.len().into_pyobject(py)?.into_any(),
        bytes(py, words(&text)).into_any(),
        strings(py, &kind)?.into_any(),
        strings(py, &rpc_id)?.into_any(),
        strings(py, &method)?.into_any(),
        ints(py, &code)?.into_any(),
        strings(py, &message)?.into_any(),
        strings(py, &version)?.into_any(),
        strings(py, &digest)?.into_any(),
        declined.into_pyobject(py)?.into_any(),
    ])
}

// ---------------------------------------------------------------------------------------------------------------
// the names of sessions and reconnects (analyzer/document/names.py): a sha256 as lower-case base32

const B32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// The first ``chars`` base32 characters (RFC 4648, lower case, no padding) of the sha256 of ``text``: 52 are
/// `names.digest`, 12 `names.head`.
fn name_digest(text: &[u8], chars: usize) -> String {
    let sum = Sha256::digest(text);
    let mut out = String::with_capacity(chars);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &byte in sum.iter() {
        acc = (acc << 8) | byte as u32;
        bits += 8;
        while bits >= 5 && out.len() < chars {
            bits -= 5;
            out.push(B32[((acc >> bits) & 31) as usize] as char);
        }
        acc &= (1 << bits) - 1;
    }
    if out.len() < chars && bits > 0 {
        out.push(B32[((acc << (5 - bits)) & 31) as usize] as char); // (the last 1 bit and 4 zero bits)
    }
    out
}

/// `name_digests(texts, chars)`: `name_digest` of each text (bytes: the caller's UTF-8, lone surrogates passed).
#[pyfunction]
fn name_digests(texts: Vec<Bound<'_, PyBytes>>, chars: usize) -> PyResult<Vec<String>> {
    if chars > 52 {
        return Err(pyo3::exceptions::PyValueError::new_err("a sha256 has 52 base32 characters"));
    }
    Ok(texts.iter().map(|t| name_digest(t.as_bytes(), chars)).collect())
}

/// What the Python side expects of this build (analyzer/compiled.py ABI): raised whenever a function is added or
/// changes what it takes or gives, so that a build older than the code is set aside, not called.
const ABI: u32 = 9;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ABI", ABI)?;
    m.add_function(wrap_pyfunction!(sse_lines, m)?)?;
    m.add_function(wrap_pyfunction!(notification_methods, m)?)?;
    m.add_function(wrap_pyfunction!(rpc_messages, m)?)?;
    m.add_function(wrap_pyfunction!(line_starts, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_lines, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_columns, m)?)?;
    m.add_function(wrap_pyfunction!(rpc_message_columns, m)?)?;
    m.add_function(wrap_pyfunction!(name_digests, m)?)?;
    Ok(())
}
