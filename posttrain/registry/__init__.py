"""Checkpoints and their lives: the one checkpoint loader and writer (`checkpoint`), the MLflow
model registry (`model_registry`), promotion and rollback (`promotion`), lineage, a version
evaluated against production (`versus_production`) and live training metrics (`live_metrics`)."""
