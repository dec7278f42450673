"""A layout as a training framework's launch arguments: Megatron-LM flags (`megatron`), torchtitan recipe
modules (`torchtitan`, `torchtitan_source`, `torchtitan_notes`) and the document `llmscale export` prints
(`document`). Every flag and key is checked against the framework's source at a cited
commit; every layout field is carried or noted, never dropped.

May import: `llmscale.io`, `llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`,
`llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
