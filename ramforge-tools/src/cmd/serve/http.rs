//! The routes: `/` (the chat page), `/metrics`, `/status`, `/health`, `/v1/models`, `/v1/chat/completions`, `/v1/completions`; the API-key
//! check on `/v1/*`, the body limit, and OpenAI-style errors for everything that goes wrong
//! (404 and 405 included).

use super::answer::answer;
use super::api::{chat_request, completion_request, GenRequest};
use super::errors::ApiError;
use super::metrics::count_requests;
use super::observe;
use super::state::State;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State as Shared};
use axum::http::{header, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;

/// The largest request body taken (a bigger one is a 413).
pub const BODY_LIMIT: usize = 1 << 20;

/// The server's routes over `state`.
pub fn router(state: Arc<State>) -> Router {
    let v1 = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route_layer(from_fn_with_state(Arc::clone(&state), check_key));
    let counted = Arc::clone(&state.telemetry);
    Router::new()
        .route("/", get(observe::page))
        .route("/metrics", get(observe::metrics))
        .route("/status", get(observe::status))
        .route("/health", get(health))
        .merge(v1)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(from_fn_with_state(counted, count_requests))
        .with_state(state)
}

/// With `--api-key`, `/v1/*` wants `Authorization: Bearer KEY`.
async fn check_key(Shared(state): Shared<Arc<State>>, request: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(key.as_str()) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// Up, with how many requests it decodes together at most (`parallel`) and the most one
/// decoding step has served so far (`busiest_step`).
async fn health(Shared(state): Shared<Arc<State>>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "parallel": state.parallel,
        "busiest_step": state.busiest.get(),
    }))
}

async fn models(Shared(state): Shared<Arc<State>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [state.model_card()]}))
}

async fn model(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> Response {
    if id == state.model_id {
        Json(state.model_card()).into_response()
    } else {
        unknown_model(&id).into_response()
    }
}

async fn chat(
    Shared(state): Shared<Arc<State>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request = chat_request(json_body(body)?)?;
    run(state, request).await
}

async fn completions(
    Shared(state): Shared<Arc<State>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request = completion_request(json_body(body)?)?;
    run(state, request).await
}

async fn run(state: Arc<State>, request: GenRequest) -> Result<Response, ApiError> {
    if request.model != state.model_id {
        return Err(unknown_model(&request.model));
    }
    answer(state, request).await
}

fn unknown_model(id: &str) -> ApiError {
    ApiError::not_found(
        format!(
            "The model '{id}' does not exist: this server serves only the one listed at /v1/models"
        ),
        "model_not_found",
    )
}

/// The body as JSON: 413 over the limit, 400 when it is not JSON.
fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(BODY_LIMIT)
        } else {
            ApiError::invalid(None, format!("could not read the request body: {e}"))
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::invalid(
            None,
            format!("We could not parse the JSON body of your request: {e}"),
        )
        .with_code("invalid_json")
    })
}

async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(
        format!(
            "no such route: {} {}",
            request.method(),
            request.uri().path()
        ),
        "unknown_url",
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    let mut e = ApiError::invalid(
        None,
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    );
    e.status = StatusCode::METHOD_NOT_ALLOWED;
    e.with_code("method_not_allowed")
}
