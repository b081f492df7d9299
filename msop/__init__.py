"""msop: a Kubernetes operator for MindSpore distributed training."""

__version__ = "0.1.0"

__all__ = ["__version__"]
