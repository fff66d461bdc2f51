"""One error type for everything that stops the embedded stack from starting, with the fix in its text."""


class StackError(RuntimeError):
    """The embedded stack cannot start or stop; the message says why and what to do."""
