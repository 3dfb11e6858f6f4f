//! Bearer tokens: read from `{"actor": "token", ...}` JSON, kept only as
//! SHA-256 digests, and matched in constant time to the actor they name.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{OmniError, Result};

pub struct Tokens {
    digests: Vec<([u8; 32], String)>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Tokens {
    /// Parse the JSON object `text` (from `source`, named in errors).
    pub fn parse(text: &str, source: &str) -> Result<Self> {
        let bad = |why: String| OmniError::BadRequest(format!("tokens in {source}: {why}"));
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| bad(format!("not a JSON object ({e})")))?;
        let mut digests: Vec<([u8; 32], String)> = Vec::new();
        for (actor, token) in map {
            let token = token
                .as_str()
                .ok_or_else(|| bad(format!("the token of actor {actor:?} is not a string")))?;
            if actor.is_empty() || token.is_empty() {
                return Err(bad("an actor or a token is empty".into()));
            }
            let d = digest(token);
            if let Some((_, other)) = digests.iter().find(|(o, _)| *o == d) {
                return Err(bad(format!(
                    "actors {other:?} and {actor:?} have the same token"
                )));
            }
            digests.push((d, actor));
        }
        if digests.is_empty() {
            return Err(bad("no tokens".into()));
        }
        Ok(Self { digests })
    }

    /// The actor whose token `presented` is. Every digest is compared, so
    /// the time taken says nothing about which one matched.
    pub fn actor(&self, presented: &str) -> Option<&str> {
        let d = digest(presented);
        let mut found = None;
        for (known, actor) in &self.digests {
            if bool::from(known.ct_eq(&d)) {
                found = Some(actor.as_str());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_actor_and_nothing_else_does() {
        let t = Tokens::parse(r#"{"alice": "s3cret", "bob": "other"}"#, "test").unwrap();
        assert_eq!(t.actor("s3cret"), Some("alice"));
        assert_eq!(t.actor("other"), Some("bob"));
        assert_eq!(t.actor("s3cre"), None);
        assert_eq!(t.actor(""), None);
    }

    #[test]
    fn bad_token_files_are_refused_with_the_reason() {
        for (text, why) in [
            ("{}", "no tokens"),
            ("[1]", "not a JSON object"),
            (r#"{"a": 1}"#, "is not a string"),
            (r#"{"a": "x", "b": "x"}"#, "the same token"),
            (r#"{"a": ""}"#, "empty"),
        ] {
            match Tokens::parse(text, "f.json") {
                Err(OmniError::BadRequest(m)) => {
                    assert!(m.contains(why) && m.contains("f.json"), "{text}: {m}")
                }
                Err(e) => panic!("{text}: {e}"),
                Ok(_) => panic!("{text} was accepted"),
            }
        }
    }
}
