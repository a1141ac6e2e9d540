"""rentopt: the cheapest way to rent GPUs for a training job, and exactly what it will be billed."""

__version__ = "0.1.0"
