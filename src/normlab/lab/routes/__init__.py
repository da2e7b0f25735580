"""The lab's routes, one module per area, each declared the same way.

Every module here has ``router() -> APIRouter``, which builds its routes when it is called (so
the routes generated per experiment see the registry of that moment) with
``router.add_api_route``; :func:`normlab.lab.app.create_app` includes them. A handler reads the
app's services through :func:`normlab.lab.state.lab_state` and shares request helpers through
:mod:`normlab.lab.requests`; it holds no math (thin edges).

- :mod:`~normlab.lab.routes.docs`: ``/docs`` and ``/redoc``, served offline;
- :mod:`~normlab.lab.routes.experiments`: ``/api/experiments`` (list, run, code, notebook);
- :mod:`~normlab.lab.routes.pages`: ``/``, the lessons, the playground page and the vendored
  files (``/static`` itself is a mount, :func:`~normlab.lab.routes.pages.static`);
- :mod:`~normlab.lab.routes.lesson_notebooks`: ``/lessons/{slug}/notebook``, a lesson as a
  notebook;
- :mod:`~normlab.lab.routes.experiment_pages`: ``/experiments`` and a page per experiment;
- :mod:`~normlab.lab.routes.playground`: ``POST /api/run``;
- :mod:`~normlab.lab.routes.learn`: the exercises, the progress and the saved listings;
- :mod:`~normlab.lab.routes.watch`: ``/watch`` and its API;
- :mod:`~normlab.lab.routes.streams`: ``/api/experiments/NAME/stream``;
- :mod:`~normlab.lab.routes.train`: ``/train`` and its API.

Their services stay outside this folder: the pages render with :mod:`normlab.lab.site` (the
Jinja environment, the lesson helpers, the vendored files), the exercises are checked in
:mod:`normlab.lab.exercises` and stored in :mod:`normlab.lab.progress`. ``include_router``
carries no mounts, so ``create_app`` mounts the static files itself, each after the routes
under its prefix that it would otherwise shadow.
"""
