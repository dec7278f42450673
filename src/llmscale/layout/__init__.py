"""The parallel layout as arrays: many candidate layouts as one struct of numpy arrays (`arrays.Layouts`, its columns
read from the layout's definition), the divisibility rules that mask them (`rules`), the search space they are
generated from (`space`) and the split of the model's layers over pipeline ranks (`stages`). Pure functions over
specs and arrays; nothing here reads a file or knows a cost.

May import: `llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
