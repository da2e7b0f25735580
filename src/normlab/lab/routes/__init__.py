"""The lab's routes, one module per area, each declared the same way.

Every module here has ``router() -> APIRouter``, which builds its routes when it is called (so
the routes generated per experiment see the registry of that moment) with
``router.add_api_route``; :func:`normlab.lab.app.create_app` includes them. A handler reads the
app's services through :func:`normlab.lab.state.lab_state` and shares request helpers through
:mod:`normlab.lab.requests`; it holds no math (thin edges).

- :mod:`~normlab.lab.routes.docs`: ``/docs`` and ``/redoc``, served offline;
- :mod:`~normlab.lab.routes.experiments`: ``/api/experiments`` (list, run, code, notebook);
- :mod:`~normlab.lab.routes.playground`: ``POST /api/run``;
- :mod:`~normlab.lab.routes.watch`: ``/watch`` and its API;
- :mod:`~normlab.lab.routes.streams`: ``/api/experiments/NAME/stream``;
- :mod:`~normlab.lab.routes.train`: ``/train`` and its API.

The pages, the experiment pages and the exercises' routes (:mod:`normlab.lab.pages`,
:mod:`normlab.lab.experiment_pages`, :mod:`normlab.lab.learn`) join them here next.
"""
