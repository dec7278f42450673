"""Predictions checked against published runs: the published-runs dataset (`runs`), the FLOP-counting conventions
the sources used (`conventions`), each row as a job resolved through `io.resolve` with its recipe facts and cluster
(`jobs`), and predicted vs published throughput, fit recall and the published-MFU check (`validate`).

May import: `llmscale.io`, `llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`,
`llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
