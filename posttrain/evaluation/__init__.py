"""Held-out evaluation and what is decided from it: the evaluation loop over the config's suites
(`suites`), the paired regression gates (`gates`) and the stage report card (`report`)."""
