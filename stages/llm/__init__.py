"""The LLM path (issue 5): client, prompts, reply parsing and patching; the `llm` proposer uses them."""
