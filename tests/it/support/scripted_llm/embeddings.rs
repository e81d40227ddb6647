//! Embeddings on the scripted server: OpenAI's `POST /v1/embeddings` and Ollama's
//! `POST /api/embed`, refused as the real ones refuse (OpenAI: a missing key, an unknown
//! argument, a missing model, an input that is not a non-empty string or a non-empty list of
//! at most 2,048 non-empty strings, an `encoding_format` other than `float` or `base64`).
//!
//! The vectors stand for meaning as far as a test needs it: each word of a [`CONCEPTS`] group
//! adds to that group's dimension, so "feline" is close to "cat" though they share no letters;
//! other words land on hashed dimensions of their own.

use super::*;

/// Words that mean alike, one dimension per group.
const CONCEPTS: &[&[&str]] = &[
    &["cat", "cats", "feline", "kitten", "kitty", "tomcat"],
    &["tea", "sencha", "matcha", "oolong", "gyokuro", "chai"],
    &["violin", "piano", "cello", "instrument", "fiddle", "music"],
    &["lisbon", "porto", "portugal", "city", "town"],
    &[
        "job",
        "work",
        "career",
        "profession",
        "glassblower",
        "occupation",
    ],
];
const DIMENSIONS: usize = 64;

/// The scripted embedding of `text`, normalised.
pub fn vector(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIMENSIONS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        let dim = match CONCEPTS.iter().position(|g| g.contains(&word.as_str())) {
            Some(group) => group,
            None => {
                let hash = word
                    .bytes()
                    .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
                CONCEPTS.len() + (hash as usize) % (DIMENSIONS - CONCEPTS.len())
            }
        };
        v[dim] += 1.0;
    }
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.into_iter().map(|x| x / norm).collect()
}

fn openai_error(status: StatusCode, message: &str, param: Option<&str>) -> Response {
    let error = json!({"error": {"message": message, "type": "invalid_request_error",
                                 "param": param, "code": null}});
    (status, axum::Json(error)).into_response()
}

/// Why OpenAI would refuse `body`: the message and the blamed parameter.
fn refusal(body: &Value) -> Option<(String, Option<&'static str>)> {
    let Some(map) = body.as_object() else {
        return Some((
            "We could not parse the JSON body of your request.".into(),
            None,
        ));
    };
    const KNOWN: &[&str] = &["model", "input", "encoding_format", "dimensions", "user"];
    if let Some(unknown) = map.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Some((
            format!("Unrecognized request argument supplied: {unknown}"),
            None,
        ));
    }
    if !map.get("model").is_some_and(Value::is_string) {
        return Some(("you must provide a model parameter".into(), Some("model")));
    }
    let input_ok = match map.get("input") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(items)) => {
            !items.is_empty()
                && items.len() <= 2048
                && items
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| !s.is_empty()))
        }
        _ => false,
    };
    if !input_ok {
        return Some((
            "'input' must be a non-empty string or a non-empty array of at most 2048 non-empty strings".into(),
            Some("input"),
        ));
    }
    let format = map.get("encoding_format");
    if format.is_some_and(|f| !matches!(f.as_str(), Some("float" | "base64"))) {
        return Some((
            "'encoding_format' must be 'float' or 'base64'".into(),
            Some("encoding_format"),
        ));
    }
    None
}

fn inputs(body: &Value) -> Vec<String> {
    match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

pub(super) async fn openai_embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let bearer = header_text(&headers, header::AUTHORIZATION.as_str());
    if !bearer
        .as_deref()
        .is_some_and(|b| b.starts_with("Bearer ") && b.len() > 7)
    {
        return openai_error(
            StatusCode::UNAUTHORIZED,
            "You didn't provide an API key.",
            None,
        );
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some((message, param)) = refusal(&body) {
        shared.lock().refusals.push(message.clone());
        return openai_error(StatusCode::BAD_REQUEST, &message, param);
    }
    let texts = inputs(&body);
    shared.lock().embedded.extend(texts.iter().cloned());
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector(t)}))
        .collect();
    let tokens: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    axum::Json(
        json!({"object": "list", "data": data, "model": body["model"],
                      "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}),
    )
    .into_response()
}

pub(super) async fn ollama_embed(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let texts = inputs(&body);
    if !body.get("model").is_some_and(Value::is_string) || texts.is_empty() {
        let message = "model and input are required".to_owned();
        shared.lock().refusals.push(message.clone());
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": message})),
        )
            .into_response();
    }
    shared.lock().embedded.extend(texts.iter().cloned());
    let embeddings: Vec<Vec<f32>> = texts.iter().map(|t| vector(t)).collect();
    axum::Json(json!({"model": body["model"], "embeddings": embeddings})).into_response()
}
