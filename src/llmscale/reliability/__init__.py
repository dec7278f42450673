"""Failures and goodput: interruption rates by cause (`rates`), checkpoint size and transfer times from the layout
(`checkpoint`), checkpoint-interval formulas (`intervals`), expected goodput per checkpoint policy (`goodput`), the
Monte Carlo event simulation (`montecarlo`), and the glue that evaluates a job size or a batch of layouts
(`estimate`). Constants arrive as arguments; nothing here reads a file.

May import: `llmscale.cost`, `llmscale.layout`, `llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale`
(the version).
"""
