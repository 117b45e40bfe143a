"""What every training stage shares: TRL trainer arguments and datasets from our configs
(`trainers`) and multi-process launching (`launcher`)."""
