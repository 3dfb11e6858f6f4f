//! Query-time embedding: the text query of a `nearest` becomes a vector
//! through any OpenAI-compatible endpoint: `POST {url}/embeddings` with
//! `{"model", "input": [text]}`. The model is the one the property's
//! `@embed` names, else the configured default; a key, when configured, is
//! sent as a bearer token. [`EmbedConfig::from_env`] reads
//! `OMNIGRAPH_EMBED_URL`, `OMNIGRAPH_EMBED_MODEL`, `OMNIGRAPH_EMBED_KEY` and
//! `OMNIGRAPH_EMBED_TIMEOUT_MS`. Every way this can fail is an
//! `EmbeddingError` naming it.

use std::sync::OnceLock;
use std::time::Duration;

use crate::compiler::query::ir::Embed;
use crate::error::{OmniError, Result};

/// How long one embedding request may take unless configured.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// How much of a refusal's body an error quotes.
const QUOTED_BODY: usize = 200;

fn setting(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Where and how text queries are embedded (a handle's [`crate::OpenOptions`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EmbedConfig {
    /// The endpoint's base URL (`/embeddings` is appended).
    pub url: Option<String>,
    /// The model when the property's `@embed` names none.
    pub model: Option<String>,
    /// Sent as `Authorization: Bearer <key>`.
    pub key: Option<String>,
    /// How long one request may take (`None`: [`DEFAULT_TIMEOUT_MS`]).
    pub timeout_ms: Option<u64>,
    /// A setting that could not be read, reported when a query needs it.
    pub invalid: Option<String>,
}

impl EmbedConfig {
    pub fn from_env() -> Self {
        let mut c = EmbedConfig {
            url: setting("OMNIGRAPH_EMBED_URL"),
            model: setting("OMNIGRAPH_EMBED_MODEL"),
            key: setting("OMNIGRAPH_EMBED_KEY"),
            ..Default::default()
        };
        if let Some(t) = setting("OMNIGRAPH_EMBED_TIMEOUT_MS") {
            match t.trim().parse() {
                Ok(ms) => c.timeout_ms = Some(ms),
                Err(_) => {
                    c.invalid = Some(format!(
                        "OMNIGRAPH_EMBED_TIMEOUT_MS is {t:?}, not a number of milliseconds"
                    ))
                }
            }
        }
        c
    }
}

fn failed(message: impl Into<String>) -> OmniError {
    OmniError::Embedding(message.into())
}

/// One client per process: it keeps connections to the endpoint open.
fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(reqwest::Client::new)
}

/// `text` as a vector of `e.dim` dimensions.
pub async fn embed(config: &EmbedConfig, e: &Embed, text: &str) -> Result<Vec<f32>> {
    if let Some(why) = &config.invalid {
        return Err(failed(why.clone()));
    }
    let base = config.url.as_deref().ok_or_else(|| {
        failed("a text query needs an embedding endpoint: set OMNIGRAPH_EMBED_URL")
    })?;
    let model = e.model.clone().or_else(|| config.model.clone()).ok_or_else(|| {
        failed("no embedding model: the property's @embed names none and OMNIGRAPH_EMBED_MODEL is not set")
    })?;
    let timeout_ms = config.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    let url = format!("{}/embeddings", base.trim_end_matches('/'));
    let mut request = client()
        .post(&url)
        .timeout(Duration::from_millis(timeout_ms))
        .json(&serde_json::json!({ "model": model, "input": [text] }));
    if let Some(key) = &config.key {
        request = request.bearer_auth(key);
    }
    // A transport failure: too slow, or `what` went wrong.
    let transport = |what: &'static str| {
        let url = url.clone();
        move |err: reqwest::Error| {
            if err.is_timeout() {
                failed(format!("{url} did not answer within {timeout_ms} ms"))
            } else {
                failed(format!("{what} {url}: {err}"))
            }
        }
    };
    let response = request.send().await.map_err(transport("could not reach"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(transport("the answer broke off from"))?;
    if !status.is_success() {
        let quoted: String = body.chars().take(QUOTED_BODY).collect();
        return Err(failed(format!("{url} answered {status}: {quoted}")));
    }
    vector_of(&body, e.dim, &model)
}

/// The embedding in an OpenAI-style answer, checked.
fn vector_of(body: &str, dim: u32, model: &str) -> Result<Vec<f32>> {
    let not_one = || {
        failed(format!(
            "the answer for model {model} is not an embedding: {}",
            shorten(body)
        ))
    };
    let json: serde_json::Value = serde_json::from_str(body).map_err(|_| not_one())?;
    let items = json["data"][0]["embedding"]
        .as_array()
        .ok_or_else(not_one)?;
    let mut out = Vec::with_capacity(items.len());
    for x in items {
        let f = x.as_f64().ok_or_else(not_one)? as f32;
        if !f.is_finite() {
            return Err(failed(format!(
                "model {model} gave an embedding with a value that is not a finite 32-bit float"
            )));
        }
        out.push(f);
    }
    if out.len() != dim as usize {
        return Err(failed(format!(
            "model {model} gave a vector of {} dimensions; the property has {dim}",
            out.len()
        )));
    }
    Ok(out)
}

fn shorten(body: &str) -> String {
    let s: String = body.chars().take(QUOTED_BODY).collect();
    format!("{s:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_must_be_an_embedding_of_the_right_dimension() {
        let good = r#"{"data":[{"embedding":[0.5,-1,2]}]}"#;
        assert_eq!(vector_of(good, 3, "m").unwrap(), [0.5, -1.0, 2.0]);
        for (body, says) in [
            (good, "3 dimensions; the property has 4"),
            (r#"{"data":[]}"#, "not an embedding"),
            ("<html>", "not an embedding"),
            (r#"{"data":[{"embedding":[1,"x",3]}]}"#, "not an embedding"),
            (r#"{"data":[{"embedding":[1e300,0,0,0]}]}"#, "not a finite"),
        ] {
            match vector_of(body, 4, "m") {
                Err(OmniError::Embedding(m)) => assert!(m.contains(says), "{m}"),
                other => panic!("expected an embedding error for {body}, got {other:?}"),
            }
        }
    }
}
