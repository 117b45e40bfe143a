"""The pipeline's configuration: the schema of every section (`pipeline`, and per concern `trainers`,
`rl`, `gates`, `embedded`, `paths`, the stage table), and loading YAML with errors that name
the field, file and line (`loading`, `yamlconfig`)."""
