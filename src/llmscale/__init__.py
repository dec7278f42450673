"""llmscale: plan, predict and check the training of very large language models."""

__version__ = "0.1.0"
"""The one place the version is written: pyproject.toml reads it from here (tool.setuptools.dynamic)."""

_API = ("plan", "explain", "memory", "export", "goodput", "allocate", "validate")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:
    """`llmscale.plan` and the rest of the Python API (llmscale.api), imported on first use so that `import
    llmscale` (which every module does for the version) stays light."""
    if name in _API:
        from importlib import import_module

        return getattr(import_module("llmscale.api"), name)
    raise AttributeError(f"module 'llmscale' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the API functions among them (`dir(llmscale)`, tab completion), though they are
    imported only on first use."""
    return sorted({*globals(), *_API})
