"""What the RL stages add to TRL's GRPOTrainer, through its public points: the trainer (`trainer`),
problem sampling and its resumable state (`sampling`), rewards wired to the trainer's log
(`rewards`) and health alerts on every logged step (`alerts`)."""
