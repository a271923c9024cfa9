"""torch_xla.experimental.fori_loop."""

from .._tools import fori_loop, while_loop  # noqa: F401
