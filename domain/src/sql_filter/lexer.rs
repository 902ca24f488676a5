//! Tokens of a SQL92 filter expression, each with the byte position it starts at.

use crate::sql_filter::SqlFilterError;
use crate::sql_filter::ast::CompareOp;

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    /// A property name.
    Ident(String),
    /// A quoted string, quotes removed and `''` read as `'`.
    Str(String),
    /// An unsigned number as written; its sign and type are the parser's business.
    Number(String),
    Minus,
    Compare(CompareOp),
    LParen,
    RParen,
    Comma,
    And,
    Or,
    Not,
    Between,
    In,
    Is,
    Null,
    True,
    False,
}

/// The tokens of `text`, each with its start, or the first thing that is not one.
pub fn tokens(text: &str) -> Result<Vec<(Token, usize)>, SqlFilterError> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        let byte = bytes[at];
        let two = |second: u8| bytes.get(at + 1) == Some(&second);
        let (token, len) = match byte {
            b' ' | b'\t' | b'\r' | b'\n' => {
                at += 1;
                continue;
            }
            b'(' => (Token::LParen, 1),
            b')' => (Token::RParen, 1),
            b',' => (Token::Comma, 1),
            b'-' => (Token::Minus, 1),
            b'=' => (Token::Compare(CompareOp::Eq), 1),
            b'<' if two(b'>') => (Token::Compare(CompareOp::Ne), 2),
            b'<' if two(b'=') => (Token::Compare(CompareOp::Le), 2),
            b'<' => (Token::Compare(CompareOp::Lt), 1),
            b'>' if two(b'=') => (Token::Compare(CompareOp::Ge), 2),
            b'>' => (Token::Compare(CompareOp::Gt), 1),
            b'!' if two(b'=') => return Err(error(start, "`!=` is not SQL92; use `<>`")),
            b'\'' => {
                let (value, len) = quoted(&text[start..])
                    .ok_or_else(|| error(start, "a string is not closed (end it with `'`)"))?;
                (Token::Str(value), len)
            }
            b'0'..=b'9' | b'.' => {
                let len = number_len(&bytes[start..]);
                (Token::Number(text[start..start + len].to_owned()), len)
            }
            _ if is_ident_start(byte) => {
                let len = bytes[start..]
                    .iter()
                    .take_while(|b| is_ident_part(**b))
                    .count();
                let word = &text[start..start + len];
                (
                    keyword(word).unwrap_or_else(|| Token::Ident(word.to_owned())),
                    len,
                )
            }
            _ => {
                let shown = text[start..].chars().next().unwrap_or(' ');
                return Err(error(start, &format!("unexpected character {shown:?}")));
            }
        };
        found.push((token, start));
        at = start + len;
    }
    Ok(found)
}

fn error(position: usize, reason: &str) -> SqlFilterError {
    SqlFilterError {
        position,
        reason: reason.to_owned(),
    }
}

fn is_ident_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_' || byte == b'$'
}

fn is_ident_part(byte: u8) -> bool {
    is_ident_start(byte) || byte.is_ascii_digit() || byte == b'.'
}

fn keyword(word: &str) -> Option<Token> {
    let token = match word.to_ascii_uppercase().as_str() {
        "AND" => Token::And,
        "OR" => Token::Or,
        "NOT" => Token::Not,
        "BETWEEN" => Token::Between,
        "IN" => Token::In,
        "IS" => Token::Is,
        "NULL" => Token::Null,
        "TRUE" => Token::True,
        "FALSE" => Token::False,
        _ => return None,
    };
    Some(token)
}

/// A quoted string at the start of `text` and the bytes it spans, quotes included.
fn quoted(text: &str) -> Option<(String, usize)> {
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((at, c)) = chars.next() {
        if c != '\'' {
            value.push(c);
        } else if chars.peek().is_some_and(|(_, next)| *next == '\'') {
            chars.next();
            value.push('\'');
        } else {
            return Some((value, at + 1));
        }
    }
    None
}

/// Length of the number at the start of `bytes`: digits, a fraction, an exponent. What it
/// spans is checked when it is read as a number.
fn number_len(bytes: &[u8]) -> usize {
    let mut len = 0;
    while len < bytes.len() {
        let byte = bytes[len];
        let exponent_sign =
            (byte == b'+' || byte == b'-') && len > 0 && matches!(bytes[len - 1], b'e' | b'E');
        if byte.is_ascii_digit() || byte == b'.' || byte == b'e' || byte == b'E' || exponent_sign {
            len += 1;
        } else {
            break;
        }
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Token> {
        tokens(text)
            .expect("tokens")
            .into_iter()
            .map(|(token, _)| token)
            .collect()
    }

    #[test]
    fn reads_every_kind_of_token() {
        assert_eq!(
            kinds("a.b >= -1.5e3 AND not TAGS in ('x''y', 'z') <> <"),
            vec![
                Token::Ident("a.b".into()),
                Token::Compare(CompareOp::Ge),
                Token::Minus,
                Token::Number("1.5e3".into()),
                Token::And,
                Token::Not,
                Token::Ident("TAGS".into()),
                Token::In,
                Token::LParen,
                Token::Str("x'y".into()),
                Token::Comma,
                Token::Str("z".into()),
                Token::RParen,
                Token::Compare(CompareOp::Ne),
                Token::Compare(CompareOp::Lt),
            ]
        );
    }

    #[test]
    fn bad_characters_and_open_strings_are_errors_at_their_position() {
        let error = tokens("a = 'abc").expect_err("open string");
        assert_eq!(error.position, 4);
        let error = tokens("a != 1").expect_err("!=");
        assert!(error.reason.contains("<>"), "{error}");
        assert_eq!(tokens("a = #").expect_err("#").position, 4);
    }
}
