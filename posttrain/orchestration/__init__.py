"""What the flows need to survive a kill: stage attempts adopted by a relaunch (`attempts`) and
which process runs a flow run, and whether it still lives (`liveness`)."""
