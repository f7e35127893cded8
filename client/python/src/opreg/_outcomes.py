"""What ``work`` and ``reconcile`` return or raise, and what ``run_once``
returns: the vocabulary that the protocol's decisions (``_decide``) and the
helpers (``_run``, the clients, ``_worker``) share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._convert import Seconds
from ._gen.v1 import registry_pb2 as pb

__all__ = [
    "Result",
    "BusinessError",
    "BusinessFailure",
    "TransientError",
    "SentButUnconfirmed",
    "Reconciliation",
]


@dataclass(frozen=True)
class Result:
    """A recorded success. ``replayed`` is true when it was recorded by an
    earlier execution (Claim answered REPLAYED) and ``work`` did not run."""

    value: bytes
    result_ref: str = ""
    replayed: bool = False
    operation: pb.Operation = field(default_factory=pb.Operation, repr=False, compare=False)


class BusinessError(Exception):
    """Raise from ``work`` for a terminal business failure (e.g. insufficient
    balance): it is recorded with Complete(failure) and replayed like a success."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class BusinessFailure(BusinessError):
    """Raised by ``run_once`` for a recorded business failure: the one the work
    just reported (``replayed`` false) or one recorded earlier (``replayed`` true)."""

    def __init__(self, code: str, message: str = "", *, replayed: bool, operation: Any = None) -> None:
        super().__init__(code, message)
        self.replayed = replayed
        self.operation: pb.Operation | None = operation


class TransientError(Exception):
    """Raise from ``work`` for a failure worth retrying (reported as
    Complete(retryable)). ``retry_after`` is downstream pushback: the next
    attempt is due exactly then. ``error_class`` defaults to the class name."""

    def __init__(self, message: str = "", *, retry_after: Seconds | None = None, error_class: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.error_class = error_class or type(self).__name__


class SentButUnconfirmed(Exception):
    """Raise from ``work`` when the request may have taken effect (e.g. a timeout
    after it left): reported as Complete(unknown) with ``remote_ref``, and
    reconciled before anything re-executes."""

    def __init__(self, remote_ref: str = "", message: str = "") -> None:
        super().__init__(message or f"sent but unconfirmed (remote_ref={remote_ref!r})")
        self.remote_ref = remote_ref
        self.message = message


@dataclass(frozen=True)
class Reconciliation:
    """What ``reconcile(lease, remote_ref)`` found out about the unknown attempt.
    Build with :meth:`succeeded`, :meth:`failed` or :meth:`not_applied`."""

    kind: str
    result: bytes = b""
    result_ref: str = ""
    code: str = ""
    message: str = ""

    @classmethod
    def succeeded(cls, result: bytes = b"", result_ref: str = "") -> Reconciliation:
        """The attempt took effect; record this result."""
        return cls("succeeded", result=bytes(result), result_ref=result_ref)

    @classmethod
    def failed(cls, code: str, message: str = "") -> Reconciliation:
        """The attempt ended in a terminal business failure; record it."""
        return cls("failed", code=code, message=message)

    @classmethod
    def not_applied(cls) -> Reconciliation:
        """The attempt did not take effect: run ``work`` under the same lease."""
        return cls("not_applied")


# A report Complete can send.
Outcome = pb.Success | pb.Failure | pb.RetryableError | pb.UnknownOutcome

# Returned by an execution whose report asks for another Claim.
AGAIN = object()
