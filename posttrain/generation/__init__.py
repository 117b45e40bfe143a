"""Generating replies: the decode loop, the transformers and vLLM engines, thinking budgets
(`engines`), and rollouts generated ahead of training in their own process (`async_rollouts`)."""
