"""Built-in catalog data (YAML files, each number with its source); read by llmscale.io.catalog."""
