"""The whole-space layout search (`plan`): score every valid layout of every job size with the cost model, mask what
does not fit, rank by objective, choose the job size; and the check of a predicted MFU against the published record
(`plausibility`). Constants arrive as arguments; nothing here reads a file.

May import: `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`, `llmscale.specs`, `llmscale.errors`,
`llmscale.units`, `llmscale` (the version).
"""
