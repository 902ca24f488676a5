//! Evaluates a SQL92 filter against one message's properties, in SQL's three-valued logic:
//! a comparison involving an absent property (NULL), or a string that does not read as the
//! number or boolean it is compared with, is unknown, and only a TRUE expression selects.

use std::cmp::Ordering;

use crate::sql_filter::ast::{CompareOp, Expr, Number, Operand};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    fn from_bool(value: bool) -> Truth {
        if value { Truth::True } else { Truth::False }
    }

    fn not(self) -> Truth {
        match self {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unknown => Truth::Unknown,
        }
    }
}

/// A value while evaluating: a property's text, or a literal.
#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    Null,
    Str(&'a str),
    Number(Number),
    Bool(bool),
}

pub fn eval<'a>(expr: &'a Expr, property: &impl Fn(&str) -> Option<&'a str>) -> Truth {
    match expr {
        Expr::And(left, right) => match (eval(left, property), eval(right, property)) {
            (Truth::False, _) | (_, Truth::False) => Truth::False,
            (Truth::True, Truth::True) => Truth::True,
            _ => Truth::Unknown,
        },
        Expr::Or(left, right) => match (eval(left, property), eval(right, property)) {
            (Truth::True, _) | (_, Truth::True) => Truth::True,
            (Truth::False, Truth::False) => Truth::False,
            _ => Truth::Unknown,
        },
        Expr::Not(inner) => eval(inner, property).not(),
        Expr::Compare { left, op, right } => {
            compare(value(left, property), *op, value(right, property))
        }
        Expr::Between {
            operand,
            low,
            high,
            negated,
        } => {
            let operand = value(operand, property);
            let above = compare(operand, CompareOp::Ge, value(low, property));
            let below = compare(operand, CompareOp::Le, value(high, property));
            let within = match (above, below) {
                (Truth::False, _) | (_, Truth::False) => Truth::False,
                (Truth::True, Truth::True) => Truth::True,
                _ => Truth::Unknown,
            };
            if *negated { within.not() } else { within }
        }
        Expr::In {
            operand,
            values,
            negated,
        } => {
            let found = match value(operand, property) {
                Value::Str(text) => Truth::from_bool(values.iter().any(|value| value == text)),
                _ => Truth::Unknown,
            };
            if *negated { found.not() } else { found }
        }
        Expr::IsNull { operand, negated } => {
            let null = matches!(value(operand, property), Value::Null);
            Truth::from_bool(null != *negated)
        }
        Expr::Constant(value) => Truth::from_bool(*value),
    }
}

fn value<'a>(operand: &'a Operand, property: &impl Fn(&str) -> Option<&'a str>) -> Value<'a> {
    match operand {
        Operand::Property(name) => property(name).map_or(Value::Null, Value::Str),
        Operand::Str(text) => Value::Str(text),
        Operand::Number(number) => Value::Number(*number),
        Operand::Bool(value) => Value::Bool(*value),
    }
}

fn compare(left: Value<'_>, op: CompareOp, right: Value<'_>) -> Truth {
    let ordering = match (left, right) {
        (Value::Null, _) | (_, Value::Null) => None,
        _ if op.orders() => number_order(left, right),
        (Value::Number(_), _) | (_, Value::Number(_)) => number_order(left, right),
        (Value::Bool(_), _) | (_, Value::Bool(_)) => match (as_bool(left), as_bool(right)) {
            (Some(a), Some(b)) => Some(a.cmp(&b)),
            _ => None,
        },
        (Value::Str(a), Value::Str(b)) => Some(a.cmp(b)),
    };
    let Some(ordering) = ordering else {
        return Truth::Unknown;
    };
    Truth::from_bool(match op {
        CompareOp::Eq => ordering == Ordering::Equal,
        CompareOp::Ne => ordering != Ordering::Equal,
        CompareOp::Lt => ordering == Ordering::Less,
        CompareOp::Le => ordering != Ordering::Greater,
        CompareOp::Gt => ordering == Ordering::Greater,
        CompareOp::Ge => ordering != Ordering::Less,
    })
}

fn number_order(left: Value<'_>, right: Value<'_>) -> Option<Ordering> {
    match (as_number(left)?, as_number(right)?) {
        (Number::Int(a), Number::Int(b)) => Some(a.cmp(&b)),
        (a, b) => as_f64(a).partial_cmp(&as_f64(b)),
    }
}

fn as_f64(number: Number) -> f64 {
    match number {
        Number::Int(value) => value as f64,
        Number::Float(value) => value,
    }
}

/// A number, or a property's text that reads as one (an integer, else a finite decimal).
fn as_number(value: Value<'_>) -> Option<Number> {
    match value {
        Value::Number(number) => Some(number),
        Value::Str(text) => text.parse::<i64>().map(Number::Int).ok().or_else(|| {
            text.parse::<f64>()
                .ok()
                .filter(|value| value.is_finite())
                .map(Number::Float)
        }),
        Value::Null | Value::Bool(_) => None,
    }
}

/// A boolean, or a property's text `true`/`false` in any case.
fn as_bool(value: Value<'_>) -> Option<bool> {
    match value {
        Value::Bool(value) => Some(value),
        Value::Str(text) if text.eq_ignore_ascii_case("true") => Some(true),
        Value::Str(text) if text.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}
