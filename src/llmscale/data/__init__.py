"""The published-runs data shipped with llmscale (YAML only; format: docs/published-runs.md)."""
