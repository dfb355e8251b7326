"""Result rows: the schema, provenance, raw point folders and the tidy tables built from them."""
