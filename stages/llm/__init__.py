"""The LLM path: client, prompts, reply parsing and patching; the `llm` proposer uses them."""
