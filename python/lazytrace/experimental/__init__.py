"""torch_xla's module paths for the spec's tools, for moved code."""
