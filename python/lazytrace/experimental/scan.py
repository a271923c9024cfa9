"""torch_xla.experimental.scan."""

from .._tools import scan  # noqa: F401
