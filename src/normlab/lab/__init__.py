"""The web lab: FastAPI app (``app.py``), run manager (``runner.py``), pages and lessons.

:func:`normlab.lab.app.create_app` makes the app's one :class:`~normlab.lab.state.LabState`
(every service and counter, typed; routes read it with :func:`~normlab.lab.state.lab_state`)
and includes :mod:`normlab.lab.routes`, one module per area, each a ``router()`` of the same
shape; what the routes share in handling a request is public in :mod:`normlab.lab.requests`.
Services stay beside them: the runner (every streamed run: the experiments', cached, and the
``/train`` page's live sessions, whose event stream is ``trainruns.py``'s), the pages'
rendering (``site.py``: the Jinja environment, the lesson helpers, the vendored files), the
progress store, the watched log (``watchlog.py``), the security guard.

:mod:`normlab.lab.sandbox` is where a learner's code runs (the playground, the code exercises):
the lab's side (:class:`~normlab.lab.sandbox.Sandbox`, per-run cgroups, the seccomp filter)
beside the programs that run inside the sandbox (the fork server, a code exercise's probe),
which travel in as scripts because the sandbox hides the lab's own folder. The rest of the lab
imports only that package's public names.

:mod:`normlab.lab.lessons` is one folder per lesson (``lessons/drift/``: its page
``lesson.html``, its title and summary, its ``exercises.py``); the widgets a lesson shows are read
from its page, and :mod:`normlab.lab.exercises` gathers every lesson's exercises.
"""
