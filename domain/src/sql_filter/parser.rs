//! A recursive-descent parser for SQL92 filters. Precedence, loosest first: `OR`, `AND`,
//! `NOT`, then one predicate (a comparison, `BETWEEN`, `IN`, `IS NULL`, a parenthesised
//! expression, or `TRUE`/`FALSE`). Checks what can be known before any message: ordering
//! comparisons and `BETWEEN` take numbers or properties, `IN` takes strings, `= NULL` is
//! refused for `IS NULL`, and nesting is at most [`SQL_FILTER_DEPTH_MAX`] deep.

use crate::sql_filter::SQL_FILTER_DEPTH_MAX;
use crate::sql_filter::SqlFilterError;
use crate::sql_filter::ast::{CompareOp, Expr, Number, Operand};
use crate::sql_filter::lexer::{Token, tokens};

/// Parses a whole expression.
pub fn parse(text: &str) -> Result<Expr, SqlFilterError> {
    let mut parser = Parser {
        tokens: tokens(text)?,
        next: 0,
        end: text.len(),
        depth: 0,
    };
    if parser.tokens.is_empty() {
        return Err(parser.error_at(0, "the expression is empty"));
    }
    let expr = parser.or()?;
    match parser.peek() {
        None => Ok(expr),
        Some(_) => Err(parser.error("expected AND, OR or the end of the expression")),
    }
}

