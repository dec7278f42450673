"""llmscale: plan, predict and check the training of very large language models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("llmscale")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
