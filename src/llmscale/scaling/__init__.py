"""Which model to train: scaling laws (`laws`, constants in catalog/scaling_laws.yaml), candidate model families
(`family`), the optima a candidate is measured against (`optimum`), the three-step allocation — memory, time,
capability — over those candidates (`allocate`) and the decomposition of "3× compute" (`multiplier`).

May import: `llmscale.io`, `llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`,
`llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
