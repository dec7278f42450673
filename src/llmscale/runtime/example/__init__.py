"""The runtime's example: a small GPT trained on a shipped public-domain text (see README.md here)."""
