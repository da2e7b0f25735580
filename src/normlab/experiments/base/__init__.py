"""What every experiment is built from, one job per module.

- :mod:`~normlab.experiments.base.params`: a parameter declared once (:func:`param`), validated
  and described for every face;
- :mod:`~normlab.experiments.base.results`: a run's :class:`Result`, data only;
- :mod:`~normlab.experiments.base.registry`: what one registered :class:`Experiment` is (its
  code, its tables, its cost).

The registry itself (the list of experiments, ``run_experiment``) is :mod:`normlab.experiments`.
"""
