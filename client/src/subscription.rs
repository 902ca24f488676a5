//! Subscription expressions: `"*"` takes every message, `"TagA || TagB"` takes those tags.
//! The broker filters by the tags' hash codes; [`Subscription::matches`] re-checks the tag
//! string, since different tags can share a hash (`"Aa"` and `"BB"`).

use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    All,
    Tags(BTreeSet<String>),
}

impl Subscription {
    /// Parses an expression; an empty tag (`"A ||"`, `"||"`, `""`) is an error.
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

    /// The tags to send with a pull (empty = all).
    pub fn tags(&self) -> Vec<String> {
        match self {
            Subscription::All => Vec::new(),
            Subscription::Tags(tags) => tags.iter().cloned().collect(),
        }
    }

    pub fn matches(&self, tag: Option<&str>) -> bool {
        match self {
            Subscription::All => true,
            Subscription::Tags(tags) => tag.is_some_and(|tag| tags.contains(tag)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions() {
        assert_eq!(Subscription::parse(" * "), Ok(Subscription::All));
        let tags = Subscription::parse("TagA || TagB").expect("valid");
        assert!(tags.matches(Some("TagA")) && tags.matches(Some("TagB")));
        assert!(!tags.matches(Some("TagC")) && !tags.matches(None));
        for bad in ["", "||", "A ||", "|| B", "A |||| B"] {
            assert!(Subscription::parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            !Subscription::parse("Aa")
                .expect("valid")
                .matches(Some("BB")),
            "a shared hash is not a match"
        );
    }
}
