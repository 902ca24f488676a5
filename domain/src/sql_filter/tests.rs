use std::collections::HashMap;

use super::ast::{CompareOp, Expr, Number, Operand};
use super::*;
use crate::xorshift::Xorshift as Rng;

fn selects(expression: &str, properties: &[(&str, &str)]) -> bool {
    let properties: HashMap<&str, &str> = properties.iter().copied().collect();
    SqlFilter::parse(expression)
        .unwrap_or_else(|error| panic!("{expression}: {error}"))
        .matches(|name| properties.get(name).copied())
}

#[test]
fn rocketmq_examples_select_as_documented() {
    let got = [("a", "10"), ("b", "abc"), ("c", "true")];
    let missed = [("a", "1"), ("b", "abc"), ("c", "true")];
    assert!(selects("a > 5 AND b = 'abc'", &got));
    assert!(!selects("a > 5 AND b = 'abc'", &missed));
    let example =
        "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)";
    assert!(selects(example, &[("TAGS", "TagB"), ("a", "3")]));
    assert!(!selects(example, &[("TAGS", "TagC"), ("a", "3")]));
    assert!(!selects(example, &[("TAGS", "TagA"), ("a", "4")]));
    assert!(!selects(example, &[("a", "1")]));
}

#[test]
fn comparisons_by_type() {
    assert!(selects("a = 10", &[("a", "10")]));
    assert!(
        selects("a = 10.0", &[("a", "10")]),
        "numbers compare as numbers"
    );
    assert!(selects("a >= -2.5 AND a < 1e3", &[("a", "-2")]));
    assert!(
        selects("a < b", &[("a", "9"), ("b", "10")]),
        "two properties, numerically"
    );
    assert!(selects("a <> 'x'", &[("a", "y")]));
    assert!(selects(
        "c = TRUE AND d = false",
        &[("c", "True"), ("d", "FALSE")]
    ));
    assert!(selects("TRUE", &[]));
    assert!(!selects("FALSE", &[]));
    assert!(selects("a NOT BETWEEN 1 AND 3", &[("a", "4")]));
    assert!(selects("a NOT IN ('x', 'y')", &[("a", "z")]));
    assert!(selects("9223372036854775807 > -9223372036854775808", &[]));
}

#[test]
fn absent_or_unreadable_properties_are_unknown_never_selected() {
    for expression in [
        "a = 1",
        "a <> 1",
        "a > 0",
        "a BETWEEN 0 AND 9",
        "a IN ('1')",
    ] {
        assert!(!selects(expression, &[]), "{expression} with a absent");
        let negated = format!("NOT ({expression})");
        assert!(!selects(&negated, &[]), "{negated} with a absent");
    }
    assert!(!selects("a > 1", &[("a", "abc")]), "not a number: unknown");
    assert!(!selects("NOT (a > 1)", &[("a", "abc")]));
    assert!(!selects("a = TRUE", &[("a", "yes")]));
    assert!(selects("a IS NULL", &[]));
    assert!(selects("a IS NOT NULL", &[("a", "")]));
    assert!(selects("a > 1 OR TRUE", &[]), "unknown OR true is true");
    assert!(
        !selects("a > 1 AND TRUE", &[]),
        "unknown AND true is unknown"
    );
}

#[test]
fn precedence_is_not_then_and_then_or() {
    assert!(selects("a = 1 OR a = 2 AND b = 3", &[("a", "1")]));
    assert!(!selects("(a = 1 OR a = 2) AND b = 3", &[("a", "1")]));
    assert!(selects("NOT a = 1 AND b = 2", &[("a", "2"), ("b", "2")]));
    assert!(
        selects("not not a = 1", &[("a", "1")]),
        "keywords in any case"
    );
}

#[test]
fn invalid_expressions_say_what_and_where() {
    let cases = [
        ("", 0, "empty"),
        ("a", 1, "expected a comparison"),
        ("a = ", 4, "expected a property name or a value"),
        ("a > 'x'", 4, "compares numbers"),
        ("'x' BETWEEN 1 AND 2", 0, "compares numbers"),
        ("a BETWEEN 1 2", 12, "AND between the bounds"),
        ("a IN (1, 2)", 6, "IN lists quoted strings"),
        ("a IN ('x'", 9, "`,` or `)`"),
        ("a = NULL", 4, "IS NULL"),
        ("a NOT = 1", 6, "BETWEEN or IN after NOT"),
        ("(a = 1", 6, "`)`"),
        ("a = 1 b = 2", 6, "AND, OR or the end"),
        ("a = 99999999999999999999", 4, "out of range"),
        ("a = 1e999", 4, "out of range"),
        ("a = 1.2.3", 4, "not a number"),
        ("a IS 1", 5, "NULL after IS"),
    ];
    for (expression, position, reason) in cases {
        let error = SqlFilter::parse(expression).expect_err(expression);
        assert_eq!(error.position, position, "{expression}: {error}");
        assert!(error.reason.contains(reason), "{expression}: {error}");
    }
}

