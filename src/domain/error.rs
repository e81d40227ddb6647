//! The vocabulary of run, step and tool failures: [`ErrorCode`], one stable snake_case word per
//! way something can fail, each knowing whether trying again may help, and [`RunError`], a code
//! with a human sentence.
//!
//! Codes are part of the public contract (they reach `error` events, step attempts and run
//! objects), so a variant's text never changes. Retryability is a property of the code, not of
//! the call site: a retry policy that lists no codes retries exactly the retryable ones.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::ToSchema;

/// Declares [`ErrorCode`]: each variant with its text and whether a retry may succeed.
macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, $retry:literal; )*) => {
        /// A stable error code. Tools of library users may report codes orca does not know
        /// ([`ErrorCode::Other`]); they are kept as they are and never retried by nature.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )*
            /// A code this build has no variant for (a tool's own, or a newer orca's).
            Other(Cow<'static, str>),
        }

        impl ErrorCode {
            pub fn as_str(&self) -> &str {
                match self {
                    $( ErrorCode::$variant => $text, )*
                    ErrorCode::Other(code) => code,
                }
            }

            /// Whether the same call, tried again, may succeed.
            pub fn retryable(&self) -> bool {
                match self {
                    $( ErrorCode::$variant => $retry, )*
                    ErrorCode::Other(_) => false,
                }
            }

            fn known(text: &str) -> Option<ErrorCode> {
                match text {
                    $( $text => Some(ErrorCode::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    // The run as a whole.
    /// The run (or the call) was cancelled.
    Cancelled = "cancelled", false;
    /// The server stopped while the attempt was in flight; it runs again after the restart.
    Interrupted = "interrupted", false;
    /// The run exceeded its time limit.
    TimedOut = "timed_out", false;
    /// A bug or an unreadable stored state; the server log has the detail.
    InternalError = "internal_error", false;
    /// The store could not be read.
    StoreUnavailable = "store_unavailable", false;
    // Limits.
    StepLimitExceeded = "step_limit_exceeded", false;
    TokenLimitExceeded = "token_limit_exceeded", false;
    ToolRoundsExceeded = "tool_rounds_exceeded", false;
    LoopLimitExceeded = "loop_limit_exceeded", false;
    /// A breakpoint reached while the tenant has `quotas.paused_runs` runs paused.
    PausedRunsExceeded = "paused_runs_exceeded", false;
    // Plans and their steps.
    InvalidPlan = "invalid_plan", false;
    /// The planner gave no valid plan, repairs included.
    PlanningFailed = "planning_failed", false;
    InvalidStep = "invalid_step", false;
    /// A `{{ }}` reference could not be resolved.
    BadReference = "bad_reference", false;
    /// A CEL condition failed to evaluate or gave no boolean.
    BadCondition = "bad_condition", false;
    /// A template would render a value over `engine.max_rendered_bytes`.
    RenderLimitExceeded = "render_limit_exceeded", false;
    /// A plan's `session_variables` would pass one of the session's limits
    /// (`context.session_max_*`); none of them was stored.
    SessionLimitExceeded = "session_limit_exceeded", false;
    /// A step attempt ran past its `timeout_ms`.
    StepTimeout = "step_timeout", true;
    /// The model's answer broke the step's output schema (another answer may not).
    InvalidLlmOutput = "invalid_llm_output", true;
    /// A step's `expect` condition was false for its output.
    UnexpectedResult = "unexpected_result", false;
    /// A run repeated itself (the same tool call and result, the same plan, the same failure)
    /// and was ended.
    LoopDetected = "loop_detected", false;
    /// A reactive run needed a new plan past its `max_replans`.
    ReplanLimitExceeded = "replan_limit_exceeded", false;
    /// A new plan version did only part of the task (its re-planner said so), for a reason
    /// that was not a step's failure (e.g. a run wrapped up near its limit).
    TaskIncomplete = "task_incomplete", false;
    /// A `handoff` step's agents handed off more than its `max_transitions`.
    HandoffLimitExceeded = "handoff_limit_exceeded", false;
    // Models.
    /// HTTP 429 from the provider.
    LlmRateLimited = "llm_rate_limited", true;
    /// The provider failed (HTTP 5xx).
    LlmError = "llm_error", true;
    /// The provider refused the request (HTTP 4xx other than 429): sending it again will not help.
    LlmRejected = "llm_rejected", false;
    LlmTimeout = "llm_timeout", true;
    /// The provider could not be reached.
    LlmUnavailable = "llm_unavailable", true;
    LlmMalformedResponse = "llm_malformed_response", false;
    UnknownModel = "unknown_model", false;
    // Tools.
    ToolNotFound = "tool_not_found", false;
    InvalidToolArguments = "invalid_tool_arguments", false;
    ToolTimeout = "tool_timeout", true;
    /// A `memory.*` tool asked for a scope the run does not have (`user` without a
    /// `user_id`, `session` without a `session_id`) or may not write (`shared` for a run of
    /// a user).
    MemoryScopeUnavailable = "memory_scope_unavailable", false;
    /// A memory write past `[memory]`'s limits (item, namespace or tenant size).
    MemoryLimitExceeded = "memory_limit_exceeded", false;
    PathOutsideWorkspace = "path_outside_workspace", false;
    FileNotFound = "file_not_found", false;
    NotAFile = "not_a_file", false;
    FileTooLarge = "file_too_large", false;
    NotText = "not_text", false;
    PermissionDenied = "permission_denied", false;
    /// An I/O failure of the operating system; often passing.
    IoError = "io_error", true;
    InvalidExpression = "invalid_expression", false;
    MathError = "math_error", false;
    InvalidTimezone = "invalid_timezone", false;
    /// An MCP server's tool answered with `isError: true`.
    McpToolError = "mcp_tool_error", false;
    /// An MCP server could not be reached, or its connection failed during the call.
    McpUnavailable = "mcp_unavailable", true;
    /// An HTTP tool's destination (or a redirect's) is not a public address, nor allowed.
    DestinationNotAllowed = "destination_not_allowed", false;
    /// An HTTP tool's URL, once its arguments are in it, is not a valid URL.
    InvalidUrl = "invalid_url", false;
    /// An HTTP tool's answer is longer than its `max_response_bytes`.
    ResponseTooLarge = "response_too_large", false;
    /// An HTTP tool's server answered 4xx (other than 429).
    HttpClientError = "http_client_error", false;
    /// An HTTP tool's server answered 5xx or 429.
    HttpServerError = "http_server_error", true;
    /// An HTTP tool's server could not be reached.
    HttpUnavailable = "http_unavailable", true;
    /// An HTTP tool's header names an environment variable that is not set.
    SecretMissing = "secret_missing", false;
    /// An HTTP tool declared through the API names an environment variable the operator did
    /// not list in `tools.http_api_env`.
    SecretNotAllowed = "secret_not_allowed", false;
    // Middleware.
    /// An agent's answer matched a `guardrail` whose action is `block`.
    GuardrailBlocked = "guardrail_blocked", false;
    /// A human denied a tool call that `tool_approval` held (the model is told, and goes on).
    ToolDenied = "tool_denied", false;
}

impl ErrorCode {
    /// The code named `text`: its variant when there is one, else [`ErrorCode::Other`].
    pub fn parse(text: &str) -> ErrorCode {
        ErrorCode::known(text).unwrap_or_else(|| ErrorCode::Other(Cow::Owned(text.to_owned())))
    }
}

/// Tools written outside orca name their codes as text (`ToolError::failed("flaky", ..)`).
impl From<&'static str> for ErrorCode {
    fn from(text: &'static str) -> Self {
        ErrorCode::known(text).unwrap_or(ErrorCode::Other(Cow::Borrowed(text)))
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Cow::<'de, str>::deserialize(d)?;
        Ok(ErrorCode::parse(&text))
    }
}

/// Why a run (or step) failed: a stable code and a human sentence. Never carries secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunError {
    #[schema(value_type = String)]
    pub code: ErrorCode,
    pub message: String,
}

impl RunError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RunError {
            code,
            message: message.into(),
        }
    }

    /// Whether trying the failed call again may help (a property of the code).
    pub fn retryable(&self) -> bool {
        self.code.retryable()
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_text() {
        for code in [
            ErrorCode::Cancelled,
            ErrorCode::StepTimeout,
            ErrorCode::LlmRejected,
            ErrorCode::PathOutsideWorkspace,
            ErrorCode::InvalidUrl,
        ] {
            let json = serde_json::to_value(&code).unwrap();
            assert_eq!(json, serde_json::Value::String(code.as_str().to_owned()));
            assert_eq!(serde_json::from_value::<ErrorCode>(json).unwrap(), code);
        }
        // Once written as text where they are raised: the same words now.
        assert_eq!(ErrorCode::InvalidUrl.as_str(), "invalid_url");
        assert_eq!(ErrorCode::LoopDetected.as_str(), "loop_detected");
    }

    #[test]
    fn unknown_codes_are_kept_and_not_retryable() {
        let code: ErrorCode = serde_json::from_str("\"flaky\"").unwrap();
        assert_eq!(code, ErrorCode::Other(Cow::Borrowed("flaky")));
        assert_eq!(code, "flaky");
        assert!(!code.retryable());
        assert_eq!(ErrorCode::from("io_error"), ErrorCode::IoError);
    }

    #[test]
    fn retryability_belongs_to_the_code() {
        let table = [
            (ErrorCode::LlmError, true),
            (ErrorCode::LlmRejected, false),
            (ErrorCode::LlmRateLimited, true),
            (ErrorCode::ToolTimeout, true),
            (ErrorCode::IoError, true),
            (ErrorCode::InvalidLlmOutput, true),
            (ErrorCode::ToolNotFound, false),
            (ErrorCode::Cancelled, false),
        ];
        for (code, retryable) in table {
            assert_eq!(code.retryable(), retryable, "{code}");
        }
    }
}
