"""The `llmscale` command line (`main`, one module per larger command). Thin: parse flags (`options`, the layout's
flags generated from its definition), call the Python API (`llmscale.api`), hand the results to `llmscale.report`.

May import: `llmscale.monitor`, `llmscale.runtime`, `llmscale.api`, `llmscale.report`, `llmscale.launch`,
`llmscale.measure`, `llmscale.scaling`, `llmscale.validation`, `llmscale.io`, `llmscale.search`,
`llmscale.reliability`, `llmscale.cost`, `llmscale.layout`, `llmscale.specs`, `llmscale.errors`, `llmscale.units`,
`llmscale` (the version).
"""
