"""torch_xla.experimental.assume_pure."""

from .._tools import assume_pure  # noqa: F401
