//! Spans around the lock operations, at no cost when no subscriber listens: a lock cycle is a
//! few microseconds of client work, and entering a disabled span on every poll, or reading the
//! clock for a field nobody records, is a measurable part of it.

use std::future::Future;

use tracing::{Instrument, Span};

/// Runs `future` inside `span`, or as is when the span is disabled.
pub(crate) async fn in_span<F: Future>(span: &Span, future: F) -> F::Output {
    if span.is_disabled() {
        future.await
    } else {
        future.instrument(span.clone()).await
    }
}

/// Records `field` on `span` with the value `value` computes, computing it only if the span
/// is enabled.
pub(crate) fn record_with<V: std::fmt::Debug>(span: &Span, field: &str, value: impl FnOnce() -> V) {
    if !span.is_disabled() {
        span.record(field, tracing::field::debug(value()));
    }
}

/// Records a lock operation's outcome on its span: `ok` if it succeeded, else the error's text.
pub(crate) fn record_outcome<T, E: std::fmt::Display>(
    span: &Span,
    outcome: Result<T, E>,
    ok: &'static str,
) {
    match outcome {
        Ok(_) => span.record("outcome", ok),
        Err(error) => span.record("outcome", tracing::field::display(error)),
    };
}
