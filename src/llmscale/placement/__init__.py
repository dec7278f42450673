"""Topology-aware placement: which physical nodes hold which ranks of a layout (`mesh`, `fabric`, `assign`), how far
each group then spreads over the network tiers (`spans`), what that costs in the step model and on each tier's
links (`search`, `traffic`), and the host order that realizes it (`hostorder`). docs/placement.md.

May import: `llmscale.cost`, `llmscale.layout`, `llmscale.specs`, `llmscale.runtime` (hostfile and exclusion-list
formats, torch-free), `llmscale.errors`, `llmscale.units`.
"""
