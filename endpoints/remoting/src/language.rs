//! `LanguageCode`: the language a command says its sender is written in, a name in a JSON
//! header (`"JAVA"`) and a byte in a ROCKETMQ header (`0`).
//!
//! Invariant: decoding never fails on a language. Clients send names and numbers RocketMQ
//! does not know; those are kept as [`LanguageCode::Unrecognised`] (the broker only records a
//! client's language and shows it back, it never acts on it).

/// A sender's language. Byte values are RocketMQ's `LanguageCode`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LanguageCode {
    /// `JAVA`, 0: what every reply of this endpoint says, as a Java broker's do.
    #[default]
    Java,
    /// `CPP`, 1.
    Cpp,
    /// `DOTNET`, 2.
    Dotnet,
    /// `PYTHON`, 3.
    Python,
    /// `DELPHI`, 4.
    Delphi,
    /// `ERLANG`, 5.
    Erlang,
    /// `RUBY`, 6.
    Ruby,
    /// `OTHER`, 7.
    Other,
    /// `HTTP`, 8.
    Http,
    /// `GO`, 9.
    Go,
    /// `PHP`, 10.
    Php,
    /// `OMS`, 11.
    Oms,
    /// `RUST`, 12 (late 4.9.x and 5.x).
    Rust,
    /// A name or number RocketMQ does not define, as received (a byte as its decimal text).
    /// A ROCKETMQ header carries it as `OTHER`.
    Unrecognised(String),
}

impl LanguageCode {
    /// The name a JSON header carries, e.g. `"JAVA"`.
    pub fn name(&self) -> &str {
        match self {
            LanguageCode::Java => "JAVA",
            LanguageCode::Cpp => "CPP",
            LanguageCode::Dotnet => "DOTNET",
            LanguageCode::Python => "PYTHON",
            LanguageCode::Delphi => "DELPHI",
            LanguageCode::Erlang => "ERLANG",
            LanguageCode::Ruby => "RUBY",
            LanguageCode::Other => "OTHER",
            LanguageCode::Http => "HTTP",
            LanguageCode::Go => "GO",
            LanguageCode::Php => "PHP",
            LanguageCode::Oms => "OMS",
            LanguageCode::Rust => "RUST",
            LanguageCode::Unrecognised(text) => text,
        }
    }

    /// The language a JSON header names (names are upper case, as Java's enum writes them).
    pub(crate) fn from_name(name: &str) -> LanguageCode {
        match name {
            "JAVA" => LanguageCode::Java,
            "CPP" => LanguageCode::Cpp,
            "DOTNET" => LanguageCode::Dotnet,
            "PYTHON" => LanguageCode::Python,
            "DELPHI" => LanguageCode::Delphi,
            "ERLANG" => LanguageCode::Erlang,
            "RUBY" => LanguageCode::Ruby,
            "OTHER" => LanguageCode::Other,
            "HTTP" => LanguageCode::Http,
            "GO" => LanguageCode::Go,
            "PHP" => LanguageCode::Php,
            "OMS" => LanguageCode::Oms,
            "RUST" => LanguageCode::Rust,
            unknown => LanguageCode::Unrecognised(unknown.to_owned()),
        }
    }

    /// The byte a ROCKETMQ header carries.
    pub(crate) fn code(&self) -> u8 {
        match self {
            LanguageCode::Java => 0,
            LanguageCode::Cpp => 1,
            LanguageCode::Dotnet => 2,
            LanguageCode::Python => 3,
            LanguageCode::Delphi => 4,
            LanguageCode::Erlang => 5,
            LanguageCode::Ruby => 6,
            LanguageCode::Other | LanguageCode::Unrecognised(_) => 7,
            LanguageCode::Http => 8,
            LanguageCode::Go => 9,
            LanguageCode::Php => 10,
            LanguageCode::Oms => 11,
            LanguageCode::Rust => 12,
        }
    }

    /// The language a ROCKETMQ header's byte (or a JSON header's number) stands for.
    pub(crate) fn from_code(code: u8) -> LanguageCode {
        match code {
            0 => LanguageCode::Java,
            1 => LanguageCode::Cpp,
            2 => LanguageCode::Dotnet,
            3 => LanguageCode::Python,
            4 => LanguageCode::Delphi,
            5 => LanguageCode::Erlang,
            6 => LanguageCode::Ruby,
            7 => LanguageCode::Other,
            8 => LanguageCode::Http,
            9 => LanguageCode::Go,
            10 => LanguageCode::Php,
            11 => LanguageCode::Oms,
            12 => LanguageCode::Rust,
            unknown => LanguageCode::Unrecognised(unknown.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_language_maps_to_its_name_and_byte_and_back() {
        for code in 0..=12u8 {
            let language = LanguageCode::from_code(code);
            assert!(!matches!(language, LanguageCode::Unrecognised(_)), "{code}");
            assert_eq!(language.code(), code);
            assert_eq!(LanguageCode::from_name(language.name()), language);
        }
    }

    #[test]
    fn an_unknown_language_is_kept_as_received_and_sent_as_other() {
        let named = LanguageCode::from_name("NODE_JS");
        assert_eq!(named, LanguageCode::Unrecognised("NODE_JS".into()));
        assert_eq!(named.name(), "NODE_JS");
        assert_eq!(named.code(), 7);
        let numbered = LanguageCode::from_code(200);
        assert_eq!(numbered.name(), "200");
        assert_eq!(
            LanguageCode::from_name("java"),
            LanguageCode::Unrecognised("java".into())
        );
    }
}
