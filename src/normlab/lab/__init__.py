"""The web lab: FastAPI app (``app.py``), result cache (``runner.py``), pages and lessons.

:mod:`normlab.lab.sandbox` is where a learner's code runs (the playground, the code exercises):
the lab's side (:class:`~normlab.lab.sandbox.Sandbox`, per-run cgroups, the seccomp filter)
beside the programs that run inside the sandbox (the fork server, a code exercise's probe),
which travel in as scripts because the sandbox hides the lab's own folder. The rest of the lab
imports only that package's public names.

:mod:`normlab.lab.lessons` is one folder per lesson (``lessons/drift/``: its page
``lesson.html``, its title and summary, its ``exercises.py``); the widgets a lesson shows are read
from its page, and :mod:`normlab.lab.exercises` gathers every lesson's exercises.
"""
