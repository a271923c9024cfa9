"""torch_xla.experimental.scan_layers."""

from .._scan_layers import scan_layers  # noqa: F401
