"""Validated, frozen inputs: the model (`model`), the cluster with its GPU, node, network tiers, storage and power
(`cluster`), its failure profile (`failures`), the training run (`train`), the parallel layout and the one
definition of its fields (`layout`), the model constants (`constants`), a measured calibration profile
(`calibration`), the collective operations (`collective`), the best published MFU per generation (`record`), and
the canonical form and SHA256 of specs (`fingerprint`). Pydantic models with the shared strictness of `base`;
nothing here reads a file.

May import: `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
