"""rentopt: the cheapest way to rent GPUs for a training job, and exactly what it will be billed.

The installed package is `rentopt`; the repository keeps its two parts in the top-level folders
`optimizer/` (the engine) and `providers/` (the price plugins), installed as
`rentopt.optimizer` and `rentopt.providers` (see pyproject.toml, `[tool.setuptools.package-dir]`).
This module is the single source of the version.
"""

__version__ = "0.2.0"
