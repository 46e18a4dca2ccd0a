"""contextstore: durable, auditable conversation history for LLM agents."""
