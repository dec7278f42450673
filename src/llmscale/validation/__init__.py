"""Predictions checked against published runs: the published-runs dataset (`runs`), the FLOP-counting conventions
the sources used (`conventions`) and predicted vs published throughput, every row resolved through `io.resolve`
(`validate`).

May import: `llmscale.io`, `llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`,
`llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
