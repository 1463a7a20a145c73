"""Every error spec-autotuner raises on purpose, and the typed reasons they carry.

A caller (the CLI, the controller loop) tells "refused cleanly, nothing changed" from a bug by
catching `AutotunerError`; the tree, as httpx draws its own:

* AutotunerError
  + InputError - input from a user or a file is invalid (also a ValueError)
    - ModelConfigError - a config.json cannot be turned into a ModelSpec
    - ProfileError - a hardware profile is missing, corrupted or of another version
    - ArgsError - engine args cannot be read or written safely
      - EngineRuleError - the engine would refuse the setup on these args (a rule named)
  + SourceError - metrics could not be fetched or trusted (carries an UnusableReason)
  + ActuatorError - a change could not be read or written
    - ConflictError - the target changed since it was read (HTTP 409)
    - ForbiddenError - RBAC refused the verb (HTTP 403)
    - RefusedByRuleError - the setup breaks a start-up rule of the engine on these args
    - AdviceOnlyError - the target is not the place to write (an owner, Helm, GitOps, a
      ConfigMap keeps the args): nothing written, the message says where the change belongs
    - RestartError - the args were written but the engine did not come up with them
  + CanaryError - the server did not answer the quality canary
  + SweepError - a bench sweep cannot go on

`UnusableReason` names why a window of metrics yields no Observation; it lives here because
sources raise it inside a `SourceError` and the core reports it on an Observation.
"""

from enum import Enum


class UnusableReason(str, Enum):
    """Why a window yields no Observation (DESIGN.md rule 1: never act on bad data)."""

    EMPTY = "empty"  # no engine series at all
    STALE = "stale"  # the newest sample is older than allowed
    INVALID_VALUE = "invalid_value"  # NaN, Inf or a negative counter/gauge
    RESET = "reset"  # too little left of the window after cutting at a counter reset
    TOO_FEW_SAMPLES = "too_few_samples"
    MALFORMED = "malformed"  # the exposition text could not be parsed
    DUPLICATE_SERIES = "duplicate_series"
    NOT_METRICS = "not_metrics"  # e.g. an HTML error page
    TOO_LARGE = "too_large"
    TIMEOUT = "timeout"
    HTTP_ERROR = "http_error"
    SERVER_DOWN = "server_down"
    QUERY_ERROR = "query_error"
    EMPTY_RESULT = "empty_result"


class AutotunerError(Exception):
    """Base class of every error spec-autotuner raises deliberately."""


class InputError(AutotunerError, ValueError):
    """Input from a user or a file is invalid; nothing was changed."""


class ModelConfigError(InputError):
    """A model config.json cannot be turned into a ModelSpec."""


class ProfileError(InputError):
    """A hardware profile is missing, corrupted or of an unsupported version."""


class ArgsError(InputError):
    """The args cannot be read or written safely; nothing was changed."""


class EngineRuleError(ArgsError):
    """The setup breaks a rule on these args (one the engine checks at start, or the tuner's
    own, named in the message); nothing was changed. Unlike other ArgsErrors, the args could
    be written: `override` names the option that writes them anyway."""

    def __init__(self, message: str, *, override: str = "--force") -> None:
        super().__init__(message)
        self.override = override


# --------------------------------------------------------------------------- finding flags


class SourceError(AutotunerError):
    """Data could not be fetched or trusted; `reason` says why in a word."""

    def __init__(self, reason: UnusableReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class ActuatorError(AutotunerError):
    """A change could not be read or written; nothing was changed unless `partial` says so."""


class ConflictError(ActuatorError):
    """The target changed since it was read in what the step decided on, or the race was lost
    every time (HTTP 409): re-decide next step."""


class RestartError(ActuatorError):
    """The new args were written but the engine did not come up with them (the restart
    command failed or timed out): the engine may have refused a flag."""


class ForbiddenError(ActuatorError):
    """RBAC refused the verb (HTTP 403)."""


class RefusedByRuleError(ActuatorError):
    """An EngineRuleError met while rendering the target's args: the setup breaks a start-up
    rule of the engine (nothing written). `apply` exits with it as with the build's other
    refusals; the loop sees a change it cannot make."""


class AdviceOnlyError(ActuatorError):
    """The target is not the place to write (its controller, a ConfigMap, Helm or GitOps
    keeps the args): nothing was written; the message says where the change belongs."""


class CanaryError(AutotunerError):
    """The server did not answer the canary (down, HTTP error, not OpenAI-compatible)."""


class SweepError(AutotunerError):
    """The sweep cannot go on (the server did not come back); finished points are kept."""