#[test]
fn limits_hold_at_their_boundaries() {
    let nested = |depth: usize| format!("{}a = 1{}", "(".repeat(depth), ")".repeat(depth));
    assert!(SqlFilter::parse(&nested(SQL_FILTER_DEPTH_MAX)).is_ok());
    let error = SqlFilter::parse(&nested(SQL_FILTER_DEPTH_MAX + 1)).expect_err("too deep");
    assert!(error.reason.contains("nests deeper"), "{error}");
    let nots = format!("{}a = 1", "NOT ".repeat(SQL_FILTER_DEPTH_MAX + 1));
    assert!(SqlFilter::parse(&nots).is_err());
    let padded = |len: usize| format!("a = '{}'", "x".repeat(len - 6));
    assert!(SqlFilter::parse(&padded(SQL_FILTER_BYTES_MAX)).is_ok());
    let error = SqlFilter::parse(&padded(SQL_FILTER_BYTES_MAX + 1)).expect_err("too long");
    assert!(error.reason.contains("more than"), "{error}");
}

const NAMES: [&str; 4] = ["a", "b", "TAGS", "x.y_1"];
const TEXTS: [&str; 4] = ["", "1", "it's", "TagA"];

fn numeric(rng: &mut Rng) -> Operand {
    match rng.below(4) {
        0 => Operand::Property(rng.pick(&NAMES).to_owned()),
        1 => Operand::Number(Number::Int(rng.next_u64() as i64)),
        2 => Operand::Number(Number::Int(rng.below(7) as i64 - 3)),
        _ => Operand::Number(Number::Float((rng.below(2001) as f64 - 1000.0) / 8.0)),
    }
}

fn operand(rng: &mut Rng) -> Operand {
    match rng.below(3) {
        0 => Operand::Str(rng.pick(&TEXTS).to_owned()),
        1 => Operand::Bool(rng.below(2) == 0),
        _ => numeric(rng),
    }
}

fn expr(rng: &mut Rng, depth: usize) -> Expr {
    let leaf = depth == 0 || rng.below(3) == 0;
    let choice = if leaf { 3 + rng.below(5) } else { rng.below(3) };
    let negated = rng.below(2) == 0;
    match choice {
        0 => Expr::And(
            Box::new(expr(rng, depth - 1)),
            Box::new(expr(rng, depth - 1)),
        ),
        1 => Expr::Or(
            Box::new(expr(rng, depth - 1)),
            Box::new(expr(rng, depth - 1)),
        ),
        2 => Expr::Not(Box::new(expr(rng, depth - 1))),
        3 => {
            let op = [
                CompareOp::Eq,
                CompareOp::Ne,
                CompareOp::Lt,
                CompareOp::Le,
                CompareOp::Gt,
                CompareOp::Ge,
            ][rng.below(6)];
            let (left, right) = if op.orders() {
                (numeric(rng), numeric(rng))
            } else {
                (operand(rng), operand(rng))
            };
            Expr::Compare { left, op, right }
        }
        4 => Expr::Between {
            operand: numeric(rng),
            low: numeric(rng),
            high: numeric(rng),
            negated,
        },
        5 => Expr::In {
            operand: Operand::Property(rng.pick(&NAMES).to_owned()),
            values: (0..=rng.below(3))
                .map(|_| rng.pick(&TEXTS).to_owned())
                .collect(),
            negated,
        },
        6 => Expr::IsNull {
            operand: Operand::Property(rng.pick(&NAMES).to_owned()),
            negated,
        },
        _ => Expr::Constant(negated),
    }
}

#[test]
fn any_expression_reads_back_from_its_text_and_negation_complements_it() {
    let mut rng = Rng::new(0x5EED_1234_ABCD_0001);
    for round in 0..2000 {
        let original = expr(&mut rng, 4);
        let text = original.to_string();
        let filter =
            SqlFilter::parse(&text).unwrap_or_else(|e| panic!("round {round}: {text}: {e}"));
        assert_eq!(filter.expr, original, "round {round}: {text}");
        // On any message, an expression and its negation are never both selected.
        let mut values: Vec<(&str, &str)> = Vec::new();
        for name in NAMES {
            if rng.below(3) != 0 {
                values.push((name, rng.pick(&["0", "-3", "2.5", "abc", "true", "TagA"])));
            }
        }
        let negated = SqlFilter::parse(&format!("NOT {text}")).expect("negation parses");
        let lookup = |name: &str| values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert!(
            !(filter.matches(lookup) && negated.matches(lookup)),
            "round {round}: {text} on {values:?}"
        );
    }
}

#[test]
fn arbitrary_input_is_parsed_or_refused_never_a_panic() {
    let mut rng = Rng::new(0xBAD_1DEA);
    let pieces = [
        "a",
        "(",
        ")",
        "'",
        "''",
        "=",
        "<",
        ">",
        "<>",
        "NOT",
        "AND",
        "OR",
        "IN",
        "BETWEEN",
        "IS",
        "NULL",
        "TRUE",
        "-",
        "1",
        "1.5e",
        ".",
        ",",
        " ",
        "é",
        "\u{0}",
        "9999999999999999999",
    ];
    for _ in 0..5000 {
        let text: String = (0..rng.below(12)).map(|_| rng.pick(&pieces)).collect();
        if let Ok(filter) = SqlFilter::parse(&text) {
            filter.matches(|_| Some("1"));
            filter.matches(|_| None);
        }
    }
}