struct Parser {
    tokens: Vec<(Token, usize)>,
    next: usize,
    /// The text's length: where "the end" is reported.
    end: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next).map(|(token, _)| token)
    }

    fn position(&self) -> usize {
        self.tokens.get(self.next).map_or(self.end, |(_, at)| *at)
    }

    fn error(&self, reason: &str) -> SqlFilterError {
        self.error_at(self.position(), reason)
    }

    fn error_at(&self, position: usize, reason: &str) -> SqlFilterError {
        SqlFilterError {
            position,
            reason: reason.to_owned(),
        }
    }

    /// Takes the next token if it is `token`.
    fn eat(&mut self, token: &Token) -> bool {
        if self.peek() == Some(token) {
            self.next += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &Token, what: &str) -> Result<(), SqlFilterError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(&format!("expected {what}")))
        }
    }

    fn nested<T>(
        &mut self,
        parse: impl FnOnce(&mut Parser) -> Result<T, SqlFilterError>,
    ) -> Result<T, SqlFilterError> {
        if self.depth == SQL_FILTER_DEPTH_MAX {
            return Err(self.error(&format!(
                "the expression nests deeper than {SQL_FILTER_DEPTH_MAX} levels"
            )));
        }
        self.depth += 1;
        let parsed = parse(self);
        self.depth -= 1;
        parsed
    }

    fn or(&mut self) -> Result<Expr, SqlFilterError> {
        let mut expr = self.and()?;
        while self.eat(&Token::Or) {
            expr = Expr::Or(Box::new(expr), Box::new(self.and()?));
        }
        Ok(expr)
    }

    fn and(&mut self) -> Result<Expr, SqlFilterError> {
        let mut expr = self.not()?;
        while self.eat(&Token::And) {
            expr = Expr::And(Box::new(expr), Box::new(self.not()?));
        }
        Ok(expr)
    }

    fn not(&mut self) -> Result<Expr, SqlFilterError> {
        if self.eat(&Token::Not) {
            return self.nested(|parser| Ok(Expr::Not(Box::new(parser.not()?))));
        }
        self.predicate()
    }

    fn predicate(&mut self) -> Result<Expr, SqlFilterError> {
        if self.eat(&Token::LParen) {
            let expr = self.nested(Parser::or)?;
            self.expect(&Token::RParen, "`)`")?;
            return Ok(expr);
        }
        let start = self.position();
        let operand = self.operand()?;
        let negated = self.eat(&Token::Not);
        if self.eat(&Token::Between) {
            let low = self.numeric_operand("BETWEEN")?;
            self.expect(&Token::And, "AND between the bounds of BETWEEN")?;
            let high = self.numeric_operand("BETWEEN")?;
            check_numeric(&operand, "BETWEEN", start)?;
            return Ok(Expr::Between {
                operand,
                low,
                high,
                negated,
            });
        }
        if self.eat(&Token::In) {
            if !matches!(operand, Operand::Property(_) | Operand::Str(_)) {
                return Err(self.error_at(start, "IN compares a property or a string"));
            }
            return Ok(Expr::In {
                operand,
                values: self.string_list()?,
                negated,
            });
        }
        if negated {
            return Err(self.error("expected BETWEEN or IN after NOT"));
        }
        if self.eat(&Token::Is) {
            let negated = self.eat(&Token::Not);
            self.expect(&Token::Null, "NULL after IS")?;
            return Ok(Expr::IsNull { operand, negated });
        }
        let Some(op) = self.compare_op() else {
            return match operand {
                Operand::Bool(value) => Ok(Expr::Constant(value)),
                _ => Err(self
                    .error("expected a comparison (=, <>, <, <=, >, >=, BETWEEN, IN or IS NULL)")),
            };
        };
        let right_start = self.position();
        let right = self.operand()?;
        if op.orders() {
            check_numeric(&operand, "an ordering comparison", start)?;
            check_numeric(&right, "an ordering comparison", right_start)?;
        }
        Ok(Expr::Compare {
            left: operand,
            op,
            right,
        })
    }

    fn compare_op(&mut self) -> Option<CompareOp> {
        let Some(Token::Compare(op)) = self.peek() else {
            return None;
        };
        let op = *op;
        self.next += 1;
        Some(op)
    }

    fn operand(&mut self) -> Result<Operand, SqlFilterError> {
        let position = self.position();
        let Some(token) = self.peek().cloned() else {
            return Err(self.error("expected a property name or a value"));
        };
        self.next += 1;
        match token {
            Token::Ident(name) => Ok(Operand::Property(name)),
            Token::Str(text) => Ok(Operand::Str(text)),
            Token::True => Ok(Operand::Bool(true)),
            Token::False => Ok(Operand::Bool(false)),
            Token::Number(digits) => number(&digits, position),
            Token::Minus => match self.peek().cloned() {
                Some(Token::Number(digits)) => {
                    self.next += 1;
                    number(&format!("-{digits}"), position)
                }
                _ => Err(self.error("expected a number after `-`")),
            },
            Token::Null => Err(self.error_at(
                position,
                "NULL is not a value to compare with; use IS NULL or IS NOT NULL",
            )),
            _ => Err(self.error_at(position, "expected a property name or a value")),
        }
    }

    fn numeric_operand(&mut self, what: &str) -> Result<Operand, SqlFilterError> {
        let position = self.position();
        let operand = self.operand()?;
        check_numeric(&operand, what, position)?;
        Ok(operand)
    }

    fn string_list(&mut self) -> Result<Vec<String>, SqlFilterError> {
        self.expect(&Token::LParen, "`(` after IN")?;
        let mut values = Vec::new();
        loop {
            match self.peek().cloned() {
                Some(Token::Str(text)) => {
                    self.next += 1;
                    values.push(text);
                }
                _ => return Err(self.error("IN lists quoted strings")),
            }
            if !self.eat(&Token::Comma) {
                break;
            }
        }
        self.expect(&Token::RParen, "`,` or `)` in the IN list")?;
        Ok(values)
    }
}

/// A string or boolean cannot be ordered: an error where it was written.
fn check_numeric(operand: &Operand, what: &str, position: usize) -> Result<(), SqlFilterError> {
    match operand {
        Operand::Property(_) | Operand::Number(_) => Ok(()),
        Operand::Str(_) | Operand::Bool(_) => Err(SqlFilterError {
            position,
            reason: format!("{what} compares numbers, not {operand}"),
        }),
    }
}

/// A signed number as written: an integer if it has no fraction or exponent.
fn number(text: &str, position: usize) -> Result<Operand, SqlFilterError> {
    let bad = |reason: &str| SqlFilterError {
        position,
        reason: format!("{text:?} {reason}"),
    };
    if text.contains(['.', 'e', 'E']) {
        let value: f64 = text.parse().map_err(|_| bad("is not a number"))?;
        if !value.is_finite() {
            return Err(bad("is out of range"));
        }
        return Ok(Operand::Number(Number::Float(value)));
    }
    text.parse::<i64>()
        .map(|value| Operand::Number(Number::Int(value)))
        .map_err(|_| bad("is out of range for a 64-bit integer"))
}
