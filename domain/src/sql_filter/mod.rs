//! SQL92 property filters, RocketMQ's `MessageSelector.bySql`: an expression over a message's
//! properties (its user properties and the core ones, such as `TAGS`), parsed once and then
//! evaluated per message: by the broker while it serves a pull, and again by the client.
//!
//! The language: comparisons `=`, `<>`, `<`, `<=`, `>`, `>=`; `[NOT] BETWEEN low AND high`;
//! `[NOT] IN ('a', 'b')`; `IS [NOT] NULL`; `AND`, `OR`, `NOT` and parentheses; literals:
//! integers, decimals, `'strings'` (`''` is a quote), `TRUE`, `FALSE`. Keywords are
//! case-insensitive, property names are not. A property is a string or absent; see `eval`
//! for how it compares with numbers and booleans. Parse errors name the byte they are at.
//!
//! Limits, checked when an expression is parsed: [`SQL_FILTER_BYTES_MAX`] bytes and
//! [`SQL_FILTER_DEPTH_MAX`] levels of parentheses and `NOT`.

mod ast;
mod eval;
mod lexer;
mod parser;

use std::fmt;

/// A subscription expression's type (RocketMQ's `ExpressionType`): tags, `"*"` or
/// `"TagA || TagB"`.
pub const EXPRESSION_TYPE_TAG: &str = "TAG";
/// A subscription expression's type: a SQL92 filter.
pub const EXPRESSION_TYPE_SQL92: &str = "SQL92";

/// Longest expression accepted, in bytes.
pub const SQL_FILTER_BYTES_MAX: usize = 4096;
/// Deepest nesting of parentheses and `NOT` accepted.
pub const SQL_FILTER_DEPTH_MAX: usize = 32;

/// Why an expression is not a valid filter, and at which byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid SQL92 filter at byte {position}: {reason}")]
pub struct SqlFilterError {
    pub position: usize,
    pub reason: String,
}

/// A parsed filter. Two filters are equal when their texts are.
#[derive(Debug, Clone)]
pub struct SqlFilter {
    text: String,
    expr: ast::Expr,
}

impl SqlFilter {
    pub fn parse(text: &str) -> Result<SqlFilter, SqlFilterError> {
        if text.len() > SQL_FILTER_BYTES_MAX {
            return Err(SqlFilterError {
                position: SQL_FILTER_BYTES_MAX,
                reason: format!(
                    "the expression is {} bytes, more than {SQL_FILTER_BYTES_MAX}",
                    text.len()
                ),
            });
        }
        Ok(SqlFilter {
            text: text.to_owned(),
            expr: parser::parse(text)?,
        })
    }

    /// The expression as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether a message whose property `name` is `property(name)` is selected: the
    /// expression is TRUE for it (not FALSE, not unknown).
    pub fn matches<'m>(&self, property: impl Fn(&str) -> Option<&'m str>) -> bool {
        let lookup = |name: &str| -> Option<&str> { property(name) };
        eval::eval(&self.expr, &lookup) == eval::Truth::True
    }
}

impl PartialEq for SqlFilter {
    fn eq(&self, other: &SqlFilter) -> bool {
        self.text == other.text
    }
}

impl Eq for SqlFilter {}

impl fmt::Display for SqlFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests;
