"""The payload of every event, one TypedDict per event type, with the field names of
PROTOCOL §5 (capitalised, as Harbor's are). `events.emit` takes only these, so mypy checks
every payload a module builds; at runtime they are plain dicts and the wire is unchanged.

Token fields (`Token`, `PauseToken`) are never stored: `emit` keeps only their names and the
envelope fills the pause's token in. Where the pause is not minted yet (a companion built
by the runtime) or already decided, they carry `events.SEALED`."""

from typing import Any, NotRequired, TypedDict, cast

# --- Tasks -----------------------------------------------------------------------------------


class TaskSpawned(TypedDict):
    TaskID: str
    Priority: int
    ParentTaskID: str | None


class TaskStarted(TypedDict):
    TaskID: str
    Priority: int
    ParentTaskID: str | None


class TaskCompleted(TypedDict):
    TaskID: str
    Answer: str


class TaskFailed(TypedDict):
    TaskID: str
    Code: str  # a FailureCode: constraints_conflict, tool_context_lost, runtime_error, remote_agent
    Message: str


class TaskCancelled(TypedDict):
    TaskID: str
    Reason: str
    Cascaded: bool


class TaskPrioritised(TypedDict):
    TaskID: str
    PriorPriority: int
    NewPriority: int


class TaskRedirected(TypedDict):
    TaskID: str
    Goal: str


# --- Planner and tools -----------------------------------------------------------------------


class PlannerDecision(TypedDict):
    Step: int
    Decision: dict[str, str]  # planner.describe: Kind, and Tool or Cause


class ToolFacts(TypedDict, total=False):
    """What a tool's events name beside Tool and Step (`Tool.facts`): a delegated call's
    remote agent, remote task and context (approvals/a2a)."""

    Agent: str
    RemoteTaskID: str
    ContextID: str


class ToolInvoked(TypedDict):
    Tool: str
    Step: int
    Args: dict[str, Any]  # the tool's own JSON arguments
    Attempt: int
    Agent: NotRequired[str]
    RemoteTaskID: NotRequired[str]
    ContextID: NotRequired[str]


class ToolCompleted(TypedDict):
    Tool: str
    Step: int
    Result: object  # the tool's own JSON result
    Attempt: int
    Agent: NotRequired[str]
    RemoteTaskID: NotRequired[str]
    ContextID: NotRequired[str]


class ToolFailed(TypedDict):
    Tool: str
    Step: int
    Error: str
    Agent: NotRequired[str]
    RemoteTaskID: NotRequired[str]
    ContextID: NotRequired[str]


# --- Pauses and their companions (PROTOCOL §4) -------------------------------------------------


class PauseRequested(TypedDict):
    Token: str
    Reason: str
    Cause: str
    ExpiresAt: str | None


class PauseResumed(TypedDict):
    Token: str
    Reason: str
    Cause: str
    Decision: str  # approve, reject, resume, timeout, cancel


class ToolApprovalRequested(TypedDict):
    Tool: str
    PauseToken: str
    Reason: str
    ArgsSummary: str
    Editable: bool


class ToolAuthRequired(TypedDict):
    SourceName: str
    AuthorizeURL: str
    State: str
    PauseToken: str
    Scopes: list[str]


class ToolAuthCompleted(TypedDict):
    SourceName: str
    PauseToken: str


class ToolPauseCompanion(TypedDict):
    """The companion of a pause a tool raised (`ToolPause`: a2a.input_required,
    a2a.auth_required, ...): the tool's own fields, which PROTOCOL §5 leaves open, and the
    pause token. Only `PauseToken` is known here; see `tool_pause_companion`."""

    PauseToken: str


class NotificationPauseRequested(TypedDict):
    Summary: str
    Severity: str  # action_required for an approval gate, else info
    Deeplink: str
    PauseToken: str


class ToolDecided(TypedDict):
    """tool.approved and tool.rejected."""

    Tool: str
    PauseToken: str
    ApproverReason: str
    Actor: str


# --- Steering ----------------------------------------------------------------------------------


class Control(TypedDict):
    """control.received, control.applied and control.rejected."""

    Type: str  # the method in upper case: APPROVE
    Outcome: str
    Err: str


class ContextInjected(TypedDict):
    TaskID: str
    Context: dict[str, Any]  # the operator's own JSON object


class MessageReceived(TypedDict):
    TaskID: str
    Message: str


class Envelope(TypedDict):
    """The one envelope of every event on SSE and websockets (PROTOCOL §5)."""

    type: str
    sequence: int
    occurred_at: str
    tenant: str
    user: str
    session: str
    run: str
    payload: dict[str, Any]  # an EventPayload with its token fields filled in (or None)


CompanionPayload = ToolApprovalRequested | ToolAuthRequired | ToolPauseCompanion

EventPayload = (
    TaskSpawned
    | TaskStarted
    | TaskCompleted
    | TaskFailed
    | TaskCancelled
    | TaskPrioritised
    | TaskRedirected
    | PlannerDecision
    | ToolInvoked
    | ToolCompleted
    | ToolFailed
    | PauseRequested
    | PauseResumed
    | CompanionPayload
    | ToolAuthCompleted
    | NotificationPauseRequested
    | ToolDecided
    | Control
    | ContextInjected
    | MessageReceived
)


def tool_pause_companion(payload: dict[str, Any], pause_token: str) -> ToolPauseCompanion:
    """A tool's pause payload as its companion event's: the one place an open payload (the
    tool's) becomes an event payload, so its fields are the tool's to name."""
    return cast(ToolPauseCompanion, {**payload, "PauseToken": pause_token})
