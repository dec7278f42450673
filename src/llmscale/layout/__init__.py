"""The parallel layout as arrays: candidate layouts as one struct of numpy arrays, the rules that mask them, the search
space and the layer split (docs/cost-model.md#layout-package); nothing here reads a file or knows a cost.

May import: `llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
