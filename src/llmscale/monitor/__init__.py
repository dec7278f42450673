"""Seeing a run (issue 16): the step profile beside llmscale's prediction, the Prometheus endpoint, the local
dashboard, all read from the run directory's files. Modules: docs/monitoring.md#monitor-package.

May import: `llmscale.api`, `llmscale.report`, `llmscale.runtime`, `llmscale.measure`, `llmscale.io`,
`llmscale.cost`, `llmscale.specs`, `llmscale.layout`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
