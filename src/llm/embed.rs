//! Embeddings (issue 48): the vector of a text by the model an alias names, for memory searched
//! by meaning. The provider kinds that have an embeddings API implement
//! [`super::LlmProvider::embed`]: OpenAI-compatible servers (`POST /embeddings`), Ollama
//! (`POST /api/embed`), and the offline provider, whose small deterministic embedding ([`offline`])
//! lets tests and demos search by meaning without a key.

use std::time::Duration;

use super::Error;
use super::router::{LlmRouter, Target};

/// The model that embeds memory items and queries: an alias's own target (no fallbacks: a
/// vector of one model is not comparable with another's).
#[derive(Clone)]
pub struct Embedder {
    target: Target,
}

/// The longest an embedding call may take when the alias sets no timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl Embedder {
    /// The embedder of `alias`; an error when no such alias is configured.
    pub fn new(router: &LlmRouter, alias: &str) -> Result<Embedder, Error> {
        let route = router.route(Some(alias))?;
        Ok(Embedder {
            target: route.targets()[0].clone(),
        })
    }

    /// What its vectors are named by where they are stored: the provider and its model. Items
    /// embedded by another model are not compared with this one's.
    pub fn model_id(&self) -> String {
        format!("{}:{}", self.target.provider.name(), self.target.model)
    }

    /// The embedding of `text`.
    pub async fn embed(&self, text: &str) -> Result<Vec<f32>, Error> {
        let timeout = self.target.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let texts = [text.to_owned()];
        let call = self.target.provider.embed(&self.target.model, &texts);
        let mut vectors = tokio::time::timeout(timeout, call).await.map_err(|_| {
            Error::Timeout(format!("no embedding within {} ms", timeout.as_millis()))
        })??;
        match (vectors.pop(), vectors.is_empty()) {
            (Some(v), true) if !v.is_empty() => Ok(v),
            _ => Err(Error::Malformed(
                "the embeddings answer did not hold one vector".into(),
            )),
        }
    }
}

/// The offline provider's embedding: each word (lower-cased, a plural `s` dropped) hashed to
/// one of 256 dimensions with a sign, the sum normalised. Texts sharing words are close; it
/// knows nothing of meaning beyond that, and needs no network.
pub fn offline(text: &str) -> Vec<f32> {
    const DIMENSIONS: usize = 256;
    let mut v = vec![0f32; DIMENSIONS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let mut word = word.to_lowercase();
        if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") {
            word.pop();
        }
        // FNV-1a: stable across builds and platforms.
        let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
        v[(hash % DIMENSIONS as u64) as usize] += sign;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::offline;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn the_offline_embedding_is_deterministic_and_close_for_shared_words() {
        let a = offline("Alice has a cat called Miso");
        assert_eq!(a, offline("Alice has a cat called Miso"));
        assert_eq!(a.len(), 256);
        let near = offline("does she have cats?");
        let far = offline("the quarterly revenue report");
        assert!(
            cosine(&a, &near) > cosine(&a, &far),
            "{} vs {}",
            cosine(&a, &near),
            cosine(&a, &far)
        );
        assert!(offline("").iter().all(|x| *x == 0.0));
    }
}
