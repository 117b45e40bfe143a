"""Data: where rows come from (sources, transforms, preference pairs, code tests and their
reference runs), what is checked before any work (decontamination), the prepared, content-addressed
files stages read, and the DVC-versioned store of the datasets runs produce."""
