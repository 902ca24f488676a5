//! Subscription expressions: `"*"` takes every message, `"TagA || TagB"` takes those tags, and
//! a SQL92 filter (`MessageSelector.bySql`) takes the messages whose properties it selects.
//! The broker filters tags by their hash codes and evaluates SQL92 on each message's
//! properties; [`Subscription::matches`] re-checks what it returns, since different tags can
//! share a hash (`"Aa"` and `"BB"`).

use std::collections::BTreeSet;

use rocketraft_domain::sql_filter::{EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG, SqlFilter};

use crate::message::MessageExt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    All,
    Tags(BTreeSet<String>),
    Sql(SqlFilter),
}

impl Subscription {
    /// Parses a tag expression; an empty tag (`"A ||"`, `"||"`, `""`) is an error.
    pub fn parse(expression: &str) -> Result<Subscription, String> {
        let expression = expression.trim();
        if expression == "*" {
            return Ok(Subscription::All);
        }
        let mut tags = BTreeSet::new();
        for tag in expression.split("||") {
            let tag = tag.trim();
            if tag.is_empty() {
                return Err(format!("subscription {expression:?} has an empty tag"));
            }
            tags.insert(tag.to_owned());
        }
        Ok(Subscription::Tags(tags))
    }

    /// Parses a SQL92 filter; the error says what is wrong and at which byte.
    pub fn sql(expression: &str) -> Result<Subscription, String> {
        SqlFilter::parse(expression.trim())
            .map(Subscription::Sql)
            .map_err(|error| format!("subscription {expression:?}: {error}"))
    }

    /// The tags to send with a pull (empty = all, or filtered by SQL92).
    pub fn tags(&self) -> Vec<String> {
        match self {
            Subscription::All | Subscription::Sql(_) => Vec::new(),
            Subscription::Tags(tags) => tags.iter().cloned().collect(),
        }
    }

    /// The SQL92 filter to send with a pull (empty = none).
    pub fn sql_text(&self) -> String {
        match self {
            Subscription::Sql(filter) => filter.text().to_owned(),
            Subscription::All | Subscription::Tags(_) => String::new(),
        }
    }

    /// The expression and its type, as heartbeats tell the broker.
    pub fn expression(&self) -> (String, &'static str) {
        match self {
            Subscription::All => ("*".to_owned(), EXPRESSION_TYPE_TAG),
            Subscription::Tags(tags) => {
                let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
                (tags.join(" || "), EXPRESSION_TYPE_TAG)
            }
            Subscription::Sql(filter) => (filter.text().to_owned(), EXPRESSION_TYPE_SQL92),
        }
    }

    /// Whether `message` is one this subscription takes.
    pub fn matches(&self, message: &MessageExt) -> bool {
        match self {
            Subscription::All => true,
            Subscription::Tags(tags) => message.tags.as_ref().is_some_and(|tag| tags.contains(tag)),
            Subscription::Sql(filter) => filter.matches(|name| message.properties.get(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tags: Option<&str>, properties: &[(&str, &str)]) -> MessageExt {
        MessageExt {
            tags: tags.map(str::to_owned),
            properties: properties
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .chain(tags.map(|tag| ("TAGS".to_owned(), tag.to_owned())))
                .collect(),
            ..MessageExt::default()
        }
    }

    #[test]
    fn expressions() {
        assert_eq!(Subscription::parse(" * "), Ok(Subscription::All));
        let tags = Subscription::parse("TagA || TagB").expect("valid");
        assert!(tags.matches(&message(Some("TagA"), &[])));
        assert!(tags.matches(&message(Some("TagB"), &[])));
        assert!(!tags.matches(&message(Some("TagC"), &[])) && !tags.matches(&message(None, &[])));
        for bad in ["", "||", "A ||", "|| B", "A |||| B"] {
            assert!(Subscription::parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            !Subscription::parse("Aa")
                .expect("valid")
                .matches(&message(Some("BB"), &[])),
            "a shared hash is not a match"
        );
        assert_eq!(tags.expression(), ("TagA || TagB".into(), "TAG"));
    }

    #[test]
    fn sql_subscriptions_select_by_properties_and_tags() {
        let sql = Subscription::sql(" TAGS IN ('A') AND price > 10 ").expect("valid");
        assert!(sql.matches(&message(Some("A"), &[("price", "11")])));
        assert!(!sql.matches(&message(Some("B"), &[("price", "11")])));
        assert!(!sql.matches(&message(Some("A"), &[])));
        assert_eq!(sql.tags(), Vec::<String>::new());
        assert_eq!(sql.sql_text(), "TAGS IN ('A') AND price > 10");
        assert_eq!(sql.expression().1, "SQL92");
        let error = Subscription::sql("price >").expect_err("invalid");
        assert!(error.contains("at byte 7"), "{error}");
    }
}
