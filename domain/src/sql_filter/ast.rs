//! The parsed form of a SQL92 filter. `Display` writes an expression back as text that parses
//! to the same tree (fully parenthesised).

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Compare {
        left: Operand,
        op: CompareOp,
        right: Operand,
    },
    Between {
        operand: Operand,
        low: Operand,
        high: Operand,
        negated: bool,
    },
    In {
        operand: Operand,
        values: Vec<String>,
        negated: bool,
    },
    IsNull {
        operand: Operand,
        negated: bool,
    },
    /// `TRUE` or `FALSE` on its own.
    Constant(bool),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Property(String),
    Str(String),
    Number(Number),
    Bool(bool),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i64),
    /// Finite.
    Float(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    /// Whether it orders (compares numbers only), as opposed to testing equality.
    pub fn orders(self) -> bool {
        !matches!(self, CompareOp::Eq | CompareOp::Ne)
    }

    fn text(self) -> &'static str {
        match self {
            CompareOp::Eq => "=",
            CompareOp::Ne => "<>",
            CompareOp::Lt => "<",
            CompareOp::Le => "<=",
            CompareOp::Gt => ">",
            CompareOp::Ge => ">=",
        }
    }
}

fn quote(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    write!(f, "'{}'", text.replace('\'', "''"))
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Property(name) => f.write_str(name),
            Operand::Str(text) => quote(f, text),
            Operand::Number(Number::Int(value)) => write!(f, "{value}"),
            // `{:?}` keeps a fraction or exponent, so the text reads back as a float.
            Operand::Number(Number::Float(value)) => write!(f, "{value:?}"),
            Operand::Bool(value) => f.write_str(if *value { "TRUE" } else { "FALSE" }),
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let not = |negated: bool| if negated { "NOT " } else { "" };
        match self {
            Expr::And(left, right) => write!(f, "({left} AND {right})"),
            Expr::Or(left, right) => write!(f, "({left} OR {right})"),
            Expr::Not(inner) => write!(f, "(NOT {inner})"),
            Expr::Compare { left, op, right } => write!(f, "({left} {} {right})", op.text()),
            Expr::Between {
                operand,
                low,
                high,
                negated,
            } => write!(f, "({operand} {}BETWEEN {low} AND {high})", not(*negated)),
            Expr::In {
                operand,
                values,
                negated,
            } => {
                write!(f, "({operand} {}IN (", not(*negated))?;
                for (index, value) in values.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    quote(f, value)?;
                }
                f.write_str("))")
            }
            Expr::IsNull { operand, negated } => write!(f, "({operand} IS {}NULL)", not(*negated)),
            Expr::Constant(value) => f.write_str(if *value { "TRUE" } else { "FALSE" }),
        }
    }
}
