//! The JSON header (serialize type 0): RocketMQ's fastjson text of a command, the form every
//! 4.x client sends by default.
//!
//! Decoding is lenient, because the clients are: ali-ons puts native JSON numbers and
//! booleans in `extFields` and leaves out `serializeTypeCurrentRPC`, the C++ client mixes
//! numbers and strings, Go sends `remark: ""`. A number becomes its decimal text (no `.0`), a
//! boolean `true`/`false`, a `null` value an absent key; unknown keys are ignored, a missing
//! number is 0 and a missing language `JAVA`, as fastjson leaves Java's defaults.
//!
//! Encoding is what a Java broker writes, byte for byte: compact, keys in fastjson's
//! alphabetical order, every `extFields` value a JSON string (Go decodes them into
//! `map[string]string` and fails on a number), no `remark` when there is none.
//!
//! One deliberate difference: `extFields` is always written, `{}` when empty. A Java broker
//! leaves it out of replies that have no header class, and writes `{}` for those that do;
//! Java clients read some replies' fields without a null check, so `{}` is the safe form, and
//! every client reads it.

use bytes::{BufMut, BytesMut};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::command::RemotingCommand;
use crate::ext::ExtFields;
use crate::language::LanguageCode;

/// What `serializeTypeCurrentRPC` says in every header this module writes.
const SERIALIZE_TYPE_NAME: &str = "JSON";

/// The command a JSON header describes, with no body; the serialize type is left for the
/// frame to set.
pub(crate) fn decode(header: &[u8]) -> Result<RemotingCommand, serde_json::Error> {
    let incoming: Incoming = serde_json::from_slice(header)?;
    Ok(RemotingCommand {
        code: incoming.code.unwrap_or(0),
        language: incoming
            .language
            .map(|language| language.0)
            .unwrap_or_default(),
        version: incoming.version.unwrap_or(0),
        opaque: incoming.opaque.unwrap_or(0),
        flag: incoming.flag.unwrap_or(0),
        remark: incoming.remark,
        ext_fields: incoming
            .ext_fields
            .map(|fields| fields.0)
            .unwrap_or_default(),
        ..RemotingCommand::default()
    })
}

/// Appends `command`'s JSON header (not its body) to `out`.
pub(crate) fn encode(
    command: &RemotingCommand,
    out: &mut BytesMut,
) -> Result<(), serde_json::Error> {
    let outgoing = Outgoing {
        code: command.code,
        ext_fields: &command.ext_fields,
        flag: command.flag,
        language: command.language.name(),
        opaque: command.opaque,
        remark: command.remark.as_deref(),
        serialize_type: SERIALIZE_TYPE_NAME,
        version: command.version,
    };
    serde_json::to_writer(out.writer(), &outgoing)
}

/// A header as clients send it. Every field may be missing or `null`.
#[derive(Deserialize)]
struct Incoming {
    code: Option<i32>,
    language: Option<Language>,
    version: Option<i32>,
    opaque: Option<i32>,
    flag: Option<i32>,
    remark: Option<String>,
    #[serde(rename = "extFields")]
    ext_fields: Option<LenientFields>,
}

/// A header as a Java broker writes it: fields in alphabetical order, as fastjson sorts them.
#[derive(Serialize)]
struct Outgoing<'a> {
    code: i32,
    #[serde(rename = "extFields", serialize_with = "fields_as_strings")]
    ext_fields: &'a ExtFields,
    flag: i32,
    language: &'a str,
    opaque: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    remark: Option<&'a str>,
    #[serde(rename = "serializeTypeCurrentRPC")]
    serialize_type: &'static str,
    version: i32,
}

fn fields_as_strings<S: Serializer>(fields: &&ExtFields, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(fields.iter())
}

/// `language`: a name (`"JAVA"`, `"GO"`, anything) or a `LanguageCode` number.
struct Language(LanguageCode);

impl<'de> Deserialize<'de> for Language {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Language, D::Error> {
        deserializer.deserialize_any(LanguageVisitor)
    }
}

struct LanguageVisitor;

impl Visitor<'_> for LanguageVisitor {
    type Value = Language;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a language name or number")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Language, E> {
        Ok(Language(LanguageCode::from_name(name)))
    }

    fn visit_u64<E: de::Error>(self, code: u64) -> Result<Language, E> {
        Ok(Language(match u8::try_from(code) {
            Ok(code) => LanguageCode::from_code(code),
            Err(_) => LanguageCode::Unrecognised(code.to_string()),
        }))
    }

    fn visit_i64<E: de::Error>(self, code: i64) -> Result<Language, E> {
        match u64::try_from(code) {
            Ok(code) => self.visit_u64(code),
            Err(_) => Ok(Language(LanguageCode::Unrecognised(code.to_string()))),
        }
    }
}

