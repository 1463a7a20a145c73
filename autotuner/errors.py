"""One exception hierarchy for the whole package.

Every error the tool raises on purpose derives from :class:`AutotunerError`, so a caller (the CLI,
the controller loop) can tell "bad input, refused cleanly" from a bug.
"""


class AutotunerError(Exception):
    """Base class of every error spec-autotuner raises deliberately."""


class InputError(AutotunerError, ValueError):
    """Input from a user or a file is invalid; nothing was changed."""


class ModelConfigError(InputError):
    """A model config.json cannot be turned into a ModelSpec."""


class ProfileError(InputError):
    """A hardware profile is missing, corrupted or of an unsupported version."""
