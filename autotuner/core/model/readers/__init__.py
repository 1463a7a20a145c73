"""Config readers, one module per model family: each turns a Hugging Face config.json into a
ModelSpec and an Inventory of its parameters through the one builder in `base`.
"""
