"""What a call to a remote agent fails with when the agent is at fault: the run fails
`remote_agent`, its message in plain words (the run page shows it as it is)."""

from runs.models import FailureCode
from runs.runtime.tools import ToolFailure


class RemoteAgentFailed(ToolFailure):
    code = FailureCode.REMOTE_AGENT
