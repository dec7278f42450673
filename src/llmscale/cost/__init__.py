"""The one cost model, vectorized over layouts and shared by `explain`, `plan` and `validate` (its modules and their
derivations: docs/cost-model.md#cost-package). Every constant arrives as an argument; nothing here reads a file.

May import: `llmscale.layout`, `llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
