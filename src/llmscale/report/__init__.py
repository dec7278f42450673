"""What users read: JSON documents, terminal tables, the offline HTML pages with inline SVG charts and the
PNG charts (numpy + zlib). Human units (GiB, days, MWh) exist only here and in `llmscale.cli`.

May import every package but `llmscale.cli`.
"""
