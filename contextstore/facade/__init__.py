"""The store facade, split by responsibility; ContextStore in contextstore.store assembles it."""
