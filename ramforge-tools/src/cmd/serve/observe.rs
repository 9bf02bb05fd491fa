//! What a person or a monitor looks at: the chat page at `/` (one embedded file, `page.html`:
//! no build step, nothing fetched from elsewhere), `/metrics` in Prometheus' text format and
//! `/status` as JSON (what the page's live panel polls). Like `/health`, they need no API key.

use super::metrics::{prometheus_text, Snapshot};
use super::state::State;
use axum::extract::State as Shared;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

/// The chat page.
const PAGE: &str = include_str!("page.html");

pub async fn page() -> Html<&'static str> {
    Html(PAGE)
}

fn snapshot(state: &State) -> Snapshot {
    state
        .telemetry
        .snapshot(state.queue.figures(state.parallel))
}

pub async fn metrics(Shared(state): Shared<Arc<State>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        prometheus_text(&snapshot(&state)),
    )
        .into_response()
}

/// The figures as JSON, with the model's name and context.
pub async fn status(Shared(state): Shared<Arc<State>>) -> Response {
    let mut value = serde_json::to_value(snapshot(&state)).unwrap_or_default();
    value["model"] = state.model_id.clone().into();
    value["ctx"] = state.ctx.into();
    value["chat"] = state.chat.is_some().into();
    Json(value).into_response()
}
