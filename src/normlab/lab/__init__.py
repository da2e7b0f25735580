"""The web lab: FastAPI app (``app.py``), result cache (``runner.py``), pages and lessons.

:mod:`normlab.lab.sandbox` is where a learner's code runs (the playground, the code exercises):
the lab's side (:class:`~normlab.lab.sandbox.Sandbox`, per-run cgroups, the seccomp filter)
beside the programs that run inside the sandbox (the fork server, a code exercise's probe),
which travel in as scripts because the sandbox hides the lab's own folder. The rest of the lab
imports only that package's public names.
"""
