"""posttrain: the building blocks of the post-training pipeline (data sources, chat templates,
rewards, evaluation, gates, registry, promotion, lineage). No orchestration here: flows/ chains them."""
