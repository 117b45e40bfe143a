"""One recipe per stage of the chain: `run(config, inputs) -> StageResult`, plain functions that
know neither Prefect nor where their data came from (flows/ calls them)."""
