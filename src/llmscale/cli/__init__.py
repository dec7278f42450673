"""The `llmscale` command line."""