/// `extFields`: an object whose values may be strings, numbers, booleans or `null`. A later
/// duplicate key wins, as in Java's `HashMap`.
struct LenientFields(ExtFields);

impl<'de> Deserialize<'de> for LenientFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LenientFields, D::Error> {
        deserializer.deserialize_map(FieldsVisitor)
    }
}

struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = LenientFields;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("an object of strings, numbers and booleans")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LenientFields, A::Error> {
        let mut fields = ExtFields::new();
        while let Some((key, value)) = map.next_entry::<String, LenientValue>()? {
            match value.0 {
                Some(text) => fields.insert(key, text),
                None => fields.remove(&key),
            }
        }
        Ok(LenientFields(fields))
    }
}

/// One `extFields` value as text; `None` for `null`.
struct LenientValue(Option<String>);

impl<'de> Deserialize<'de> for LenientValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LenientValue, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl Visitor<'_> for ValueVisitor {
    type Value = LenientValue;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a string, number, boolean or null")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<LenientValue, E> {
        Ok(LenientValue(Some(text.to_owned())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<LenientValue, E> {
        Ok(LenientValue(Some(text)))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<LenientValue, E> {
        Ok(LenientValue(Some(value.to_string())))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<LenientValue, E> {
        Ok(LenientValue(Some(value.to_string())))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<LenientValue, E> {
        Ok(LenientValue(Some(value.to_string())))
    }

    /// A number with a fraction or exponent. Rust writes an integral float without `.0`
    /// (`2.0` is `2`, `1e3` is `1000`), so an integer a JavaScript client wrote as a float
    /// still parses as a Java `Long`.
    fn visit_f64<E: de::Error>(self, value: f64) -> Result<LenientValue, E> {
        Ok(LenientValue(Some(value.to_string())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<LenientValue, E> {
        Ok(LenientValue(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<LenientValue, E> {
        Ok(LenientValue(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::request;

    fn decoded(json: &str) -> RemotingCommand {
        decode(json.as_bytes()).expect("a header clients send")
    }

    fn encoded(command: &RemotingCommand) -> String {
        let mut out = BytesMut::new();
        encode(command, &mut out).expect("a command encodes");
        String::from_utf8(out.to_vec()).expect("JSON is UTF-8")
    }

    #[test]
    fn a_java_header_decodes_and_encodes_back_to_the_same_text() {
        let java = r#"{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}"#;
        let command = decoded(java);
        assert_eq!(command.code, request::GET_ROUTEINFO_BY_TOPIC);
        assert_eq!(command.ext_fields.get("topic"), Some("T"));
        assert_eq!(command.language, LanguageCode::Java);
        assert_eq!((command.opaque, command.flag, command.version), (1, 0, 409));
        assert_eq!(command.remark, None);
        assert_eq!(encoded(&command), java);
    }

    #[test]
    fn ali_ons_native_numbers_and_booleans_become_text() {
        let ali_ons = r#"{"code":310,"language":"JAVA","opaque":7,"flag":0,"version":121,
            "extFields":{"a":"GID_test","b":"T","c":"TBW102","d":4,"e":0,"f":0,
            "g":1700000000000,"h":0,"i":"UNIQ_KEY\u0001AB\u0002WAIT\u0001true","j":0,
            "k":false,"l":16,"m":true,"neg":-3,"float":2.0,"half":1.5,"exp":1e3,"gone":null}}"#;
        let command = decoded(ali_ons);
        let fields = &command.ext_fields;
        assert_eq!(command.code, request::SEND_MESSAGE_V2);
        assert_eq!(command.version, 121);
        assert_eq!(fields.get("d"), Some("4"));
        assert_eq!(fields.get("g"), Some("1700000000000"));
        assert_eq!(fields.get("i"), Some("UNIQ_KEY\u{1}AB\u{2}WAIT\u{1}true"));
        assert_eq!(fields.get("k"), Some("false"));
        assert_eq!(fields.get("m"), Some("true"));
        assert_eq!(fields.get("neg"), Some("-3"));
        assert_eq!(fields.get("float"), Some("2"));
        assert_eq!(fields.get("half"), Some("1.5"));
        assert_eq!(fields.get("exp"), Some("1000"));
        assert_eq!(fields.get("gone"), None);
        assert_eq!(fields.required_i64("g"), Ok(1_700_000_000_000));
        assert_eq!(fields.optional_bool("m"), Ok(Some(true)));
    }

    #[test]
    fn cpp_empty_access_fields_are_kept_and_mixed_types_read() {
        let cpp = r#"{"code":10,"language":"CPP","version":333,"opaque":3,"flag":0,"remark":"",
            "extFields":{"AccessKey":"","Signature":"","OnsChannel":"","producerGroup":"G",
            "topic":"T","defaultTopic":"TBW102","defaultTopicQueueNums":4,"queueId":1,
            "sysFlag":0,"bornTimestamp":"1700000000000","flag":0,"batch":"false"}}"#;
        let command = decoded(cpp);
        let fields = &command.ext_fields;
        assert_eq!(command.language, LanguageCode::Cpp);
        assert_eq!(command.remark.as_deref(), Some(""));
        assert_eq!(fields.get("AccessKey"), Some(""));
        assert_eq!(fields.get("Signature"), Some(""));
        assert_eq!(fields.get("OnsChannel"), Some(""));
        assert_eq!(fields.required_i32("queueId"), Ok(1));
        assert_eq!(fields.required_i64("bornTimestamp"), Ok(1_700_000_000_000));
        assert_eq!(fields.optional_bool("batch"), Ok(Some(false)));
    }

    #[test]
    fn go_all_string_header_with_empty_remark() {
        let go = r#"{"code":105,"language":"GO","version":317,"opaque":9,"flag":0,"remark":"","extFields":{"topic":"T"}}"#;
        let command = decoded(go);
        assert_eq!(command.language, LanguageCode::Go);
        assert_eq!(command.version, 317);
        assert_eq!(command.remark.as_deref(), Some(""));
        assert_eq!(command.ext_fields.required_str("topic"), Ok("T"));
    }

    #[test]
    fn missing_and_null_fields_take_javas_defaults() {
        let command = decoded(r#"{"code":34,"remark":null,"language":null,"extFields":null}"#);
        assert_eq!(command.code, request::HEART_BEAT);
        assert_eq!(command.language, LanguageCode::Java);
        assert_eq!((command.opaque, command.flag, command.version), (0, 0, 0));
        assert_eq!(command.remark, None);
        assert_eq!(command.ext_fields, ExtFields::new());

        let command = decoded(r#"{"code":34,"language":"NODE_JS","unknown":[1,{"x":2}]}"#);
        assert_eq!(
            command.language,
            LanguageCode::Unrecognised("NODE_JS".into())
        );
        assert_eq!(decoded(r#"{"language":9}"#).language, LanguageCode::Go);
        assert_eq!(
            decoded(r#"{"language":-1}"#).language,
            LanguageCode::Unrecognised("-1".into())
        );
    }

    #[test]
    fn a_later_duplicate_or_null_value_replaces_an_earlier_one() {
        let command = decoded(r#"{"extFields":{"a":"1","a":"2","b":"x","b":null}}"#);
        assert_eq!(command.ext_fields.get("a"), Some("2"));
        assert_eq!(command.ext_fields.get("b"), None);
    }

    #[test]
    fn headers_that_are_not_a_command_are_errors() {
        for bad in [
            "",
            "[]",
            "not json",
            r#"{"code":"105"}"#,
            r#"{"code":4294967296}"#,
            r#"{"opaque":1.5}"#,
            r#"{"remark":5}"#,
            r#"{"extFields":{"nested":{"a":1}}}"#,
            r#"{"extFields":{"list":[1]}}"#,
            r#"{"extFields":"topic"}"#,
        ] {
            assert!(decode(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(decode(b"{\"remark\":\"\xff\"}").is_err(), "not UTF-8");
    }

    #[test]
    fn encoding_writes_strings_sorted_keys_and_leaves_out_no_remark() {
        let mut command = RemotingCommand {
            code: 0,
            opaque: 5,
            flag: 1,
            version: 409,
            remark: None,
            ..RemotingCommand::default()
        };
        assert_eq!(
            encoded(&command),
            r#"{"code":0,"extFields":{},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}"#
        );
        command.ext_fields.insert("queueOffset", "12");
        command
            .ext_fields
            .insert("msgId", "7F00000100002A9F0000000000001234");
        command.ext_fields.insert("queueId", "0");
        command.remark = Some("say \"hi\"\n, ünïcödé ✓".into());
        assert_eq!(
            encoded(&command),
            r#"{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000001234","queueId":"0","queueOffset":"12"},"flag":1,"language":"JAVA","opaque":5,"remark":"say \"hi\"\n, ünïcödé ✓","serializeTypeCurrentRPC":"JSON","version":409}"#
        );
        assert_eq!(decoded(&encoded(&command)), command);
    }
}
